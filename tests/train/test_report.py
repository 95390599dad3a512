"""The run summary's per-task table (summary.md and summary.json), from fake per-task metrics."""

from __future__ import annotations

import json

import pytest

from grpolab.config import Config
from grpolab.measure.evaluate import per_family
from grpolab.train.loop import TrainResult
from grpolab.train.report import per_task_rows, write_report
from grpolab.tasks.base import TaskItem


def _families(pairs):
    return {name: {"solved": s, "n": n, "accuracy": s / n} for name, (s, n) in pairs.items()}


def test_summary_has_per_task_table_with_headroom_verdicts(tmp_path):
    # an older run's headroom.json (written by the headroom check the preflight replaced; the report still
    # reads it): task a: greedy 0/20, every item solved by 4 of 8 samples -> "headroom"; task b: greedy
    # 20/20 -> "saturated". 40 items in all.
    def fam(g, s, verdict):
        return {"n_items": 20, "k": 8, "greedy": {"value": g}, "sampled": {"value": s},
                "pass_at_k": {"8": {"value": 1.0}}, "verdict": verdict}
    (tmp_path / "headroom.json").write_text(json.dumps({
        "verdict": "headroom", "overall": {"k": 8},
        "families": {"family=a": fam(0.0, 0.5, "headroom"), "family=b": fam(1.0, 1.0, "saturated")}}))
    cfg = Config()
    cfg.task.name = "miniwob"
    result = TrainResult(run_dir=tmp_path, steps=10, start_accuracy=0.55, final_accuracy=0.65, best_accuracy=0.7,
                         seconds=12.0, start_families=_families({"a": (10, 100), "b": (100, 100)}),
                         final_families=_families({"a": (30, 100), "b": (100, 100)}))
    write_report(tmp_path, cfg, result, plots=False)
    md = (tmp_path / "summary.md").read_text()
    assert "| a | 100 | 0.100 | 0.300 | +0.200 | headroom | 20 | 0.000 / 0.500 / 1.000 |" in md
    assert "| b | 100 | 1.000 | 1.000 | +0.000 | saturated | 20 | 1.000 / 1.000 / 1.000 |" in md
    data = json.loads((tmp_path / "summary.json").read_text())
    assert data["accuracy"]["change"] == pytest.approx(0.1)
    assert data["headroom_verdict"] == "headroom"
    a, b = data["per_task"]
    assert (a["task"], a["n"], a["before"], a["after"], a["headroom_verdict"]) == ("a", 100, 0.1, 0.3, "headroom")
    assert a["change"] == pytest.approx(0.2)
    assert (b["task"], b["headroom_verdict"], b["headroom_items"]) == ("b", "saturated", 20)


def test_summary_without_families_or_headroom(tmp_path):
    cfg = Config()
    result = TrainResult(run_dir=tmp_path, steps=1, start_accuracy=0.5, final_accuracy=0.5, best_accuracy=0.5,
                         seconds=1.0)
    write_report(tmp_path, cfg, result, plots=False)
    assert "Per task" not in (tmp_path / "summary.md").read_text()
    assert json.loads((tmp_path / "summary.json").read_text())["per_task"] == []
    # a task measured only at the end, no headroom file: the missing cells say so
    rows = per_task_rows({}, _families({"c": (1, 4)}))
    assert rows[0]["before"] is None and rows[0]["after"] == 0.25 and rows[0]["headroom_verdict"] is None


def test_per_family_counts_solved_items():
    items = [TaskItem(prompt=str(i), reference="", meta={"family": f}) for i, f in enumerate("aabba")]
    out = per_family(items, [1.0, 0.0, 1.0, 1.0, 0.999])
    assert out == {"a": {"solved": 1, "n": 3, "accuracy": pytest.approx(1 / 3), "kind": "family"},
                   "b": {"solved": 2, "n": 2, "accuracy": 1.0, "kind": "family"}}
    # a difficulty level says so (the default run's rows read `3`, `4`, `2` with no word of what they were)
    levels = [TaskItem(prompt=str(i), reference="", meta={"difficulty": d}) for i, d in enumerate([3, 4, 3, 10, 2])]
    out = per_family(levels, [1.0, 0.0, 0.0, 0.0, 1.0])
    assert out["3"]["kind"] == "difficulty" and out["3"]["n"] == 2
    from grpolab.train.report import per_task_markdown

    table = per_task_markdown(per_task_rows(out, out))
    assert any(line.startswith("| difficulty 3 | 2 |") for line in table)
    assert not any(line.startswith("| 3 |") for line in table)
    # the levels in order (they read 3, 4, 2 in the order the held-out items happened to come), counted in items
    assert [line.split(" | ")[0] for line in table if line.startswith("| difficulty")] == [
        "| difficulty 2", "| difficulty 3", "| difficulty 4", "| difficulty 10"]
    assert "| task | held-out items |" in "\n".join(table)
    # nothing ran before RL: said so, not "headroom measured before RL" over a column of "not measured"
    assert "no preflight ran (trainer.preflight=false)" in table[0] and "headroom" not in "\n".join(table)
    # a preflight that measured none of a family's items (the SmolLM2 example's 1-item preflight): its table
    table = per_task_markdown(per_task_rows(out, out, preflight={"families": {}}))
    assert "the preflight's GRPO verdict before RL ([preflight.md](preflight.md))" in table[0]
    assert all(line.endswith("| not measured | - |") for line in table if line.startswith("| difficulty"))
    assert per_family([TaskItem(prompt="x", reference="")], [1.0]) == {}
    with pytest.raises(ValueError, match="one score per item"):
        per_family(items, [1.0])
