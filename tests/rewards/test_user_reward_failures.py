"""Issue 46: a user reward that raises, or returns NaN, a string or None, is visible: the step's
experience carries the first failure (exception text, completion, reference) and the trainer's
warning shows it after the first failing step (it trained to the end at reward 0, silently)."""

from __future__ import annotations

import textwrap

import pytest

from grpolab.config import load_config
from grpolab.rollout.collector import collector_for
from grpolab.train.setup import build_task_splits
from grpolab.train.watch import TrainingWatch

CASES = {
    "raises": ("raise ValueError('cannot parse ' + completion[:5])", "ValueError: cannot parse"),
    "nan": ("return float('nan')", "must be finite, got nan"),
    "text": ("return 'good'", "returned str; a reward must return a RewardResult or a number"),
    "none": ("return None", "returned NoneType; a reward must return a RewardResult or a number"),
}


@pytest.fixture(scope="module")
def tiny():
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer

    tok = build_tokenizer()
    return build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=64), seed=0), tok


def _collector(tiny, tmp_path, monkeypatch, mod: str, source: str):
    """A collector whose task is scored by ``mod:fn`` (written from ``source`` into tmp_path), the tiny
    model and tokenizer, and the task's training items."""
    (tmp_path / f"{mod}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(overrides=[f"task.options.reward={mod}:fn", "task.n_train=8", "task.n_eval=4",
                                 "rollout.prompts_per_step=2", "rollout.max_new_tokens=4", "task.chat_template=off"])
    model, tok = tiny
    train_items, _ = build_task_splits(cfg.task, seed=0)
    return collector_for(cfg, tok, prompt_format=cfg.task.prompt_format().resolve(tok)), model, train_items


@pytest.mark.parametrize("case", sorted(CASES))
def test_failing_user_reward_is_shown_with_its_cause(case, tiny, tmp_path, monkeypatch):
    body, expected = CASES[case]
    mod = f"h46_reward_{case}"
    collector, model, train_items = _collector(tiny, tmp_path, monkeypatch, mod, textwrap.dedent(f"""
        def fn(completion, reference):
            {body}
    """))
    exp = collector.collect(model, train_items[:2], group_size=2)
    assert exp.reward_errors == 4 and float(exp.rewards.sum()) == 0
    ex = exp.reward_error_example
    assert expected in ex["error"] and ex["reward"] == f"{mod}:fn"
    assert ex["completion"] == exp.texts[0] and ex["reference"] == train_items[0].reference
    row = {"reward/errors": 4.0, "reward/scored": 4.0, "groups/with_signal": 0.0}
    (line,) = TrainingWatch(no_signal_steps=0, run_dir=str(tmp_path)).observe(1, row, ex)
    assert line.startswith("warning: step 1: the reward failed on every response (4), each scored 0: ")
    assert expected in line and f"(reward '{mod}:fn')" in line


# Issue 62, item 3: user code cannot end or move the run. sys.exit (any code) and a KeyboardInterrupt
# the reward raises itself are that reward's failure (before: training ended silently with exit 0
# and no model); a working-directory change is undone (before: it moved the run).
EXITS = {
    "exit0": ("import sys; sys.exit(0)", "the reward called sys.exit(0)"),
    "exit3": ("import sys; sys.exit(3)", "the reward called sys.exit(3)"),
    "interrupt": ("raise KeyboardInterrupt", "the reward raised KeyboardInterrupt"),
}


@pytest.mark.parametrize("case", sorted(EXITS))
def test_a_reward_that_exits_is_a_failing_reward(case, tiny, tmp_path, monkeypatch):
    from grpolab.train.signals import stop_signals

    body, expected = EXITS[case]
    mod = f"h62_reward_{case}"
    collector, model, train_items = _collector(tiny, tmp_path, monkeypatch, mod,
                                               f"def fn(completion, reference):\n    {body}\n")
    with stop_signals():  # the trainer's handlers: a real Ctrl-C is told apart from the reward's own
        exp = collector.collect(model, train_items[:2], group_size=2)
    assert exp.reward_errors == 4 and float(exp.rewards.sum()) == 0
    assert expected in exp.reward_error_example["error"]


def test_a_real_interrupt_still_stops(tiny, tmp_path, monkeypatch):
    # the trainer's handler raises Interrupted for a real Ctrl-C / SIGTERM: never a reward failure
    import os
    import signal

    from grpolab.errors import Interrupted
    from grpolab.train.signals import stop_signals

    collector, model, train_items = _collector(tiny, tmp_path, monkeypatch, "h62_sig", (
        "import os, signal\ndef fn(completion, reference):\n    os.kill(os.getpid(), signal.SIGTERM)\n    return 1.0\n"))
    with pytest.raises(Interrupted) as e, stop_signals():
        collector.collect(model, train_items[:2], group_size=2)
    assert e.value.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and os.getpid()  # handlers restored


def test_a_reward_that_exits_and_moves_cannot_end_or_move_the_run(tmp_path, monkeypatch, capsys):
    import os

    from grpolab.cli import main

    (tmp_path / "h62_move.py").write_text(
        "import os, sys\n"
        "def fn(completion, reference):\n"
        f"    os.chdir({str(tmp_path / 'elsewhere')!r})\n"
        "    sys.exit(0)\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    sets = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64",
            "task.n_train=8", "task.n_eval=4", "sft.enabled=no", "rollout.prompts_per_step=2",
            "rollout.group_size=2", "rollout.max_new_tokens=4", "trainer.steps=2", "trainer.save_every=2",
            "trainer.eval_every=2", "trainer.preflight=false", "log.progress=false", "log.plots=false",
            "log.tensorboard=false", "task.options.reward=h62_move:fn", "trainer.run_dir=run"]
    assert main(["train", *sum([["--set", s] for s in sets], [])]) == 0
    out = capsys.readouterr().out
    assert "the reward failed on every response" in out and "sys.exit(0)" in out
    assert os.getcwd() == str(work)
    assert (work / "run" / "final" / "config.json").exists() and not (tmp_path / "elsewhere" / "run").exists()


def test_user_reward_process_survives_os_exit_and_crashes(tmp_path, monkeypatch):
    # rollout.user_reward_process: os._exit (uncatchable in-process) ends only the worker; the call
    # scores 0 with the reason, the next one gets a new worker
    import os

    from grpolab.rewards import resolve_reward, safe_score
    from grpolab.rewards.user_worker import set_isolation

    (tmp_path / "h62_iso.py").write_text(
        "import os, sys\n"
        "def fn(completion, reference):\n"
        "    if completion == 'die':\n        os._exit(0)\n"
        "    if completion == 'exit':\n        sys.exit(3)\n"
        "    if completion == 'raise':\n        raise ValueError('bad ' + completion)\n"
        "    os.chdir('/')\n"
        "    return float(completion == reference)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    name = resolve_reward("h62_iso:fn")
    cwd = os.getcwd()
    set_isolation(True)
    try:
        assert safe_score(name, "4", "4").score == 1.0
        died = safe_score(name, "die", "4")
        assert died.score == 0.0 and "ended its worker process (exit code 0" in died.info["error"]
        assert safe_score(name, "4", "4").score == 1.0  # a new worker
        assert "the reward called sys.exit(3)" in safe_score(name, "exit", "4").info["error"]
        assert "ValueError: bad raise" in safe_score(name, "raise", "4").info["error"]
        assert os.getcwd() == cwd  # the worker's chdir never reaches the trainer
    finally:
        set_isolation(False)
    assert safe_score(name, "4", "4").score == 1.0 and os.getcwd() == cwd  # in-process again, guarded


@pytest.mark.slow  # each failing call starts a new worker (about 1 s each); the mechanism is tested above
def test_a_run_with_a_reward_that_calls_os_exit_goes_on(tmp_path, monkeypatch, capsys):
    from grpolab.cli import main

    (tmp_path / "h62_osexit.py").write_text("import os\ndef fn(completion, reference):\n    os._exit(0)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "run"
    sets = ["model.hidden_size=32", "model.num_layers=1", "model.num_heads=2", "model.intermediate_size=64",
            "task.n_train=8", "task.n_eval=2", "sft.enabled=no", "rollout.prompts_per_step=1",
            "rollout.group_size=2", "rollout.max_new_tokens=4", "trainer.steps=1", "trainer.eval_every=1",
            "trainer.preflight=false", "log.progress=false", "log.plots=false", "log.tensorboard=false",
            "task.options.reward=h62_osexit:fn", "rollout.user_reward_process=true", f"trainer.run_dir={run}"]
    assert main(["train", *sum([["--set", s] for s in sets], [])]) == 0
    out = capsys.readouterr().out
    assert "the reward failed on every response" in out and "ended its worker process" in out
    assert (run / "final" / "config.json").exists()
