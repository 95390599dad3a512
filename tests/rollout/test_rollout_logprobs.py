"""response_logprobs(): slow per-row float64 reference, entropy, poisoned padding, micro-batching
(values and gradients), tuple input, teacher prompts."""

import warnings

import pytest
import torch

from grpolab.rollout import LogprobResult, Rollout, response_logprobs, sample

from rollout_helpers import PAD, VOCAB, make_llama, ref_logprobs_alone

PROMPTS = [[1, 5, 6, 7], [1, 9], [1, 3, 4, 5, 6, 7, 8, 2, 11], [1, 20, 21]]


def _rollout(model, G=2, seed=0, T=14, temperature=1.0):
    return sample(model, PROMPTS, group_size=G, max_new_tokens=T, temperature=temperature, eos_token_id=3,
                  pad_token_id=PAD, generator=torch.Generator().manual_seed(seed))


def _rows(r: Rollout):
    """(prompt, response) token lists per row, padding stripped."""
    out = []
    for b in range(r.batch_size):
        p = r.prompt_ids[b][r.prompt_mask[b].bool()].tolist()
        resp = r.response_ids[b][r.response_mask[b].bool()].tolist()
        out.append((p, resp))
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_matches_per_row_reference_with_entropy(llama, temperature):
    r = _rollout(llama, temperature=temperature)
    assert (r.response_lengths < r.response_ids.shape[1]).any()  # some rows are padded
    res = response_logprobs(llama, r, temperature=temperature, return_entropy=True)
    assert isinstance(res, LogprobResult) and res.logp.shape == r.response_ids.shape
    for b, (p, resp) in enumerate(_rows(r)):
        with torch.no_grad():
            lp, ent = ref_logprobs_alone(llama, p, resp, temperature)
        n = len(resp)
        torch.testing.assert_close(res.logp[b, :n].double(), lp, atol=1e-5, rtol=0)
        torch.testing.assert_close(res.entropy[b, :n].double(), ent, atol=1e-5, rtol=0)
        assert (res.logp[b, n:] == 0).all() and (res.entropy[b, n:] == 0).all()
    assert response_logprobs(llama, r).entropy is None


def test_poisoned_padding_changes_nothing(llama):
    r = _rollout(llama)
    base = response_logprobs(llama, r, return_entropy=True)
    g = torch.Generator().manual_seed(5)
    poisoned_prompt = torch.where(r.prompt_mask.bool(), r.prompt_ids, torch.randint(0, VOCAB, r.prompt_ids.shape, generator=g))
    poisoned_resp = torch.where(r.response_mask.bool(), r.response_ids, torch.randint(0, VOCAB, r.response_ids.shape, generator=g))
    assert not torch.equal(poisoned_prompt, r.prompt_ids) and not torch.equal(poisoned_resp, r.response_ids)
    res = response_logprobs(llama, (poisoned_prompt, r.prompt_mask, poisoned_resp, r.response_mask), return_entropy=True)
    torch.testing.assert_close(res.logp, base.logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(res.entropy, base.entropy, atol=1e-5, rtol=0)
    # extra all-padding columns on both sides (poisoned too) change nothing either
    B = r.batch_size
    junk = lambda n: torch.randint(0, VOCAB, (B, n), generator=g)  # noqa: E731
    wide = (torch.cat([junk(3), poisoned_prompt], 1), torch.cat([torch.zeros(B, 3, dtype=torch.long), r.prompt_mask], 1),
            torch.cat([poisoned_resp, junk(4)], 1), torch.cat([r.response_mask, torch.zeros(B, 4)], 1))
    res = response_logprobs(llama, wide, return_entropy=True)
    assert res.logp.shape == (B, r.response_ids.shape[1] + 4)
    torch.testing.assert_close(res.logp[:, :-4], base.logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(res.entropy[:, :-4], base.entropy, atol=1e-5, rtol=0)
    assert (res.logp[:, -4:] == 0).all() and (res.entropy[:, -4:] == 0).all()


def test_tuple_input_equals_rollout_input(llama):
    r = _rollout(llama)
    a = response_logprobs(llama, r).logp
    b = response_logprobs(llama, (r.prompt_ids, r.prompt_mask, r.response_ids, r.response_mask)).logp
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("micro_batch_size", [1, 3, 5])
def test_micro_batching_same_values_and_gradients(micro_batch_size):
    model = make_llama(2)
    r = _rollout(model, G=2, seed=3)
    weights = torch.randn(r.response_ids.shape, generator=torch.Generator().manual_seed(0))

    model.zero_grad()
    full = response_logprobs(model, r, return_entropy=True)
    ((full.logp * weights).sum() + full.entropy.sum()).backward()
    g_full = _grads(model)

    model.zero_grad()
    mb = response_logprobs(model, r, return_entropy=True, micro_batch_size=micro_batch_size)
    ((mb.logp * weights).sum() + mb.entropy.sum()).backward()
    g_mb = _grads(model)

    torch.testing.assert_close(mb.logp, full.logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(mb.entropy, full.entropy, atol=1e-5, rtol=0)
    assert g_full.keys() == g_mb.keys() and len(g_full) > 0
    for k in g_full:
        torch.testing.assert_close(g_mb[k], g_full[k], atol=1e-5, rtol=1e-4)


def test_gradient_equals_per_row_reference_gradient():
    model = make_llama(3)
    r = _rollout(model, G=1, seed=1, T=8)
    model.zero_grad()
    response_logprobs(model, r).logp.sum().backward()
    g_batched = _grads(model)
    model.zero_grad()
    for p, resp in _rows(r):  # sum of per-row, unpadded log-likelihoods
        lp, _ = ref_logprobs_alone(model, p, resp)
        lp.sum().backward()
    g_ref = _grads(model)
    for k in g_ref:
        assert torch.isfinite(g_batched[k]).all()
        torch.testing.assert_close(g_batched[k], g_ref[k], atol=1e-5, rtol=1e-4)


def test_teacher_prompt_scores_same_response_under_other_context(llama):
    r = _rollout(llama, G=1)
    teacher_prompts = [[1, 33, 34] + p for p in PROMPTS]  # privileged context prepended
    from grpolab.rollout import left_pad

    t_ids, t_mask = left_pad(teacher_prompts, PAD)
    res = response_logprobs(llama, (t_ids, t_mask, r.response_ids, r.response_mask))
    for b, (_, resp) in enumerate(_rows(r)):
        with torch.no_grad():
            lp, _ = ref_logprobs_alone(llama, teacher_prompts[b], resp)
        torch.testing.assert_close(res.logp[b, : len(resp)].double(), lp, atol=1e-5, rtol=0)
    assert not torch.allclose(res.logp, r.sample_logp, atol=1e-3)


def test_shape_validation(llama):
    r = _rollout(llama)
    with pytest.raises(ValueError, match="shape mismatch"):
        response_logprobs(llama, (r.prompt_ids, r.prompt_mask[:, 1:], r.response_ids, r.response_mask))
    with pytest.raises(ValueError, match="temperature"):
        response_logprobs(llama, r, temperature=0)


# ------------------------------------------------------------------------------------------------
# share_prompts: each distinct prompt forwarded once, the responses on its KV cache


def _shapes_seen(model):
    """Record the ``input_ids`` shape of every forward of the decoder stack."""
    seen = []
    handle = model.model.register_forward_pre_hook(
        lambda mod, args, kwargs: seen.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    return seen, handle


def _values_and_grads(model, batch, weights, **kw):
    model.zero_grad()
    res = response_logprobs(model, batch, return_entropy=True, **kw)
    ((res.logp * weights).sum() + 0.3 * res.entropy.sum()).backward()
    return res, _grads(model)


def _assert_same(shared, joint, g_shared, g_joint):
    # values: float32 rounding; gradients: HF's RMSNorm computes in float32, so the prompt
    # positions' gradient (a sum over the G rows in the shared path, G separate parts in the joint
    # one) is rounded differently: compare relative to each tensor's largest entry
    torch.testing.assert_close(shared.logp, joint.logp, atol=1e-5, rtol=0)
    torch.testing.assert_close(shared.entropy, joint.entropy, atol=1e-5, rtol=0)
    assert g_shared.keys() == g_joint.keys() and len(g_joint) > 0
    for k in g_joint:
        scale = float(g_joint[k].abs().max())
        assert scale > 0, k
        torch.testing.assert_close(g_shared[k], g_joint[k], atol=1e-5 * scale, rtol=0)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_shared_prompts_same_values_and_gradients_as_joint_forward(temperature):
    model = make_llama(2)
    r = _rollout(model, G=3, seed=3, temperature=temperature)  # prompts of 2..9 tokens: left padding
    assert (r.prompt_mask == 0).any() and (r.response_mask == 0).any()
    w = torch.randn(r.response_ids.shape, generator=torch.Generator().manual_seed(1))
    joint, g_joint = _values_and_grads(model, r, w, temperature=temperature)
    seen, handle = _shapes_seen(model)
    try:
        shared, g_shared = _values_and_grads(model, r, w, temperature=temperature, share_prompts=True)
    finally:
        handle.remove()
    B, T = r.response_ids.shape
    # really the shared path: the 4 distinct prompts once, then the responses (but the last token)
    assert seen == [(len(PROMPTS), r.prompt_ids.shape[1]), (B, T - 1)]
    _assert_same(shared, joint, g_shared, g_joint)
    # and both equal the slow per-row reference
    for b, (p, resp) in enumerate(_rows(r)):
        with torch.no_grad():
            lp, _ = ref_logprobs_alone(model, p, resp, temperature)
        torch.testing.assert_close(shared.logp[b, : len(resp)].double(), lp, atol=1e-5, rtol=0)


def test_shared_prompts_poisoned_padding_and_observation_tokens():
    model = make_llama(0)
    r = _rollout(model, G=2, seed=4)
    g = torch.Generator().manual_seed(7)
    # observation-like tokens: attended to (response_attention 1) but not scored (response_mask 0)
    mask = r.response_mask.clone()
    mask[:, 2] = 0
    attn = r.response_attention if r.response_attention is not None else r.response_mask
    attn = attn.clone()
    noise = lambda shape: torch.randint(0, VOCAB, shape, generator=g)  # noqa: E731
    poisoned_prompt = torch.where(r.prompt_mask.bool(), r.prompt_ids, noise(r.prompt_ids.shape))
    poisoned_resp = torch.where(attn.bool(), r.response_ids, noise(r.response_ids.shape))
    assert not torch.equal(poisoned_prompt, r.prompt_ids) and not torch.equal(poisoned_resp, r.response_ids)
    w = torch.randn(r.response_ids.shape, generator=g)
    clean = (r.prompt_ids, r.prompt_mask, r.response_ids, mask, attn)
    joint, g_joint = _values_and_grads(model, clean, w)
    # pads differ between rows of one group: they must still share the prompt (tokens under the mask only)
    poisoned = (poisoned_prompt, r.prompt_mask, poisoned_resp, mask, attn)
    seen, handle = _shapes_seen(model)
    try:
        shared, g_shared = _values_and_grads(model, poisoned, w, share_prompts=True)
    finally:
        handle.remove()
    assert seen[0][0] == len(PROMPTS)
    assert (shared.logp[:, 2] == 0).all() and (joint.logp[:, 2] == 0).all()
    _assert_same(shared, joint, g_shared, g_joint)


def test_shared_prompts_falls_back_to_the_joint_forward():
    from grpolab.rollout.logprobs import distinct_prompts

    model = make_llama(6)
    r = _rollout(model, G=1, seed=5)  # no prompt repeats: nothing to share
    seen, handle = _shapes_seen(model)
    try:
        a = response_logprobs(model, r, share_prompts=True).logp
    finally:
        handle.remove()
    assert seen == [(r.batch_size, r.prompt_ids.shape[1] + r.response_ids.shape[1])]
    torch.testing.assert_close(a, response_logprobs(model, r).logp, atol=0, rtol=0)
    # activation checkpointing in training: the model drops its cache, so the joint forward runs
    r2 = _rollout(model, G=2, seed=5)
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    model.train()
    try:
        seen, handle = _shapes_seen(model)
        try:
            response_logprobs(model, r2, share_prompts=True)
        finally:
            handle.remove()
        assert len(seen) == 1 and seen[0][0] == r2.batch_size
    finally:
        (getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable)()
        model.eval()
    first, inverse = distinct_prompts(r2.prompt_ids, r2.prompt_mask)
    assert sorted(first.tolist()) == [0, 2, 4, 6] and (inverse[first] == torch.arange(4)).all()
    assert torch.equal(inverse[0::2], inverse[1::2]) and len(set(inverse.tolist())) == 4


def test_shared_prompts_through_a_peft_wrapper():
    """A peft ``PeftModel`` passes ``**kwargs`` to the model it wraps: ForwardSignature reads through it
    (it used to see no ``logits_to_keep`` and send such wrappers to the joint forward and full logits),
    and the shared-prompt forward gives the joint forward's values and LoRA gradients."""
    peft = pytest.importorskip("peft")
    from grpolab.rollout.cache import ForwardSignature

    pm = peft.get_peft_model(make_llama(2), peft.LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                                            target_modules=["q_proj", "v_proj", "up_proj"]))
    inner = pm.get_base_model()
    assert ForwardSignature.of(pm) == ForwardSignature.of(inner) and ForwardSignature.of(pm).logits_to_keep
    r = _rollout(pm, G=3, seed=3)
    w = torch.randn(r.response_ids.shape, generator=torch.Generator().manual_seed(1))
    joint, g_joint = _values_and_grads(pm, r, w)
    seen, handle = _shapes_seen(inner)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            shared, g_shared = _values_and_grads(pm, r, w, share_prompts=True)
    finally:
        handle.remove()
    # the checkpointing probe asks the wrapped model by the current name (no deprecation warning)
    assert not [c for c in caught if "is_gradient_checkpointing" in str(c.message)]
    B, T = r.response_ids.shape
    assert seen == [(len(PROMPTS), r.prompt_ids.shape[1]), (B, T - 1)]
    assert any("lora_" in k for k in g_joint)
    _assert_same(shared, joint, g_shared, g_joint)
