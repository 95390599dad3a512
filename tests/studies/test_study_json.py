"""studies/study_json.py: per-seed finals, curve area, steps to the baseline's final, pairing by seed."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location("study_json", Path(__file__).parents[2] / "studies" / "study_json.py")
sj = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sj)


def _run(out, name, factors, seed, curve, extra=None):
    d = out / "runs" / name
    d.mkdir(parents=True)
    rows = [{"step": s, "eval/accuracy": a, **(extra or {})} for s, a in curve]
    rows.insert(1, {"step": 5, "reward/mean": 0.5, **(extra or {})})  # a step without evaluation
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    start = [a for s, a in curve if s == 0]
    if start:  # the trainer writes the step-0 evaluation to result.json, not to metrics.jsonl
        curve = [(s, a) for s, a in curve if s != 0]
    (d / "result.json").write_text(json.dumps({"start_accuracy": start[0]} if start else {}))
    return {"name": name, "setting": name.rsplit(",", 1)[0], "factors": factors, "seed": seed}


def test_study_json_pairs_by_seed_and_measures_the_curve(tmp_path, monkeypatch, capsys):
    out = tmp_path / "cmp"
    runs = [
        _run(out, "m=a,seed=1", {"m": "a"}, 1, [(0, 0.5), (10, 0.6), (20, 0.7)], {"x": 2.0}),
        _run(out, "m=a,seed=0", {"m": "a"}, 0, [(0, 0.5), (10, 0.5), (20, 0.6)], {"x": 1.0}),
        _run(out, "m=b,seed=0", {"m": "b"}, 0, [(0, 0.5), (10, 0.6), (20, 0.8)]),
        _run(out, "m=b,seed=1", {"m": "b"}, 1, [(0, 0.5), (10, 0.2), (20, 0.65)]),
    ]
    (out / "runs" / "m=b,seed=2").mkdir()  # unfinished: no result.json, left out
    runs.append({"name": "m=b,seed=2", "setting": "m=b", "factors": {"m": "b"}, "seed": 2})
    (out / "sweep.json").write_text(json.dumps({"runs": runs}))
    results = tmp_path / "results"
    results.mkdir()
    (results / "s.json").write_text(json.dumps({"name": "s", "precondition": {"auc": 0.9}}))
    monkeypatch.setattr(sys, "argv", ["study_json.py", str(out), "--name", "s", "--baseline", "a",
                                      "--metric", "x", "--results", str(results), "--command", "cmd"])
    sj.main()
    doc = json.loads((results / "s.json").read_text())
    assert doc["precondition"] == {"auc": 0.9} and doc["command"] == ["cmd"] and doc["baseline"] == "a"
    a, b = doc["variants"]["a"], doc["variants"]["b"]
    assert a["seeds"] == [0, 1] and a["final"] == [0.6, 0.7]  # sorted by seed
    assert b["seeds"] == [0, 1] and b["final"] == [0.8, 0.65]
    assert a["auc"] == pytest.approx([(10 * 0.5 + 10 * 0.55) / 20, (10 * 0.55 + 10 * 0.65) / 20])
    assert a["metrics"]["x"] == [1.0, 2.0]
    # b reaches a's final of the same seed: seed 0 (0.6) at step 10, seed 1 (0.7) never
    assert b["steps_to_baseline_final"] == [10, None]
    assert b["collapsed"] == 1  # seed 1 fell to 0.2 < half of 0.5
    assert b["max_drop"] == pytest.approx([0.0, 0.3]) and a["max_drop"] == [0.0, 0.0]
    p = doc["paired_vs_baseline"]["b"]
    assert p["final"]["value"] == pytest.approx(((0.8 - 0.6) + (0.65 - 0.7)) / 2)
    assert p["final_above"] == 1 and p["final_below"] == 1
    assert p["max_drop"]["value"] == pytest.approx(0.15) and (p["max_drop_above"], p["max_drop_below"]) == (1, 0)
    assert "| b | 2 |" in capsys.readouterr().out


def test_study_json_refuses_an_unknown_baseline(tmp_path, monkeypatch):
    out = tmp_path / "cmp"
    runs = [_run(out, "m=a,seed=0", {"m": "a"}, 0, [(0, 0.5), (10, 0.6)])]
    (out / "sweep.json").write_text(json.dumps({"runs": runs}))
    monkeypatch.setattr(sys, "argv", ["study_json.py", str(out), "--name", "s", "--baseline", "zz",
                                      "--results", str(tmp_path)])
    with pytest.raises(SystemExit, match="baseline 'zz' is not one of the variants"):
        sj.main()


def test_max_drop_is_the_fall_below_the_best_so_far():
    assert sj.max_drop([0.5, 0.9, 0.6, 0.95, 0.7, 0.8]) == pytest.approx(0.3)  # 0.9 -> 0.6 (0.95 -> 0.7: 0.25)
    assert sj.max_drop([0.5, 0.9, 0.7, 0.95, 0.6]) == pytest.approx(0.35)  # from the new best 0.95, not 0.9
    assert sj.max_drop([0.9, 0.5]) == pytest.approx(0.4) and sj.max_drop([0.1, 0.2, 0.3]) == 0.0
