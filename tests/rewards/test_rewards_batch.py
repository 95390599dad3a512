"""score_batch: same answers as one-by-one scoring, in order, never raising; dataset columns."""

from __future__ import annotations

import json
import sqlite3

import pytest

import grpolab.rewards.base as base
from grpolab.rewards import RewardResult, ScoreRequest, register_reward, safe_score, score_batch
from grpolab.tasks import TaskItem


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1), (2), (3);")
    conn.commit()
    conn.close()
    return str(path)


def mixed_requests(db):
    reqs = []
    for i in range(24):
        reqs.append(("math", f"#{i}", str(i if i % 3 else i + 1)))  # every third one wrong
    for i in range(8):
        body = f"def f(x):\n    return x * {2 if i % 2 else 3}\n"
        reqs.append(("code", body, ["assert f(2) == 4", "assert f(1) == 2"]))
    reqs.append(("sql", "SELECT x FROM t WHERE x > 1", {"db_path": db, "query": "SELECT x FROM t WHERE x >= 2"}))
    reqs.append(("json_schema", '{"a": 1}', {"type": "object", "required": ["a"]}, {}))
    reqs.append(("json_schema", '{"b": 1}', {"type": "object", "required": ["a"]}, {"partial": True}))
    return reqs


def test_batch_matches_sequential_scoring(db):
    reqs = mixed_requests(db)
    want = [safe_score(r[0], r[1], r[2], **(r[3] if len(r) == 4 else {})) for r in reqs]
    got = score_batch(reqs, workers=2, min_parallel=4)
    assert [g.score for g in got] == [w.score for w in want]
    assert sum(g.score for g in got[:24]) == 16  # hand count: 24 items, every third wrong
    assert [g.score for g in got[24:32]] == [0.0, 1.0] * 4
    assert got[32].score == 1.0 and got[33].score == 1.0 and got[34].score == 0.5
    assert all("error" not in g.info for g in got)
    seq = score_batch(reqs, parallel=False)
    assert [s.score for s in seq] == [w.score for w in want]


def test_task_items_and_requests_are_accepted():
    item = TaskItem(prompt="1+1=", reference="2")
    out = score_batch([(item, "#2"), (item, "#3"), ScoreRequest("exact", "#ok", "ok")])
    assert [r.score for r in out] == [1.0, 0.0, 1.0]


def test_bad_entries_and_crashing_verifiers_become_errors(monkeypatch):
    monkeypatch.setattr(base, "_REWARDS", dict(base._REWARDS))

    @register_reward("test_batch_boom")
    def boom(completion, reference):
        raise RuntimeError("crash")

    out = score_batch([("math", "#1", "1"), "garbage", ("test_batch_boom", "x", "y"),
                       ("nope", "x", "y"), ("math", None, "1")])
    assert out[0].score == 1.0 and "error" not in out[0].info
    for r, msg in zip(out[1:], ["TypeError", "RuntimeError: crash", "unknown reward", "TypeError"]):
        assert r.score == 0.0 and msg in r.info["error"]


def test_runtime_registered_rewards_run_in_process(monkeypatch):
    monkeypatch.setattr(base, "_REWARDS", dict(base._REWARDS))
    register_reward("test_batch_len")(lambda c, r: RewardResult(float(len(c) == int(r))))
    out = score_batch([("test_batch_len", "abc", "3")] * 20, workers=2, min_parallel=1)
    assert [r.score for r in out] == [1.0] * 20


def test_dataset_column_with_structured_references(tmp_path, db):
    from grpolab.tasks.dataset import load_dataset_task

    rows = [
        {"prompt": "Write f(x) = 2x.", "answer": ["assert f(2) == 4", "assert f(0) == 0"]},
        {"prompt": "Rows above 1.", "answer": {"db_path": db, "query": "SELECT x FROM t WHERE x > 1"}},
    ]
    for reward, row in zip(("code", "sql"), rows):
        path = tmp_path / f"{reward}.jsonl"
        path.write_text(json.dumps(row) + "\n")
        task = load_dataset_task(path, reward=reward, eval_fraction=0.0)
        (item,) = task.items("train", 1)
        good = "def f(x):\n    return 2 * x\n" if reward == "code" else "SELECT x FROM t WHERE x IN (2, 3)"
        assert item.score(good).score == 1.0
        assert item.score("nonsense(").score == 0.0
