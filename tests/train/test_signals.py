"""Issue 62, item 4: SIGTERM and SIGHUP stop `grpolab train` and `grpolab sft` the way Ctrl-C does,
with the resume hint and exit code 128 + the signal (before: they ended training without a word).
The real-process case, resumed to the uninterrupted run's weights, is in test_faults.py."""

from __future__ import annotations

import os
import signal

import pytest

from grpolab.cli import main

SMALL = [
    "model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
    "task.options.max_digits=1", "task.options.max_terms=2", "task.n_train=16", "task.n_eval=4",
    "rollout.prompts_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=4",
    "trainer.steps=3", "trainer.save_every=1", "trainer.eval_every=3", "trainer.preflight=false",
    "log.progress=false", "log.plots=false", "log.tensorboard=false",
    "sft.max_steps=4", "sft.eval_every=2", "sft.batch_size=8", "sft.n_eval=4", "sft.save_every=1",
]


def _sets(*values):
    return sum([["--set", v] for v in values], [])


def _signal_at(monkeypatch, module, name, n, sig):
    real, calls = getattr(module, name), {"n": 0}

    def hooked(*a, **k):
        calls["n"] += 1
        if calls["n"] == n:
            os.kill(os.getpid(), sig)  # the handler raises at the next bytecode, in this thread
        return real(*a, **k)

    monkeypatch.setattr(module, name, hooked)


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM])
def test_train_stops_on_a_signal_with_the_resume_hint(tmp_path, monkeypatch, capsys, sig):
    from grpolab.train import loop

    run = tmp_path / "run"
    _signal_at(monkeypatch, loop, "collect_step", 2, sig)  # during step 2, after checkpoint 1
    capsys.readouterr()
    assert main(["train", *_sets(*SMALL, "sft.enabled=no", f"trainer.run_dir={run}")]) == 128 + sig
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    name = signal.Signals(sig).name
    assert err == [f"stopped by {name}; resume with `grpolab train --resume {run}` (continues from its last "
                   "checkpoint, step 1)"]
    assert signal.getsignal(sig) is not None and not getattr(signal.getsignal(sig), "grpolab_stop", False)
    monkeypatch.undo()
    assert main(["train", "--resume", str(run)]) == 0  # the lock was released


def test_sft_stops_on_sigterm_with_its_hint(tmp_path, monkeypatch, capsys):
    from grpolab.train import sft

    _signal_at(monkeypatch, sft, "sft_batch", 3, signal.SIGTERM)
    capsys.readouterr()
    assert main(["sft", "--out", str(tmp_path / "ws"), *_sets(*SMALL)]) == 128 + signal.SIGTERM
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert err == ["stopped by SIGTERM; run the same `grpolab sft` command again to continue from its last "
                   "checkpoint (sft.save_every)"]


def test_a_signal_while_the_run_finishes_lets_final_and_the_report_be_written(tmp_path, monkeypatch, capfd):
    from grpolab.train import loop

    run = tmp_path / "run"
    _signal_at(monkeypatch, loop, "save_final", 1, signal.SIGTERM)  # lands as final/ is about to be written
    capfd.readouterr()
    assert main(["train", *_sets(*SMALL, "sft.enabled=no", f"trainer.run_dir={run}")]) == 128 + signal.SIGTERM
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert err == ["SIGTERM: writing final/ and the report, then stopping; a second signal stops at once",
                   f"stopped by SIGTERM; resume with `grpolab train --resume {run}` (continues from its last "
                   "checkpoint, step 3)"]
    assert (run / "final" / "model.safetensors").exists() and (run / "summary.md").exists()
    monkeypatch.undo()
    assert main(["train", "--resume", str(run)]) == 0
    assert "already finished its 3 steps" in capfd.readouterr().out
