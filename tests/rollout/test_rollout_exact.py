"""The fast paths of the rollout and the update are the same function as the plain forward.

On a real-architecture model (a tiny ``LlamaForCausalLM`` with grouped-query attention, built
here, behind a byte-level BPE tokenizer with a ChatML chat template, prompts rendered through it):

* the chunked LM head of ``response_logprobs`` (``head_chunk``: the head over a few positions at a
  time, logits recomputed in the backward) gives the log-probabilities, entropies and gradients of
  the model's own ``[B, T, V]`` logits, for full fine-tuning and for LoRA, with and without the
  shared-prompt forward, at several temperatures and chunk sizes, and really runs (the model's LM
  head sees one position per row);
* its custom backward passes ``torch.autograd.gradcheck`` in float64 (log-probs and entropies);
* the kept log-softmax (``head_keep_bytes``: a batch whose ``[N, V]`` log-softmax fits the budget
  keeps it for the backward instead of recomputing the logits) gives bit for bit the gradients of
  the recompute, really skips the head matmul in the backward, and is chosen by the budget alone;
* a model whose logits are not ``head(hidden)`` (a soft cap after the head) is scored through its
  own logits (the fallback), bit for bit what ``head_chunk=None`` gives;
* the in-place decode step (``grpolab.rollout.decode_step``: large models and LoRA, the model's own
  weights, no fused copy) samples the same tokens with the same log-probabilities as the model's
  own forward, with and without LoRA adapters, and really runs.
"""

import pytest
import torch
from chat_helpers import build_chat_tokenizer

from grpolab.rollout import response_logprobs, sample
from grpolab.rollout.logprobs import chunked_head_logprobs
from grpolab.tasks import PromptFormat, TaskItem

QUESTIONS = ["Natalia sold 48 clips in April and half as many in May. How many in all?",
             "How many clips?", "Weng earns $12 an hour. How much for 50 minutes?"]


def make_chat_llama(tok, seed=0, dtype=torch.float32):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=48, num_hidden_layers=2, num_attention_heads=6,
                      num_key_value_heads=2, intermediate_size=96, max_position_embeddings=256,
                      tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=None,
                      eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"))
    return LlamaForCausalLM(cfg).to(dtype).eval()


@pytest.fixture(scope="module")
def chat():
    tok = build_chat_tokenizer()
    fmt = PromptFormat(chat_template="on", system_prompt="You are a helpful assistant.")
    prompts = fmt.encode([TaskItem(prompt=q, reference="1") for q in QUESTIONS], tok)
    assert all(tok.decode(p).endswith("<|im_start|>assistant\n") for p in prompts)
    return tok, prompts


def _rollout(model, tok, prompts, G=3, T=12, seed=0, temperature=1.0):
    # random weights rarely emit <|im_end|>: 40 more stop ids give responses of varied lengths
    stops = [tok.convert_tokens_to_ids("<|im_end|>")] + list(range(100, 140))
    return sample(model, prompts, group_size=G, max_new_tokens=T, temperature=temperature,
                  eos_token_id=stops, pad_token_id=tok.pad_token_id,
                  generator=torch.Generator().manual_seed(seed))


def _values_and_grads(model, r, w, **kw):
    model.zero_grad()
    res = response_logprobs(model, r, return_entropy=True, **kw)
    ((res.logp * w).sum() + 0.3 * res.entropy.sum()).backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return res, grads


def _assert_same(a, b, ga, gb, tol=1e-5):
    torch.testing.assert_close(a.logp, b.logp, atol=tol, rtol=0)
    torch.testing.assert_close(a.entropy, b.entropy, atol=tol, rtol=0)
    assert ga.keys() == gb.keys() and len(gb) > 0
    for k in gb:
        scale = float(gb[k].abs().max())
        assert scale > 0, k
        torch.testing.assert_close(ga[k], gb[k], atol=tol * scale, rtol=0, msg=k)


def _head_inputs(model):
    """Record how many positions per row each call of the model's LM head sees."""
    seen = []
    handle = model.get_output_embeddings().register_forward_pre_hook(lambda m, a: seen.append(tuple(a[0].shape)))
    return seen, handle


@pytest.mark.parametrize("keep_bytes", [0, 2**30])  # recompute the logits in the backward / keep them
@pytest.mark.parametrize("share_prompts", [False, True])
@pytest.mark.parametrize("temperature,chunk", [(1.0, 512), (0.7, 5), (1.3, 1)])
def test_chunked_head_same_values_and_gradients_as_the_logits(chat, share_prompts, temperature, chunk, keep_bytes):
    tok, prompts = chat
    model = make_chat_llama(tok, seed=1)
    r = _rollout(model, tok, prompts, temperature=temperature, seed=2)
    assert (r.prompt_mask == 0).any() and (r.response_mask == 0).any()  # left and right padding
    w = torch.randn(r.response_ids.shape, generator=torch.Generator().manual_seed(3))
    plain, g_plain = _values_and_grads(model, r, w, temperature=temperature, share_prompts=share_prompts,
                                       head_chunk=None)
    seen, handle = _head_inputs(model)
    try:
        fast, g_fast = _values_and_grads(model, r, w, temperature=temperature, share_prompts=share_prompts,
                                         head_chunk=chunk, head_keep_bytes=keep_bytes)
    finally:
        handle.remove()
    assert seen and all(s[1] == 1 for s in seen)  # the model's head ran on one position per row only
    _assert_same(fast, plain, g_fast, g_plain)
    assert "model.embed_tokens.weight" in g_fast  # the tied head's gradient reaches the embedding
    # the same as the sampler's own log-probs
    torch.testing.assert_close(fast.logp, r.sample_logp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("keep_bytes", [0, 2**30])
@pytest.mark.parametrize("share_prompts", [False, True])
def test_chunked_head_with_lora_same_values_and_adapter_gradients(chat, share_prompts, keep_bytes):
    from grpolab.models.lora import AdaptersOff, apply_lora

    tok, prompts = chat
    model = make_chat_llama(tok, seed=4)
    apply_lora(model, {"r": 4, "alpha": 8})
    with torch.no_grad():  # peft initialises B = 0: give the adapters a real effect
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    r = _rollout(model, tok, prompts, seed=5)
    w = torch.randn(r.response_ids.shape, generator=torch.Generator().manual_seed(6))
    plain, g_plain = _values_and_grads(model, r, w, share_prompts=share_prompts, head_chunk=None)
    fast, g_fast = _values_and_grads(model, r, w, share_prompts=share_prompts, head_chunk=7,
                                     head_keep_bytes=keep_bytes)
    assert all("lora_" in k for k in g_fast) and len(g_fast) == 2 * 7 * 2  # A and B, 7 projections, 2 layers
    _assert_same(fast, plain, g_fast, g_plain)
    # the base model (adapters off, the LoRA teacher and KL reference) through the same path
    base = AdaptersOff(model)
    with torch.no_grad():
        a = response_logprobs(base, r, share_prompts=share_prompts, head_chunk=7).logp
        b = response_logprobs(base, r, share_prompts=share_prompts, head_chunk=None).logp
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert not torch.allclose(a, fast.logp, atol=1e-3)  # the adapters do change the policy


def test_chunked_head_float64_model(chat):
    tok, prompts = chat
    model = make_chat_llama(tok, seed=7, dtype=torch.float64)
    r = _rollout(model, tok, prompts, seed=8)
    w = torch.randn(r.response_ids.shape, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    plain, g_plain = _values_and_grads(model, r, w, head_chunk=None)
    fast, g_fast = _values_and_grads(model, r, w, head_chunk=4)
    assert fast.logp.dtype == torch.float64
    # HF's RMSNorm rounds through float32 even in a float64 model (see grpolab.rollout.logprobs)
    _assert_same(fast, plain, g_fast, g_plain, tol=1e-6)


def _head_matmuls(monkeypatch, w_VH):
    """Count ``F.linear`` calls on the head weight ``w_VH`` (the chunked head's logits)."""
    calls = []
    orig = torch.nn.functional.linear

    def spy(x, w, b=None):
        if w is w_VH:
            calls.append(x.shape[0])
        return orig(x, w, b)

    monkeypatch.setattr(torch.nn.functional, "linear", spy)
    return calls


@pytest.mark.parametrize("temperature,with_entropy", [(1.0, False), (0.7, True), (1.3, False)])
def test_kept_log_softmax_same_gradients_bit_for_bit_and_no_recompute(monkeypatch, temperature, with_entropy):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(50, 8, generator=g, requires_grad=True)
    h = torch.randn(13, 8, generator=g, requires_grad=True)
    tok = torch.randint(0, 50, (13,), generator=g)
    gl, ge = torch.randn(13, generator=g), torch.randn(13, generator=g)
    calls = _head_matmuls(monkeypatch, w)
    out = {}
    for keep_bytes in (0, 13 * 50 * 4):  # recompute / exactly fits the budget: kept
        calls.clear()
        lp, ent = chunked_head_logprobs(h, w, tok, temperature=temperature, chunk=4, return_entropy=True,
                                        keep_bytes=keep_bytes)
        n_forward = len(calls)
        loss = (lp * gl).sum() + ((ent * ge).sum() if with_entropy else 0.0)
        gh, gw = torch.autograd.grad(loss, (h, w))
        out[keep_bytes] = (lp.detach(), ent.detach(), gh, gw, len(calls) - n_forward)
        assert n_forward == 4  # ceil(13 / 4) chunks in the forward
    (lp0, e0, gh0, gw0, back0), (lp1, e1, gh1, gw1, back1) = out.values()
    assert back0 == 4 and back1 == 0  # the kept path does not run the head again in the backward
    for a, b in ((lp0, lp1), (e0, e1), (gh0, gh1), (gw0, gw1)):
        assert torch.equal(a, b)
    # one byte under the budget: recomputed; no gradient needed: nothing kept
    calls.clear()
    lp, _ = chunked_head_logprobs(h, w, tok, chunk=4, keep_bytes=13 * 50 * 4 - 1)
    lp.sum().backward()
    assert len(calls) == 8
    calls.clear()
    with torch.no_grad():
        chunked_head_logprobs(h, w, tok, chunk=4, keep_bytes=2**30)
    assert len(calls) == 4


def test_unused_entropy_costs_no_gradient_work():
    """The update logs the entropy without differentiating it: the backward must not fold a zero
    entropy gradient into ``dz`` (``set_materialize_grads(False)``), and the result is the same as
    asking for no entropy at all."""
    g = torch.Generator().manual_seed(2)
    w = torch.randn(40, 6, generator=g, requires_grad=True)
    h = torch.randn(9, 6, generator=g, requires_grad=True)
    tok = torch.randint(0, 40, (9,), generator=g)
    for keep in (0, 2**30):
        lp, ent = chunked_head_logprobs(h, w, tok, chunk=4, return_entropy=True, keep_bytes=keep)
        a = torch.autograd.grad(lp.sum(), (h, w), retain_graph=True)
        lp2, _ = chunked_head_logprobs(h, w, tok, chunk=4, keep_bytes=keep)
        b = torch.autograd.grad(lp2.sum(), (h, w))
        for x, y in zip(a, b):
            assert torch.equal(x, y)
        # and only the entropy's gradient (logp unused) works as well
        ge = torch.autograd.grad(ent.sum(), (h, w))
        zz = (h @ w.T)
        ref = torch.autograd.grad((-(torch.softmax(zz, -1) * torch.log_softmax(zz, -1)).sum(-1)).sum(), (h, w))
        for x, y in zip(ge, ref):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5)


def test_chunked_head_backward_passes_gradcheck():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(7, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(11, 5, dtype=torch.float64, generator=g, requires_grad=True)
    tok = torch.randint(0, 11, (7,), generator=g)
    for temperature, chunk, keep in ((1.0, 3, 0), (0.6, 2, 0), (1.7, 100, 0), (0.6, 2, 2**30), (1.0, 3, 2**30)):
        torch.autograd.gradcheck(lambda h, w: chunked_head_logprobs(h, w, tok, temperature=temperature,
                                                                    chunk=chunk, return_entropy=True,
                                                                    keep_bytes=keep), (h, w))
        torch.autograd.gradcheck(lambda h, w: chunked_head_logprobs(h, w, tok, temperature=temperature,
                                                                    chunk=chunk, keep_bytes=keep)[0], (h, w))
    # against a direct float64 computation
    z = (h @ w.T) / 0.6
    lp, ent = chunked_head_logprobs(h, w, tok, temperature=0.6, chunk=3, return_entropy=True)
    ref = torch.log_softmax(z, -1)
    torch.testing.assert_close(lp, ref.gather(1, tok[:, None]).squeeze(1), atol=1e-12, rtol=0)
    torch.testing.assert_close(ent, -(ref.exp() * ref).sum(-1), atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="head_chunk"):
        chunked_head_logprobs(h, w, tok, chunk=0)


def test_model_whose_logits_are_not_the_head_falls_back_to_its_logits(chat):
    tok, prompts = chat
    model = make_chat_llama(tok, seed=10)
    r = _rollout(model, tok, prompts, seed=11)
    # a soft cap after the head (Gemma-2 style): head(hidden) no longer reproduces the logits
    handle = model.get_output_embeddings().register_forward_hook(lambda m, a, out: 3.0 * torch.tanh(out / 3.0))
    try:
        for share in (False, True):
            a = response_logprobs(model, r, share_prompts=share, return_entropy=True)
            b = response_logprobs(model, r, share_prompts=share, return_entropy=True, head_chunk=None)
            torch.testing.assert_close(a.logp, b.logp, atol=0, rtol=0)
            torch.testing.assert_close(a.entropy, b.entropy, atol=0, rtol=0)
            # and the soft cap is really in the scores
            assert float(b.logp.detach().min()) > -2 * 3.0 - 1e-4 - torch.log(torch.tensor(float(len(tok))))
    finally:
        handle.remove()


# ------------------------------------------------------------------------------------------------
# the in-place decode step (models above MAX_FUSED_PARAMS, and LoRA)


def _spy_in_place(monkeypatch):
    from grpolab.rollout.decode_step import FusedLlamaDecoder

    calls = []
    orig = FusedLlamaDecoder._step_in_place

    def spy(self, *a, **k):
        calls.append(a[0].shape[0])
        return orig(self, *a, **k)

    monkeypatch.setattr(FusedLlamaDecoder, "_step_in_place", spy)
    return calls


def _same_rollout(a, b):
    assert torch.equal(a.response_ids, b.response_ids)
    assert torch.equal(a.response_mask, b.response_mask)
    torch.testing.assert_close(a.sample_logp, b.sample_logp, atol=1e-5, rtol=0)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_in_place_decode_step_same_rollout_as_the_hf_forward(chat, monkeypatch, temperature, top_p):
    import grpolab.rollout.decode_step as ds

    tok, prompts = chat
    model = make_chat_llama(tok, seed=12)
    monkeypatch.setattr(ds, "MAX_FUSED_PARAMS", 0)  # as for a model above 50 M parameters
    calls = _spy_in_place(monkeypatch)
    assert ds.why_not_fused(model) is None
    kw = dict(temperature=temperature, seed=13)
    fast = _rollout(model, tok, prompts, T=16, **kw)
    assert calls and calls[0] == len(prompts) * 3  # the in-place step decoded every row
    n = len(calls)
    plain = sample(model, prompts, group_size=3, max_new_tokens=16, temperature=temperature, top_p=top_p,
                   eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>")] + list(range(100, 140)),
                   pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(13), fused=False)
    assert len(calls) == n  # fused=False never calls it
    if top_p == 1.0:
        _same_rollout(fast, plain)
    fast = sample(model, prompts, group_size=3, max_new_tokens=16, temperature=temperature, top_p=top_p,
                  eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>")] + list(range(100, 140)),
                  pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(13))
    _same_rollout(fast, plain)
    # and the sampled log-probs are the teacher-forced ones
    torch.testing.assert_close(response_logprobs(model, fast, temperature=temperature).logp.detach(),
                               fast.sample_logp, atol=1e-5, rtol=0)


def test_in_place_decode_step_with_lora_adapters(chat, monkeypatch):
    import grpolab.rollout.decode_step as ds
    from grpolab.models.lora import adapters_disabled, apply_lora

    tok, prompts = chat
    model = make_chat_llama(tok, seed=14)
    apply_lora(model, {"r": 4, "alpha": 8, "dropout": 0.1})  # dropout: off in eval, as the sampler runs
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3)
    assert ds.why_not_fused(model) is None
    # an update-style forward with output_hidden_states installs transformers' capturing hooks for
    # good; they are inactive while decoding, so the fast step still applies
    response_logprobs(model, _rollout(model, tok, prompts, T=4, seed=0))
    assert any(m._forward_hooks for m in model.modules())
    assert ds.why_not_fused(model) is None
    calls = _spy_in_place(monkeypatch)
    fast = _rollout(model, tok, prompts, T=16, seed=15)
    assert calls  # LoRA models are always decoded in place (small as this one is)
    plain = sample(model, prompts, group_size=3, max_new_tokens=16, temperature=1.0,
                   eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>")] + list(range(100, 140)),
                   pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(15), fused=False)
    _same_rollout(fast, plain)
    torch.testing.assert_close(response_logprobs(model, fast).logp.detach(), fast.sample_logp, atol=1e-5, rtol=0)
    # adapters disabled (the base model): the in-place step follows, and the policy really differs
    with adapters_disabled(model):
        base_fast = _rollout(model, tok, prompts, T=16, seed=15)
        base_plain = sample(model, prompts, group_size=3, max_new_tokens=16, temperature=1.0,
                            eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>")] + list(range(100, 140)),
                            pad_token_id=tok.pad_token_id, generator=torch.Generator().manual_seed(15), fused=False)
    _same_rollout(base_fast, base_plain)
    assert not torch.equal(base_fast.response_ids, fast.response_ids)
    # what the in-place step cannot reproduce falls back with a reason
    q = model.model.layers[0].self_attn.q_proj
    q.merge()
    try:
        assert "merged" in ds.why_not_fused(model)
    finally:
        q.unmerge()
    assert ds.why_not_fused(model) is None
