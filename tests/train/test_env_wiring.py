"""Multi-turn settings reach the pieces that depend on them: the constant aggregation's length and
`grpolab eval` on a run directory."""

from __future__ import annotations

import json

import yaml

from grpolab.config import load_config
from grpolab.train.policy_update import max_response_len as _max_response_len

from grpolab.rollout.collector import EpisodeCollector


def test_constant_aggregation_length_covers_observations_in_env_runs():
    single = load_config(overrides={"rollout.max_new_tokens": 40})
    assert _max_response_len(single) == 40
    multi = load_config(overrides={"task.name": "tool_arith", "env.name": "tool_arith",
                                   "env.max_total_tokens": 96, "rollout.max_new_tokens": 40})
    assert _max_response_len(multi) == 96  # model + observation tokens share the response


def test_eval_cli_plays_episodes_for_an_env_run(tmp_path, monkeypatch, capsys):
    from grpolab.cli import main
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer, save_model

    cfg = load_config(overrides={"task.name": "tool_arith", "env.name": "tool_arith", "task.n_eval": 4})
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict()))
    tok = build_tokenizer()
    save_model(build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=64)), tok, run / "final")
    calls = []
    real = EpisodeCollector.collect

    def spy(self, model, items, **kw):
        calls.append(self.env.name)
        return real(self, model, items, **kw)

    monkeypatch.setattr(EpisodeCollector, "collect", spy)
    assert main(["eval", str(run), "--n", "4", "--samples", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "tool_arith" and report["items"] == 4
    assert "sampled_accuracy" in report
    assert calls == ["tool_arith", "tool_arith"]  # greedy and sampled evaluation played episodes
