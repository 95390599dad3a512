"""Issue 46: `grpolab train --dry-run` runs every check `grpolab train` runs before its work, so it
refuses what `train` refuses (it exited 0 for a missing model, missing data or an occupied run
directory), and `train` checks its run directory for writability before any work."""

from __future__ import annotations

import os

import pytest

from grpolab.cli import main


def _sets(*values):
    return sum([["--set", v] for v in values], [])


def _error(capsys, argv, *needles):
    rc = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    for n in needles:
        assert n in err[0], err[0]
    return err[0]


@pytest.mark.parametrize("dry", [True, False])
def test_missing_model(tmp_path, capsys, dry):
    run = tmp_path / "run"
    _error(capsys, ["train", *(["--dry-run"] if dry else []),
                    *_sets(f"model.path={tmp_path / 'nope'}", f"trainer.run_dir={run}")],
           "model.path=", "does not exist")
    assert not run.exists()


@pytest.mark.parametrize("dry", [True, False])
def test_missing_data(tmp_path, capsys, dry):
    run = tmp_path / "run"
    _error(capsys, ["train", *(["--dry-run"] if dry else []),
                    *_sets("task.name=dataset", f"task.options.path={tmp_path / 'none.jsonl'}",
                           f"trainer.run_dir={run}")], "task 'dataset'")
    assert not run.exists()


def test_occupied_run_dir_is_refused_by_dry_run_too(tmp_path, capsys):
    from grpolab.train.rundir import MARKER

    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    (run / MARKER).write_text("")  # a grpolab run's folder (a user's folder is refused: test_run_ownership.py)
    _error(capsys, ["train", "--dry-run", *_sets(f"trainer.run_dir={run}")], "already holds a run", "--overwrite")
    # with --overwrite the dry run passes and still writes nothing
    assert main(["train", "--dry-run", "--overwrite", *_sets(f"trainer.run_dir={run}")]) == 0
    assert "every check `grpolab train` runs first passed" in capsys.readouterr().out
    assert sorted(p.name for p in run.iterdir()) == [MARKER, "final"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_run_dir_before_any_work(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        _error(capsys, ["train", *_sets(f"trainer.run_dir={ro / 'run'}")], "trainer.run_dir", "not writable")
    finally:
        ro.chmod(0o700)


def test_run_dir_that_is_a_file(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    _error(capsys, ["train", "--dry-run", *_sets(f"trainer.run_dir={f}")], "trainer.run_dir", "is a file")
    _error(capsys, ["train", *_sets(f"trainer.run_dir={f / 'run'}")], "trainer.run_dir", "is a file")


@pytest.mark.parametrize("dry", [True, False])
def test_warm_start_without_demonstrations_before_any_work(tmp_path, capsys, dry):
    """It came after the model was built and left a config.yaml behind."""
    data, run = tmp_path / "d.jsonl", tmp_path / "run"
    data.write_text("".join(f'{{"prompt": "{i}+1", "answer": "{i + 1}"}}\n' for i in range(8)))
    _error(capsys, ["train", *(["--dry-run"] if dry else []),
                    *_sets("task.name=dataset", f"task.options.path={data}", "rollout.prompts_per_step=2",
                           f"trainer.run_dir={run}")], "needs task items with a demonstration", "sft.enabled=no")
    assert not run.exists()
