"""The sandbox under a training run (issue 61, item 3): a short_code run's step rows carry the
verifier's share of the step time (``time/reward_frac``), the programs it ran per second
(``time/reward_per_s``) and no verifier errors (``reward/errors``: a sandbox failure is one), with the
real sandbox required (GRPOLAB_REQUIRE_SANDBOX=1)."""

from __future__ import annotations

import math

import pytest

SMALL = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
         "model.tokenizer_alphabet=printable", "task.name=short_code", "task.n_train=16", "task.n_eval=2",
         "rollout.prompts_per_step=2", "rollout.group_size=3", "rollout.max_new_tokens=24", "trainer.steps=2",
         "trainer.eval_every=2", "trainer.preflight=false", "log.progress=false", "log.plots=false",
         "log.tensorboard=false", "sft.enabled=no"]


@pytest.mark.slow
def test_code_run_records_reward_share_programs_per_second_and_no_errors(tmp_path, monkeypatch):
    from grpolab.config import load_config
    from grpolab.train import train
    from grpolab.train.metrics_log import read_metrics

    monkeypatch.setenv("GRPOLAB_REQUIRE_SANDBOX", "1")
    cfg = load_config(None, SMALL + [f"trainer.run_dir={tmp_path / 'run'}"])
    train(cfg, log=lambda _line: None)
    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 2
    for row in rows:
        assert row["reward/errors"] == 0 and row["reward/scored"] == 6  # 2 prompts x 3 programs, all run
        assert 0 < row["time/reward"] < row["time/step"]
        assert row["time/reward_frac"] == pytest.approx(row["time/reward"] / row["time/step"])
        assert 0 < row["time/reward_frac"] < 1
        assert row["time/reward_per_s"] == pytest.approx(6 / row["time/reward"])
        assert math.isfinite(row["time/reward_per_s"]) and row["time/reward_per_s"] > 0
