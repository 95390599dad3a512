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

from cli_helpers import one_error, sets, tiny_run
from grpolab.cli import main
from grpolab.train.rundir import LOCK_FILE, MARKER

SMALL = tiny_run(1)


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
    one_error(capsys, ["train", *flags, *sets(*SMALL, f"trainer.run_dir={folder}")],
               "is not empty", "not created by grpolab", MARKER, "--set trainer.run_dir=PATH")
    assert _snapshot(folder) == before


def test_an_empty_folder_is_fine_and_gets_the_marker(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    assert main(["train", *sets(*SMALL, f"trainer.run_dir={folder}")]) == 0
    assert (folder / MARKER).exists() and (folder / "final" / "config.json").exists()
    # its own run is overwritten as before: the marker says it is grpolab's
    assert main(["train", "--overwrite", *sets(*SMALL, f"trainer.run_dir={folder}")]) == 0


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
        assert main(["train", *sets(*SMALL, f"trainer.run_dir={run}")]) == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(run)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert holder.stdout.readline().strip() == "held"
        argv = ["train", "--resume", str(run), *sets("trainer.steps=2")] if resume else \
            ["train", *sets(*SMALL, f"trainer.run_dir={run}")]
        one_error(capsys, argv, "in use by another grpolab process", f"pid {holder.pid}")
        one_error(capsys, ["train", "--dry-run", *argv[1:]], f"pid {holder.pid}")
    finally:
        holder.kill()
        holder.wait()
    # the kernel released the dead holder's lock: the run goes on
    time.sleep(0.1)
    argv = ["train", "--resume", str(run), *sets("trainer.steps=2")] if resume else \
        ["train", *sets(*SMALL, f"trainer.run_dir={run}")]
    assert main(argv) == 0
    assert (run / LOCK_FILE).read_text().strip() == str(os.getpid())


def test_resume_refuses_a_conflicting_run_dir(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *sets(*SMALL, f"trainer.run_dir={run}")]) == 0
    other = tmp_path / "other"
    one_error(capsys, ["train", "--resume", str(run), *sets("trainer.steps=2", f"trainer.run_dir={other}")],
               f"--resume {run} with trainer.run_dir={str(other)!r}", "drop trainer.run_dir")
    assert not other.exists()
    # naming the same directory is no conflict
    assert main(["train", "--resume", str(run), *sets("trainer.steps=2", f"trainer.run_dir={run}")]) == 0
