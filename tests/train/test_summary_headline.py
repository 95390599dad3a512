"""Issue 46: summary.md of a run that learned opens with its gains; steps without signal early in
the run are a note, not a bold warning; the accuracy table says how many items it rests on."""

from __future__ import annotations

import json
from types import SimpleNamespace

from grpolab.config import load_config
from grpolab.train.report import write_report


def _run(tmp_path, signals):
    run = tmp_path / "run"
    run.mkdir()
    with open(run / "metrics.jsonl", "w") as f:
        for step, s in enumerate(signals, 1):
            f.write(json.dumps({"step": step, "groups/with_signal": s, "reward/mean": 0.5, "reward/errors": 0.0,
                                "reward/scored": 32.0, "length/truncated_frac": 0.0, "length/mean": 5.0}) + "\n")
    result = SimpleNamespace(steps=len(signals), start_accuracy=0.348, final_accuracy=0.914, best_accuracy=0.93,
                             seconds=100.0, start_families={}, final_families={}, n_eval=256)
    write_report(run, load_config(overrides=["log.plots=false", "trainer.preflight=false"]), result, plots=False)
    return (run / "summary.md").read_text().splitlines(), json.loads((run / "summary.json").read_text())


def test_a_run_that_learned_opens_with_its_gains_and_notes_early_steps(tmp_path):
    lines, summary = _run(tmp_path, [0, 0, 3, 4, 5, 6, 6, 7, 7, 8])
    assert lines[2] == ("**Held-out greedy accuracy 0.348 -> 0.914 (+0.566; best 0.930) after 10 steps, "
                        "on 256 held-out items.**")
    assert not any(line.startswith("**Warning") for line in lines)
    (note,) = [line for line in lines if line.startswith("Note: ")]
    assert note.startswith("Note: 2 of 10 steps updated nothing (all within the first 5 steps")
    assert "| held-out greedy accuracy (256 items) | value |" in lines
    assert summary["health"]["not_learning"] is False


def test_a_run_that_is_not_learning_warns_after_its_gains(tmp_path):
    lines, summary = _run(tmp_path, [3, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0])
    assert lines[2].startswith("**Held-out greedy accuracy")
    assert lines[4].startswith("**Warning: 6 of 11 steps updated nothing (most of the run")
    assert summary["health"]["not_learning"] is True
