"""benchmarks/experiments/miniwob_paired.py: the summary over several trained models, against hand values."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "experiments" / "miniwob_paired.py"
_spec = importlib.util.spec_from_file_location("miniwob_paired", _PATH)
miniwob_paired = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(miniwob_paired)


def _row(task, start, trained, gained, lost):
    return {"task": task, "n": 200, "start": start, "trained": trained, "gained": gained, "lost": lost}


def test_across_models_counts_directions_and_tests_at_seed_level():
    models = [
        {"model": "s0", "rows": [_row("a", 0.5, 0.6, 25, 5), _row("b", 0.2, 0.2, 3, 3)]},
        {"model": "s1", "rows": [_row("a", 0.5, 0.45, 4, 14), _row("b", 0.2, 0.25, 10, 0)]},
        {"model": "s2", "rows": [_row("a", 0.5, 0.55, 12, 2), _row("b", 0.2, 0.2, 0, 0)]},
    ]
    a, b = miniwob_paired.across_models(models, ["a", "b"])
    assert a["task"] == "a" and a["start"] == 0.5
    assert a["mean_change"] == pytest.approx((0.1 - 0.05 + 0.05) / 3)
    assert (a["up"], a["down"], a["same"]) == (2, 1, 0)
    assert (a["gained"], a["lost"]) == (41, 21)
    # not pooled (a pooled McNemar on 41 vs 21 would give p ~0.015): the seed-level test of the changes
    # (0.1, -0.05, 0.05): t = 0.7559 on 2 df, t p = 1 - t / sqrt(2 + t^2) = 0.529; sign flips of
    # (0.1, -0.05, 0.05): |sum| >= 0.1 in 6 of 8 -> 0.75, the larger of the two
    assert a["p_seed_level"] == pytest.approx(0.75) and a["verdict"] == "not significant"
    assert (b["up"], b["down"], b["same"]) == (1, 0, 2) and (b["gained"], b["lost"]) == (13, 3)
    # changes (0, 0.05, 0): every sign assignment has |sum| = 0.05 -> sign-flip p 1
    assert b["p_seed_level"] == pytest.approx(1.0)


def test_cache_key_changes_when_the_model_at_the_same_path_changes(tmp_path):
    model = tmp_path / "final"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights-1")
    (model / "config.json").write_text("{}")
    k1 = miniwob_paired.cache_key(model, "c.yaml", 200)
    assert miniwob_paired.cache_key(model, "c.yaml", 200) == k1
    assert miniwob_paired.cache_key(model, "c.yaml", 100) != k1
    (model / "model.safetensors").write_bytes(b"weights-2")  # retrained into the same directory
    assert miniwob_paired.cache_key(model, "c.yaml", 200) != k1


def test_by_target_splits_each_task_by_the_pages_target():
    tasks = ["t", "t", "t", "t", "u", "u", "w", "w", "w"]
    targets = ["2", "1", "1", "2", "-", "-", "a", "b", "c"]
    # a start that always picks element 1 solves the target-1 pages only; the trained model reads
    models = {"start": [False, True, True, False, True, False, True, True, False],
              "trained": [True, True, True, True, False, False, True, True, True]}
    rows = miniwob_paired.by_target(tasks, targets, models, max_values=2)
    # w has 3 target values > max_values: not split; t's targets come sorted
    assert [(r["task"], r["target"], r["n"]) for r in rows] == [("t", "1", 2), ("t", "2", 2), ("u", "-", 2)]
    assert rows[0]["solved"] == {"start": 2, "trained": 2} and rows[1]["solved"] == {"start": 0, "trained": 2}
    assert rows[2]["solved"] == {"start": 1, "trained": 0}
