"""examples/verl/prepare_math.py: the answer extraction and the verl row format (no verl needed)."""

import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "examples" / "verl" / "prepare_math.py"
spec = importlib.util.spec_from_file_location("prepare_math", PATH)
prepare_math = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prepare_math)


def test_boxed_answer_takes_the_last_box_with_nested_braces():
    sol = r"First \boxed{1}. Then $x = \frac{1}{2}$, so $\boxed{\frac{1}{2}+\sqrt{3}}$."
    assert prepare_math.boxed_answer(sol) == r"\frac{1}{2}+\sqrt{3}"
    assert prepare_math.boxed_answer(r"so \fbox{7}") == "7"
    with pytest.raises(ValueError, match="boxed"):
        prepare_math.boxed_answer("no answer here")
    with pytest.raises(ValueError, match="boxed"):
        prepare_math.boxed_answer(r"unbalanced \boxed{1")


def test_row_has_the_fields_verl_reads():
    row = prepare_math.to_row({"problem": "What is 2+3?", "solution": r"It is $\boxed{5}$."}, 4, "test")
    assert row["data_source"] == "DigitalLearningGmbH/MATH-lighteval"  # routed to verl's MATH verifier
    assert row["prompt"] == [{"role": "user", "content": "What is 2+3? " + prepare_math.INSTRUCTION}]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "5"}
    assert row["extra_info"]["index"] == 4 and row["extra_info"]["solution"] == r"It is $\boxed{5}$."
