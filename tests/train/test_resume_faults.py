"""Issue 46: resume and checkpoint faults are one clear error or message each (they were raw
tracebacks, or a silent exit 0): LoRA added on resume, a truncated state.pt, truncated weights,
resuming with fewer steps than done, and a finished run resumed."""

from __future__ import annotations

import shutil

import pytest

from cli_helpers import sets, tiny_run
from grpolab.cli import main

SMALL = tiny_run(2)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run = tmp_path_factory.mktemp("resume") / "run"
    assert main(["train", *sets(*SMALL, f"trainer.run_dir={run}")]) == 0
    return run


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _one_error(capsys, argv, *needles):
    capsys.readouterr()
    rc = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    for n in needles:
        assert n in err[0], err[0]
    return err[0]


def test_lora_added_on_resume(run, capsys):
    _one_error(capsys, ["train", "--resume", str(run), *sets("model.lora={r: 4}", "trainer.steps=3")],
               "cannot change model.lora", "start a new run")


def test_truncated_state_pt(run, capsys):
    state = run / "checkpoints" / "step_000002" / "state.pt"
    state.write_bytes(state.read_bytes()[:100])
    _one_error(capsys, ["train", "--resume", str(run), *sets("trainer.steps=3")],
               "step_000002: its state.pt cannot be read", "truncated or corrupt",
               f"delete {run / 'checkpoints' / 'step_000002'} to resume from step_000001")


def test_truncated_weights(run, capsys):
    w = run / "checkpoints" / "step_000002" / "model" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:500])
    shutil.rmtree(run / "checkpoints" / "step_000001")  # no older checkpoint: start over
    _one_error(capsys, ["train", "--resume", str(run), *sets("trainer.steps=3")],
               "its model weights cannot be read", "truncated or corrupt", "--overwrite")


def test_resume_with_fewer_steps_than_done(run, capsys):
    _one_error(capsys, ["train", "--resume", str(run), *sets("trainer.steps=1")],
               "the run is at step 2 but trainer.steps=1", "--set trainer.steps=3")
    _one_error(capsys, ["train", "--resume", str(run), "--dry-run", *sets("trainer.steps=1")],
               "the run is at step 2 but trainer.steps=1")


def test_finished_run_resumed_says_so(run, capsys):
    before = (run / "summary.md").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["train", "--resume", str(run)]) == 0
    out = capsys.readouterr().out
    assert "already finished its 2 steps" in out and "nothing to do" in out and "--set trainer.steps=4" in out
    assert (run / "summary.md").stat().st_mtime_ns == before  # nothing rewritten
