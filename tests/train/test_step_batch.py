"""DAPO in the trainer: dynamic sampling's refill, truncation masking in the update, overlong
shaping in the advantage, the preset and its config checks, and a short end-to-end run."""

from __future__ import annotations

import math

import pytest
import torch

from grpolab.config import ConfigError, load_config
from grpolab.rollout import Rollout
from grpolab.rollout.experience import concat_experiences, select_groups
from grpolab.train.step_batch import collect_step, without_truncated
from grpolab.rollout.experience import Experience


class ScriptedCollector:
    """Items are ints; item ``i`` gets rewards ``script(i)`` (a list of group_size floats).

    Rollouts have prompts of width ``1 + i % 3`` and responses of length ``1 + i % 4``, so that
    concatenating rounds has to pad both sides."""

    def __init__(self, script, tokenizer_pad=9):
        self.script = script
        self.calls: list[list[int]] = []
        self.tokenizer = type("Tok", (), {"pad_token_id": tokenizer_pad})()

    def collect(self, model, items, *, group_size, greedy=False, temperature=1.0, top_p=1.0, generator=None):
        self.calls.append(list(items))
        P = 1 + max(i % 3 for i in items)
        T = 1 + max(i % 4 for i in items)
        rows = [(g, i) for g, i in enumerate(items) for _ in range(group_size)]
        B = len(rows)
        pid = torch.full((B, P), 9)
        pm = torch.zeros(B, P, dtype=torch.long)
        rid = torch.full((B, T), 9)
        rm = torch.zeros(B, T)
        for b, (g, i) in enumerate(rows):
            p, t = 1 + i % 3, 1 + i % 4
            pid[b, P - p:] = 100 + i
            pm[b, P - p:] = 1
            rid[b, :t] = 200 + i
            rm[b, :t] = 1
        ro = Rollout(prompt_ids=pid, prompt_mask=pm, response_ids=rid, response_mask=rm, sample_logp=-rm,
                     group_ids=torch.tensor([g for g, _ in rows]), finished=torch.ones(B, dtype=torch.bool))
        rewards = torch.tensor([r for i in items for r in self.script(i)], dtype=torch.float32)
        return Experience(items=list(items), rollout=ro, texts=[f"item{i}" for _, i in rows], rewards=rewards,
                          reward_errors=1, seconds={"rollout": 1.0, "reward": 0.5})


def _stream():
    state = {"next": 0}

    def next_prompts(n):
        out = list(range(state["next"], state["next"] + n))
        state["next"] += n
        return out

    return next_prompts


def _cfg(*extra):
    return load_config(overrides=["rollout.prompts_per_step=4", "rollout.group_size=2", *extra])


def test_dynamic_sampling_refills_with_groups_that_have_signal():
    # items divisible by 3 have signal (one right, one wrong); the rest are all right or all wrong
    coll = ScriptedCollector(lambda i: [0.0, 1.0] if i % 3 == 0 else [float(i % 2)] * 2)
    exp, m = collect_step(coll, None, _stream(), _cfg("rollout.dynamic_sampling=true"), n_train=1000)
    # round 1: items 0..3 -> 0, 3 kept (2 missing); round 2: 4, 5 -> none; round 3: 6, 7 -> 6;
    # round 4: 8 -> none. The cap of 4 rounds ends the step with 3 of 4 groups.
    assert coll.calls == [[0, 1, 2, 3], [4, 5], [6, 7], [8]]
    assert exp.items == [0, 3, 6]
    assert m == {"dynamic_sampling/rounds": 4.0, "dynamic_sampling/sampled_groups": 9.0,
                 "dynamic_sampling/kept_groups": 3.0, "dynamic_sampling/signal_frac": 3 / 9}
    assert exp.prompt_index.tolist() == [0, 0, 1, 1, 2, 2]
    assert exp.texts == ["item0", "item0", "item3", "item3", "item6", "item6"]
    assert exp.rewards.tolist() == [0.0, 1.0] * 3
    # every round's verifier calls count (4 rounds x 1 error; 9 groups x 2 rows scored)
    assert exp.reward_errors == 4 and exp.reward_scored == 18
    assert exp.seconds == {"rollout": 4.0, "reward": 2.0}
    ro = exp.rollout
    # prompts left-padded, responses right-padded with the pad id, tokens kept row by row
    for b, i in enumerate([0, 0, 3, 3, 6, 6]):
        p, t = 1 + i % 3, 1 + i % 4
        assert ro.prompt_mask[b].tolist() == [0] * (ro.prompt_ids.shape[1] - p) + [1] * p
        assert ro.prompt_ids[b, -p:].tolist() == [100 + i] * p
        assert ro.response_mask[b].tolist() == [1.0] * t + [0.0] * (ro.response_ids.shape[1] - t)
        assert ro.response_ids[b, :t].tolist() == [200 + i] * t
        assert (ro.prompt_ids[b, : ro.prompt_ids.shape[1] - p] == 9).all()


def test_dynamic_sampling_stops_when_full_and_truncates_extra_groups():
    coll = ScriptedCollector(lambda i: [0.0, 1.0] if i != 1 else [1.0, 1.0])
    exp, m = collect_step(coll, None, _stream(), _cfg("rollout.dynamic_sampling=true",
                                                      "rollout.dynamic_sampling_oversample=2"), n_train=1000)
    # round 1 samples 4 x 2 = 8 prompts; 7 have signal, the first 4 are kept
    assert coll.calls == [list(range(8))]
    assert exp.items == [0, 2, 3, 4] and m["dynamic_sampling/kept_groups"] == 4.0
    assert m["dynamic_sampling/rounds"] == 1.0 and m["dynamic_sampling/signal_frac"] == 7 / 8


def test_dynamic_sampling_with_no_signal_trains_on_the_last_round_unfiltered():
    coll = ScriptedCollector(lambda i: [0.0, 0.0])
    exp, m = collect_step(coll, None, _stream(), _cfg("rollout.dynamic_sampling=true",
                                                      "rollout.dynamic_sampling_rounds=2"), n_train=1000)
    assert len(coll.calls) == 2 and m["dynamic_sampling/kept_groups"] == 0.0
    assert exp.items == coll.calls[-1]


def test_without_dynamic_sampling_one_round_and_no_metrics():
    coll = ScriptedCollector(lambda i: [1.0, 1.0])
    exp, m = collect_step(coll, None, _stream(), _cfg(), n_train=1000)
    assert coll.calls == [[0, 1, 2, 3]] and m == {} and exp.reward_scored == 8


def test_overlong_shaping_reaches_the_advantage_not_the_reward():
    # responses of 1 + i % 4 tokens; max_new_tokens 4 and a 2-token buffer: 3 tokens -> -0.5, 4 -> -1
    coll = ScriptedCollector(lambda i: [1.0, 1.0])
    exp, m = collect_step(coll, None, _stream(), _cfg("rollout.max_new_tokens=4", "objective.overlong_buffer=2",
                                                      "objective.overlong_penalty=0.5"), n_train=1000)
    assert exp.rewards.tolist() == [1.0] * 8
    assert exp.reward_shaping.tolist() == [0, 0, 0, 0, -0.25, -0.25, -0.5, -0.5]
    assert exp.learning_rewards.tolist() == [1, 1, 1, 1, 0.75, 0.75, 0.5, 0.5]
    assert m["reward/overlong_penalty"] == pytest.approx(-1.5 / 8)
    # a share of the longest response: 0.5 of 4 tokens = the same 2-token buffer
    exp2, _ = collect_step(coll, None, _stream(), _cfg("rollout.max_new_tokens=4", "objective.overlong_buffer=0.5",
                                                       "objective.overlong_penalty=0.5"), n_train=1000)
    assert exp2.reward_shaping.tolist() == exp.reward_shaping.tolist()


def test_select_then_concat_is_the_identity():
    coll = ScriptedCollector(lambda i: [0.0, 1.0])
    exp = coll.collect(None, [5, 6, 7], group_size=2)
    parts = [select_groups(exp, [0]), select_groups(exp, [1, 2])]
    back = concat_experiences(parts, pad_id=9)
    assert back.items == exp.items and back.texts == exp.texts
    for name in ("prompt_ids", "prompt_mask", "response_ids", "response_mask", "group_ids", "finished"):
        assert torch.equal(getattr(back.rollout, name), getattr(exp.rollout, name)), name


def test_without_truncated_changes_only_the_loss_mask():
    """The update sees the truncated rows masked out; the forward (attention) is unchanged, so the
    finished rows' log-probs are exactly those of the unmasked batch."""
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.rollout import response_logprobs

    model = build_tiny_model(build_tokenizer(), TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                                  intermediate_size=32), seed=0)
    g = torch.Generator().manual_seed(0)
    B, P, T = 4, 3, 5
    ro = Rollout(prompt_ids=torch.randint(3, 20, (B, P), generator=g), prompt_mask=torch.ones(B, P, dtype=torch.long),
                 response_ids=torch.randint(3, 20, (B, T), generator=g), response_mask=torch.ones(B, T),
                 sample_logp=torch.zeros(B, T), group_ids=torch.tensor([0, 0, 1, 1]),
                 finished=torch.tensor([True, False, True, False]))
    exp = Experience(items=[0, 1], rollout=ro, texts=[""] * B, rewards=torch.zeros(B))
    masked = without_truncated(exp).rollout
    assert masked.response_mask.sum(-1).tolist() == [5.0, 0.0, 5.0, 0.0]
    assert torch.equal(masked.attention_mask, ro.attention_mask)  # the forward attends as before
    with torch.no_grad():
        a = response_logprobs(model, ro).logp
        b = response_logprobs(model, masked).logp
    torch.testing.assert_close(a[[0, 2]], b[[0, 2]], rtol=0, atol=0)


def test_dapo_preset_turns_on_the_recipe():
    cfg = load_config(overrides=["preset=dapo"])
    o, r = cfg.objective, cfg.rollout
    assert (o.aggregation, o.clip_low, o.clip_high, o.kl_coef) == ("token", 0.2, 0.28, 0.0)
    assert r.dynamic_sampling and o.overlong_buffer == 0.2 and o.overlong_penalty == 1.0
    assert not o.mask_truncated


@pytest.mark.parametrize("override,needle", [
    ("objective.overlong_buffer=-1", "objective.overlong_buffer"),
    ("objective.overlong_buffer=2.5", "whole number"),
    ("objective.overlong_buffer=100", "exceeds the longest response (48"),
    ("objective.overlong_penalty=-0.5", "objective.overlong_penalty"),
    ("rollout.dynamic_sampling_rounds=0", "rollout.dynamic_sampling_rounds"),
    ("rollout.dynamic_sampling_oversample=0.5", "rollout.dynamic_sampling_oversample"),
])
def test_bad_dapo_settings_are_refused(override, needle):
    with pytest.raises(ConfigError, match=needle.replace("(", r"\(")):
        load_config(overrides=[override])


def test_dynamic_sampling_needs_groups():
    with pytest.raises(ConfigError, match="group_size >= 2"):
        load_config(overrides=["rollout.dynamic_sampling=true", "rollout.group_size=1", "objective.advantage=grpo"])


def test_train_with_the_dapo_pieces(tmp_path):
    """A few steps of the tiny model with dynamic sampling, overlong shaping and truncation masking:
    every row logs the sampling, kept groups never exceed prompts_per_step, the run finishes."""
    from grpolab.train import train
    from grpolab.train.metrics_log import read_metrics

    small = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
             "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
             "sft.max_steps=4", "sft.eval_every=2", "sft.batch_size=16", "sft.n_eval=8",
             "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12",
             "trainer.eval_every=2", "trainer.save_every=2", "log.progress=false", "log.plots=false",
             "log.tensorboard=false", "trainer.preflight=false", "trainer.steps=3", "preset=dapo",
             "objective.mask_truncated=true", f"trainer.run_dir={tmp_path / 'run'}"]
    res = train(load_config(overrides=small), log=lambda *_: None)
    rows = read_metrics(tmp_path / "run")
    assert res.steps == 3 and len(rows) == 3
    for r in rows:
        assert 1 <= r["dynamic_sampling/rounds"] <= 4
        assert r["dynamic_sampling/kept_groups"] <= 4
        assert r["reward/overlong_penalty"] <= 0
        assert math.isfinite(r["update/grad_norm"])


def test_a_killed_dapo_run_resumes_exactly(tmp_path, kill_during_step):
    """Dynamic sampling draws a varying number of prompts per step; the data stream and the
    sampler's RNG are in the checkpoint, so a run killed during step 3 and resumed logs the same
    rows and ends with the same weights as one never interrupted."""
    from grpolab.models import load_model
    from grpolab.train import train
    from grpolab.train.metrics_log import read_metrics

    small = ["model.hidden_size=32", "model.num_layers=2", "model.num_heads=2", "model.intermediate_size=64",
             "task.options.max_digits=1", "task.options.max_terms=3", "task.n_train=64", "task.n_eval=8",
             "sft.max_steps=4", "sft.eval_every=2", "sft.batch_size=16", "sft.n_eval=8",
             "rollout.prompts_per_step=4", "rollout.group_size=4", "rollout.max_new_tokens=12",
             "trainer.eval_every=2", "trainer.save_every=2", "log.progress=false", "log.plots=false",
             "log.tensorboard=false", "trainer.preflight=false", "trainer.steps=4", "preset=dapo",
             "objective.mask_truncated=true"]

    def cfg(d):
        return load_config(overrides=[*small, f"trainer.run_dir={d}"])

    def stable(rows):
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "tokens_per_s", "memory/"))} for r in rows]

    train(cfg(tmp_path / "full"), log=lambda *_: None)
    kill_during_step(3, lambda: train(cfg(tmp_path / "crashed"), log=lambda *_: None))
    train(cfg(tmp_path / "crashed"), resume=True, log=lambda *_: None)
    full, crashed = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "crashed")
    assert any(r["dynamic_sampling/rounds"] > 1 for r in full)  # the refill really ran
    assert stable(crashed) == stable(full)
    a, _ = load_model(tmp_path / "full" / "final")
    b, _ = load_model(tmp_path / "crashed" / "final")
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), k
