"""The short_arith task: words in, one number out, a worked solution as privileged context."""

import pytest

from grpolab.tasks import ShortArithTask, get_task, prompt_in_eval
from grpolab.tasks.short_arith import worked_solution


def test_items_are_scored_by_their_final_line():
    task = ShortArithTask(digits=[2, 1])
    items = task.items("train", 50)
    for it in items:
        a, op, b = it.prompt[len("What is "):-1].split()
        assert it.reference == str(int(a) + int(b)) and op == "+"
        assert (len(a), len(b)) in {(2, 1), (1, 2)}
        assert it.score(f"{a} {op} {b} = {it.reference}").score == 1.0
        assert it.score(it.reference).score == 1.0
        assert it.score(f"The sum is {it.reference}").score == 0.0
        assert it.privileged.endswith(f"So {a} + {b} = {it.reference}.\nAnswer: {it.reference}")
        assert it.score(it.privileged).score == 1.0  # the worked solution's last line is its answer line
        assert it.demonstration == it.reference


def test_splits_are_disjoint_and_large_enough():
    task = get_task("short_arith", digits=[1, 1], eval_fraction=0.5)
    ev = task.items("eval", 40)
    tr = task.items("train", 40)
    assert not {i.prompt for i in ev} & {i.prompt for i in tr}
    assert all(prompt_in_eval(i.prompt, 0.5) for i in ev)


def test_worked_solutions_by_hand():
    assert worked_solution(47, "+", 8) == ("7 + 8 = 15: write 5, carry 1. 4 + 1 = 5. So 47 + 8 = 55.\nAnswer: 55", 1)
    assert worked_solution(8, "+", 47)[0].startswith("7 + 8 = 15")  # columns of the longer number
    assert worked_solution(30, "+", 5) == ("0 + 5 = 5. So 30 + 5 = 35.\nAnswer: 35", 0)
    assert worked_solution(100, "-", 3) == (
        "0 - 3: borrow 10, 7. 0 - 1: borrow 10, 9. 1 - 1 = 0. So 100 - 3 = 97.\nAnswer: 97", 2)
    with pytest.raises(ValueError, match="non-negative result"):
        worked_solution(3, "-", 5)


@pytest.mark.parametrize("kw, msg", [
    ({"digits": [2]}, "digits must be a list of two ints"),
    ({"digits": [0, 1]}, "digits must be a list of two ints"),
    ({"ops": "*"}, "ops must be a non-empty subset"),
    ({"privileged": "all"}, "privileged must be one of"),
])
def test_bad_options_are_named(kw, msg):
    with pytest.raises(ValueError, match=msg):
        ShortArithTask(**kw)


def test_max_operand_space_is_counted_exactly_and_served_whole():
    task = ShortArithTask(max_operand=20, eval_fraction=0.5)
    n_tr, n_ev = task.available("train"), task.available("eval")
    assert n_tr + n_ev == 21 * 21
    ev = task.items("eval")
    assert len(ev) == n_ev >= 200 and len({i.prompt for i in ev}) == n_ev
    assert all(0 <= int(x) <= 20 for i in ev for x in i.reward_options["expression"].split(" + "))
    from grpolab.tasks import TooFewItems

    with pytest.raises(TooFewItems, match=f"only {n_ev} eval items"):
        task.items("eval", n_ev + 1)


def test_worked_demonstrations_show_the_column_by_column_working():
    # demonstration=worked: the warm start's target is the worked solution, which the final_line
    # verifier accepts; the default keeps the number alone (and every other field the same)
    worked = ShortArithTask(digits=[2, 2], demonstration="worked").items("train", 16)
    plain = ShortArithTask(digits=[2, 2]).items("train", 16)
    for w, p in zip(worked, plain):
        assert (w.prompt, w.reference, w.privileged, w.meta) == (p.prompt, p.reference, p.privileged, p.meta)
        assert p.demonstration == p.reference and w.demonstration == w.privileged
        a, b = (int(x) for x in w.prompt[len("What is "):-1].split(" + "))
        assert w.demonstration == worked_solution(a, "+", b)[0]
        assert w.demonstration.endswith(f"\nAnswer: {w.reference}")
    with pytest.raises(ValueError, match="demonstration must be one of"):
        ShortArithTask(demonstration="steps")


def test_reworded_solutions_by_hand():
    assert worked_solution(47, "+", 8, 1)[0] == (
        "next column: 7 + 8 = 15, so put down 5 and carry one. next column: 4 + 1 = 5. That makes 47 + 8 = 55.\n"
        "Answer: 55")
    assert worked_solution(52, "-", 17, 2)[0] == (
        "then 2 - 7: borrow 10, 5. then 5 - 1 - 1 = 3. All together 52 - 17 = 35.\nAnswer: 35")
    assert worked_solution(30, "+", 5, 3)[0] == "the column gives 0 + 5 = 5. Hence 30 + 5 = 35.\nAnswer: 35"
    for bad in (-1, 4, True, "1"):
        with pytest.raises(ValueError, match="style must be an int in 0..3"):
            worked_solution(47, "+", 8, bad)


def test_every_rewording_re_derives_as_correct_and_an_injected_error_is_found():
    """Each style's solution is a right worked answer to the re-deriver (no error, the final answer
    right), and one wrong column value in it is found at that value: a teacher shown a rewording gets the
    same numbers in other words."""
    from grpolab.diagnostics.rederive import rederive_short_arith

    for a, op, b in [(47, "+", 8), (99, "+", 99), (100, "-", 3), (52, "-", 17), (30, "+", 5), (408, "+", 96)]:
        for style in range(4):
            text, _ = worked_solution(a, op, b, style)
            r = rederive_short_arith(f"What is {a} {op} {b}?", text)
            assert r.error_char is None and r.final_correct and r.claims >= 2, (style, text, r)
    for style in range(4):
        wrong = worked_solution(47, "+", 8, style)[0].replace("= 15", "= 16", 1)
        r = rederive_short_arith("What is 47 + 8?", wrong)
        assert r.error_char == wrong.index("16") + 1 and (r.written, r.expected) == ("16", "15"), (style, r)


def test_reworded_privileged_and_demonstration_leave_the_items_alone():
    base = ShortArithTask(digits=[2, 1], demonstration="worked").items("train", 40)
    rew = ShortArithTask(digits=[2, 1], privileged="reworded", demonstration="reworded").items("train", 40)
    assert [i.prompt for i in base] == [i.prompt for i in rew]  # the random stream is untouched
    styles = set()
    for b0, r in zip(base, rew):
        assert r.privileged == r.demonstration != b0.demonstration  # another wording of the same working
        assert r.privileged.splitlines()[-1] == b0.demonstration.splitlines()[-1] == f"Answer: {r.reference}"
        assert r.score(r.privileged).score == 1.0
        styles.add(r.privileged.split(" ")[0])
    assert styles == {"next", "then", "the"}  # all three rewordings occur
    with pytest.raises(ValueError, match="privileged must be one of"):
        ShortArithTask(privileged="paraphrase")
