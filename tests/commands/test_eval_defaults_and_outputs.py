"""Issue 46: `grpolab eval RUN_DIR` samples as the run did (its group size, temperature and top_p,
printed), and outputs are checked for writability before any work (eval --completions, preflight
--out, credit --out and models import --out failed after the evaluation or a 30 s load)."""

from __future__ import annotations

import json

import pytest

from grpolab.cli import main

SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=2", "task.n_train=16", "task.n_eval=4",
    "sft.enabled=no", "rollout.prompts_per_step=2", "rollout.group_size=3", "rollout.temperature=0.7",
    "rollout.top_p=0.9", "rollout.max_new_tokens=4", "trainer.steps=1", "trainer.preflight=false",
    "log.progress=false", "log.plots=false",
]


def _sets(*values):
    return sum([["--set", v] for v in values], [])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("eval") / "run"
    assert main(["train", *_sets(*SMALL, f"trainer.run_dir={run}")]) == 0
    return run


def test_eval_samples_as_the_run_did_and_says_so(run_dir, capsys):
    capsys.readouterr()
    assert main(["eval", str(run_dir), "--examples", "0"]) == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["sampling"] == {"samples": 3, "temperature": 0.7, "top_p": 0.9,
                                  "source": "the run's rollout settings"}
    assert set(report["pass_at_k"]) >= {"3"}
    assert "sampling: 3 samples per item at temperature 0.7, top_p 0.9 (the run's rollout settings" in err
    assert main(["eval", str(run_dir), "--examples", "0", "--temperature", "1.0"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["sampling"]["temperature"] == 1.0
    assert "(the run's rollout settings, --temperature given" in err


def _no_work(monkeypatch):
    import grpolab.credit_page as credit
    import grpolab.models.gguf as gguf
    import grpolab.runs as runs

    def boom(*a, **k):
        raise AssertionError("the work started before the output was checked")

    monkeypatch.setattr(runs, "open_run", boom)
    monkeypatch.setattr(gguf, "load_gguf", boom)
    monkeypatch.setattr(credit, "collect", boom)


def _one_error(capsys, argv, *needles):
    rc = main(argv)
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: "), err
    for n in needles:
        assert n in err[0], err[0]


def test_outputs_are_checked_before_any_work(tmp_path, capsys, monkeypatch):
    _no_work(monkeypatch)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    _one_error(capsys, ["eval", str(tmp_path), "--completions", str(blocker / "c.jsonl")], "--completions",
               "is a file")
    _one_error(capsys, ["eval", str(tmp_path), "--completions", str(tmp_path)], "--completions", "is a directory")
    _one_error(capsys, ["preflight", str(tmp_path), "--out", str(blocker)], "--out", "is a file")
    _one_error(capsys, ["preflight", str(tmp_path), "--out", str(blocker / "sub")], "--out", "is a file")
    _one_error(capsys, ["credit", str(tmp_path), "--out", str(blocker)], "--out", "is a file")
    _one_error(capsys, ["credit", str(tmp_path), "--out", str(blocker / "sub")], "--out", "is a file")
    _one_error(capsys, ["models", "import", str(tmp_path / "m.gguf"), "--out", str(blocker / "m")], "--out",
               "is a file")
