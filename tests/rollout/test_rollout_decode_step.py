"""The fused Llama decode step: same tokens and log-probs as the Hugging Face forward it replaces,
used only where it reproduces the model, and the prefill stays the model's own forward."""

import functools

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer
from grpolab.rollout import response_logprobs, sample
from grpolab.rollout.cache import ForwardSignature, expand_to_slabs, new_cache
from grpolab.rollout.decode_step import FusedLlamaDecoder, fused_decoder, why_not_fused

from rollout_helpers import PAD, VOCAB, ref_greedy_alone

PROMPTS = [[1, 5, 6, 7], [1, 9], [1, 3, 4, 5, 6, 7, 8, 2, 11], [1, 20, 21], [1, 30, 31, 32, 33, 34]]


def _llama(seed=0, **kw):
    torch.manual_seed(seed)
    base = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, max_position_embeddings=256, initializer_range=0.2)
    base.update(kw)
    return LlamaForCausalLM(LlamaConfig(**base)).eval()


@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["mha", "gqa2", "mqa"])
def test_one_step_logits_equal_the_hf_forward(kv_heads):
    model = _llama(num_key_value_heads=kv_heads)
    assert why_not_fused(model) is None
    ids = torch.tensor([[PAD, PAD, 1, 5, 6], [1, 9, 8, 7, 6]])
    mask = (ids != PAD).long()
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    sig = ForwardSignature.of(model)
    nxt = torch.tensor([11, 12])
    with torch.no_grad():
        cache = new_cache(model)
        model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **{sig.cache_kw: cache})
        expand_to_slabs(cache, capacity=8, repeats=1)
        attn = torch.cat([mask, torch.ones(2, 3, dtype=torch.long)], 1)
        dec = fused_decoder(model, cache, attn, max_position=8)
        assert isinstance(dec, FusedLlamaDecoder)
        got = dec(nxt, pos[:, -1] + 1)
        # reference: the whole sequence again, no cache
        full = torch.cat([ids, nxt[:, None]], 1)
        fmask = torch.cat([mask, torch.ones(2, 1, dtype=torch.long)], 1)
        ref = model(input_ids=full, attention_mask=fmask, position_ids=(fmask.cumsum(-1) - 1).clamp(min=0)).logits[:, -1]
    assert got.shape == (2, VOCAB)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
    assert cache.layers[0].get_seq_length() == 6  # the step's keys/values were appended


@pytest.mark.parametrize("temperature,top_p,group_size", [(1.0, 1.0, 4), (0.8, 0.9, 3)])
def test_fused_sampling_gives_the_same_rollout_as_the_hf_forward(temperature, top_p, group_size):
    model = _llama(1, num_key_value_heads=2)
    kw = dict(group_size=group_size, max_new_tokens=20, temperature=temperature, top_p=top_p, eos_token_id=3,
              pad_token_id=PAD)
    a = sample(model, PROMPTS, generator=torch.Generator().manual_seed(5), fused=True, **kw)
    b = sample(model, PROMPTS, generator=torch.Generator().manual_seed(5), fused=False, **kw)
    lengths = a.response_lengths
    assert lengths.min() < lengths.max()  # rows stop at different steps: compaction ran on both paths
    assert torch.equal(a.response_ids, b.response_ids) and torch.equal(a.response_mask, b.response_mask)
    torch.testing.assert_close(a.sample_logp, b.sample_logp, atol=1e-5, rtol=0)
    # and the fused log-probs are the model's own (teacher-forced, full forward)
    lp = response_logprobs(model, a, temperature=temperature).logp
    torch.testing.assert_close(lp, a.sample_logp, atol=1e-5, rtol=0)


def test_fused_greedy_equals_each_row_decoded_alone_without_cache():
    model = _llama(2)
    refs = [ref_greedy_alone(model, p, 12, None) for p in PROMPTS]
    r = sample(model, PROMPTS, greedy=True, max_new_tokens=12, eos_token_id=None, pad_token_id=PAD)
    assert r.response_ids.tolist() == refs


def test_prefill_is_the_models_forward_and_decode_steps_are_not():
    """With the fused step, ``model.forward`` runs once (the prefill); without it, once per token."""
    model = _llama(3)
    calls = []
    orig = model.forward

    @functools.wraps(orig)  # keeps forward's signature (the sampler reads its keyword names)
    def counting(*a, **k):  # an instance attribute, not a hook: the fused path stays eligible
        calls.append(k["input_ids"].shape)
        return orig(*a, **k)

    model.forward = counting
    kw = dict(group_size=2, max_new_tokens=6, eos_token_id=None, pad_token_id=PAD,
              generator=torch.Generator().manual_seed(0))
    sample(model, PROMPTS, fused=True, **kw)
    assert calls == [(len(PROMPTS), max(map(len, PROMPTS)))]
    calls.clear()
    sample(model, PROMPTS, fused=False, **kw)
    assert len(calls) == 6


def test_tiny_default_model_is_fused_and_matches():
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=96), seed=0)
    assert why_not_fused(model) is None
    prompts = [tok.encode("12+34=")[:6], tok.encode("7*8=")[:4]]
    kw = dict(group_size=4, max_new_tokens=16, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    a = sample(model, prompts, generator=torch.Generator().manual_seed(0), fused=True, **kw)
    b = sample(model, prompts, generator=torch.Generator().manual_seed(0), fused=False, **kw)
    assert torch.equal(a.response_ids, b.response_ids)
    torch.testing.assert_close(a.sample_logp, b.sample_logp, atol=1e-5, rtol=0)


def test_unsupported_models_fall_back_with_a_reason():
    from transformers import GPT2Config, GPT2LMHeadModel, MistralConfig, MistralForCausalLM

    assert "not LlamaForCausalLM" in why_not_fused(GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2)))
    mistral = MistralForCausalLM(MistralConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                                               num_attention_heads=2, intermediate_size=64, sliding_window=4))
    assert why_not_fused(mistral) is not None
    assert "biases" in why_not_fused(_llama(attention_bias=True))
    assert "RoPE type" in why_not_fused(
        _llama(rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}))
    assert "bfloat16" in why_not_fused(_llama().to(torch.bfloat16))
    big = _llama(hidden_size=1024, intermediate_size=4096, num_hidden_layers=4, num_attention_heads=8)
    assert why_not_fused(big) is None  # 4 x 16.8 M parameters: decoded in place (test_rollout_exact.py)
    model = _llama()
    handle = model.model.layers[0].mlp.register_forward_hook(lambda *a: None)
    try:
        assert "hooks" in why_not_fused(model)
    finally:
        handle.remove()
    assert why_not_fused(model) is None
    model.model.layers[1].self_attn.q_proj = torch.nn.Sequential(model.model.layers[1].self_attn.q_proj)
    assert "q_proj" in why_not_fused(model)
    # and the sampler still works on it through the model's forward
    r = sample(model, PROMPTS, max_new_tokens=4, eos_token_id=None, pad_token_id=PAD,
               generator=torch.Generator().manual_seed(0))
    assert r.response_ids.shape == (len(PROMPTS), 4)
