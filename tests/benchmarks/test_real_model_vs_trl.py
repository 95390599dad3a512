"""benchmarks/speed/real_model_vs_trl.py: time to plain TRL's final accuracy, the seed-mean curves, the
record's schema (issue 46: ``seeds``, per side ``final`` and ``wall_s``, ``time_to_trl_final_ratio``,
``command``, ``commit``) and that every comparison with plain TRL is paired by seed."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "speed" / "real_model_vs_trl.py"
_spec = importlib.util.spec_from_file_location("real_model_vs_trl", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_time_to_accuracy_is_the_first_point_at_or_above_the_target():
    curve = [{"step": 0, "accuracy": 0.2, "wall_s": 0.0}, {"step": 5, "accuracy": 0.6, "wall_s": 50.0},
             {"step": 10, "accuracy": 0.5, "wall_s": 100.0}]
    assert bench.time_to_accuracy(curve, 0.5) == 50.0
    assert bench.time_to_accuracy(curve, 0.6) == 50.0          # equal counts as reached
    assert bench.time_to_accuracy(curve, 0.61) is None
    assert bench.time_to_accuracy(curve, 0.1) == 0.0
    assert bench.time_to_accuracy(curve, 0.5, "cpu_s") is None  # a curve without CPU seconds
    assert bench.time_to_accuracy([dict(p, cpu_s=p["wall_s"] / 4) for p in curve], 0.5, "cpu_s") == 12.5


def _run(side, seed, accs, step_s, start=None):
    curve, cum = [], 0.0
    for i, s in enumerate(step_s, 1):
        cum += s
        if i % 5 == 0:
            curve.append({"step": i, "accuracy": accs[i // 5 - 1], "wall_s": cum, "cpu_s": cum / 2})
    return {"side": side, "seed": seed, "step_s": step_s, "curve": curve, "final": curve[-1]["accuracy"],
            "wall_s": sum(step_s), "peak_rss_mb": 2048.0, "start_accuracy": start}


def _runs():
    return [
        _run("grpolab", 0, [0.5, 0.7], [2.0] * 10, start=0.2), _run("grpolab", 1, [0.6, 0.8], [4.0] * 10, start=0.2),
        _run("trl", 0, [0.3, 0.6], [10.0] * 10), _run("trl", 1, [0.5, 0.6], [10.0] * 10),
        _run("adapter", 0, [0.3, 0.6], [12.0] * 10),  # seed 1 of the adapter did not finish
    ]


def test_every_comparison_is_paired_by_seed():
    rec = bench.summarize(_runs(), seeds=[0, 1], command="python benchmarks/speed/real_model_vs_trl.py", commit="abc")
    bench.check_record(rec)
    assert rec["seeds"] == [0, 1] and rec["complete_seeds"] == 2 and rec["all_sides_seeds"] == [0]
    assert rec["sides"]["grpolab"]["seeds"] == [0, 1] and rec["sides"]["trl"]["seeds"] == [0, 1]
    a = rec["sides"]["adapter"]  # seed 1 of the adapter did not finish: compared with TRL on seed 0 only
    assert a["seeds"] == [0] and a["final"] == [0.6] and a["wall_s"] == [120.0]
    assert a["trl_final_same_seeds"] == pytest.approx(0.6) and rec["trl_final"] == pytest.approx(0.6)
    # the adapter reaches TRL's seed-0 final (0.6) at its step 10 (120 s); TRL's seed 0 at its step 10 (100 s)
    assert rec["time_to_trl_final_s"]["adapter"] == pytest.approx(120.0)
    assert rec["trl_time_to_final_s_same_seeds"]["adapter"] == pytest.approx(100.0)
    assert rec["time_to_trl_final_ratio"]["adapter"] == pytest.approx(1.2)
    only_trl_s0 = bench.summarize(_runs()[:3] + [_runs()[4]], seeds=[0, 1], command="c", commit="x")
    assert only_trl_s0["seeds"] == [0] and only_trl_s0["sides"]["grpolab"]["final"] == [0.7]


def test_summary_means_target_and_ratio():
    rec = bench.summarize(_runs()[:4], seeds=[0, 1], sides=("grpolab", "trl"), command="cmd", commit="abc")
    bench.check_record(rec)
    g, t = rec["sides"]["grpolab"], rec["sides"]["trl"]
    assert g["final"] == [0.7, 0.8] and g["final_mean"] == pytest.approx(0.75) and g["wall_s"] == [20.0, 40.0]
    assert t["final_mean"] == pytest.approx(0.6) and rec["trl_final"] == pytest.approx(0.6)
    # seed-mean curves: step 0 is the base model at 0 s; later points average accuracy and cumulative time
    assert [p["step"] for p in g["curve"]] == [0, 5, 10]
    assert g["curve"][1] == {"step": 5, "accuracy": pytest.approx(0.55), "wall_s": pytest.approx(15.0),
                             "cpu_s": pytest.approx(7.5)}
    assert t["curve"][1]["accuracy"] == pytest.approx(0.4) and t["curve"][2]["wall_s"] == pytest.approx(100.0)
    # grpolab reaches 0.6 at its step-10 point (mean 30 s); TRL at its own step 10 (100 s)
    assert rec["time_to_trl_final_s"] == {"grpolab": pytest.approx(30.0), "trl": pytest.approx(100.0)}
    assert rec["time_to_trl_final_ratio"] == {"grpolab": pytest.approx(0.3), "trl": pytest.approx(1.0)}
    assert rec["cpu_to_trl_final_s"] == {"grpolab": pytest.approx(15.0), "trl": pytest.approx(50.0)}
    assert rec["cpu_to_trl_final_ratio"] == {"grpolab": pytest.approx(0.3), "trl": pytest.approx(1.0)}
    assert g["s_per_step_median"] == 3.0 and t["peak_rss_gib"] == [2.0, 2.0]  # steps 2+ of both seeds
    page = bench.markdown(rec)
    assert "| grpolab (own trainer) | 0, 1 | 0.700 / 0.800 | 0.750 | 20 / 40 | 10 / 20 | 3.0 | -- |" in page
    assert "| 30 s / 15 s | 0.30 / 0.30 |" in page


def test_a_side_that_never_reaches_the_target_has_no_ratio():
    runs = [_run("grpolab", 0, [0.1, 0.2], [2.0] * 10, start=0.1), _run("trl", 0, [0.3, 0.6], [10.0] * 10)]
    rec = bench.summarize(runs, seeds=[0], sides=("grpolab", "trl"), command="c", commit="x")
    assert rec["time_to_trl_final_s"]["grpolab"] is None and rec["time_to_trl_final_ratio"]["grpolab"] is None
    assert "not reached" in bench.markdown(rec)


def test_the_schema_check_fails_on_a_record_that_lacks_what_the_issue_asks():
    rec = bench.summarize(_runs()[:4], seeds=[0, 1], sides=("grpolab", "trl"), command="c", commit="x")
    for key in ("seeds", "time_to_trl_final_ratio", "command", "commit"):
        broken = {k: v for k, v in rec.items() if k != key}
        with pytest.raises(ValueError, match=key):
            bench.check_record(broken)
    broken = dict(rec, sides={"trl": {k: v for k, v in rec["sides"]["trl"].items() if k != "wall_s"}})
    with pytest.raises(ValueError, match="wall_s"):
        bench.check_record(broken)
    broken = dict(rec, sides={"trl": dict(rec["sides"]["trl"], final=[0.6])})
    with pytest.raises(ValueError, match="one final"):
        bench.check_record(broken)
    broken = dict(rec, sides={"trl": dict(rec["sides"]["trl"], seeds=[0], final=[0.6], wall_s=[100.0])})
    with pytest.raises(ValueError, match="not the record's"):
        bench.check_record(broken)


def test_the_committed_record_has_the_issues_schema():
    import json

    path = Path(__file__).resolve().parents[2] / "docs" / "results" / "real_model_vs_trl.json"
    rec = json.loads(path.read_text())
    bench.check_record(rec)
    assert set(rec["sides"]) >= {"grpolab", "trl"}
    # the record was run as benchmarks/real_model_vs_trl.py, before the script moved to benchmarks/speed/
    assert rec["command"].split()[:2] in (["python", "benchmarks/real_model_vs_trl.py"],
                                          ["python", "benchmarks/speed/real_model_vs_trl.py"])
    assert len(rec["commit"]) == 40 and rec["seeds"] == rec["sides"]["trl"]["seeds"]
