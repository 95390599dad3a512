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
    from grpolab.rollout.collector import make_collector
    from grpolab.train.step_batch import collect_step

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


def _loop_penalised_greedy(model, prompt, steps, penalty):
    """Greedy decoding with the repetition penalty, one full forward per token (no cache)."""
    ids = list(prompt)
    out = []
    for _ in range(steps):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].double().tolist()
        seen = set(ids)
        pen = [(x / penalty if x > 0 else x * penalty) if i in seen else x for i, x in enumerate(logits)]
        tok = max(range(len(pen)), key=lambda i: pen[i])
        out.append(tok)
        ids.append(tok)
    return out


@pytest.mark.parametrize("penalty", [1.0, 1.3, 5.0])
def test_repetition_penalty_matches_a_loop_and_keeps_the_policy_logp(penalty):
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.rollout import sample

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=32), seed=1)
    prompts = [tok.encode("12+3=")[:4], tok.encode("7-")[:2]]
    ro = sample(model, prompts, group_size=1, max_new_tokens=6, greedy=True, eos_token_id=None,
                pad_token_id=tok.pad_token_id, repetition_penalty=penalty)
    for b, p in enumerate(prompts):
        assert ro.response_ids[b].tolist() == _loop_penalised_greedy(model, p, 6, penalty)
        # sample_logp: the unpenalised policy log-prob of the chosen token
        ids = list(p) + ro.response_ids[b].tolist()
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), -1)
        want = [float(logp[len(p) - 1 + t, ids[len(p) + t]]) for t in range(6)]
        assert ro.sample_logp[b].tolist() == pytest.approx(want, abs=1e-4)


def test_a_strong_penalty_stops_repeats():
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.rollout import sample

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=32), seed=1)
    prompt = [tok.encode("1+1=")[:3]]
    plain = sample(model, prompt, max_new_tokens=12, greedy=True, eos_token_id=None, pad_token_id=tok.pad_token_id)
    pen = sample(model, prompt, max_new_tokens=12, greedy=True, eos_token_id=None, pad_token_id=tok.pad_token_id,
                 repetition_penalty=1e6)
    toks = pen.response_ids[0].tolist()
    assert len(set(toks)) == len(toks) and not set(toks) & set(prompt[0])  # nothing repeats
    assert len(set(plain.response_ids[0].tolist())) < 12  # the untrained model does repeat without it


def test_repetition_penalty_config():
    from grpolab.config import ConfigError, load_config

    assert load_config(overrides=["rollout.repetition_penalty=1.2"]).rollout.repetition_penalty == 1.2
    with pytest.raises(ConfigError, match="rollout.repetition_penalty"):
        load_config(overrides=["rollout.repetition_penalty=0"])


def test_repetition_penalty_survives_compaction():
    """Rows that finish are dropped from the decode batch; the seen-token table follows them, so the
    result is the same with and without compaction."""
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
    from grpolab.rollout import sample

    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                  intermediate_size=32), seed=2)
    prompts = [tok.encode(s)[:4] for s in ("12+3=", "7-2=", "40+1", "9")]
    eos = sorted(set(range(3, 40)))[::3]  # many stop ids: rows end at different steps
    kw = dict(group_size=3, max_new_tokens=10, temperature=1.0, eos_token_id=eos, pad_token_id=tok.pad_token_id,
              repetition_penalty=1.5, top_k=8)
    a = sample(model, prompts, generator=torch.Generator().manual_seed(0), compact=True, **kw)
    b = sample(model, prompts, generator=torch.Generator().manual_seed(0), compact=False, **kw)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.response_mask, b.response_mask)
    assert 0 < int(a.finished.sum()) < len(a.finished)  # some rows finished early, some did not


@pytest.mark.parametrize("greedy,top_p,temperature,penalised", [
    (False, 1.0, 1.0, False), (False, 1.0, 0.6, False), (False, 0.9, 0.8, False), (True, 1.0, 0.7, False),
    (False, 1.0, 0.7, True), (True, 1.0, 1.0, True),
])
def test_sample_logp_is_log_softmax_at_the_drawn_token(greedy, top_p, temperature, penalised):
    """sample_logp is the policy's tempered log_softmax at the drawn token (float32, a real vocabulary
    size), whatever logits the draw used (repetition penalty) and whatever truncation applied."""
    g = torch.Generator().manual_seed(7)
    B, V = 16, 49152
    logits = torch.randn(B, V, generator=g) * 4
    u = torch.rand(B, generator=g)
    draw = logits.flip(-1) if penalised else None  # a different distribution to draw from
    tok, logp = _next_tokens(logits, u, temperature=temperature, top_p=top_p, greedy=greedy, draw_logits_BV=draw)
    want = torch.log_softmax(logits.double() / temperature, -1).gather(1, tok.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(logp.double(), want, rtol=0, atol=2e-5)
    if greedy:
        assert torch.equal(tok, (draw if penalised else logits).argmax(-1))


def test_zero_probability_tokens_are_never_drawn():
    """Tokens whose logit is -inf (or whose probability underflows to 0 in float32) have a flat
    step in the CDF; uniforms at the edges of [0, 1) still land on a token with mass."""
    V = 1000
    logits = torch.full((6, V), -float("inf"))
    logits[:, [3, 500, 998]] = torch.tensor([0.0, 1.0, 2.0])
    logits[:, 999] = -200.0  # exp underflows to 0 in float32 relative to the max
    u = torch.tensor([0.0, 1e-12, 0.3, 0.7, 1 - 2**-24, 0.9999999])
    tok, logp = _next_tokens(logits, u, temperature=1.0, top_p=1.0, greedy=False)
    assert set(tok.tolist()) <= {3, 500, 998}
    assert tok[0] == 3 and tok[-2] == 998
    assert torch.isfinite(logp).all()
