"""top_k and min_p truncation in the sampler against a slow loop twin (per row: keep, renormalise,
walk the cumulative sum in vocabulary order to the row's uniform)."""

from __future__ import annotations

import math

import pytest
import torch

from grpolab.rollout.sampler import _next_tokens


def loop_pick(logits_row, u, temperature, top_k, min_p):
    z = [x / temperature for x in logits_row]
    m = max(z)
    e = [math.exp(x - m) for x in z]
    total = sum(e)
    p = [x / total for x in e]
    keep = [True] * len(p)
    if 0 < top_k < len(p):
        kth = sorted(p, reverse=True)[top_k - 1]
        keep = [k and x >= kth for k, x in zip(keep, p)]
    if min_p > 0:
        keep = [k and x >= min_p * max(p) for k, x in zip(keep, p)]
    q = [x if k else 0.0 for x, k in zip(p, keep)]
    s = sum(q)
    q = [x / s for x in q]
    cum = 0.0
    for i, x in enumerate(q):
        cum += x
        if u * 1.0 < cum:
            return i, math.log(p[i])
    return max(i for i, k in enumerate(keep) if k), math.log(p[-1])


@pytest.mark.parametrize("top_k,min_p", [(1, 0.0), (3, 0.0), (0, 0.2), (5, 0.05), (0, 0.0)])
@pytest.mark.parametrize("seed", range(3))
def test_top_k_min_p_match_the_loop(top_k, min_p, seed):
    g = torch.Generator().manual_seed(seed)
    B, V = 64, 12
    logits = torch.randn(B, V, generator=g, dtype=torch.float64) * 2
    u = torch.rand(B, generator=g, dtype=torch.float64)
    tok, logp = _next_tokens(logits, u, temperature=0.7, top_p=1.0, greedy=False, top_k=top_k, min_p=min_p)
    for b in range(B):
        want_tok, _ = loop_pick(logits[b].tolist(), float(u[b]), 0.7, top_k, min_p)
        assert int(tok[b]) == want_tok, b
        # sample_logp stays the untruncated tempered log-probability (as with top_p)
        want_logp = torch.log_softmax(logits[b].float() / 0.7, -1)[want_tok]
        assert float(logp[b]) == pytest.approx(float(want_logp), abs=1e-5)


def test_top_k_one_is_greedy():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(32, 20, generator=g)
    u = torch.rand(32, generator=g)
    tok, _ = _next_tokens(logits, u, temperature=1.0, top_p=1.0, greedy=False, top_k=1)
    assert torch.equal(tok, logits.argmax(-1))


def test_only_kept_tokens_are_drawn():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).repeat(400, 1)
    u = torch.linspace(0, 0.999, 400)
    tok, _ = _next_tokens(logits, u, temperature=1.0, top_p=1.0, greedy=False, min_p=0.35)  # keeps p >= 0.175
    assert set(tok.tolist()) == {0, 1}
    tok, _ = _next_tokens(logits, u, temperature=1.0, top_p=1.0, greedy=False, top_k=3)
    assert set(tok.tolist()) == {0, 1, 2}


def test_config_keys_and_refusals():
    from grpolab.config import ConfigError, load_config

    cfg = load_config(overrides=["rollout.top_k=20", "rollout.min_p=0.05"])
    assert (cfg.rollout.top_k, cfg.rollout.min_p) == (20, 0.05)
    for bad, needle in (("rollout.top_k=-1", "rollout.top_k"), ("rollout.min_p=1", "rollout.min_p")):
        with pytest.raises(ConfigError, match=needle):
            load_config(overrides=[bad])
    with pytest.raises(ConfigError, match="single-turn sampling only"):
        load_config(overrides=["env.name=tool_arith", "task.name=tool_arith", "rollout.top_k=5"])


def test_the_training_collector_passes_top_k_through():
    """Sampling with top_k=1 through the trainer's collection step is greedy decoding."""
    from grpolab.config import load_config
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.tasks import get_task
    from grpolab.train.collector import make_collector
    from grpolab.train.dapo import collect_step

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=32))
    items = get_task("arith").items("train", 3)
    coll = make_collector(tok, max_new_tokens=6)
    cfg = load_config(overrides=["rollout.top_k=1", "rollout.group_size=2", "rollout.prompts_per_step=3",
                                 "rollout.max_new_tokens=6"])
    exp, _ = collect_step(coll, model, lambda n: items[:n], cfg, n_train=3, generator=torch.Generator().manual_seed(0))
    greedy = coll.collect(model, items, group_size=2, greedy=True)
    assert exp.texts == greedy.texts
    sampled, _ = collect_step(coll, model, lambda n: items[:n], load_config(overrides=[
        "rollout.group_size=2", "rollout.prompts_per_step=3", "rollout.max_new_tokens=6"]), n_train=3,
        generator=torch.Generator().manual_seed(0))
    assert sampled.texts != greedy.texts  # without top_k the untrained model's samples differ
