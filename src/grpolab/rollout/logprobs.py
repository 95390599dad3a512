"""Teacher-forced scoring of responses: ``log pi(response_t | prompt, response_<t)``.

One forward over ``[prompt ; response]`` (``[B, P + T]``) with the attention mask
``[prompt_mask ; response_mask]`` and ``position_ids = cumsum(mask) - 1``, the same positions the
sampler used, so for the sampling model the result equals ``Rollout.sample_logp`` up to float
error. The logits at position ``p`` predict token ``p + 1``, so the response tokens are scored by
the logits at positions ``P - 1 .. P + T - 2``; only those ``T`` positions go through the LM head
(``logits_to_keep``).

Memory: ``logp = logit[token] - logsumexp(logits)`` (a gather and a reduction, no ``[B, T, V]``
log-softmax tensor kept for backward); entropy ``H = logsumexp - sum(softmax * logits)`` only when
asked. Runs with gradients: this is the forward of the policy update. It does not touch
``model.training``; call ``model.eval()`` first if dropout should be off.

The same function is the "teacher forward" of RLSD-style credit assignment: pass a *privileged*
prompt with the student's response tensors, ``(teacher_prompt_ids, teacher_prompt_mask,
response_ids, response_mask)``, to score the same tokens under another context.

Shared prompts (``share_prompts=True``, what the policy update uses): the ``G`` rows of a group
repeat one prompt, and the joint forward recomputes it ``G`` times. The shared path forwards each
distinct prompt of the (micro-)batch once with a KV cache, gathers its keys/values to the rows
that repeat it (``index_select``: gradients from every row flow back into the one prompt forward
and add up) and forwards only the response tokens on top, with the same attention mask and
positions as the joint forward. It is the same function up to float rounding, which
``tests/rollout/test_rollout_logprobs.py`` checks for values and gradients, with left padding and
poisoned pads (to float32 rounding even for a float64 model: Hugging Face's RMSNorm computes in
float32, and its backward rounds the summed gradient of a shared prompt position once instead of
each row's part separately). It falls back to the joint forward when no prompt repeats, when a prompt row is
empty, with gradient checkpointing on (the model drops its cache), and for models whose cache has
layers other than plain full attention (:func:`shared_prompt_fallback` says why). The forward is
:func:`prefix_forward`, which the privileged teacher's shared prompts use too.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..models.memory import grouped_kv_attention
from .batch import Rollout
from .cache import DynamicLayer, ForwardSignature, new_cache


#: positions whose ``V``-wide logits the chunked head holds at once (``response_logprobs(head_chunk=)``)
HEAD_CHUNK = 512
#: a (micro-)batch's ``[N, V]`` log-softmax up to this size is kept for the backward instead of
#: recomputed (``response_logprobs(head_keep_bytes=)``): 256 MiB, e.g. 1,365 scored positions of a
#: 49,152-token vocabulary in float32
HEAD_KEEP_BYTES = 256 * 2**20


@dataclass
class LogprobResult:
    """Per-token scores of a response batch.

    Attributes:
        logp: ``FloatTensor [B, T]`` log-probability of each response token under
            ``softmax(logits / temperature)``; 0 where ``response_mask`` is 0. float32, or
            float64 for a float64 model.
        entropy: ``FloatTensor [B, T]`` entropy of that distribution at each response position
            (0 where masked), or ``None`` if not requested.
    """

    logp: torch.Tensor
    entropy: torch.Tensor | None = None


def response_logprobs(
    model: torch.nn.Module,
    batch: Rollout | tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
    micro_batch_size: int | None = None,
    share_prompts: bool = False,
    head_chunk: int | None = HEAD_CHUNK,
    head_keep_bytes: int = HEAD_KEEP_BYTES,
) -> LogprobResult:
    """Log-probs (and optionally entropies) of the response tokens, with gradients.

    Args:
        model: a Hugging Face causal LM.
        batch: a :class:`Rollout`, or ``(prompt_ids [B, P] long, prompt_mask [B, P],
            response_ids [B, T] long, response_mask [B, T])`` with prompts left-padded and
            responses right-padded, optionally followed by ``response_attention [B, T]`` (1 on
            every response token to attend to, e.g. the observation tokens of a multi-turn
            episode, which have ``response_mask`` 0: they are attended to and counted in the
            positions, but get logp 0). Without it the response mask is the attention mask.
        temperature: logits are divided by it (use the sampling temperature so that ratios
            compare like with like).
        return_entropy: also return the per-token entropy.
        micro_batch_size: run the forward in chunks of this many rows (concatenated on
            return).
        share_prompts: forward each distinct prompt of a chunk once and the responses on top of
            its KV cache (see the module docstring); the same values and gradients up to float
            rounding, fewer FLOPs when rows repeat prompts (groups).
        head_chunk: score through :func:`chunked_head_logprobs` (the LM head over at most this
            many positions at a time, logits recomputed in the backward: no ``[B, T, V]`` tensor
            is ever held); ``None`` or 0 takes the model's own ``[B, T, V]`` logits. The same
            values and gradients up to float rounding; falls back to the logits when the model's
            head is not a plain bias-free linear layer that reproduces its logits.
        head_keep_bytes: with ``head_chunk``, a (micro-)batch whose scored positions' log-softmax
            (``N x V`` floats) fits in this many bytes keeps it for the backward, which then
            skips recomputing the logits (the speed of the plain logits path; the same values
            and gradients bit for bit as recomputing); above it the backward recomputes them
            chunk by chunk (memory bounded by ``head_chunk``). 0: always recompute.

    Each (micro-)batch is trimmed to its own longest prompt and response before the forward.

    Returns:
        :class:`LogprobResult` with ``logp [B, T]`` (and ``entropy [B, T]``).
    """
    prompt_ids, prompt_mask, response_ids, response_mask, response_attention = _unpack(batch)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    B = prompt_ids.shape[0]
    sig = ForwardSignature.of(model)
    mb = B if not micro_batch_size else int(micro_batch_size)
    if mb < 1:
        raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")

    logps, ents = [], []
    with grouped_kv_attention(model):  # SDPA saves the key/value heads, not repeated copies (CPU)
        for s in range(0, B, mb):  # loop over micro-batches, not over rows
            lp, ent = _score(
                model, sig,
                prompt_ids[s : s + mb], prompt_mask[s : s + mb], response_ids[s : s + mb], response_mask[s : s + mb],
                temperature=temperature, return_entropy=return_entropy,
                response_attn_BT=None if response_attention is None else response_attention[s : s + mb],
                share_prompts=share_prompts, head_chunk=head_chunk, head_keep_bytes=head_keep_bytes,
            )
            logps.append(lp)
            ents.append(ent)
    logp = logps[0] if len(logps) == 1 else torch.cat(logps, dim=0)
    entropy = None
    if return_entropy:
        entropy = ents[0] if len(ents) == 1 else torch.cat(ents, dim=0)
    return LogprobResult(logp=logp, entropy=entropy)


def _unpack(batch):
    """``(prompt_ids, prompt_mask, response_ids, response_mask, response_attention | None)`` of a
    :class:`Rollout` or a 4- or 5-tuple, with their shapes checked."""
    if isinstance(batch, Rollout):
        prompt_ids, prompt_mask, response_ids, response_mask = (
            batch.prompt_ids, batch.prompt_mask, batch.response_ids, batch.response_mask,
        )
        response_attention = batch.response_attention
    else:
        prompt_ids, prompt_mask, response_ids, response_mask = batch[:4]
        response_attention = batch[4] if len(batch) > 4 else None
    if response_attention is not None and response_attention.shape != response_mask.shape:
        raise ValueError(
            f"response_attention shape {tuple(response_attention.shape)} != response_mask shape "
            f"{tuple(response_mask.shape)}"
        )
    if prompt_ids.shape != prompt_mask.shape or response_ids.shape != response_mask.shape:
        raise ValueError(
            f"shape mismatch: prompt_ids {tuple(prompt_ids.shape)} / prompt_mask {tuple(prompt_mask.shape)}, "
            f"response_ids {tuple(response_ids.shape)} / response_mask {tuple(response_mask.shape)}"
        )
    return prompt_ids, prompt_mask, response_ids, response_mask, response_attention


def joint_forward(model, prompt_ids_BP, prompt_mask_BP, response_ids_BT, response_attn_BT, **model_kwargs):
    """The one teacher-forced forward over ``[prompt ; response]`` (no KV cache).

    Args:
        prompt_ids_BP, prompt_mask_BP: ``[B, P]`` left-padded prompts and their mask.
        response_ids_BT, response_attn_BT: ``[B, T]`` right-padded responses and the mask of the
            response tokens to attend to (observation tokens of an episode included).
        model_kwargs: passed to the model (``logits_to_keep``, ``output_hidden_states``, ...).

    The attention mask is ``[prompt_mask ; response_attn]`` (``[B, P + T]``) and
    ``position_ids = cumsum(mask) - 1``: the positions the sampler used. Returns the model output;
    its logits at position ``p`` predict token ``p + 1``.
    """
    input_ids = torch.cat([prompt_ids_BP, response_ids_BT], dim=1)
    attn = torch.cat([prompt_mask_BP.long(), response_attn_BT.long()], dim=1)
    position_ids = (attn.cumsum(-1) - 1).clamp_(min=0)
    return model(input_ids=input_ids, attention_mask=attn, position_ids=position_ids, use_cache=False,
                 **model_kwargs)


def _score(
    model, sig: ForwardSignature, prompt_ids_BP, prompt_mask_BP, response_ids_BT, response_mask_BT,
    *, temperature: float, return_entropy: bool, response_attn_BT=None, share_prompts: bool = False,
    head_chunk: int | None = None, head_keep_bytes: int = 0,
):
    """One forward. Returns ``(logp [B, T], entropy [B, T] | None)``."""
    if response_attn_BT is None:
        response_attn_BT = response_mask_BT
    B, T = response_ids_BT.shape
    out_dtype = torch.float32
    if T == 0:
        z = torch.zeros(B, 0, dtype=out_dtype, device=response_ids_BT.device)
        return z, (z.clone() if return_entropy else None)
    T_full = T
    # Trim: drop prompt columns that are padding in every row (left) and response columns masked
    # in every row (right), e.g. in a micro-batch of short responses. Positions come from the
    # mask cumsum, so they are unchanged; masked keys contribute nothing, so neither are values.
    any_p = prompt_mask_BP.bool().any(dim=0)
    first = int(any_p.long().argmax()) if bool(any_p.any()) else prompt_mask_BP.shape[1] - 1
    if first > 0:
        prompt_ids_BP, prompt_mask_BP = prompt_ids_BP[:, first:], prompt_mask_BP[:, first:]
    any_r = response_mask_BT.bool().any(dim=0)
    T = int(any_r.nonzero().max()) + 1 if bool(any_r.any()) else 1
    if T < T_full:
        response_ids_BT, response_mask_BT = response_ids_BT[:, :T], response_mask_BT[:, :T]
        response_attn_BT = response_attn_BT[:, :T]
    P = prompt_ids_BP.shape[1]
    maskf = response_mask_BT.to(out_dtype)
    if head_chunk:
        hidden = None
        if share_prompts:
            hidden = prefix_forward(model, sig, prompt_ids_BP, prompt_mask_BP, response_ids_BT, response_attn_BT,
                                    hidden=True)
        if hidden is None:
            hidden = joint_hidden(model, sig, prompt_ids_BP, prompt_mask_BP, response_ids_BT, response_attn_BT)
        if hidden is not None:
            valid = maskf > 0
            h_NH = hidden[valid]  # only the scored positions go through the head
            lp_N, ent_N = chunked_head_logprobs(h_NH, _head_weight(model), response_ids_BT[valid],
                                                temperature=temperature, chunk=head_chunk,
                                                return_entropy=return_entropy, keep_bytes=head_keep_bytes)
            dt = lp_N.dtype
            logp_BT = torch.zeros(B, T, dtype=dt, device=lp_N.device).masked_scatter(valid, lp_N)
            ent_BT = None
            if return_entropy:
                ent_BT = torch.zeros(B, T, dtype=dt, device=lp_N.device).masked_scatter(valid, ent_N)
            if T < T_full:
                pad = (0, T_full - T)
                logp_BT = torch.nn.functional.pad(logp_BT, pad)
                ent_BT = torch.nn.functional.pad(ent_BT, pad) if ent_BT is not None else None
            return logp_BT, ent_BT
    logits_BTV = None
    if share_prompts:
        logits_BTV = prefix_forward(model, sig, prompt_ids_BP, prompt_mask_BP, response_ids_BT, response_attn_BT)
    if logits_BTV is None:
        kwargs = {"logits_to_keep": T + 1} if sig.logits_to_keep else {}
        out = joint_forward(model, prompt_ids_BP, prompt_mask_BP, response_ids_BT, response_attn_BT, **kwargs)
        logits = out.logits
        # logits[:, p] predicts token p + 1: keep positions P - 1 .. P + T - 2
        logits_BTV = logits[:, -(T + 1) : -1] if sig.logits_to_keep else logits[:, P - 1 : P + T - 1]
    if logits_BTV.dtype != torch.float64:  # half precision is scored in float32; float64 stays float64
        logits_BTV = logits_BTV.float()
    if temperature != 1.0:
        logits_BTV = logits_BTV / temperature
    lse_BT = torch.logsumexp(logits_BTV, dim=-1)
    tok_logit_BT = logits_BTV.gather(-1, response_ids_BT.unsqueeze(-1)).squeeze(-1)
    # torch.where (not multiply) so that garbage at masked positions cannot leak as NaN
    logp_BT = torch.where(maskf > 0, tok_logit_BT - lse_BT, torch.zeros_like(lse_BT))
    ent_BT = None
    if return_entropy:
        probs = torch.softmax(logits_BTV, dim=-1)
        ent_BT = lse_BT - (probs * logits_BTV).sum(-1)
        ent_BT = torch.where(maskf > 0, ent_BT, torch.zeros_like(ent_BT))
    if T < T_full:
        pad = (0, T_full - T)
        logp_BT = torch.nn.functional.pad(logp_BT, pad)
        ent_BT = torch.nn.functional.pad(ent_BT, pad) if ent_BT is not None else None
    return logp_BT, ent_BT


def distinct_prompts(prompt_ids_BP: torch.Tensor, prompt_mask_BP: torch.Tensor):
    """The distinct prompts of a batch: ``(first_N, inverse_B)``.

    ``first_N`` (``LongTensor [N]``) is the first row holding each distinct prompt, ``inverse_B``
    (``LongTensor [B]``) the index into ``first_N`` of every row's prompt. Two rows share a prompt
    when their tokens and mask agree at every position; token ids under padding are ignored.
    """
    key_BP = prompt_ids_BP.masked_fill(prompt_mask_BP == 0, -1)
    _, inverse_B = torch.unique(key_BP, dim=0, return_inverse=True)
    N = int(inverse_B.max()) + 1 if inverse_B.numel() else 0
    rows_B = torch.arange(inverse_B.shape[0], device=inverse_B.device)
    first_N = torch.full((N,), inverse_B.shape[0], dtype=torch.long, device=inverse_B.device)
    first_N = first_N.scatter_reduce(0, inverse_B, rows_B, reduce="amin")
    return first_N, inverse_B


def shared_prompt_fallback(model, sig: ForwardSignature, prompt_mask_NP: torch.Tensor, n_rows: int | None) -> str | None:
    """``None`` if :func:`prefix_forward` applies to these ``[N, P]`` distinct prompts of ``n_rows``
    response rows, else why the joint forward is used (``n_rows`` None: the caller chose the
    prompts to share, so whether any repeats is not asked)."""
    if n_rows is not None and prompt_mask_NP.shape[0] >= n_rows:
        return "no prompt repeats"
    if prompt_mask_NP.shape[1] == 0 or not bool(prompt_mask_NP.bool().any(dim=1).all()):
        return "a prompt row is empty"
    if _activation_checkpointing(model) and model.training:
        return "gradient checkpointing is on (the model drops its KV cache)"
    if DynamicLayer is None:
        return "transformers has no layered cache API"
    return None


def _activation_checkpointing(model) -> bool:
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # newer name first
        if hasattr(type(model), name) or hasattr(model, name):
            return bool(getattr(model, name))
    return False


def prefix_forward(model, sig: ForwardSignature, prompt_ids, prompt_mask, response_ids_BT, response_attn_BT, *,
                   prompt_of_row: torch.Tensor | None = None, hidden: bool = False, forward_last: bool = False):
    """The prefix forward: each prompt once into a KV cache, the responses on top.

    The update (:func:`response_logprobs` with ``share_prompts``) and the teacher
    (:func:`grpolab.rollout.teacher.teacher_logprobs` with ``prompt_index``) both score through it.

    Args:
        prompt_ids, prompt_mask: ``[B, P]`` left-padded, one prompt per response row, whose
            distinct prompts (:func:`distinct_prompts`) are forwarded once; or, with
            ``prompt_of_row``, ``[N, P]`` prompts each forwarded once.
        response_ids_BT, response_attn_BT: ``[B, T]`` right-padded responses and the mask of the
            response tokens to attend to.
        prompt_of_row: ``[B]`` long, the prompt row of each response row (the caller chose the
            prompts to share), or None.
        hidden: return the final hidden states ``[B, T, H]`` (scored through the LM head by the
            caller) instead of the logits ``[B, T, V]``.
        forward_last: also forward the last response token (its output is dropped: it is only a
            target). The teacher does, the update does not: attention's float rounding at a
            position depends on how many queries run together, so each keeps the query length it
            has always had and its numbers bit for bit; the values agree to float rounding
            (``tests/rollout/test_prefix_forward.py``).

    Row ``b``, position ``t`` of the result predicts ``response_ids[b, t]`` (the joint forward's
    positions ``P - 1 .. P + T - 2``, with the same attention mask and positions). Returns None
    when the joint forward must be used instead: :func:`shared_prompt_fallback`'s reasons, a
    cache the model filled with other layer kinds, or (``hidden``) a head that does not reproduce
    the model's logits (:func:`_head_reproduces`).
    """
    if prompt_of_row is None:
        first_N, inverse_B = distinct_prompts(prompt_ids, prompt_mask)
        ids_NP, mask_NP = prompt_ids[first_N], prompt_mask[first_N].long()
    else:
        inverse_B, ids_NP, mask_NP = prompt_of_row, prompt_ids, prompt_mask.long()
    n_rows = None if prompt_of_row is not None else prompt_ids.shape[0]
    if shared_prompt_fallback(model, sig, mask_NP, n_rows) is not None or (hidden and _head_weight(model) is None):
        return None
    cache = new_cache(model)
    extra = {"logits_to_keep": 1} if sig.logits_to_keep else {}
    if hidden:
        extra["output_hidden_states"] = True
    pos_NP = (mask_NP.cumsum(-1) - 1).clamp_(min=0)
    out = model(input_ids=ids_NP, attention_mask=mask_NP, position_ids=pos_NP, use_cache=True,
                **{sig.cache_kw: cache}, **extra)
    layers = getattr(cache, "layers", None)  # the model filled the cache in place
    if not isinstance(layers, list) or not layers or any(
            type(layer) is not DynamicLayer or layer.keys is None or layer.keys.shape[0] != ids_NP.shape[0]
            for layer in layers):
        return None
    if hidden:
        states = getattr(out, "hidden_states", None)
        if not states or not _head_reproduces(model, states[-1][:, -1], out.logits[:, -1]):
            return None
    first_B = (states[-1] if hidden else out.logits)[:, -1][inverse_B]  # the last prompt position predicts token 0
    if response_ids_BT.shape[1] == 1:
        return first_B[:, None]
    T = response_ids_BT.shape[1]
    L = T if forward_last else T - 1                   # the last token is only ever a target
    out = _response_forward(model, sig, layers, inverse_B, mask_NP[inverse_B], response_ids_BT[:, :L],
                            response_attn_BT[:, :L], **(extra if hidden else {}))
    rest = (out.hidden_states[-1] if hidden else out.logits)[:, : T - 1]
    return torch.cat([first_B[:, None], rest], dim=1)


# ------------------------------------------------------------------------------------------------
# The chunked LM head: log-probs from the final hidden states, never a [B, T, V] tensor


def _head_weight(model) -> torch.Tensor | None:
    """The LM head's weight ``[V, H]`` if the head is a plain bias-free ``nn.Linear``, else None."""
    get = getattr(model, "get_output_embeddings", None)
    head = get() if get is not None else None
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return None
    return head.weight


def _head_reproduces(model, hidden_NH: torch.Tensor, logits_NV: torch.Tensor) -> bool:
    """Whether ``head(hidden)`` equals the model's own logits at a few positions (some models
    scale or soft-cap after the head, or return pre-norm hidden states: those keep their logits)."""
    w = _head_weight(model)
    if w is None:
        return False
    with torch.no_grad():
        probe = torch.nn.functional.linear(hidden_NH, w).float()
        ref = logits_NV.float()
        return probe.shape == ref.shape and torch.allclose(probe, ref, atol=1e-4, rtol=1e-4)


def joint_hidden(model, sig: ForwardSignature, prompt_ids_BP, prompt_mask_BP, response_ids_BT, response_attn_BT):
    """The joint forward's final hidden states ``[B, T, H]`` at the positions that predict the
    response tokens (``P - 1 .. P + T - 2``), or None when the head cannot score them (the
    model's logits are then needed: :func:`_head_reproduces`)."""
    if _head_weight(model) is None:
        return None
    P, T = prompt_ids_BP.shape[1], response_ids_BT.shape[1]
    kwargs = {"logits_to_keep": 1} if sig.logits_to_keep else {}
    out = joint_forward(model, prompt_ids_BP, prompt_mask_BP, response_ids_BT, response_attn_BT,
                        output_hidden_states=True, **kwargs)
    hidden = getattr(out, "hidden_states", None)
    if not hidden:
        return None
    h = hidden[-1]
    if not _head_reproduces(model, h[:, -1], out.logits[:, -1]):
        return None
    return h[:, P - 1 : P + T - 1]


class _ChunkedHeadLogp(torch.autograd.Function):
    """``logp[n] = z[n, tok[n]] - logsumexp(z[n])`` with ``z = (h W^T) / temperature``, over chunks
    of rows; the entropy ``H[n] = -sum_v p log p`` alongside. Saves ``h``, ``W`` and the per-row
    ``logsumexp`` and ``H``, and either nothing more (the backward recomputes each chunk's logits:
    one more head matmul) or, with ``keep``, the ``[N, V]`` log-softmax ``z - logsumexp`` (the
    backward then skips the recompute: the same numbers, bit for bit). The backward uses
    ``d logp / dz = onehot(tok) - p`` and ``d H / dz = -p (log p + H)``, both divided by the
    temperature on the way back to ``h W^T``."""

    @staticmethod
    def forward(ctx, h_NH, w_VH, tok_N, temperature, chunk, want_entropy, keep):
        N = h_NH.shape[0]
        acc = torch.float64 if w_VH.dtype == torch.float64 else torch.float32
        logp = torch.empty(N, dtype=acc, device=h_NH.device)
        lse = torch.empty(N, dtype=acc, device=h_NH.device)
        ent = torch.empty(N, dtype=acc, device=h_NH.device)
        kept = torch.empty(N, w_VH.shape[0], dtype=acc, device=h_NH.device) if keep else None
        for s in range(0, N, chunk):
            z = torch.nn.functional.linear(h_NH[s : s + chunk], w_VH).to(acc)
            if temperature != 1.0:
                z = z / temperature
            l_n = torch.logsumexp(z, dim=-1)
            lse[s : s + chunk] = l_n
            logp[s : s + chunk] = z.gather(-1, tok_N[s : s + chunk, None]).squeeze(-1) - l_n
            if want_entropy:
                ent[s : s + chunk] = l_n - (torch.softmax(z, dim=-1) * z).sum(-1)
            if keep:
                torch.sub(z, l_n[:, None], out=kept[s : s + chunk])
        ctx.save_for_backward(h_NH, w_VH, tok_N, lse, ent, kept)
        ctx.temperature, ctx.chunk, ctx.want_entropy = temperature, chunk, want_entropy
        ctx.set_materialize_grads(False)  # an unused output (the logged entropy) costs nothing
        if not want_entropy:
            ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, g_ent):
        h_NH, w_VH, tok_N, lse, ent, kept = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        use_ent = ctx.want_entropy and g_ent is not None
        if g_logp is None:
            g_logp = torch.zeros_like(lse)
        gh = torch.empty_like(h_NH) if need_h else None
        gw = torch.zeros_like(w_VH) if need_w else None
        T, chunk = ctx.temperature, ctx.chunk
        for s in range(0, h_NH.shape[0], chunk):
            h = h_NH[s : s + chunk]
            if kept is not None:
                logp_z = kept[s : s + chunk]
            else:  # recompute this chunk's logits (bit for bit the forward's)
                z = torch.nn.functional.linear(h, w_VH).to(lse.dtype)
                if T != 1.0:
                    z = z / T
                logp_z = z - lse[s : s + chunk, None]
                del z
            p = logp_z.exp()
            g = g_logp[s : s + chunk]
            if use_ent:  # dz = -p * (g + (log p + H) g_H), in place on a fresh buffer
                dz = logp_z + ent[s : s + chunk, None] if kept is not None else logp_z.add_(ent[s : s + chunk, None])
                del logp_z
                dz.mul_(g_ent[s : s + chunk, None]).add_(g[:, None]).mul_(p).neg_()
                del p
            else:
                del logp_z
                dz = p.mul_((-g)[:, None])
            dz.scatter_add_(1, tok_N[s : s + chunk, None], g[:, None])
            if T != 1.0:
                dz.div_(T)
            dz = dz.to(h_NH.dtype)
            if need_h:
                torch.mm(dz, w_VH, out=gh[s : s + chunk])
            if need_w:
                gw.addmm_(dz.t(), h)
            del dz
        return gh, gw, None, None, None, None, None


def chunked_head_logprobs(h_NH: torch.Tensor, w_VH: torch.Tensor, tok_N: torch.Tensor, *, temperature: float = 1.0,
                          chunk: int = HEAD_CHUNK, return_entropy: bool = False, keep_bytes: int = 0):
    """Log-probs (and entropies) of ``tok_N`` under ``softmax(h W^T / temperature)``, chunked.

    Args:
        h_NH: final hidden states ``[N, H]`` (one per scored position).
        w_VH: the LM head's weight ``[V, H]``.
        tok_N: ``[N]`` long, the scored tokens.
        keep_bytes: when the ``[N, V]`` log-softmax fits in this many bytes it is kept from the
            forward for the backward, which then skips recomputing the logits (faster by one head
            matmul per position, bit for bit the same gradients); 0: always recompute.

    Returns:
        ``(logp [N], entropy [N] | None)``, float32 (float64 for a float64 head). Differentiable in
        ``h`` and ``W``; at most ``chunk`` rows of logits exist at a time, in the forward and in
        the backward (which recomputes them: one more head matmul per token), plus the kept
        ``[N, V]`` log-softmax when it fits ``keep_bytes``.
    """
    if chunk < 1:
        raise ValueError(f"head_chunk must be >= 1, got {chunk}")
    acc = 8 if w_VH.dtype == torch.float64 else 4
    keep = torch.is_grad_enabled() and (h_NH.requires_grad or w_VH.requires_grad) and \
        h_NH.shape[0] * w_VH.shape[0] * acc <= keep_bytes
    logp, ent = _ChunkedHeadLogp.apply(h_NH.contiguous(), w_VH, tok_N, float(temperature), int(chunk),
                                       bool(return_entropy), bool(keep))
    return logp, (ent if return_entropy else None)


def _response_forward(model, sig, layers, inverse_B, prompt_mask_BP, response_ids_BL, response_attn_BL, **kw):
    """Forward ``[B, L]`` response tokens over each row's copy of its prompt's cache.

    Every row gets its prompt's keys/values (index_select: the backward sums the rows' gradients);
    the tokens run at the joint forward's positions, with its attention mask.
    """
    rows = new_cache(model)
    for i, layer in enumerate(layers):
        rows.update(layer.keys.index_select(0, inverse_B), layer.values.index_select(0, inverse_B), i)
    attn_BL = response_attn_BL.long()
    attn_BPL = torch.cat([prompt_mask_BP.long(), attn_BL], dim=1)
    pos_BL = (prompt_mask_BP.long().sum(-1, keepdim=True) + attn_BL.cumsum(-1) - 1).clamp_(min=0)
    return model(input_ids=response_ids_BL, attention_mask=attn_BPL, position_ids=pos_BL, use_cache=True,
                 **kw, **{sig.cache_kw: rows})
