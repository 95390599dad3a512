"""The final_line verifier: the last line is the number, `Answer: N`, or the question's `EXPR = N`."""

import pytest

from grpolab.rewards import safe_score
from grpolab.rewards.final_line import final_line, final_line_reward


@pytest.mark.parametrize("completion", [
    "18", " 18.\n", "Answer: 18", "answer:18.", "#### 18", "3 + 15 = 18", "3+15=18.",
    "To add them, start with 3.\n3 + 15 = 18",
])
def test_accepted_forms(completion):
    r = final_line_reward(completion, "18", expression="3 + 15")
    assert r.score == 1.0, r.info


@pytest.mark.parametrize("completion, form", [
    ("3 + 15 = 18\nThis is a classic example", "other"),      # a right line followed by more text
    ("3 + 15 is 18, which is equal to 1", "other"),            # the number inside a sentence
    ("The answer is 18.", "other"),
    ("3 + 16 = 18", "other equation"),                          # another sum whose result matches
    ("15 + 3 = 18", "other equation"),                          # operands not as asked
    ("3 + 15 = 17", "equation"),                                # wrong arithmetic
    ("Answer: 17", "answer line"),
    ("18.0", "other"), ("018", "other"), ("", "empty"), ("  \n ", "empty"),
])
def test_rejected_forms(completion, form):
    r = final_line_reward(completion, "18", expression="3 + 15")
    assert r.score == 0.0 and r.info["form"] == form


def test_without_an_expression_no_equation_counts():
    assert final_line_reward("3 + 15 = 18", "18").score == 0.0
    assert final_line_reward("18", "18").score == 1.0


def test_final_line_helper_and_registry():
    assert final_line("a\n\n b. \n") == "b"
    assert final_line("x..") == "x."
    assert safe_score("final_line", "2 + 2 = 4", "4", expression="2 + 2").score == 1.0
