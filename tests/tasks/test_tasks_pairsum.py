"""The "pairsum" search task and its "pair_sum" verifier."""

import re
from itertools import combinations

import pytest

from grpolab.rewards import get_reward, safe_score
from grpolab.tasks import PairSumTask, get_task, list_tasks, prompt_in_eval

_PROMPT_RE = re.compile(r"((?:\d+ )+)sum (\d+)=")


def _parse(prompt):
    m = _PROMPT_RE.fullmatch(prompt)
    assert m, prompt
    return [int(x) for x in m.group(1).split()], int(m.group(2))


def _solve(numbers, target):
    """Independent reference: every pair (i < j) whose values sum to target."""
    return [(i, j) for i, j in combinations(range(len(numbers)), 2) if numbers[i] + numbers[j] == target]


def test_registered_and_deterministic():
    assert "pairsum" in list_tasks()
    a = get_task("pairsum", seed=3).items("train", 50)
    assert a == PairSumTask(seed=3).items("train", 50)
    assert PairSumTask(seed=3).items("train", 20) == a[:20]
    assert PairSumTask(seed=4).items("train", 50) != a


def test_split_is_disjoint():
    train = {i.prompt for s in (0, 1) for i in PairSumTask(seed=s).items("train", 1500)}
    evals = {i.prompt for s in (0, 2) for i in PairSumTask(seed=s).items("eval", 200)}
    assert len(evals) > 200 and train.isdisjoint(evals)
    assert all(prompt_in_eval(p, 0.1) for p in evals)
    assert not any(prompt_in_eval(p, 0.1) for p in train)


@pytest.mark.parametrize("opts", [{}, {"min_numbers": 3, "max_numbers": 6, "max_value": 20},
                                  {"show_target": False}])
def test_demonstration_solves_every_item(opts):
    task = PairSumTask(**opts)
    items = task.items("train", 600) + task.items("eval", 60)
    positions = set()
    for item in items:
        numbers, target = _parse(item.prompt)
        n = len(numbers)
        assert opts.get("min_numbers", 4) <= n <= opts.get("max_numbers", 4)
        assert all(0 <= x <= task.max_value for x in numbers)
        solutions = _solve(numbers, target)
        assert len(solutions) == 1  # exactly one solving pair
        i, j = solutions[0]
        order = list(combinations(range(n), 2))
        k = order.index((i, j)) + 1
        assert item.meta == {"difficulty": k, "n_numbers": n, "n_checks": k, "pair": [i, j]}
        checks, answer = item.demonstration.split("#")
        assert answer == item.reference == f"{numbers[i]}+{numbers[j]}"
        checks = checks.split(";")
        assert len(checks) == k  # stops at the first (only) hit
        tail = "" if opts.get("show_target") is False else f",{target}"
        for (a, b), check in zip(order, checks):
            assert check == f"{numbers[a]}+{numbers[b]}={numbers[a] + numbers[b]}{tail}"
        assert item.reward == "pair_sum" and item.privileged == item.demonstration
        assert item.reward_options == {"numbers": numbers, "target": target}
        assert len(item.demonstration) <= task.max_completion_length()
        assert item.score(item.demonstration).score == 1.0
        positions.add(k)
    if opts.get("max_numbers", 4) == 4:  # the solving pair occurs at each of the 6 positions
        assert positions == set(range(1, 7))


def test_lengths_and_the_target_echo():
    assert PairSumTask(show_target=False).max_completion_length() == 45  # 6 x "9+9=18", 5 ";", "#9+9"
    task = PairSumTask()
    assert task.max_completion_length() == 63  # 6 x "9+9=18,18", 5 ";", "#9+9"
    lengths = [len(i.demonstration) for i in task.items("train", 2000)]
    assert max(lengths) <= 63 and min(lengths) >= len("0+1=1,1#0+1")
    plain = PairSumTask(show_target=False).items("train", 50)
    for a, b in zip(task.items("train", 50), plain):
        assert a.prompt == b.prompt and a.reference == b.reference
        target = a.reward_options["target"]
        assert a.demonstration.split("#")[0] == ";".join(
            f"{c},{target}" for c in b.demonstration.split("#")[0].split(";"))
    # the solving pair is uniform over the 6 positions: successes vary in length with it
    by_k = {}
    for i in task.items("train", 2000):
        by_k.setdefault(i.meta["n_checks"], []).append(len(i.demonstration))
    assert sorted(by_k) == [1, 2, 3, 4, 5, 6] and min(len(v) for v in by_k.values()) > 250


def test_verifier_rejects_wrong_and_hacked_answers():
    item = next(i for i in PairSumTask().items("train", 200) if i.reference.split("+")[0] != i.reference.split("+")[1])
    numbers, target = _parse(item.prompt)
    a, b = item.reference.split("+")
    body = item.demonstration.split("#")[0]
    assert item.score(f"{body}#{b}+{a}").score == 1.0  # either order
    assert item.score(f"#{a}+{b}").score == 1.0  # the verifier checks the answer, not the scratchpad
    outsiders = [x for x in range(10) if x not in numbers and 0 <= target - x <= 9 and target - x not in numbers]
    bad = [
        body,                          # no answer marker
        f"{body}#{target}",            # the target alone
        f"{body}#{a}+{b}+0",           # three numbers
        f"{body}#{a} + {b}x",          # junk
        f"{body}#0{a}+{b}",            # non-canonical number
        f"{body}#{a}+{b};{a}+{b}",     # trailing text after the answer
        f"{body}#",                    # empty answer
    ]
    bad += [f"{body}#{x}+{target - x}" for x in outsiders]  # sums right, numbers not in the list
    for completion in bad:
        assert item.score(completion).score == 0.0, completion
    # a pair that sums to the target using one listed number twice
    r = get_reward("pair_sum")
    assert r("#4+4", "4+4", numbers=[4, 1, 7], target=8).score == 0.0
    assert r("#4+4", "4+4", numbers=[4, 1, 4], target=8).score == 1.0
    assert r("#1+7", "1+7", numbers=[4, 1, 7], target=8).score == 1.0
    assert r("#1+6", "1+7", numbers=[4, 1, 7], target=8).score == 0.0  # wrong sum
    # bad options are a clear error, and safe_score turns it into a scored 0
    with pytest.raises(TypeError, match="numbers .* and target"):
        r("#1+7", "1+7", numbers=[4, 1, 7], target="8")
    res = safe_score("pair_sum", "#1+7", "1+7")
    assert res.score == 0.0 and "error" in res.info


def test_privileged_kinds():
    s, h, a = (PairSumTask(privileged=k).items("train", 30) for k in ("solution", "hint", "answer"))
    for x, y, z in zip(s, h, a):
        assert x.prompt == y.prompt == z.prompt
        assert y.privileged == x.demonstration.split("#")[0].split(";")[0]
        assert z.privileged == x.reference


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"min_numbers": 2}, "min_numbers"),
        ({"min_numbers": 5, "max_numbers": 4}, "max_numbers"),
        ({"max_numbers": 9}, "max_numbers"),
        ({"max_value": 5}, "max_value"),
        ({"privileged": "everything"}, "privileged must be one of"),
    ],
)
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PairSumTask(**kwargs)
    with pytest.raises(TypeError, match="max_value"):
        PairSumTask(max_value=9.0)
    with pytest.raises(TypeError, match="show_target"):
        PairSumTask(show_target="yes")
