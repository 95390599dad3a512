"""sample(): greedy equals no-cache references, sample_logp equals the teacher forward,
reproducibility, top-p, compaction invariance, distribution of draws, KV-cache usage."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM

from grpolab.rollout import Rollout, left_pad, response_logprobs, sample

from rollout_helpers import PAD, VOCAB, make_llama, ref_greedy_alone

PROMPTS = [[1, 5, 6, 7], [1, 9], [1, 3, 4, 5, 6, 7, 8, 2, 11], [1, 20, 21], [1, 30, 31, 32, 33, 34]]
MAX_NEW = 16


def _pick_eos(refs):
    """The token that, used as EOS, makes the reference rows stop at the most distinct lengths."""
    best, best_score = None, -1
    for v in range(1, VOCAB):
        lengths = {r.index(v) + 1 if v in r else len(r) + 100 for r in refs}
        if len(lengths) > best_score:
            best, best_score = v, len(lengths)
    return best


def _row(rollout: Rollout, b: int) -> list[int]:
    n = int(rollout.response_lengths[b])
    return rollout.response_ids[b, :n].tolist()


def _greedy_refs(model, prompts, max_new):
    """(eos, per-row greedy references stopping at eos), eos chosen to spread the lengths."""
    free = [ref_greedy_alone(model, p, max_new, None) for p in prompts]
    eos = _pick_eos(free)
    return eos, [ref_greedy_alone(model, p, max_new, eos) for p in prompts]


@pytest.fixture(scope="module")
def llama_refs(llama):
    return _greedy_refs(llama, PROMPTS, MAX_NEW)


def _assert_greedy_matches_alone(model, prompts, max_new, refs=None):
    eos, refs = refs if refs is not None else _greedy_refs(model, prompts, max_new)
    assert len({len(r) for r in refs}) >= 3, "test is vacuous: rows should stop at different steps"
    r = sample(model, prompts, greedy=True, max_new_tokens=max_new, eos_token_id=eos, pad_token_id=PAD)
    for b, ref in enumerate(refs):
        assert _row(r, b) == ref, f"row {b}"
        assert bool(r.finished[b]) == (ref[-1] == eos and len(ref) <= max_new and eos in ref)
        # right padding after the response
        assert (r.response_ids[b, len(ref):] == PAD).all()
        assert (r.response_mask[b, len(ref):] == 0).all() and (r.response_mask[b, : len(ref)] == 1).all()
        assert (r.sample_logp[b, len(ref):] == 0).all()
    assert r.response_ids.shape[1] == max(len(x) for x in refs)  # trimmed to the longest response
    return r, eos


def test_greedy_left_padded_batch_equals_each_row_decoded_alone_without_cache(llama, llama_refs):
    r, _ = _assert_greedy_matches_alone(llama, PROMPTS, MAX_NEW, llama_refs)
    # prompts are left padded
    P = max(len(p) for p in PROMPTS)
    for b, p in enumerate(PROMPTS):
        assert r.prompt_ids[b, P - len(p):].tolist() == p
        assert r.prompt_mask[b].tolist() == [0] * (P - len(p)) + [1] * len(p)
        assert (r.prompt_ids[b, : P - len(p)] == PAD).all()


def test_greedy_equals_hf_generate_single_prompt(llama):
    prompt = [1, 5, 6, 7, 8]
    hf = llama.generate(
        torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False, max_new_tokens=20, eos_token_id=None, pad_token_id=PAD,
    )[0, len(prompt):].tolist()
    r = sample(llama, [prompt], greedy=True, max_new_tokens=20, eos_token_id=None, pad_token_id=PAD)
    assert r.response_ids[0].tolist() == hf
    assert not bool(r.finished[0]) and int(r.response_lengths[0]) == 20
    # and with an EOS the model actually emits, HF stops at the same place
    eos = hf[7]
    hf_eos = llama.generate(
        torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        do_sample=False, max_new_tokens=20, eos_token_id=eos, pad_token_id=PAD,
    )[0, len(prompt):].tolist()
    r = sample(llama, [prompt], greedy=True, max_new_tokens=20, eos_token_id=eos, pad_token_id=PAD)
    assert _row(r, 0) == hf_eos and hf_eos[-1] == eos and bool(r.finished[0])


def test_greedy_equals_hf_generate_left_padded_batch(llama, llama_refs):
    eos, _ = llama_refs
    ids, mask = left_pad(PROMPTS, PAD)
    hf = llama.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=MAX_NEW, eos_token_id=eos,
                        pad_token_id=PAD)[:, ids.shape[1]:]
    r = sample(llama, PROMPTS, greedy=True, max_new_tokens=MAX_NEW, eos_token_id=eos, pad_token_id=PAD)
    assert torch.equal(r.response_ids, hf)


def test_pad_equal_to_eos(llama, llama_refs):
    """GPT-2 style tokenizers use EOS as pad: padding must still be told apart by the masks."""
    eos, refs = llama_refs
    r = sample(llama, PROMPTS, greedy=True, max_new_tokens=MAX_NEW, eos_token_id=eos, pad_token_id=eos)
    for b, ref in enumerate(refs):
        assert _row(r, b) == ref
        assert bool(r.finished[b]) == (ref[-1] == eos)
    assert (r.prompt_ids[r.prompt_mask == 0] == eos).all()
    torch.testing.assert_close(response_logprobs(llama, r).logp, r.sample_logp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sample_logp_equals_teacher_forced_logprobs(llama, temperature, top_p):
    g = torch.Generator().manual_seed(1)
    r = sample(
        llama, PROMPTS, group_size=4, max_new_tokens=24, temperature=temperature, top_p=top_p,
        eos_token_id=3, pad_token_id=PAD, generator=g,
    )
    assert r.response_mask.sum() > 40
    assert r.finished.any() and (~r.finished).any()  # mix of EOS-ended and truncated rows
    lp = response_logprobs(llama, r, temperature=temperature).logp
    torch.testing.assert_close(lp, r.sample_logp, atol=1e-5, rtol=0)
    assert (r.sample_logp[r.response_mask == 0] == 0).all()
    assert (r.sample_logp[r.response_mask == 1] < 0).all()


def test_group_layout_and_group_members_differ(llama):
    g = torch.Generator().manual_seed(0)
    r = sample(llama, PROMPTS, group_size=3, max_new_tokens=12, eos_token_id=None, pad_token_id=PAD, generator=g)
    N, G = len(PROMPTS), 3
    assert r.batch_size == N * G
    assert r.group_ids.tolist() == [n for n in range(N) for _ in range(G)]
    for n in range(N):
        rows = r.prompt_ids[n * G : (n + 1) * G]
        assert (rows == rows[0]).all()
        assert len({tuple(x.tolist()) for x in r.response_ids[n * G : (n + 1) * G]}) > 1
    assert r.response_ids.shape == (N * G, 12) and not r.finished.any()
    assert r.response_ids.dtype == torch.long and r.response_mask.dtype == torch.float32
    assert r.group_ids.dtype == torch.long and r.finished.dtype == torch.bool


def test_reproducible_with_generator_and_sensitive_to_seed(llama):
    kw = dict(group_size=4, max_new_tokens=16, eos_token_id=3, pad_token_id=PAD)
    a = sample(llama, PROMPTS, generator=torch.Generator().manual_seed(7), **kw)
    b = sample(llama, PROMPTS, generator=torch.Generator().manual_seed(7), **kw)
    c = sample(llama, PROMPTS, generator=torch.Generator().manual_seed(8), **kw)
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.sample_logp, b.sample_logp)
    assert torch.equal(a.finished, b.finished)
    assert not torch.equal(a.response_ids[:, :4], c.response_ids[:, :4])


def test_compaction_does_not_change_the_rollout(llama):
    kw = dict(group_size=6, max_new_tokens=24, eos_token_id=3, pad_token_id=PAD, temperature=1.3)
    a = sample(llama, PROMPTS, generator=torch.Generator().manual_seed(3), compact=True, **kw)
    b = sample(llama, PROMPTS, generator=torch.Generator().manual_seed(3), compact=False, **kw)
    lengths = a.response_lengths
    assert lengths.min() < 8 and lengths.max() == 24  # compaction actually triggered (many early stops)
    assert torch.equal(a.response_ids, b.response_ids)
    torch.testing.assert_close(a.sample_logp, b.sample_logp, atol=1e-6, rtol=0)


def test_tiny_top_p_equals_greedy(llama):
    greedy = sample(llama, PROMPTS, group_size=2, greedy=True, max_new_tokens=12, eos_token_id=3, pad_token_id=PAD)
    nucleus = sample(
        llama, PROMPTS, group_size=2, top_p=1e-6, max_new_tokens=12, eos_token_id=3, pad_token_id=PAD,
        generator=torch.Generator().manual_seed(0),
    )
    assert torch.equal(greedy.response_ids, nucleus.response_ids)
    torch.testing.assert_close(greedy.sample_logp, nucleus.sample_logp)


@pytest.mark.parametrize("top_p", [1.0, 0.6])
def test_first_token_frequencies_match_the_model_distribution(llama, top_p):
    """8000 one-token draws from one prompt: empirical frequencies vs softmax(logits / temp) (top-p renormalised)."""
    prompt, temp, n = [1, 5, 6], 1.5, 8000
    with torch.no_grad():
        p = torch.softmax(llama(input_ids=torch.tensor([prompt])).logits[0, -1].double() / temp, -1)
    if top_p < 1.0:
        sp, order = p.sort(descending=True)
        keep = (sp.cumsum(0) - sp) < top_p
        q = torch.zeros_like(p)
        q[order[keep]] = sp[keep]
        p = q / q.sum()
    r = sample(
        llama, [prompt], group_size=n, max_new_tokens=1, temperature=temp, top_p=top_p, eos_token_id=None,
        pad_token_id=PAD, generator=torch.Generator().manual_seed(0),
    )
    freq = torch.bincount(r.response_ids[:, 0], minlength=VOCAB).double() / n
    assert (freq[p == 0] == 0).all()  # nothing outside the nucleus
    # total variation; sampling noise alone gives about 0.5 * sum(sqrt(p(1-p)/n)) ~ 0.03
    assert 0.5 * (freq - p).abs().sum() < 0.05
    # sample_logp is under the untruncated tempered distribution
    with torch.no_grad():
        full = torch.log_softmax(llama(input_ids=torch.tensor([prompt])).logits[0, -1] / temp, -1)
    torch.testing.assert_close(r.sample_logp[:, 0], full[r.response_ids[:, 0]], atol=1e-5, rtol=0)


def test_kv_cache_one_prefill_per_prompt_then_single_token_steps_and_early_stop(llama):
    calls = []
    h = llama.register_forward_pre_hook(lambda mod, args, kw: calls.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    try:
        g = torch.Generator().manual_seed(0)
        r = sample(llama, PROMPTS, group_size=4, max_new_tokens=200, temperature=2.0, eos_token_id=list(range(1, 11)),
                   pad_token_id=PAD, generator=g)
    finally:
        h.remove()
    P = max(len(p) for p in PROMPTS)
    assert calls[0] == (len(PROMPTS), P)  # prefill over the distinct prompts only
    assert all(s[1] == 1 for s in calls[1:])  # then one token per step
    assert r.finished.all()  # a quarter of the vocabulary is EOS: everyone stops early
    T = r.response_ids.shape[1]
    assert T < 200 and len(calls) == T  # stopped as soon as the last row finished
    assert calls[-1][0] < len(PROMPTS) * 4  # finished rows were dropped from the batch


def test_train_mode_restored_and_rollout_usable_with_autograd():
    model = make_llama(1).train()
    r = sample(model, PROMPTS, group_size=2, max_new_tokens=8, eos_token_id=3, pad_token_id=PAD,
               generator=torch.Generator().manual_seed(0))
    assert model.training
    res = response_logprobs(model, r)
    res.logp.sum().backward()  # rollout tensors are normal tensors, not inference tensors
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0


def test_edge_cases(llama):
    r = sample(llama, PROMPTS, group_size=2, max_new_tokens=0, eos_token_id=3, pad_token_id=PAD)
    assert r.response_ids.shape == (10, 0) and r.sample_logp.shape == (10, 0) and not r.finished.any()
    assert response_logprobs(llama, r).logp.shape == (10, 0)
    r = sample(llama, [[1, 2, 3]], max_new_tokens=5, greedy=True, eos_token_id=None, pad_token_id=PAD)
    assert r.response_ids.shape == (1, 5) and not r.finished.any()
    with pytest.raises(ValueError, match="at least one token"):
        sample(llama, [[1], []], eos_token_id=3, pad_token_id=PAD)
    with pytest.raises(ValueError, match="top_p"):
        sample(llama, [[1]], top_p=0.0, eos_token_id=3, pad_token_id=PAD)
    with pytest.raises(ValueError, match="temperature"):
        sample(llama, [[1]], temperature=0.0, eos_token_id=3, pad_token_id=PAD)
    with pytest.raises(ValueError, match="group_size"):
        sample(llama, [[1]], group_size=0, eos_token_id=3, pad_token_id=PAD)


def test_prompts_as_tensors(llama):
    a = sample(llama, PROMPTS, greedy=True, max_new_tokens=6, eos_token_id=None, pad_token_id=PAD)
    b = sample(llama, [torch.tensor(p) for p in PROMPTS], greedy=True, max_new_tokens=6, eos_token_id=None, pad_token_id=PAD)
    assert torch.equal(a.response_ids, b.response_ids)


def _gpt2():
    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=256, bos_token_id=1,
                     eos_token_id=2, initializer_range=0.2)  # larger init: less degenerate greedy text
    return GPT2LMHeadModel(cfg).eval()


def _mistral_sliding():
    torch.manual_seed(0)
    cfg = MistralConfig(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256, sliding_window=6)
    return MistralForCausalLM(cfg).eval()


def _llama_eager():
    model = make_llama(4)
    model.set_attn_implementation("eager")
    return model


@pytest.mark.parametrize("factory", [_gpt2, _mistral_sliding, _llama_eager],
                         ids=["gpt2-learned-positions", "mistral-gqa-sliding", "llama-eager-attention"])
def test_other_families_greedy_left_padding(factory):
    model = factory()
    _assert_greedy_matches_alone(model, PROMPTS, 12)
    g = torch.Generator().manual_seed(0)
    r = sample(model, PROMPTS, group_size=3, max_new_tokens=12, temperature=0.8, eos_token_id=3, pad_token_id=PAD, generator=g)
    torch.testing.assert_close(response_logprobs(model, r, temperature=0.8).logp, r.sample_logp, atol=1e-5, rtol=0)


def test_sampling_spec_is_the_loose_keywords_as_one_value(llama):
    # sample(sampling=SamplingSpec(...)) draws exactly what the loose keywords draw; mixing both,
    # or an unknown keyword, is refused; the spec validates its ranges
    from grpolab.rollout import SamplingSpec

    prompts = [[1, 5, 6], [1, 7]]
    kw = dict(temperature=0.8, top_p=0.9, top_k=20, min_p=0.01, repetition_penalty=1.3)
    a = sample(llama, prompts, group_size=3, max_new_tokens=12, eos_token_id=None, pad_token_id=PAD,
               generator=torch.Generator().manual_seed(3), **kw)
    b = sample(llama, prompts, group_size=3, max_new_tokens=12, eos_token_id=None, pad_token_id=PAD,
               generator=torch.Generator().manual_seed(3), sampling=SamplingSpec(**kw))
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.sample_logp, b.sample_logp)
    with pytest.raises(TypeError, match="not both"):
        sample(llama, prompts, eos_token_id=None, pad_token_id=PAD, sampling=SamplingSpec(), top_p=0.5)
    with pytest.raises(TypeError, match="top_q"):
        sample(llama, prompts, eos_token_id=None, pad_token_id=PAD, top_q=0.5)
    with pytest.raises(ValueError, match="top_p must be in"):
        SamplingSpec(top_p=0.0).validate()
    with pytest.raises(ValueError, match="temperature must be > 0 for sampling"):
        sample(llama, prompts, eos_token_id=None, pad_token_id=PAD, sampling=SamplingSpec(temperature=0.0))
