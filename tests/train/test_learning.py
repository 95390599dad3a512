"""Slow: the default pipeline really learns (warm start, then RL raises held-out greedy accuracy).

Not in CI (``-m "not slow"``); run with ``pytest -m slow``. The full measurement over three seeds
is ``benchmarks/experiments/train_default.py``.
"""

import pytest

from grpolab.config import load_config
from grpolab.train import train


@pytest.mark.slow
def test_default_training_raises_heldout_accuracy(tmp_path):
    cfg = load_config(overrides=[f"trainer.run_dir={tmp_path}", "log.progress=false",
                                 "log.tensorboard=false", "trainer.steps=120"])
    result = train(cfg, log=lambda *_: None)
    # the warm start leaves headroom, and RL uses it: at least +5 points in 120 steps
    assert result.start_accuracy < 0.6
    assert result.final_accuracy >= result.start_accuracy + 0.05, result
