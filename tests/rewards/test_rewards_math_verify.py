"""The "math" verifier's math-verify path (LaTeX, sets, intervals) and its plain-number fallback."""

from __future__ import annotations

import pytest

import grpolab.rewards.math as math_mod
from grpolab.rewards import score

needs_mv = pytest.mark.skipif(not math_mod.math_verify_available(), reason="math-verify not installed")


@needs_mv
@pytest.mark.parametrize(
    "completion, reference, expected",
    [
        (r"so \boxed{\frac{\sqrt{2}}{2}}", r"\frac{1}{\sqrt{2}}", 1.0),
        (r"\boxed{\{1, 2\}}", r"\{2, 1\}", 1.0),
        (r"\boxed{\{1, 3\}}", r"\{2, 1\}", 0.0),
        (r"\boxed{(0,1]}", r"(0, 1]", 1.0),
        (r"\boxed{(0, 1)}", r"(0, 1]", 0.0),
        (r"\boxed{1 + x}", r"x + 1", 1.0),
        (r"\boxed{2x}", r"x + 1", 0.0),
        (r"\boxed{\dfrac{3}{4}}", "0.75", 1.0),
        (r"\boxed{\sqrt{4}}", "2", 1.0),  # LaTeX answer, numeric reference
        (r"\boxed{\sqrt{5}}", "2", 0.0),
    ],
)
def test_symbolic_equivalence(completion, reference, expected):
    res = score("math", completion, reference)
    assert res.score == expected, res.info
    if expected:
        assert res.info["match"] in ("symbolic", "numeric")


@needs_mv
def test_plain_numbers_keep_the_strict_tolerance():
    # math-verify rounds floats to 6 digits; plain numbers must not go through it
    assert score("math", "#0.33333333", "1/3").score == 0.0
    assert score("math", "#1.00000001", "1").score == 0.0
    assert score("math", r"\boxed{x+1}", "x+1").info["match"] == "string"
    assert score("math", r"\boxed{1+x}", "x+1", symbolic=False).score == 0.0


def test_works_without_math_verify(monkeypatch):
    monkeypatch.setattr(math_mod, "_MATH_VERIFY", False)
    assert score("math", "#3/4", "0.75").score == 1.0
    assert score("math", "the answer is 12", "12").score == 1.0
    res = score("math", r"\boxed{\{1, 2\}}", r"\{2, 1\}")
    assert res.score == 0.0 and res.info["symbolic"] == "unavailable"


@needs_mv
def test_long_inputs_skip_math_verify():
    long = "x+" * 400 + "1"
    res = score("math", rf"\boxed{{{long}}}", "y + 1")
    assert res.score == 0.0 and res.info["symbolic"] == "too_long"


def test_word_answers_do_not_go_through_math_verify(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("math-verify must not be called for word answers")

    monkeypatch.setattr(math_mod, "symbolic_equal", boom)
    assert score("math", "#Paris", "paris").score == 1.0
    assert score("math", "#blue", "red").score == 0.0
