"""Built-in procedural tasks ("arith", "reverse"): determinism, disjoint splits, correctness."""

import re
from collections import defaultdict

import pytest

from grpolab.tasks import (
    ArithTask,
    ReverseTask,
    Task,
    TaskItem,
    get_task,
    list_tasks,
    prompt_in_eval,
)


def _evaluate_prompt(prompt):
    """Independent reference: evaluate "a+b-c=" left to right."""
    assert prompt.endswith("=")
    tokens = re.findall(r"[+-]|\d+", prompt[:-1])
    total = int(tokens[0])
    for op, num in zip(tokens[1::2], tokens[2::2], strict=True):
        total = total + int(num) if op == "+" else total - int(num)
    return total, (len(tokens) + 1) // 2


@pytest.mark.parametrize("cls", [ArithTask, ReverseTask])
def test_deterministic_and_prefix_stable(cls):
    a = cls(seed=7).items("train", 60)
    assert a == cls(seed=7).items("train", 60)  # fresh instance, same items
    assert cls(seed=7).items("train", 25) == a[:25]
    assert cls(seed=8).items("train", 60) != a
    assert cls(seed=7).items("eval", 20) == cls(seed=7).items("eval", 20)


@pytest.mark.parametrize("cls", [ArithTask, ReverseTask])
def test_train_and_eval_disjoint_across_seeds(cls):
    train = {item.prompt for seed in (0, 1) for item in cls(seed=seed).items("train", 1500)}
    evals = {item.prompt for seed in (0, 2) for item in cls(seed=seed).items("eval", 200)}
    assert len(evals) > 200  # different seeds give different eval items...
    assert train.isdisjoint(evals)  # ...all outside every train stream
    assert all(prompt_in_eval(p, 0.1) for p in evals)
    assert not any(prompt_in_eval(p, 0.1) for p in train)


@pytest.mark.parametrize("cls", [ArithTask, ReverseTask])
def test_unique_prompts_within_split(cls):
    items = cls().items("train", 1000)
    assert len({i.prompt for i in items}) == 1000


def test_arith_items_are_correct():
    task = ArithTask(max_terms=5, max_digits=2)  # the harder variant exercises carries and 5 terms
    items = task.items("train", 800) + task.items("eval", 100)
    seen_terms = set()
    for item in items:
        value, n_terms = _evaluate_prompt(item.prompt)
        assert item.reference == str(value) and value >= 0
        assert item.meta == {"difficulty": n_terms, "n_terms": n_terms, "n_steps": n_terms - 1}
        assert 2 <= n_terms <= 5
        seen_terms.add(n_terms)
        steps, answer = item.demonstration.split("#")
        assert answer == item.reference
        steps = steps.split(";")
        assert len(steps) == n_terms - 1
        running = int(re.match(r"\d+", item.prompt).group())
        for step in steps:
            a, op, b, c = re.fullmatch(r"(\d+)([+-])(\d+)=(\d+)", step).groups()
            assert int(a) == running
            running = int(a) + int(b) if op == "+" else int(a) - int(b)
            assert int(c) == running >= 0
        assert item.reward == "math" and item.privileged == item.demonstration
        assert len(item.demonstration) <= task.max_completion_length() <= 48
        assert len(item.prompt) <= task.max_prompt_length()
        assert item.score(item.demonstration).score == 1.0
        assert item.score(item.demonstration + "1").score == 0.0
    assert seen_terms == {2, 3, 4, 5}


def test_arith_longer_chains_need_longer_completions():
    by_terms = defaultdict(list)
    for item in ArithTask().items("train", 1000):
        by_terms[item.meta["n_terms"]].append(len(item.demonstration))
    means = [sum(v) / len(v) for _, v in sorted(by_terms.items())]
    assert means == sorted(means) and means[-1] > 2.5 * means[0]


def test_arith_options():
    items = ArithTask(min_terms=3, max_terms=3, max_digits=1, ops="+").items("train", 50)
    for item in items:
        assert "-" not in item.prompt and item.meta["n_terms"] == 3
        assert all(len(n) == 1 for n in re.findall(r"\d+", item.prompt))
    assert ArithTask(max_terms=5, max_digits=2).max_completion_length() == 46


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"min_terms": 1}, "min_terms"),
        ({"min_terms": 4, "max_terms": 3}, "max_terms"),
        ({"max_digits": 0}, "max_digits"),
        ({"ops": "*"}, "ops"),
        ({"eval_fraction": 1.0}, "eval_fraction"),
        ({"eval_fraction": 0.0}, "eval_fraction"),
    ],
)
def test_arith_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ArithTask(**kwargs)


def test_small_prompt_space_is_reported():
    # 1-digit "a+b=": 100 prompts, about 10 of them reserved for eval
    task = ArithTask(min_terms=2, max_terms=2, max_digits=1, ops="+")
    assert len(task.items("eval", 3)) == 3
    with pytest.raises(RuntimeError, match="prompt space is too small"):
        task.items("eval", 50)


def test_reverse_items():
    task = ReverseTask()
    items = task.items("train", 300)
    for item in items:
        digits = re.fullmatch(r"rev (\d+)=", item.prompt).group(1)
        assert item.reference == digits[::-1]
        assert item.demonstration == "#" + digits[::-1]
        assert item.reward == "exact" and 3 <= item.meta["length"] == len(digits) <= 6
        assert item.score(item.demonstration).score == 1.0
    lead = next(i for i in items if i.reference.startswith("0"))
    assert lead.score("#" + lead.reference.lstrip("0")).score == 0.0  # "exact": zeros matter
    assert {i.meta["length"] for i in items} == {3, 4, 5, 6}


def test_bad_split_and_n():
    with pytest.raises(ValueError, match="split"):
        ArithTask().items("test", 3)
    with pytest.raises(ValueError, match="n must be"):
        ArithTask().items("train", -1)
    assert ArithTask().items("train", 0) == []


def test_registry():
    assert {"arith", "reverse", "dataset", "reasoning_gym"} <= set(list_tasks())
    task = get_task("arith", seed=3, max_terms=3)
    assert isinstance(task, ArithTask) and isinstance(task, Task)
    assert task.items("train", 5) == ArithTask(seed=3, max_terms=3).items("train", 5)
    with pytest.raises(ValueError, match=r"unknown task 'arithmetic'.*'arith'"):
        get_task("arithmetic")


def test_task_item_validation_and_safe_scoring():
    with pytest.raises(TypeError, match="reference"):
        TaskItem(prompt="1+1=", reference=2)
    with pytest.raises(ValueError, match="reward"):
        TaskItem(prompt="1+1=", reference="2", reward="")
    item = TaskItem(prompt="1+1=", reference="2", reward="no_such_reward")
    assert item.score("#2").score == 0.0 and "unknown reward" in item.score("#2").info["error"]


def test_privileged_context_kinds_of_the_built_in_tasks():
    a = {k: get_task("arith", privileged=k).items("train", 20) for k in ("solution", "hint", "answer")}
    for s, h, ans in zip(a["solution"], a["hint"], a["answer"]):
        assert s.prompt == h.prompt == ans.prompt  # the option changes nothing but the context
        assert s.privileged == s.demonstration
        assert h.privileged == s.demonstration.split(";")[0].split("#")[0] and "=" in h.privileged
        assert ans.privileged == s.reference
    r = {k: get_task("reverse", privileged=k).items("train", 20) for k in ("solution", "hint", "answer")}
    for s, h, ans in zip(r["solution"], r["hint"], r["answer"]):
        assert s.prompt == h.prompt and s.privileged == s.demonstration == "#" + s.reference
        n = len(s.reference)
        assert h.privileged == "#" + s.reference[: (n + 1) // 2]
        assert ans.privileged == s.reference
    for name in ("arith", "reverse"):
        with pytest.raises(ValueError, match="privileged must be one of"):
            get_task(name, privileged="everything")
