"""End to end on a very small model: sweep (resumable), compare, preflight, diagnose; the preflight in train.

Each test trains for a few steps in subprocesses or in-process; on 2 busy cores that is tens of
seconds, so they are marked slow.
"""

import json
import sys
from pathlib import Path

import pytest

from grpolab.cli import main as cli_main
from grpolab.config import load_config
from grpolab.train import train
from grpolab.train.metrics_log import read_metrics

sys.path.insert(0, str(Path(__file__).parents[1] / "train"))
from test_end_to_end import SMALL, _stable  # noqa: E402

pytestmark = pytest.mark.slow

TINY_YAML = """\
model: {hidden_size: 32, num_layers: 2, num_heads: 2, intermediate_size: 64}
task: {options: {max_digits: 1, max_terms: 3}, n_train: 64, n_eval: 8}
sft: {max_steps: 4, eval_every: 2, batch_size: 16, n_eval: 8}
rollout: {prompts_per_step: 4, group_size: 4, max_new_tokens: 16}
trainer: {steps: 2, eval_every: 1, save_every: 1, preflight: false}
log: {progress: false, plots: false, tensorboard: false}
"""


def test_sweep_runs_grid_then_skips_finished_runs(tmp_path, capsys):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY_YAML)
    out = tmp_path / "sweep"
    args = ["sweep", str(cfg), "--grid", "optim.lr=1e-4,1e-3", "--seeds", "1", "--jobs", "2", "--out", str(out)]
    assert cli_main(args) == 0
    runs = sorted(p.name for p in (out / "runs").iterdir())
    assert runs == ["lr=1e-3,seed=0", "lr=1e-4,seed=0"]
    for r in runs:
        result = json.loads((out / "runs" / r / "result.json").read_text())
        fam = result["final_families"]  # per task family, for studies that split by family
        assert fam and sum(f["n"] for f in fam.values()) == 8, fam
        assert result["start_families"].keys() == fam.keys()
        assert [m["step"] for m in read_metrics(out / "runs" / r)] == [1, 2]
    assert "lr: 0.001" in (out / "runs" / "lr=1e-3,seed=0" / "config.yaml").read_text()
    stamps = {r: (out / "runs" / r / "result.json").stat().st_mtime_ns for r in runs}
    md = (out / "summary.md").read_text()
    assert "| 1e-4 | 0 |" in md and "| 1e-3 | 0 |" in md
    capsys.readouterr()
    # the same command again: nothing is retrained
    assert cli_main(args) == 0
    assert "2 already finished, 0 to run" in capsys.readouterr().out
    assert {r: (out / "runs" / r / "result.json").stat().st_mtime_ns for r in runs} == stamps
    inv = json.loads((out / "invocations.json").read_text())
    assert len(inv) == 2 and inv[1]["status"] == {r: "skipped" for r in runs}


def test_sweep_resumes_an_interrupted_run(tmp_path, kill_during_step):
    from grpolab.sweep import plan_sweep, run_sweep
    from grpolab.train import load_run_config
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY_YAML.replace("steps: 2,", "steps: 3,"))
    out, specs = plan_sweep(cfg, [], ["optim.lr=1e-3"], 1, tmp_path / "sweep")
    run_dir = out / "runs" / specs[0].name
    # the run, killed during step 3 (after the step-2 checkpoint), as a sweep process would be
    kill_during_step(3, lambda: train(load_run_config(run_dir), log=lambda *_: None))
    assert not (run_dir / "result.json").exists()
    sweep = run_sweep(out, specs, jobs=1, log=lambda *_: None)
    assert sweep.status == {specs[0].name: "done"}
    res = json.loads((run_dir / "result.json").read_text())
    assert res["resumed_from_step"] == 2 and res["steps"] == 3
    assert [m["step"] for m in read_metrics(run_dir)] == [1, 2, 3]


def test_preflight_check_leaves_training_unchanged(tmp_path, capsys):
    steps = ["trainer.steps=3"]
    on = train(load_config(overrides=SMALL + steps + [f"trainer.run_dir={tmp_path / 'on'}"]), log=lambda *_: None)
    off = train(load_config(overrides=SMALL + steps + ["trainer.preflight=false", f"trainer.run_dir={tmp_path / 'off'}"]),
                log=lambda *_: None)
    assert _stable(read_metrics(tmp_path / "on")) == _stable(read_metrics(tmp_path / "off"))
    assert on.final_accuracy == off.final_accuracy
    h = json.loads((tmp_path / "on" / "preflight.json").read_text())  # the pre-check is the preflight (issue 43)
    assert h["stats"]["k"] == 8 and h["verdict"] in ("indicated", "not indicated", "can't tell")
    assert not (tmp_path / "off" / "preflight.json").exists()
    # preflight and diagnose commands on the finished run
    capsys.readouterr()
    assert cli_main(["preflight", str(tmp_path / "on"), "--n", "6", "--k", "2", "--out", str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out  # the expected cost first, then progress with an ETA
    assert "preflight: expected cost 18 sampled responses (6 items x (1 greedy + 2))" in out
    assert "preflight: 6/6 items x (1 greedy + 2 sampled)" in out
    h2 = json.loads((tmp_path / "h" / "preflight.json").read_text())
    assert h2["stats"]["n_items"] == 6 and set(h2["stats"]["pass_at_k_unbiased"]) == {"1", "2"}
    assert cli_main(["diagnose", str(tmp_path / "on"), "--n", "6", "--probe", "4"]) == 0
    out = capsys.readouterr().out
    assert "[1/6 groups, ETA" in out and "[6/6 groups, ETA 0s]" in out
    d = json.loads((tmp_path / "on" / "diagnose.json").read_text())
    assert {x["group"] for x in d["drift"]} >= {"embed", "attention", "mlp", "norm", "head", "layer.0"}
    assert abs(sum(x["share"] for x in d["drift"] if "." not in x["group"]) - 1) < 1e-9
    assert set(d["causal"]["groups"]) == {"embed", "attention", "mlp", "norm", "head", "attention+mlp"}
    assert len(d["hidden_ranks"]["trained"]) == 3
    assert (tmp_path / "on" / "plots" / "diagnose_causal.png").exists()


def test_compare_command(tmp_path):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY_YAML)
    out = tmp_path / "cmp"
    assert cli_main(["compare", str(cfg), "--vary", "objective.aggregation=token,balanced", "--seeds", "2",
                     "--jobs", "2", "--out", str(out), "--baseline", "balanced"]) == 0
    res = json.loads((out / "comparison.json").read_text())
    assert res["baseline"] == "aggregation=balanced"
    assert res["variants"]["aggregation=token"]["seeds"] == [0, 1]
    assert "final_minus_baseline" in res["variants"]["aggregation=token"]
    assert (out / "plots" / "compare_curves.png").exists()


def test_sweep_runs_a_design_file(tmp_path, capsys):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY_YAML)
    design = tmp_path / "design.yaml"
    design.write_text("runs:\n  - {optim.lr: '1e-4', objective.kl_coef: 0, trainer.seed: 0}\n"
                      "  - {optim.lr: '1e-3', objective.kl_coef: 0.1, trainer.seed: 1}\n")
    out = tmp_path / "sweep"
    assert cli_main(["sweep", str(cfg), "--design", str(design), "--jobs", "2", "--out", str(out)]) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["lr=1e-3,kl_coef=0.1,seed=1",
                                                                "lr=1e-4,kl_coef=0,seed=0"]
    saved = (out / "runs" / "lr=1e-3,kl_coef=0.1,seed=1" / "config.yaml").read_text()
    assert "kl_coef: 0.1" in saved and "seed: 1" in saved
    md = (out / "summary.md").read_text()
    # two runs cannot balance lr x kl (1e-4 only ever meets 0): the summary says so
    assert "design: " in md and "UNBALANCED" in md and "optim.lr x objective.kl_coef" in md
    assert "| 1e-3 | 0.1 | 1 |" in md
    capsys.readouterr()
    assert cli_main(["sweep", str(cfg), "--design", str(tmp_path / "nope.yaml"), "--out", str(out)]) == 2
    assert "cannot read design file" in capsys.readouterr().err
