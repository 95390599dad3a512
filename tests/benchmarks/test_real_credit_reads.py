"""benchmarks/experiments/real_credit_reads.py (issue 44's study): every seed planned at once so a
partial study collects every finished seed, and the record's per-method numbers from step rows."""

import argparse
import importlib.util
import json
from pathlib import Path

import pytest

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "experiments" / "real_credit_reads.py"
_spec = importlib.util.spec_from_file_location("bench_real_credit_reads", _SCRIPT)
reads = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reads)

# held-out accuracy at steps 5 and 10 per (method, seed); step 0 comes from result.json
CURVES = {("grpo", 0): (0.60, 0.70), ("grpo", 1): (0.58, 0.66), ("rlsd", 0): (0.72, 0.74), ("rlsd", 1): (0.60, 0.62)}


def _finish(run_dir: Path, method: str, seed: int) -> None:
    """What a finished run leaves: step rows (eval every 5 steps, teacher time, peak memory) and result.json."""
    a5, a10 = CURVES[(method, seed)]
    rows = [{"step": s, "time/step": 20.0, **({"time/teacher": 4.0} if method != "grpo" else {}),
             "memory/peak_rss_mb": 1000.0 + 10 * s + 100 * (method == "rlsd"),
             **({"eval/accuracy": {5: a5, 10: a10}[s]} if s in (5, 10) else {})} for s in range(1, 11)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "result.json").write_text(json.dumps({"start_accuracy": 0.57, "final_accuracy": a10}))


def test_a_partial_study_collects_every_finished_seed_and_reports_it(tmp_path, monkeypatch):
    ran = []

    def fake_run_sweep(out, specs, jobs=1):
        ran.append(sorted((s.name, s.seed) for s in specs))
        for s in specs:
            _finish(Path(out) / "runs" / s.name, s.factors["credit.name"], s.seed)
        return argparse.Namespace(status={s.name: "done" for s in specs}, cpu_seconds=1.0)

    import grpolab.sweep.runner as runner

    monkeypatch.setattr(runner, "run_sweep", fake_run_sweep)
    out = tmp_path / "record.json"
    args = argparse.Namespace(config=reads.CONFIG, warm_start=str(tmp_path / "ws"), set=[], seeds=[0, 1],
                              methods=["grpo", "rlsd"], root=str(tmp_path / "study"), jobs=2, heldout=200,
                              steps_label="test schedule", out=out, threads=1)
    reads.study(args)
    assert ran == [[("name=grpo,seed=0", 0), ("name=rlsd,seed=0", 0)], [("name=grpo,seed=1", 1), ("name=rlsd,seed=1", 1)]]
    doc = json.loads(out.read_text())
    assert doc["seeds_run"] == [0, 1]  # each seed's call used to rewrite the plan, so only the last was collected
    g, r = doc["variants"]["grpo"], doc["variants"]["rlsd"]
    assert g["seeds"] == [0, 1] and g["final"] == [0.70, 0.66] and g["curve"]["steps"] == [0, 5, 10]
    assert r["peak_rss_mb"] == [1200.0, 1200.0] and g["peak_rss_mb"] == [1100.0, 1100.0]
    assert r["teacher_seconds_per_step"] == [4.0, 4.0] and g["teacher_seconds_per_step"] == [None, None]
    # RLSD reaches GRPO's final (0.70, 0.66) at step 5 on seed 0, at no step on seed 1 (0.62 < 0.66)
    assert r["steps_to_grpo_final"] == [5, None] and r["grpo_gained"] == [True, True]
    pair = doc["paired_vs_grpo"]["rlsd"]
    assert pair["final"]["value"] == pytest.approx(0.0) and (pair["final_above"], pair["final_below"]) == (1, 1)
    assert "--seeds 0 1 --jobs 2" in doc["command"][-1]

    # the report rebuilds the same record without training and draws the figure
    fig = tmp_path / "fig.png"
    reads.report(argparse.Namespace(root=str(tmp_path / "study"), heldout=200, out=out, figure=fig))
    again = json.loads(out.read_text())
    assert again["variants"] == doc["variants"] and fig.stat().st_size > 10_000


def test_steps_to_grpo_final_are_marked_where_grpo_lost(tmp_path, monkeypatch):
    root = tmp_path / "study"
    runs = [("grpo", 0, (0.30, 0.50)), ("rlsd", 0, (0.40, 0.45))]  # GRPO ends below its start (0.57)
    (root / "runs").mkdir(parents=True)
    (root / "sweep.json").write_text(json.dumps({"runs": [
        {"name": f"name={m},seed={s}", "factors": {"credit.name": m}, "seed": s} for m, s, _ in runs]}))
    for m, s, curve in runs:
        monkeypatch.setitem(CURVES, (m, s), curve)
        d = root / "runs" / f"name={m},seed={s}"
        d.mkdir()
        _finish(d, m, s)
    variants, _, carried = reads.build_variants(root, 200)
    assert carried == {}
    assert variants["rlsd"]["steps_to_grpo_final"] == [0] and variants["rlsd"]["grpo_gained"] == [False]
    assert "(0: grpo lost)" in reads.table({"variants": variants})


def test_report_carries_recorded_seeds_whose_runs_are_gone(tmp_path, monkeypatch):
    """Seeds 0-1 ran on a machine that is gone (only the record has them); seed 2 is on disk: the
    record keeps all three in seed order, the paired CI over three seeds, and names the carried ones."""
    root = tmp_path / "study"
    (root / "runs").mkdir(parents=True)
    (root / "sweep.json").write_text(json.dumps({"runs": [
        {"name": f"name={m},seed=2", "factors": {"credit.name": m}, "seed": 2} for m in ("grpo", "rlsd")]}))
    for m, curve in (("grpo", (0.50, 0.60)), ("rlsd", (0.65, 0.70))):
        monkeypatch.setitem(CURVES, (m, 2), curve)
        (root / "runs" / f"name={m},seed=2").mkdir()
        _finish(root / "runs" / f"name={m},seed=2", m, 2)
    old = tmp_path / "old"
    (old / "runs").mkdir(parents=True)
    (old / "sweep.json").write_text(json.dumps({"runs": [
        {"name": f"name={m},seed={s}", "factors": {"credit.name": m}, "seed": s} for m in ("grpo", "rlsd") for s in (0, 1)]}))
    for m in ("grpo", "rlsd"):
        for s in (0, 1):
            (old / "runs" / f"name={m},seed={s}").mkdir()
            _finish(old / "runs" / f"name={m},seed={s}", m, s)
    recorded, _, _ = reads.build_variants(old, 200)
    out = tmp_path / "record.json"
    out.write_text(json.dumps({"variants": recorded, "study": "not run"}))

    reads.report(argparse.Namespace(root=str(root), heldout=200, out=out, figure=None, carry_recorded=True))
    doc = json.loads(out.read_text())
    g, r = doc["variants"]["grpo"], doc["variants"]["rlsd"]
    assert g["seeds"] == r["seeds"] == [0, 1, 2] and doc["seeds_run"] == [0, 1, 2]
    assert g["final"] == [0.70, 0.66, 0.60] and r["final"] == [0.74, 0.62, 0.70]
    assert r["curve"]["accuracy"][2] == [0.57, 0.65, 0.70] and len(r["wilson_final"]) == 3
    assert r["steps_to_grpo_final"] == [5, None, 5]  # recomputed against each seed's GRPO final
    assert doc["carried_seeds"]["seeds"] == {"grpo": [0, 1], "rlsd": [0, 1]} and "study" not in doc
    pair = doc["paired_vs_grpo"]["rlsd"]
    assert pair["seeds"] == [0, 1, 2] and (pair["final_above"], pair["final_below"]) == (2, 1)

    # without the flag the record is what is on disk, and nothing is said to be carried
    reads.report(argparse.Namespace(root=str(root), heldout=200, out=out, figure=None, carry_recorded=False))
    doc = json.loads(out.read_text())
    assert doc["variants"]["grpo"]["seeds"] == [2] and "carried_seeds" not in doc
