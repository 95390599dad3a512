"""Issue 62, item 2: run directories have an owner. A marker file written when a run starts says
grpolab created the folder; `--overwrite` and a plain `train` refuse a non-empty folder without it
(before: --overwrite deleted a user's plots/, final/ and summary.md, and a plain train appended to
a user's metrics.jsonl); an exclusive lock stops a second writer with an error naming the holder's
pid (before: both ran to the end writing the same checkpoints); `--resume DIR` refuses a
conflicting trainer.run_dir (before: silently ignored)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from grpolab.cli import main
from grpolab.train.rundir import LOCK_FILE, MARKER

SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=2", "task.n_train=16", "task.n_eval=4",
    "sft.enabled=no", "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
    "trainer.steps=1", "trainer.save_every=1", "trainer.eval_every=1", "trainer.preflight=false",
    "log.progress=false", "log.plots=false", "log.tensorboard=false",
]


def _sets(*values):
    return sum([["--set", v] for v in values], [])


def _one_error(capsys, argv, *needles):
    capsys.readouterr()
    rc = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), (rc, err)
    for n in needles:
        assert n in err[0], err[0]
    return err[0]


def _user_folder(tmp_path):
    """A folder holding a user's files, named like a run's outputs."""
    folder = tmp_path / "mine"
    (folder / "plots").mkdir(parents=True)
    (folder / "plots" / "fig.png").write_bytes(b"png")
    (folder / "final").mkdir()
    (folder / "final" / "config.json").write_text("{}")
    (folder / "summary.md").write_text("my notes\n")
    (folder / "metrics.jsonl").write_text('{"step": 1, "mine": 1}\n')
    return folder


def _snapshot(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("flags", [[], ["--overwrite"], ["--dry-run"], ["--dry-run", "--overwrite"]])
def test_a_users_folder_is_never_written_or_deleted(tmp_path, capsys, flags):
    folder = _user_folder(tmp_path)
    before = _snapshot(folder)
    _one_error(capsys, ["train", *flags, *_sets(*SMALL, f"trainer.run_dir={folder}")],
               "is not empty", "not created by grpolab", MARKER, "--set trainer.run_dir=PATH")
    assert _snapshot(folder) == before


def test_an_empty_folder_is_fine_and_gets_the_marker(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    assert main(["train", *_sets(*SMALL, f"trainer.run_dir={folder}")]) == 0
    assert (folder / MARKER).exists() and (folder / "final" / "config.json").exists()
    # its own run is overwritten as before: the marker says it is grpolab's
    assert main(["train", "--overwrite", *_sets(*SMALL, f"trainer.run_dir={folder}")]) == 0


_HOLD = """
import sys, time
from grpolab.train.rundir import RunDir
lock = RunDir(sys.argv[1]).claim()
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("resume", [False, True])
def test_a_second_writer_is_stopped_naming_the_holders_pid(tmp_path, capsys, resume):
    run = tmp_path / "run"
    if resume:
        assert main(["train", *_sets(*SMALL, f"trainer.run_dir={run}")]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        argv = ["train", "--resume", str(run), *_sets("trainer.steps=2")] if resume else \
            ["train", *_sets(*SMALL, f"trainer.run_dir={run}")]
        _one_error(capsys, argv, "in use by another grpolab process", f"pid {holder.pid}")
        _one_error(capsys, ["train", "--dry-run", *argv[1:]], f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    # the kernel released the dead holder's lock: the run goes on
    time.sleep(0.1)
    argv = ["train", "--resume", str(run), *_sets("trainer.steps=2")] if resume else \
        ["train", *_sets(*SMALL, f"trainer.run_dir={run}")]
    assert main(argv) == 0
    assert (run / LOCK_FILE).read_text().strip() == str(os.getpid())


def test_resume_refuses_a_conflicting_run_dir(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *_sets(*SMALL, f"trainer.run_dir={run}")]) == 0
    other = tmp_path / "other"
    _one_error(capsys, ["train", "--resume", str(run), *_sets("trainer.steps=2", f"trainer.run_dir={other}")],
               f"--resume {run} with trainer.run_dir={str(other)!r}", "drop trainer.run_dir")
    assert not other.exists()
    # naming the same directory is no conflict
    assert main(["train", "--resume", str(run), *_sets("trainer.steps=2", f"trainer.run_dir={run}")]) == 0
