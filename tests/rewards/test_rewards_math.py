"""The "math" and "exact" verifiers: extraction priority, numeric matching, hostile input."""

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grpolab.rewards import extract_answer, parse_number, safe_score, score


@pytest.mark.parametrize(
    "completion, reference, expected, extracted, method",
    [
        # the built-in tasks' format
        ("7+5=12;12-3=9#9", "9", 1.0, "9", "marker"),
        ("7+5=12;12-3=9#10", "9", 0.0, "10", "marker"),
        ("#49183", "49183", 1.0, "49183", "marker"),
        # "#" with nothing after it: a committed empty answer, no fallback to the 12 before it
        ("7+5=12#", "12", 0.0, "", "marker"),
        ("#   \n  ", "0", 0.0, "", "marker"),
        # empty / no answer at all
        ("", "0", 0.0, None, "none"),
        ("no digits here", "0", 0.0, None, "none"),
        # boxed beats markers; the last boxed wins; nested braces
        ("#5 but really \\boxed{7}", "7", 1.0, "7", "boxed"),
        ("\\boxed{1} then \\boxed{2}", "2", 1.0, "2", "boxed"),
        ("\\boxed{\\frac{3}{4}}", "0.75", 1.0, "\\frac{3}{4}", "boxed"),
        ("\\boxed{x^{2}}", "x^{2}", 1.0, "x^{2}", "boxed"),
        ("\\boxed{3", "3", 1.0, "3", "last_number"),  # unbalanced: not a boxed answer
        # GSM8K style and answer: markers (case-insensitive), last marker wins
        ("so 3 + 4 = 7\n#### 7", "7", 1.0, "7", "marker"),
        ("Answer: 12.", "12", 1.0, "12", "marker"),
        ("ANSWER:\n\n  -4\n", "-4", 1.0, "-4", "marker"),
        ("answer: 3 wait #5", "5", 1.0, "5", "marker"),
        ("Answer: x = 5", "5", 1.0, "x = 5", "marker"),  # one number inside the answer text
        ("Answer: 5 or 6", "5", 0.0, "5 or 6", "marker"),  # two numbers: ambiguous
        # last-number fallback; "12-3" has numbers 12 and 3, not -3
        ("I get 12-3", "3", 1.0, "3", "last_number"),
        ("x=-3", "-3", 1.0, "-3", "last_number"),
        # numeric equality: fractions, decimals, commas, exponents, signs
        ("#3/4", "0.75", 1.0, "3/4", "marker"),
        ("#0.750", "3/4", 1.0, "0.750", "marker"),
        ("#6/8", "3/4", 1.0, "6/8", "marker"),
        ("#1,000", "1000", 1.0, "1,000", "marker"),
        ("#2.5e3", "2500", 1.0, "2.5e3", "marker"),
        ("#+7", "7", 1.0, "+7", "marker"),
        ("#$12$", "12", 1.0, "$12$", "marker"),
        ("#-0", "0", 1.0, "-0", "marker"),
        ("#1.0000000001", "1", 1.0, "1.0000000001", "marker"),  # within 1e-9 relative
        ("#1.00000001", "1", 0.0, "1.00000001", "marker"),  # outside
        ("#0.3333333333", "1/3", 1.0, "0.3333333333", "marker"),  # rel err 1e-10 (see below)
        ("#0.33333333", "1/3", 0.0, "0.33333333", "marker"),  # rel err 1e-8
        ("#3/0", "3", 0.0, "3/0", "marker"),
        # string answers
        ("#Paris", "paris", 1.0, "Paris", "marker"),
        ("#blue", "red", 0.0, "blue", "marker"),
    ],
)
def test_math_cases(completion, reference, expected, extracted, method):
    result = score("math", completion, reference)
    assert result.score == expected, result.info
    assert result.info["extracted"] == extracted
    assert result.info["method"] == method


def test_relative_tolerance_arithmetic_behind_the_cases_above():
    # 1/3 - 0.3333333333 = (10^10 - 3*3333333333) / (3*10^10) = 1 / (3*10^10); relative to 1/3
    # that is 1e-10 <= 1e-9 -> equal. With 8 threes: 1/(3*10^8), relative 1e-8 > 1e-9 -> not.
    assert Fraction(1, 3) - Fraction("0.3333333333") == Fraction(1, 3 * 10**10)
    assert Fraction(1, 3) - Fraction("0.33333333") == Fraction(1, 3 * 10**8)


@pytest.mark.parametrize(
    "text, value",
    [
        ("42", Fraction(42)),
        ("-3/4", Fraction(-3, 4)),
        (" 1,234,567.5 ", Fraction(2469135, 2)),
        ("\\frac{2}{6}", Fraction(1, 3)),
        ("-\\dfrac{1}{2}", Fraction(-1, 2)),
        ("1e-3", Fraction(1, 1000)),
        (".5", Fraction(1, 2)),
        ("7.", Fraction(7)),
        ("", None),
        ("abc", None),
        ("1/0", None),
        ("1,23", None),
        ("1e5000", None),  # exponent cap: no 5000-digit int
        ("9" * 5000, None),  # length cap: Python's int(str) limit never reached
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


def test_huge_numbers_are_safe_and_fast():
    big = "9" * 100_000
    assert score("math", "#" + big, big).score == 1.0  # string match still works
    assert score("math", "#" + big, "1").score == 0.0
    assert score("math", big, "1").score == 0.0
    assert score("math", "1e999999", "1").score == 0.0  # not read as 1
    assert score("math", "#" + "1/" * 20_000, "1").score == 0.0
    result = score("math", "#" + "9" * 20 + "0", "9" * 20 + "0")
    assert result.score == 1.0


@pytest.mark.parametrize(
    "completion, reference, expected",
    [
        ("#00183", "00183", 1.0),
        ("#00183", "183", 0.0),  # no numeric matching
        ("  #49183  \n", "49183", 1.0),
        ("49183", "49183", 1.0),  # no marker: whole completion
        ("#", "", 0.0),  # an empty answer never scores, even against an empty reference
        ("", "", 0.0),
        ("#ABC", "abc", 0.0),
    ],
)
def test_exact(completion, reference, expected):
    assert score("exact", completion, reference).score == expected


def test_exact_options():
    assert score("exact", "#ABC", "abc", case_sensitive=False).score == 1.0
    assert score("exact", "x#1", "x#1", extract=False).score == 1.0
    assert score("exact", "x#1", "x#1").score == 0.0


def test_extract_answer_priority():
    assert extract_answer("1 #2 \\boxed{3}").answer == "3"
    assert extract_answer("1 #2 answer: 4").answer == "4"
    assert extract_answer("1 2 3").answer == "3"
    assert extract_answer("   ", number_fallback=False).method == "none"


@settings(max_examples=150, deadline=None)
@given(
    st.integers(min_value=-(10**30), max_value=10**30), st.sampled_from(["#", "answer: ", "#### "])
)
def test_integers_match_themselves_only(n, marker):
    assert score("math", f"work 1+1=2{marker}{n}", str(n)).score == 1.0
    assert score("math", f"work{marker}{n}", str(n + 1)).score == 0.0


@settings(max_examples=100, deadline=None)
@given(st.fractions(max_denominator=1000).filter(lambda f: f.denominator > 1))
def test_fraction_matches_its_decimal(f):
    decimal = f"{f.numerator / f.denominator:.15f}"  # within 1e-9 relative
    assert score("math", f"#{f.numerator}/{f.denominator}", decimal).score == 1.0


_HOSTILE = st.text(alphabet="0123456789#/.,-+eE$ \\boxed{}answer:\n", max_size=80)


@settings(max_examples=150, deadline=None)
@given(st.one_of(st.text(max_size=80), _HOSTILE), st.one_of(st.text(max_size=10), _HOSTILE))
def test_safe_score_never_raises(completion, reference):
    for name in ("math", "exact"):
        result = safe_score(name, completion, reference)
        assert result.score in (0.0, 1.0)
        assert "error" not in result.info


def test_integers_get_no_tolerance():
    # rel diff of 999999999 vs 10^9 is exactly 1e-9: a tolerance would accept it
    assert score("math", "#999999999", "1000000000").score == 0.0
    assert score("math", "#999999999.0", "1000000000").score == 0.0
    assert score("math", "#1000000000.0000001", "1000000000").score == 1.0
