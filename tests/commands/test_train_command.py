"""`grpolab train` and friends on a run directory: the bugs that lost users' work, one test each.

Every test here failed on the trainer before RunDir owned the run directory (see the CHANGELOG):
the config was rewritten before the model loaded, a config file given with --resume was ignored,
--overwrite deleted the run and then reused a warm start built for another model or task, and
bad paths ended in tracebacks.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml

from grpolab.cli import main
from grpolab.train.metrics_log import read_metrics

SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
    "sft.max_steps=2", "sft.eval_every=2", "sft.batch_size=8", "sft.n_eval=8",
    "rollout.prompts_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=8",
    "trainer.eval_every=2", "trainer.save_every=1", "trainer.preflight=false", "log.progress=false",
    "log.plots=false", "log.tensorboard=false",
]


def _sets(*values):
    return sum([["--set", v] for v in values], [])


def _train(run, *extra):
    return main(["train", *_sets(*SMALL, f"trainer.run_dir={run}", *extra)])


def _one_error_line(capsys, *needles):
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


@pytest.fixture
def run(tmp_path):
    """A finished 2-step run directory (module-sized: a few seconds)."""
    path = tmp_path / "run"
    assert _train(path, "trainer.steps=2") == 0
    return path


def test_failed_resume_leaves_the_saved_config_and_resume_still_works(run, capsys):
    saved = (run / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "model.path=/nonexistent"]) == 2
    _one_error_line(capsys, "model.path", "/nonexistent")
    assert (run / "config.yaml").read_text() == saved  # not rewritten by the failed attempt
    assert main(["train", "--resume", str(run), "--set", "trainer.steps=3"]) == 0
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]


def test_resume_merges_a_config_file_below_the_overrides(run, tmp_path):
    more = tmp_path / "more.yaml"
    more.write_text(yaml.safe_dump({"trainer": {"steps": 3}, "optim": {"lr": 5e-5}}))
    assert main(["train", str(more), "--resume", str(run)]) == 0
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3]  # the file's steps were used
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert cfg["trainer"]["steps"] == 3 and cfg["optim"]["lr"] == 5e-5
    assert cfg["model"]["hidden_size"] == 32  # the rest stays as saved
    # precedence: saved < file < --set
    assert main(["train", str(more), "--resume", str(run), "--set", "trainer.steps=4"]) == 0
    assert [r["step"] for r in read_metrics(run)] == [1, 2, 3, 4]


def test_resume_refuses_to_change_what_the_checkpoint_depends_on(run, tmp_path, capsys):
    saved = (run / "config.yaml").read_text()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--set", "model.hidden_size=64"]) == 2
    _one_error_line(capsys, "model.hidden_size", "32 -> 64", "new run")
    assert (run / "config.yaml").read_text() == saved


@pytest.mark.parametrize("change", ["model.hidden_size=48", "task.name=reverse"])
def test_overwrite_rebuilds_a_warm_start_built_with_other_settings(run, change):
    # before: a size-mismatch traceback after the run was deleted (hidden size), or RL silently
    # started from the arith warm start (task)
    built = os.stat(run / "sft" / "model.safetensors").st_mtime_ns
    base = SMALL if change.startswith("model") else [s for s in SMALL if not s.startswith("task.options")]
    assert main(["train", "--overwrite", *_sets(*base, f"trainer.run_dir={run}", "trainer.steps=1", change)]) == 0
    assert os.stat(run / "sft" / "model.safetensors").st_mtime_ns != built  # rebuilt
    model_cfg = json.loads((run / "sft" / "config.json").read_text())
    assert model_cfg["hidden_size"] == (48 if change.startswith("model") else 32)
    key = json.loads((run / "sft" / "sft.json").read_text())["key"]
    assert (key["model"]["hidden_size"], key["task"]["name"]) == \
        ((48, "arith") if change.startswith("model") else (32, "reverse"))
    assert [r["step"] for r in read_metrics(run)] == [1]
    # and the rebuilt cache is reused by the next identical overwrite
    again = os.stat(run / "sft" / "model.safetensors").st_mtime_ns
    assert main(["train", "--overwrite", *_sets(*base, f"trainer.run_dir={run}", "trainer.steps=1", change)]) == 0
    assert os.stat(run / "sft" / "model.safetensors").st_mtime_ns == again


def test_overwrite_keeps_a_matching_warm_start(run, capsys):
    before = os.stat(run / "sft" / "model.safetensors").st_mtime_ns
    capsys.readouterr()
    assert main(["train", "--overwrite", *_sets(*SMALL, f"trainer.run_dir={run}", "trainer.steps=1")]) == 0
    assert os.stat(run / "sft" / "model.safetensors").st_mtime_ns == before
    assert f"--overwrite: removed the previous run's outputs in {run}" in capsys.readouterr().out


def test_overwrite_of_a_fresh_directory_claims_no_removal(tmp_path, capsys):
    # before: "--overwrite: removed the previous run's outputs" was printed where there were none
    fresh = tmp_path / "fresh"
    assert main(["train", "--overwrite", *_sets(*SMALL, f"trainer.run_dir={fresh}", "trainer.steps=1")]) == 0
    assert "removed the previous run's outputs" not in capsys.readouterr().out
    assert [r["step"] for r in read_metrics(fresh)] == [1]


def test_overwrite_deletes_nothing_when_the_new_config_cannot_load(run, capsys):
    ckpts = sorted(p.name for p in (run / "checkpoints").iterdir())
    capsys.readouterr()
    assert main(["train", "--overwrite", *_sets(*SMALL, f"trainer.run_dir={run}", "model.path=/nonexistent")]) == 2
    _one_error_line(capsys, "model.path")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ckpts
    assert (run / "final" / "config.json").exists() and (run / "sft" / "config.json").exists()


def test_plain_train_into_a_finished_run_is_refused(run, capsys):
    capsys.readouterr()
    assert _train(run, "trainer.steps=2") == 2
    _one_error_line(capsys, "--resume", "--overwrite")


def test_bad_paths_are_one_error_line(tmp_path, capsys):
    assert _train(tmp_path / "a", "model.path=/nonexistent/model") == 2
    _one_error_line(capsys, "model.path", "/nonexistent/model")
    assert not (tmp_path / "a" / "config.yaml").exists()  # nothing written for a config that cannot run
    assert main(["train", *_sets("task.name=dataset", f"task.options.path={tmp_path / 'none.jsonl'}",
                                 f"trainer.run_dir={tmp_path / 'b'}")]) == 2
    _one_error_line(capsys, "none.jsonl")
    assert main(["train", "--set", "trainer.run_dir="]) == 2
    _one_error_line(capsys, "trainer.run_dir")
    assert main(["train", "--resume", str(tmp_path / "nothing")]) == 2
    _one_error_line(capsys, "there is no run directory there")  # a missing path, not a missing file


def test_debug_shows_the_traceback(tmp_path):
    from grpolab.config import ConfigError

    with pytest.raises(ConfigError, match="model.path"):
        main(["train", "--debug", *_sets("model.path=/nonexistent", f"trainer.run_dir={tmp_path / 'x'}")])


def test_eval_on_a_run_that_failed_before_its_warm_start(tmp_path, capsys):
    run = tmp_path / "failed"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"trainer": {"run_dir": str(run)}}))
    assert main(["eval", str(run), "--n", "4", "--samples", "0"]) == 2
    line = _one_error_line(capsys, "holds no model yet", "--resume")
    assert "does not exist" not in line
    for cmd in (["preflight", str(run), "--n", "4"], ["credit", str(run)], ["diagnose", str(run)]):
        assert main(cmd) == 2, cmd
        _one_error_line(capsys)


def test_stale_temporary_checkpoints_are_removed_at_start(run):
    stale = run / "checkpoints" / ".tmp-step_000009-999999999"  # a pid no process has
    (stale / "model").mkdir(parents=True)
    assert main(["train", "--resume", str(run), "--set", "trainer.steps=3"]) == 0
    assert not stale.exists()
    assert not list((run / "checkpoints").glob(".tmp-*"))


VOLATILE = ("time/", "tokens_per_s", "timing_s/", "perf/throughput", "memory/")  # wall-clock metrics (+ verl aliases)


@pytest.mark.parametrize("how", ["--resume", "the same command"])
def test_a_killed_warm_start_continues_where_it_stopped(tmp_path, capsys, sft_steps, how):
    # before: the warm start saved only at its end, so a kill lost all of it, and `--resume` found
    # no config.yaml (it was written after the warm start)
    warm = ["sft.max_steps=6", "sft.target_accuracy=1.0", "trainer.steps=2"]
    assert _train(tmp_path / "full", *warm) == 0
    sft_steps.reset()
    sft_steps.kill_at = 5  # during warm-start step 5: its checkpoint after step 4 is on disk
    run = tmp_path / "run"
    assert _train(run, *warm) == 130
    assert "--resume" in capsys.readouterr().err
    assert (run / "config.yaml").exists() and not (run / "sft").exists()
    assert (run / "sft.partial" / "checkpoints" / "latest").read_text().strip() == "step_000004"

    sft_steps.reset()
    assert (main(["train", "--resume", str(run)]) if how == "--resume" else _train(run, *warm)) == 0
    assert sft_steps.taken == 2  # warm-start steps 5 and 6, not 1-6
    said = [line for line in capsys.readouterr().out.splitlines() if "warm start: resuming" in line]
    assert len(said) == 1 and "step 4" in said[0], said
    assert not (run / "sft.partial").exists()
    assert json.loads((run / "sft" / "sft.json").read_text())["resumed_from"] == 4
    # the warm start, and the RL run after it, are those of the run that was never killed
    from safetensors.torch import load_file

    for sub in ("sft", "final"):
        a = load_file(str(tmp_path / "full" / sub / "model.safetensors"))
        b = load_file(str(run / sub / "model.safetensors"))
        assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a), sub
    stable = lambda rows: [{k: v for k, v in r.items() if not k.startswith(VOLATILE)} for r in rows]  # noqa: E731
    assert stable(read_metrics(run)) == stable(read_metrics(tmp_path / "full"))


def test_a_resumed_runs_wall_time_counts_the_earlier_processes(run):
    # before: summary.json's "seconds" was the resuming process's time alone (a 55-minute run
    # finished by a resume reported 19 s). The checkpoint now carries the time spent up to it.
    import torch

    first = json.loads((run / "summary.json").read_text())["seconds"]
    ckpt = sorted((run / "checkpoints").glob("step_*"))[-1] / "state.pt"
    state = torch.load(ckpt, weights_only=False)
    assert 0 < state["seconds"] <= first  # the time up to the step-2 checkpoint
    state["seconds"] = 5000.0  # as if the first process had run for 83 minutes
    torch.save(state, ckpt)
    assert main(["train", "--resume", str(run), "--set", "trainer.steps=3"]) == 0
    resumed = json.loads((run / "summary.json").read_text())["seconds"]
    assert 5000.0 < resumed < 5000.0 + 600.0
    assert "wall time: 50" in (run / "summary.md").read_text()
    state = torch.load(sorted((run / "checkpoints").glob("step_*"))[-1] / "state.pt", weights_only=False)
    assert state["step"] == 3 and 5000.0 < state["seconds"] <= resumed


def test_preflight_of_a_bare_model_takes_a_training_config(run, tmp_path, capsys):
    # a warm start is measured on the task and settings of the runs that will start from it
    cfg = tmp_path / "c.yaml"
    cfg.write_text("task: {name: arith, n_eval: 5}\nrollout: {temperature: 0.5, max_new_tokens: 20}\n")
    out = tmp_path / "h"
    assert main(["preflight", str(run / "final"), "--config", str(cfg), "--set", "task.n_eval=6", "--n", "6",
                 "--k", "2", "--no-readability", "--out", str(out)]) == 0
    report = json.loads((out / "preflight.json").read_text())
    assert report["stats"]["n_items"] == 6 and report["settings"]["temperature"] == 0.5
    assert not (run / "final" / "preflight.json").exists()
    capsys.readouterr()
    assert main(["preflight", str(run), "--config", str(cfg)]) == 2  # a run brings its own config
    _one_error_line(capsys, "drop --config")


def test_warm_start_snapshots_are_kept_and_equal_a_shorter_warm_start(tmp_path):
    # sft.snapshot_every keeps the model of every N-th step next to the warm start: the 2-step
    # snapshot of a 4-step warm start is the 2-step warm start (constant lr, same data order)
    from safetensors.torch import load_file

    warm = ["sft.max_steps=4", "sft.eval_every=2", "sft.target_accuracy=1.0", "trainer.steps=1"]
    assert main(["sft", *_sets(*SMALL, *warm, "sft.snapshot_every=2"), "--out", str(tmp_path / "ws4")]) == 0
    snaps = tmp_path / "ws4.snapshots"
    assert sorted(p.name for p in snaps.iterdir()) == ["step_000002", "step_000004"]
    info = json.loads((snaps / "step_000002" / "snapshot.json").read_text())
    assert info["step"] == 2 and info["accuracy"] is not None and "key" in info
    assert main(["sft", *_sets(*SMALL, *warm, "sft.max_steps=2"), "--out", str(tmp_path / "ws2")]) == 0
    a = load_file(str(snaps / "step_000002" / "model.safetensors"))
    b = load_file(str(tmp_path / "ws2" / "model.safetensors"))
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    final = load_file(str(tmp_path / "ws4" / "model.safetensors"))
    last = load_file(str(snaps / "step_000004" / "model.safetensors"))
    assert all(final[k].equal(last[k]) for k in final)
    # a snapshot is a model directory: RL can start from it
    assert _train(tmp_path / "rl", f"model.path={snaps / 'step_000002'}", "trainer.steps=1") == 0
    # a warm start with other settings drops the snapshots that are not its own
    assert main(["sft", *_sets(*SMALL, *warm, "sft.lr=3e-3", "sft.snapshot_every=4"),
                 "--out", str(tmp_path / "ws4"), "--overwrite"]) == 0
    assert sorted(p.name for p in snaps.iterdir()) == ["step_000004"]
    assert json.loads((snaps / "step_000004" / "snapshot.json").read_text())["key"]["sft"]["lr"] == 3e-3
