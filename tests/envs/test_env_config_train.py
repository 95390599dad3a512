"""The env config section, and short end-to-end training runs of each built-in environment."""

import json

import pytest

from grpolab.config import ConfigError, load_config


def test_env_config_defaults_and_examples():
    cfg = load_config()
    assert cfg.env.name == ""  # single-turn unless asked
    for path, name in (("examples/tool_arith.yaml", "tool_arith"), ("examples/web_agent.yaml", "web")):
        cfg = load_config(path)
        assert cfg.env.name == name and cfg.task.name == name


@pytest.mark.parametrize("override, message", [
    ("env.name=browser", "env.name='browser' is not allowed; choose one of"),
    ("env.max_turns=0", "env.max_turns=0 must be > 0"),
    ("env.max_turn_tokens=500", "env.max_turn_tokens=500 exceeds env.max_total_tokens"),
    ("env.colour=red", "unknown config key 'env.colour'"),
])
def test_env_config_errors(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_config(overrides=["env.name=web", override])


def test_env_options_override():
    cfg = load_config("examples/tool_arith.yaml", ["env.options.calc_backend=sandbox"])
    assert cfg.env.options == {"calc_backend": "sandbox"}


@pytest.mark.slow
@pytest.mark.parametrize("example", ["tool_arith", "web_agent"])
def test_train_a_few_steps(tmp_path, example):
    from grpolab.train.loop import train

    cfg = load_config(f"examples/{example}.yaml", [
        f"trainer.run_dir={tmp_path}", "trainer.steps=2", "trainer.eval_every=2", "sft.max_steps=4",
        "sft.eval_every=4", "sft.n_eval=8", "task.n_eval=8", "task.n_train=64", "rollout.prompts_per_step=4",
        "rollout.group_size=2", "log.progress=false", "log.tensorboard=false", "log.plots=false",
    ])
    result = train(cfg, log=lambda *_: None)
    assert result.steps == 2
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        for key in ("episode/turns", "episode/tool_errors", "episode/invalid_actions", "episode/truncated_frac"):
            assert key in row
        assert row["episode/turns"] >= 1
        assert 0 <= row["accuracy"] <= 1
    assert "eval/accuracy" in rows[-1]
