"""studies/aggregation_coupled_tables.py: per-seed finals paired with the baseline, and the within-group
lengths of the first and last ``--window`` steps, on a tiny hand-computed comparison."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

spec = importlib.util.spec_from_file_location(
    "aggregation_coupled_tables", Path(__file__).parents[2] / "studies" / "aggregation_coupled_tables.py")
act = importlib.util.module_from_spec(spec)
spec.loader.exec_module(act)

NAN = math.nan
KEYS = ("length/mixed_correct", "length/mixed_incorrect", "length/mixed_ratio", "length/truncated_frac",
        "length/mean", "accuracy")


def _run(out, aggregation, seed, cols, evals, start=0.5):
    """Steps 1..3: ``cols`` maps each of KEYS to its 3 values, ``evals`` the held-out accuracy at steps 2, 3."""
    name = f"aggregation={aggregation},seed={seed}"
    d = out / "runs" / name
    d.mkdir(parents=True)
    rows = [{"step": s, **{k: cols[k][s - 1] for k in KEYS}} for s in (1, 2, 3)]
    rows[1]["eval/accuracy"], rows[2]["eval/accuracy"] = evals
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # NaN as the trainer writes it
    (d / "result.json").write_text(json.dumps({"start_accuracy": start, "final_accuracy": evals[-1],
                                               "best_accuracy": max(start, *evals), "seconds": 7.0}))
    return {"name": name, "setting": f"aggregation={aggregation}", "factors": {"objective.aggregation": aggregation},
            "seed": seed}


def _by_key(mc, mi, ratio, trunc, mean, acc):
    return dict(zip(KEYS, (mc, mi, ratio, trunc, mean, acc)))


def test_tables_on_a_hand_computed_comparison(tmp_path, monkeypatch, capsys):
    out = tmp_path / "cmp"
    runs = [
        _run(out, "token", 0, _by_key([10, 12, 14], [20, 22, 24], [2.0, NAN, 1.5], [0, 0.5, 0.25], [16, 18, 20],
                                    [0.5, 0.5, 0.75]), (0.5, 0.625)),
        _run(out, "token", 1, _by_key([8] * 3, [16] * 3, [2.0] * 3, [0.0] * 3, [12] * 3, [0.25] * 3), (0.25, 0.375)),
        _run(out, "balanced", 0, _by_key([10] * 3, [30, 40, 50], [3.0, 4.0, 5.0], [0, 0, 1], [20, 25, 30],
                                       [0.5] * 3), (0.75, 0.5)),
        _run(out, "balanced", 1, _by_key([6] * 3, [12] * 3, [NAN, 2.0, 2.0], [0.0] * 3, [9] * 3, [0.25] * 3),
             (0.5, 0.5)),
    ]
    (out / "runs" / "aggregation=balanced,seed=2").mkdir()  # unfinished: no result.json, left out
    runs.append({"name": "aggregation=balanced,seed=2", "setting": "aggregation=balanced",
                 "factors": {"objective.aggregation": "balanced"}, "seed": 2})
    (out / "sweep.json").write_text(json.dumps({"factors": [{"key": "objective.aggregation",
                                                             "values": ["token", "balanced"]}], "runs": runs}))
    pre = tmp_path / "pre.json"
    pre.write_text(json.dumps({"fail_success_length_ratio": 1.5, "max_new_tokens": 96, "responses": 100,
                               "task": "pairsum", "task_options": {"a": 1}, "flag": True}))
    earlier = tmp_path / "earlier.json"
    earlier.write_text(json.dumps({"fail_success_length_ratio": 1.1, "max_new_tokens": 64, "task": "pairsum"}))
    dest = tmp_path / "agg.json"
    dest.write_text(json.dumps({"attempts": [{"setting": "pairsum, replaced", "x": 0},
                                             {"setting": "arith, kept", "x": 1}]}))
    monkeypatch.setattr(sys, "argv", ["aggregation_coupled_tables.py", str(out), "--precondition", str(pre),
                                      "--attempt", f"old try={earlier}", "--window", "2", "--out", str(dest),
                                      "--command", "cmd"])
    act.main()
    doc = json.loads(dest.read_text())
    doc.pop("commit")
    # windows of 2 steps: first = steps 1-2, last = steps 2-3; a NaN step is left out of its window's mean
    # token seed 0: mixed_correct (10+12)/2 = 11, (12+14)/2 = 13; incorrect 21, 23; ratio 2 (NaN left out), 1.5;
    #   truncated 0.25, 0.375; length 17, 19; batch accuracy 0.5, 0.625
    t0 = {"first": _by_key(11, 21, 2.0, 0.25, 17, 0.5), "last": _by_key(13, 23, 1.5, 0.375, 19, 0.625)}
    t1 = {"first": _by_key(8, 16, 2.0, 0.0, 12, 0.25), "last": _by_key(8, 16, 2.0, 0.0, 12, 0.25)}
    # balanced seed 0: incorrect (30+40)/2 = 35, (40+50)/2 = 45; ratio 3.5, 4.5; truncated 0, 0.5; length 22.5, 27.5
    b0 = {"first": _by_key(10, 35, 3.5, 0.0, 22.5, 0.5), "last": _by_key(10, 45, 4.5, 0.5, 27.5, 0.5)}
    b1 = {"first": _by_key(6, 12, 2.0, 0.0, 9, 0.25), "last": _by_key(6, 12, 2.0, 0.0, 9, 0.25)}
    diff = doc["variants"]["balanced"].pop("diff_vs_token")
    # paired by seed: 0.5 - 0.625 = -0.125, 0.5 - 0.375 = +0.125 -> mean 0, sd 0.125 * sqrt(2), se 0.125;
    # t_{0.975, 1} = 12.706 (t table); sign flips of (-0.125, +0.125): |sum| >= 0 in 4 of 4
    assert (diff["value"], diff["n"]) == (0.0, 2)
    assert (diff["low"], diff["high"]) == pytest.approx((-12.706 * 0.125, 12.706 * 0.125), abs=1e-3)
    assert diff["t_p"] == pytest.approx(1.0) and diff["sign_flip_p"] == pytest.approx(1.0)
    assert diff["verdict"] == "not significant" and diff["differences"] == [-0.125, 0.125]
    assert doc == {
        "name": "aggregation_coupled",
        "status": "precondition met on pairsum; 4 variants x 5 seeds run",  # 1.5 >= 1.25
        "precondition": {"fail_success_length_ratio": 1.5, "max_new_tokens": 96, "responses": 100,
                         "required_fail_success_length_ratio": 1.25},
        "attempts": [
            {"setting": "pairsum ({'a': 1}), max_new_tokens 96", "fail_success_length_ratio": 1.5,
             "max_new_tokens": 96, "responses": 100},
            {"setting": "old try", "fail_success_length_ratio": 1.1, "max_new_tokens": 64},
            {"setting": "arith, kept", "x": 1},  # the earlier pairsum attempt is replaced
        ],
        "variants": {
            "token": {
                "seeds": [0, 1], "final": [0.625, 0.375], "start": [0.5, 0.5], "best": [0.625, 0.5],
                # two seeds: t interval 0.5 +- 12.706 * 0.125 (sd 0.125 * sqrt(2), se 0.125)
                "final_ci": {"value": 0.5, "low": pytest.approx(0.5 - 1.58828, abs=1e-4),
                             "high": pytest.approx(0.5 + 1.58828, abs=1e-4), "n": 2, "level": 0.95},
                # seed means: mixed_correct (11+8)/2, incorrect (21+16)/2, ratio (2+2)/2, truncated 0.25/2,
                # length (17+12)/2, accuracy (0.5+0.25)/2; last: (13+8)/2, (23+16)/2, (1.5+2)/2, 0.375/2, ...
                "lengths_first": _by_key(9.5, 18.5, 2.0, 0.125, 14.5, 0.375),
                "lengths_last": _by_key(10.5, 19.5, 1.75, 0.1875, 15.5, 0.4375),
                "per_seed": {"0": t0, "1": t1},
            },
            "balanced": {
                "seeds": [0, 1], "final": [0.5, 0.5], "start": [0.5, 0.5], "best": [0.75, 0.5],
                "final_ci": {"value": 0.5, "low": 0.5, "high": 0.5, "n": 2, "level": 0.95},
                "lengths_first": _by_key(8, 23.5, 2.75, 0.0, 15.75, 0.375),
                "lengths_last": _by_key(8, 28.5, 3.25, 0.25, 18.25, 0.375),
                "per_seed": {"0": b0, "1": b1},
            },
        },
        "window_steps": 2,
        "command": ["cmd"],
    }
    printed = capsys.readouterr().out
    assert printed.split("\nwrote ")[0] == "\n".join([
        "| variant | seeds | before RL | final (95% CI) | final - token (paired) |",
        "|---|---|---|---|---|",
        "| token | 2 | 0.500 | 0.500 [-1.088, 2.088] | (baseline) |",
        "| balanced | 2 | 0.500 | 0.500 [0.500, 0.500] | +0.000 [-1.588, +1.588] (p 1, not significant) |",
        "",
        "| variant | seed 0 | seed 1 |",
        "|---|---|---|",
        "| token | 0.625 | 0.375 |",
        "| balanced | 0.500 | 0.500 |",
        "",
        "| variant | right, first 2 steps | right, last 2 | wrong, first | wrong, last | ratio first | ratio last "
        "| truncated first | truncated last | batch accuracy first | last |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        "| token | 9.50 | 10.50 | 18.50 | 19.50 | 2.000 | 1.750 | 0.125 | 0.188 | 0.375 | 0.438 |",
        "| balanced | 8.00 | 8.00 | 23.50 | 28.50 | 2.750 | 3.250 | 0.000 | 0.250 | 0.375 | 0.375 |",
    ])
