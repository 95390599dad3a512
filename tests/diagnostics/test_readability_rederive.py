"""grpolab.diagnostics.rederive: the first wrong number of a worked answer, on hand-made responses.

Expected positions are hand-chosen substrings of the hand-written responses (``text.index``), never
values the re-deriver computes."""

import pytest

from grpolab.diagnostics.rederive import REDERIVERS, rederive
from grpolab.tasks.short_arith import worked_solution

Q = "What is 47 + 8?"
RIGHT = "7 + 8 = 15: write 5, carry 1. 4 + 1 = 5. So 47 + 8 = 55.\nAnswer: 55"


def _at(text, marker, offset=0):
    return text.index(marker) + offset


def test_the_registry_holds_both_formats_and_names_the_fix():
    assert {"short_arith", "arith"} <= set(REDERIVERS)
    with pytest.raises(ValueError, match="no re-deriver for task 'gsm8k'.*register_rederiver"):
        rederive("gsm8k", Q, "55")
    with pytest.raises(ValueError, match="no 'A \\+ B'"):
        rederive("short_arith", "What is the capital?", "55")


def test_the_worked_solution_is_right():
    assert RIGHT == worked_solution(47, "+", 8)[0]  # the format this parses is the task's own
    r = rederive("short_arith", Q, RIGHT)
    assert r.error_char is None and r.correct and r.final_answer == "55"
    for a, op, b in [(3, "+", 15), (52, "-", 7), (95, "+", 7), (40, "-", 3), (7, "+", 8), (20, "+", 20)]:
        text = worked_solution(a, op, b)[0]
        assert rederive("short_arith", f"What is {a} {op} {b}?", text).correct, text


def test_a_wrong_digit_in_an_equation_points_at_the_digit():
    t = "7 + 8 = 16: write 6, carry 1. 4 + 1 = 5. So 47 + 8 = 56.\nAnswer: 56"
    r = rederive("short_arith", Q, t)
    assert r.error_char == _at(t, "16", 1) and r.error_kind == "equation"  # the 6 of 16; the 1 is right
    assert (r.written, r.expected) == ("16", "15") and not r.correct


def test_a_wrong_written_digit_and_a_wrong_carry():
    t = "7 + 8 = 15: write 4, carry 1. 4 + 1 = 5. So 47 + 8 = 55.\nAnswer: 55"
    r = rederive("short_arith", Q, t)
    assert r.error_char == _at(t, "write 4", 6) and r.error_kind == "write"
    t = "7 + 8 = 15: write 5, carry 0. 4 + 0 = 4. So 47 + 8 = 45.\nAnswer: 45"
    r = rederive("short_arith", Q, t)
    assert r.error_char == _at(t, "carry 0", 6) and r.error_kind == "carry"


def test_a_forgotten_or_wrong_carry_in_the_next_column():
    # arithmetic true ("4 + 2 = 6"), but the column is 4 plus the carry 1
    t = "7 + 8 = 15: write 5, carry 1. 4 + 2 = 6. So 47 + 8 = 65.\nAnswer: 65"
    r = rederive("short_arith", Q, t)
    assert r.error_char == _at(t, "4 + 2", 4) and r.error_kind == "column"
    # the carry left out: every operand written is right, the column value is not
    t = "7 + 8 = 15: write 5. 4 + 0 = 4. So 47 + 8 = 45.\nAnswer: 45"
    assert rederive("short_arith", Q, t).error_char == _at(t, "4 + 0", 4)
    t = "3 + 8 = 11: write 1, carry 1. 4 + 1 = 5. So 47 + 8 = 51.\nAnswer: 51"  # a wrong digit copied
    assert rederive("short_arith", Q, t).error_char == 0


def test_a_wrong_final_answer_after_right_steps():
    t = RIGHT[:-2] + "54"
    r = rederive("short_arith", Q, t)
    assert r.error_char == len(t) - 1 and r.error_kind == "final" and (r.written, r.expected) == ("54", "55")
    t = "So 47 + 9 = 56.\nAnswer: 56"  # a restated question with the wrong operand
    r = rederive("short_arith", Q, t)
    assert r.error_char == _at(t, "9") and r.error_kind == "summary"
    t = "I think it is\n550"  # one digit too many: the third digit is the wrong one
    assert rederive("short_arith", Q, t).error_char == _at(t, "550", 2)


@pytest.mark.parametrize("text", [
    "First add the ones: 8 + 7 = 15, so we write 5 and carry 1. Then the tens: 4 + 1 = 5. The total is 55.\nAnswer: 55",
    "47 + 3 = 50 and 50 + 5 = 55.\n55",
    "47 + 8 = 55",
    "Adding 8 to 47 gives 55.\nAnswer: 55",
    "8 + 7 = 15, write 5 carry 1; 1 + 4 = 5.\nSo 8 + 47 = 55.\nAnswer: 55",
])
def test_correct_rewordings_have_no_error(text):
    r = rederive("short_arith", Q, text)
    assert r.error_char is None and r.correct, r


def test_truncated_and_garbage_responses_have_no_error_and_no_answer():
    r = rederive("short_arith", Q, "7 + 8 = 15: write 5, car", finished=False)
    assert r.error_char is None and r.final_answer is None and not r.correct
    # a number touching the cut is not judged ("1" may have become "15")
    assert rederive("short_arith", Q, "7 + 8 = 1", finished=False).error_char is None
    assert rederive("short_arith", Q, "7 + 8 = 1", finished=True).error_char == 8
    r = rederive("short_arith", Q, "banana banana")
    assert r.error_char is None and r.final_answer is None and r.claims == 0 and not r.correct
    assert rederive("short_arith", Q, "").final_answer is None


def test_only_a_line_that_states_an_answer_holds_the_final_answer():
    # SmolLM2's own: a right sum, then lines restating the operands (the verifier reads "37 = 37": wrong)
    r = rederive("short_arith", "What is 19 + 37?", "19 + 37 = 56\n\nwhere:\n19 = 19\n37 = 37")
    assert r.error_char is None and r.final_answer is None and not r.correct
    t = "19 + 78 = 27 + 11 = 38\n\nThe final answer is: 38"  # SmolLM2's own: the first equation is wrong
    r = rederive("short_arith", "What is 19 + 78?", t)
    assert r.error_char == _at(t, "27") and r.written == "27" and r.expected.startswith("97 ")
    assert rederive("short_arith", Q, "The final answer is: 55.").final_answer == "55"
    # SmolLM2's own: both sides of an equation are expressions, equal in value: no error
    assert rederive("short_arith", "What is 1 + 78?", "1 + 78 = 78 + 1\n78 + 1 = 79\n\nThe answer is 79.").correct
    assert rederive("short_arith", Q, "Finally, 7 + 8 = 15 is the ones column.").final_answer is None


def test_subtraction_borrow():
    q = "What is 52 - 7?"
    assert rederive("short_arith", q, "2 - 7: borrow 10, 5. 5 - 1 = 4. So 52 - 7 = 45.\nAnswer: 45").correct
    t = "2 - 7: borrow 10, 6. 5 - 1 = 4. So 52 - 7 = 46.\nAnswer: 46"
    r = rederive("short_arith", q, t)
    assert r.error_char == _at(t, "6") and r.error_kind == "equation"
    t = "2 - 7: borrow 10, 5. 5 = 5. So 52 - 7 = 55.\nAnswer: 55"  # the borrow not paid back
    assert rederive("short_arith", q, t).error_char == _at(t, "= 55", 2)  # 55 for 45: the first digit


def test_arith_scratchpad():
    p = "7+5-3="
    assert rederive("arith", p, "7+5=12;12-3=9#9").correct
    assert rederive("arith", p, "7+5=13;13-3=10#10").error_char == 5  # the 3 of 13
    assert rederive("arith", p, "7+5=12;11-3=8#8").error_char == 8  # 11 for the running total 12: its 2nd digit
    assert rederive("arith", p, "7+5=12;12+3=15#15").error_char == 10  # the prompt's operator is '-'
    assert rederive("arith", p, "7+5=12;12-3=9#8").error_char == 14  # the final answer
    assert rederive("arith", p, "7+5=12;12-3=9;9+1=10#10").error_char == 14  # a step the problem lacks
    r = rederive("arith", p, "7+5=12;12-", finished=False)
    assert r.error_char is None and r.final_answer is None
