"""Sweep and compare without training: grid expansion, planning, summaries of fabricated runs."""

import json

import pytest

from grpolab.config import ConfigError
from grpolab.sweep import collect_runs, expand_grid, parse_factor, plan_sweep, write_sweep_summary
from grpolab.sweep.compare import pick_baseline, training_statistics, write_comparison


def test_parse_and_expand_grid():
    assert parse_factor("optim.lr=1e-4, 3e-4") == ("optim.lr", ["1e-4", "3e-4"])
    for bad, msg in (("optim.lr", "must look like"), ("optim.lr=", "at least one"),
                     ("optim.lr=1,1", "repeats"), ("trainer.seed=1,2", "--seeds")):
        with pytest.raises(ValueError, match=msg):
            parse_factor(bad)
    specs = expand_grid([("optim.lr", ["1e-4", "3e-4"]), ("objective.kl_coef", ["0", "0.1"])], [0, 1])
    assert len(specs) == 8
    assert specs[0].name == "lr=1e-4,kl_coef=0,seed=0" and specs[1].name == "lr=1e-4,kl_coef=0,seed=1"
    assert specs[0].setting == specs[1].setting == "lr=1e-4,kl_coef=0"
    assert specs[-1].overrides() == ["optim.lr=3e-4", "objective.kl_coef=0.1", "trainer.seed=1"]
    # clashing short names fall back to the full key
    s = expand_grid([("objective.clip_low", ["0.1"]), ("rollout.clip_low", ["2"])], [0])
    assert s[0].name == "objective.clip_low=0.1,rollout.clip_low=2,seed=0"


def test_plan_validates_every_point_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="objective.aggregation"):
        plan_sweep(None, [], ["objective.aggregation=token,nope"], 1, tmp_path / "s")
    assert not (tmp_path / "s").exists()
    out, specs = plan_sweep(None, ["trainer.steps=3"], ["optim.lr=1e-4,1e-3"], 2, tmp_path / "s")
    assert len(specs) == 4 and (out / "sweep.json").exists()
    cfg = (out / "runs" / specs[0].name / "config.yaml").read_text()
    assert "lr: 0.0001" in cfg and "steps: 3" in cfg
    # a finished run with a different config in the same place is refused, with the fix named
    (out / "runs" / specs[0].name / "result.json").write_text("{}")
    with pytest.raises(ValueError, match="trainer.steps: 3 -> 4"):
        plan_sweep(None, ["trainer.steps=4"], ["optim.lr=1e-4,1e-3"], 2, tmp_path / "s")
    # a run saved before grpolab grew a new config field (it takes its default) is still the same run
    import yaml

    path = out / "runs" / specs[0].name / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    del saved["trainer"]["preflight"]
    path.write_text(yaml.safe_dump(saved))
    plan_sweep(None, ["trainer.steps=3"], ["optim.lr=1e-4,1e-3"], 2, tmp_path / "s")
    assert "preflight" not in yaml.safe_load(path.read_text())["trainer"]  # finished: left alone


def _fake_run(out, spec, start, curve, entropy=None, extra=None):
    d = out / "runs" / spec.name
    d.mkdir(parents=True, exist_ok=True)
    (d / "result.json").write_text(json.dumps({"steps": len(curve) * 10, "start_accuracy": start,
                                               "final_accuracy": curve[-1], "best_accuracy": max([start, *curve])}))
    rows = []
    for i in range(1, len(curve) * 10 + 1):
        r = {"step": i, "update/entropy": (entropy or [0.5] * 1000)[i - 1], "time/step": 1.0,
             "length/std": 2.0, "update/ratio_max": 1.5, "update/ratio_min": 0.5, **(extra or {})}
        if i % 10 == 0:
            r["eval/accuracy"] = curve[i // 10 - 1]
        rows.append(r)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_summary_of_fabricated_sweep(tmp_path):
    factors = [("optim.lr", ["1e-4", "1e-2"])]
    specs = expand_grid(factors, [0, 1])
    out = tmp_path / "s"
    _fake_run(out, specs[0], 0.3, [0.35, 0.40, 0.45])
    _fake_run(out, specs[1], 0.3, [0.33, 0.38, 0.41])
    _fake_run(out, specs[2], 0.3, [0.10, 0.0, 0.0])  # collapses at step 20
    # specs[3] unfinished
    rows = collect_runs(out, specs)
    assert [r.status for r in rows] == ["finished"] * 3 + ["unfinished"]
    assert rows[0].eval_steps == [0, 10, 20, 30] and rows[0].final == 0.45
    assert rows[2].collapse == "success" and rows[2].collapse_step == 20
    assert rows[0].collapse == "-"
    md = write_sweep_summary(out, specs, factors).read_text()
    assert "| 1e-2 | 1 | 0.000 (1 run)" in md  # one finished run at lr=1e-2: no interval
    assert "| 1e-4 | 2 | 0.430" in md  # mean of 0.45 and 0.41
    assert "unfinished" in md and "fell from 0.300" in md
    assert (out / "plots" / "success_vs_lr.png").exists() and (out / "plots" / "curves.png").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["effects"]["optim.lr"][0]["change"]["value"] == pytest.approx(0.13)


def test_seeds_only_sweep_repeats_the_config(tmp_path):
    """`grpolab sweep CONFIG --seeds 3` without --grid: one setting, three seeds, summarised over seeds."""
    out, specs = plan_sweep(None, ["trainer.steps=3"], [], 3, tmp_path / "s")
    assert [s.name for s in specs] == ["seed=0", "seed=1", "seed=2"] and {s.setting for s in specs} == {"base"}
    assert "seed: 2" in (out / "runs" / "seed=2" / "config.yaml").read_text()
    assert "No finished runs yet." in write_sweep_summary(out, specs, [], plots=False).read_text()
    for s, final in zip(specs, [0.40, 0.50, 0.60]):
        _fake_run(out, s, 0.3, [0.35, final])
    md = write_sweep_summary(out, specs, []).read_text()
    assert "## Over seeds" in md and "| all | 3 | 0.500 [" in md
    summary = json.loads((out / "summary.json").read_text())
    assert summary["effects"]["all runs"][0]["change"]["value"] == pytest.approx(0.2)


def test_comparison_pairs_by_seed(tmp_path):
    factors = [("objective.aggregation", ["token", "balanced"])]
    specs = expand_grid(factors, [0, 1])
    out = tmp_path / "c"
    _fake_run(out, specs[0], 0.3, [0.5], extra={"length/gap_incorrect_minus_correct": 4.0})
    _fake_run(out, specs[1], 0.3, [0.4], extra={"length/gap_incorrect_minus_correct": 6.0})
    _fake_run(out, specs[2], 0.3, [0.6], extra={"length/gap_incorrect_minus_correct": 1.0})
    _fake_run(out, specs[3], 0.3, [0.6], extra={"length/gap_incorrect_minus_correct": 1.0})
    md = write_comparison(out, specs, factors, baseline="token").read_text()
    res = json.loads((out / "comparison.json").read_text())
    b = res["variants"]["aggregation=balanced"]
    # paired by seed: (0.6 - 0.5, 0.6 - 0.4) -> mean 0.15
    d = b["final_minus_baseline"]
    assert d["value"] == pytest.approx(0.15)
    # 2 seeds: sd of (0.1, 0.2) = 0.0707, se 0.05, t_{0.975, 1} = 12.706 (t table); sign flips: 2 of 4
    assert (d["low"], d["high"]) == pytest.approx((0.15 - 12.706 * 0.05, 0.15 + 12.706 * 0.05), abs=1e-3)
    assert d["sign_flip_p"] == pytest.approx(0.5) and d["verdict"] == "not significant"
    assert "| +0.150 [-0.485, +0.785] | not significant (p 0.5) |" in md
    assert res["variants"]["aggregation=token"]["statistics"]["length/gap_incorrect_minus_correct"]["value"] == pytest.approx(5.0)
    assert b["statistics"]["update/ratio_spread"]["value"] == pytest.approx(1.0)
    assert "(baseline)" in md and (out / "plots" / "compare_curves.png").exists()
    with pytest.raises(ValueError, match="matches 0 variants"):
        write_comparison(out, specs, factors, baseline="sequence")
    assert pick_baseline(["a=1", "a=2"], expand_grid([("x.a", ["1", "2"])], [0]), "a=2") == "a=2"


def test_training_statistics_means():
    rows = [{"step": 1, "length/std": 2.0, "update/clip_frac": 0.1, "update/ratio_max": 1.2, "update/ratio_min": 0.9},
            {"step": 2, "length/std": 4.0, "update/clip_frac": 0.3, "update/ratio_max": 1.4, "update/ratio_min": 0.7,
             "update/credit_weight_std": 0.5, "reward/mean": 1.0, "credit/multiplier_max": 3.0,
             "credit/multiplier_min": 0.5}]
    st = training_statistics(rows)
    assert st["length/std"] == 3.0 and st["update/clip_frac"] == pytest.approx(0.2)
    assert st["update/ratio_spread"] == pytest.approx(0.5)  # (0.3 + 0.7) / 2
    assert st["update/credit_weight_std"] == 0.5 and "reward/mean" not in st
    assert st["credit/multiplier_spread"] == 2.5 and st["credit/multiplier_max"] == 3.0


def test_config_differences_ignore_sft_only_when_no_warm_start_runs():
    from grpolab.sweep.runner import _config_differences

    def cfg(path, enabled="auto", ema=0.0, lr=1e-4):
        return {"model": {"path": path}, "sft": {"enabled": enabled, "ema": ema},
                "optim": {"lr": lr}, "trainer": {"run_dir": "x"}}

    # a loaded model: the sft section cannot change the run, a changed sft default is no difference
    assert _config_differences(cfg("ws", ema=0.0), cfg("ws", ema=0.99)) == []
    assert _config_differences(cfg("ws", enabled=False, ema=0.0), cfg("ws", enabled="no", ema=0.5)) == []
    # ... but every other section still counts
    assert _config_differences(cfg("ws"), cfg("ws", lr=3e-4)) == ["optim.lr: 0.0001 -> 0.0003"]
    # a model built from scratch (or sft.enabled=yes) runs the warm start: sft differences count
    assert _config_differences(cfg("", ema=0.0), cfg("", ema=0.99)) == ["sft.ema: 0.0 -> 0.99"]
    assert _config_differences(cfg("ws", "yes", ema=0.0), cfg("ws", "yes", ema=0.99)) == ["sft.ema: 0.0 -> 0.99"]
    # switching the warm start on is a difference
    assert _config_differences(cfg("ws", "auto"), cfg("ws", "yes")) == ["sft.enabled: 'auto' -> 'yes'"]


def test_config_differences_ignore_keys_that_only_change_saving():
    from grpolab.sweep.runner import _config_differences

    def cfg(sft_save=None, save=10, progress=True, steps=40):
        return {"model": {"path": ""}, "sft": {"save_every": sft_save, "max_steps": 100},
                "trainer": {"run_dir": "x", "save_every": save, "steps": steps}, "log": {"progress": progress}}

    # checkpoint frequency and the progress bar cannot change a run (resume is exact) ...
    assert _config_differences(cfg(), cfg(sft_save=50, save=5, progress=False)) == []
    # ... the number of steps can
    assert _config_differences(cfg(), cfg(steps=80)) == ["trainer.steps: 40 -> 80"]


def test_sweep_and_compare_usage_errors_are_one_line(tmp_path, capsys):
    from grpolab.cli import main

    assert main(["sweep", "--out", str(tmp_path / "s")]) == 2
    assert main(["compare", "--out", str(tmp_path / "c")]) == 2
    assert main(["sweep", "--grid", "optim.lr", "--out", str(tmp_path / "s")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)
    assert "--grid" in lines[0] and "--seeds N" in lines[0] and "--vary" in lines[1]


def test_design_file_runs_listed_points(tmp_path):
    from grpolab.sweep import design_balance, load_design

    d = tmp_path / "d.yaml"
    d.write_text("runs:\n  - {optim.lr: '1e-4', objective.kl_coef: 0, trainer.seed: 0}\n"
                 "  - {optim.lr: '1e-3', objective.kl_coef: 0.1, trainer.seed: 0}\n"
                 "  - {optim.lr: '1e-4', objective.kl_coef: 0.1, trainer.seed: 1}\n"
                 "  - {optim.lr: '1e-3', objective.kl_coef: 0, trainer.seed: 1}\n")
    specs = load_design(d)
    assert [s.name for s in specs] == ["lr=1e-4,kl_coef=0,seed=0", "lr=1e-3,kl_coef=0.1,seed=0",
                                       "lr=1e-4,kl_coef=0.1,seed=1", "lr=1e-3,kl_coef=0,seed=1"]
    assert specs[1].overrides() == ["optim.lr=1e-3", "objective.kl_coef=0.1", "trainer.seed=0"]
    assert design_balance(specs) == []  # a 2^(3-1) fraction: every pair balanced
    out, planned = plan_sweep(None, ["trainer.steps=3"], [], 1, tmp_path / "s", design=d)
    assert [s.name for s in planned] == [s.name for s in specs]
    plan = json.loads((out / "sweep.json").read_text())
    assert plan["design"] == str(d) and plan["seeds"] == [0, 1]
    assert plan["factors"] == [{"key": "optim.lr", "values": ["1e-4", "1e-3"]},
                               {"key": "objective.kl_coef", "values": ["0", "0.1"]}]
    assert "kl_coef: 0.1" in (out / "runs" / specs[1].name / "config.yaml").read_text()
    # dropping a run unbalances lr x seed and kl x seed ... and the check names the pairs
    assert set(design_balance(specs[:3])) == {"optim.lr x objective.kl_coef", "optim.lr x seed",
                                              "objective.kl_coef x seed"}
    # rows without a seed are repeated per seed; with one, --seeds is refused
    d2 = tmp_path / "d2.yaml"
    d2.write_text("runs:\n  - {optim.lr: '1e-4'}\n  - {optim.lr: '1e-3'}\n")
    assert [s.name for s in load_design(d2, [0, 1])] == ["lr=1e-4,seed=0", "lr=1e-4,seed=1",
                                                         "lr=1e-3,seed=0", "lr=1e-3,seed=1"]
    with pytest.raises(ValueError, match="drop --seeds"):
        load_design(d, [0, 1, 2])
    with pytest.raises(ValueError, match="not both"):
        plan_sweep(None, [], ["optim.lr=1e-4"], 1, tmp_path / "s2", design=d)


@pytest.mark.parametrize("text,msg", [
    ("runs: []\n", "non-empty list"), ("nope: 1\n", "non-empty list"), ("runs:\n  - 3\n", "non-empty list"),
    ("runs:\n  - {optim.lr: '1e-4'}\n  - {objective.kl_coef: 0}\n", "same keys"),
    ("runs:\n  - {optim.lr: '1e-4'}\n  - {optim.lr: '1e-4'}\n", "twice"),
    ("runs:\n  - {optim.lr: [1, 2]}\n", "number or a string"),
])
def test_design_file_errors_name_the_problem(tmp_path, text, msg):
    from grpolab.sweep import load_design

    d = tmp_path / "d.yaml"
    d.write_text(text)
    with pytest.raises(ValueError, match=msg):
        load_design(d)
    with pytest.raises(ValueError, match="cannot read"):
        load_design(tmp_path / "missing.yaml")


def test_study_design_is_an_orthogonal_array():
    """studies/web_lr_grid_design.yaml: 18 runs, every pair of its five factors balanced."""
    from pathlib import Path

    from grpolab.sweep import design_balance, design_factors, load_design

    specs = load_design(Path(__file__).resolve().parents[2] / "studies" / "web_lr_grid_design.yaml")
    assert len(specs) == 18 and design_balance(specs) == []
    assert [len(v) for _, v in design_factors(specs)] == [2, 3, 3, 3]
    assert sorted({s.seed for s in specs}) == [0, 1, 2]
