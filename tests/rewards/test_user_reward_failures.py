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


@pytest.mark.parametrize("case", sorted(CASES))
def test_failing_user_reward_is_shown_with_its_cause(case, tiny, tmp_path, monkeypatch):
    body, expected = CASES[case]
    mod = f"h46_reward_{case}"
    (tmp_path / f"{mod}.py").write_text(textwrap.dedent(f"""
        def fn(completion, reference):
            {body}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = load_config(overrides=[f"task.options.reward={mod}:fn", "task.n_train=8", "task.n_eval=4",
                                 "rollout.prompts_per_step=2", "rollout.max_new_tokens=4", "task.chat_template=off"])
    model, tok = tiny
    train_items, _ = build_task_splits(cfg.task, seed=0)
    collector = collector_for(cfg, tok, prompt_format=cfg.task.prompt_format().resolve(tok))
    exp = collector.collect(model, train_items[:2], group_size=2)
    assert exp.reward_errors == 4 and float(exp.rewards.sum()) == 0
    ex = exp.reward_error_example
    assert expected in ex["error"] and ex["reward"] == f"{mod}:fn"
    assert ex["completion"] == exp.texts[0] and ex["reference"] == train_items[0].reference
    row = {"reward/errors": 4.0, "reward/scored": 4.0, "groups/with_signal": 0.0}
    (line,) = TrainingWatch(no_signal_steps=0, run_dir=str(tmp_path)).observe(1, row, ex)
    assert line.startswith("warning: step 1: the reward failed on every response (4), each scored 0: ")
    assert expected in line and f"(reward '{mod}:fn')" in line
