"""Batched autoregressive sampling with a KV cache: prompts -> :class:`Rollout`.

What :func:`sample` does, per call:

1. Left-pad the ``N`` prompts to ``[N, P]``; ``position_ids = cumsum(mask) - 1`` so every row's
   first real token sits at position 0 whatever its padding (RoPE models then give the same
   numbers as the row decoded alone).
2. One prefill forward over the ``N`` *distinct* prompts (not ``N * G`` copies: the ``G`` samples
   of a group share their prompt, so their prompt keys/values are computed once and copied into
   each group member's cache slot), logits only for the last position.
3. One forward per new token over the last token only, with the cache (:mod:`.cache`: a
   pre-allocated slab instead of ``torch.cat`` growth) and the 2-D attention mask extended by one
   column per step. For plain Llama models the step is :class:`~.decode_step.FusedLlamaDecoder`
   (the same function in fewer ops: fused projections, one RoPE op, two-matmul attention on the
   slabs); any other model goes through its own ``forward``.
4. Next token: ``argmax`` (greedy) or a draw from ``softmax(logits / temperature)`` after optional
   top-p (nucleus) truncation (Holtzman et al. 2020, "The Curious Case of Neural Text
   Degeneration", sec. 3.1). ``sample_logp`` is the log-probability under the *untruncated*
   tempered distribution, which is what the importance ratios of PPO/GRPO divide by
   (deviation: for top_p < 1 this is not the exact behaviour policy; it is the convention of TRL,
   verl and OpenRLHF).
5. Rows that emitted EOS emit pad (mask 0) afterwards; decoding stops once every row is finished.
   Finished rows are dropped from the decode batch once they make up a quarter of it
   ("compaction"), so a batch with a long tail of long responses does not pay for the short ones.

Randomness. All uniforms are drawn up front, one per (step, row): ``u[T_max, B]`` from
``generator``. A row's draw at step ``t`` is ``inverse-CDF(u[t, row])``, so its tokens depend only on
its own logits and its own uniforms, never on which other rows are still in the batch. Compaction
therefore changes nothing, and the same ``generator`` state reproduces the same rollout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F

from .batch import Rollout
from .cache import ForwardSignature, expand_to_slabs, new_cache, select_rows, supports_slabs
from .decode_step import fused_decoder

#: drop finished rows from the decode batch once they are at least this fraction of it
COMPACT_FRACTION = 0.25


@dataclass(frozen=True)
class SamplingSpec:
    """How the next token is picked: the sampling settings :func:`sample` and its decode loop take
    as one value (``rollout.temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``
    of the run config; ``greedy`` for evaluation).

    Attributes:
        temperature: logits are divided by it before softmax (> 0; with ``greedy`` it only scales
            ``sample_logp``).
        top_p: nucleus mass in (0, 1]; 1 disables truncation.
        top_k, min_p: truncation before ``top_p`` (0 = off; see :func:`_next_tokens`).
        repetition_penalty: > 1 discourages every token already in the row's prompt or response
            (CTRL, Keskar et al. 2019, as in transformers: a seen token's logit is divided by it
            when positive, multiplied when negative) when drawing; 1 = off. ``sample_logp`` stays
            the unpenalised tempered log-probability (the policy's, which the ratio needs).
        greedy: argmax decoding.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    greedy: bool = False

    def validate(self) -> "SamplingSpec":
        """Raise ``ValueError`` naming the setting out of range; return ``self``."""
        if not self.greedy and not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 for sampling, got {self.temperature} "
                             "(use greedy=True for argmax)")
        if self.greedy and not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 (it scales sample_logp), got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0 or not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"top_k must be >= 0 and min_p in [0, 1); got {self.top_k}, {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0 (1 = off), got {self.repetition_penalty}")
        return self


SAMPLING_KEYS = tuple(f.name for f in fields(SamplingSpec))


def _model_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")  # pragma: no cover


def _as_id_tensor(ids: int | Sequence[int] | torch.Tensor | None, device: torch.device) -> torch.Tensor:
    if ids is None:
        return torch.empty(0, dtype=torch.long, device=device)
    if isinstance(ids, int):
        ids = [ids]
    return torch.as_tensor(ids, dtype=torch.long, device=device).reshape(-1)


def left_pad(prompts: Sequence[Sequence[int]], pad_token_id: int, device: torch.device | str = "cpu"):
    """Left-pad token-id lists.

    Returns:
        ``(ids [N, P] long, mask [N, P] long)`` with ``P`` the longest prompt.
    """
    if len(prompts) == 0:
        raise ValueError("need at least one prompt")
    seqs = [torch.as_tensor(p if isinstance(p, torch.Tensor) else list(p), dtype=torch.long).reshape(-1) for p in prompts]
    lengths = torch.tensor([s.numel() for s in seqs], dtype=torch.long)
    if int(lengths.min()) == 0:
        raise ValueError("every prompt needs at least one token (add a BOS token to empty prompts)")
    P = int(lengths.max())
    flat = torch.cat(seqs)
    # scatter the concatenated tokens into their left-padded slots (no per-row Python copies)
    row = torch.repeat_interleave(torch.arange(len(seqs)), lengths)
    start = P - lengths
    col = torch.arange(flat.numel()) - torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    col = col + start[row]
    ids = torch.full((len(seqs), P), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), P), dtype=torch.long)
    ids[row, col] = flat
    mask[row, col] = 1
    return ids.to(device), mask.to(device)


def _next_tokens(
    logits_BV: torch.Tensor,
    u_B: torch.Tensor,
    *,
    temperature: float,
    top_p: float,
    greedy: bool,
    top_k: int = 0,
    min_p: float = 0.0,
    draw_logits_BV: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row and its log-prob under softmax(logits / temperature).

    Args:
        logits_BV: next-token logits ``[B, V]``.
        u_B: uniforms in [0, 1) ``[B]``, one per row (ignored when greedy).
        top_k: keep only the ``top_k`` most likely tokens (0 = all; ties at the k-th probability
            are kept).
        min_p: keep only tokens with probability >= ``min_p`` x the most likely one's (0 = all).
            Both truncate (and renormalise) before ``top_p``; like ``top_p`` they change what is
            drawn, not ``sample_logp``.
        draw_logits_BV: logits to draw (or take the argmax) from instead of ``logits_BV`` (the
            repetition penalty's); the returned log-prob is still ``logits_BV``'s.

    Returns:
        ``(tok [B] long, logp [B] float32)``.
    """
    scaled_BV = logits_BV.float()
    if temperature != 1.0:
        scaled_BV = scaled_BV / temperature
    logp_BV = F.log_softmax(scaled_BV, dim=-1)
    draw_logp_BV = logp_BV
    if draw_logits_BV is not None:
        draw_BV = draw_logits_BV.float()
        scaled_BV = draw_BV / temperature if temperature != 1.0 else draw_BV
        draw_logp_BV = F.log_softmax(scaled_BV, dim=-1)
    if greedy:
        tok_B = scaled_BV.argmax(dim=-1)
    else:
        probs_BV = draw_logp_BV.exp()
        if top_k > 0 or min_p > 0.0:
            keep_BV = torch.ones_like(probs_BV, dtype=torch.bool)
            if 0 < top_k < probs_BV.shape[-1]:
                kth_B1 = probs_BV.topk(top_k, dim=-1).values[:, -1:]
                keep_BV &= probs_BV >= kth_B1
            if min_p > 0.0:
                keep_BV &= probs_BV >= min_p * probs_BV.amax(dim=-1, keepdim=True)
            probs_BV = probs_BV * keep_BV
            probs_BV = probs_BV / probs_BV.sum(dim=-1, keepdim=True)
        if top_p < 1.0:
            # nucleus: keep the smallest prefix (by descending prob) whose mass reaches top_p;
            # sample in sorted order, then map back to vocabulary ids
            sorted_BV, order_BV = probs_BV.sort(dim=-1, descending=True)
            cum_BV = sorted_BV.cumsum(dim=-1)
            sorted_BV = sorted_BV.masked_fill((cum_BV - sorted_BV) >= top_p, 0.0)
            cdf_BV = sorted_BV.cumsum(dim=-1)
            pick_B = torch.searchsorted(cdf_BV, (u_B * cdf_BV[:, -1]).unsqueeze(1), right=True)
            pick_B = pick_B.clamp_(max=cdf_BV.shape[1] - 1)
            tok_B = order_BV.gather(1, pick_B).squeeze(1)
        else:
            cdf_BV = probs_BV.cumsum(dim=-1)
            pick_B = torch.searchsorted(cdf_BV, (u_B * cdf_BV[:, -1]).unsqueeze(1), right=True)
            tok_B = pick_B.clamp_(max=cdf_BV.shape[1] - 1).squeeze(1)
    logp_B = logp_BV.gather(1, tok_B.unsqueeze(1)).squeeze(1)
    return tok_B, logp_B


def sample(
    model: torch.nn.Module,
    prompts: Sequence[Sequence[int]],
    *,
    group_size: int = 1,
    max_new_tokens: int = 64,
    eos_token_id: int | Sequence[int] | None,
    pad_token_id: int,
    sampling: SamplingSpec | None = None,
    generator: torch.Generator | None = None,
    compact: bool = True,
    fused: bool = True,
    **sampling_kw,
) -> Rollout:
    """Sample ``group_size`` responses per prompt with a KV cache.

    Args:
        model: a Hugging Face causal LM (``model(input_ids, attention_mask, position_ids, cache,
            use_cache) -> .logits``). Put in eval mode for the call and restored afterwards.
        prompts: ``N`` token-id lists (or 1-D tensors), each non-empty.
        group_size: ``G`` samples per prompt; output rows ``n*G .. n*G+G-1`` belong to prompt ``n``.
        max_new_tokens: cap on generated tokens per row (EOS included).
        eos_token_id: id or ids that end a response (``None``: always run ``max_new_tokens``).
        pad_token_id: id used for prompt left-padding and response right-padding.
        sampling: how tokens are picked (:class:`SamplingSpec`; default: plain sampling at
            temperature 1).
        sampling_kw: the :class:`SamplingSpec` fields as loose keywords (``temperature=0.7,
            top_p=0.9``, ``greedy=True``), the earlier spelling, still read; not together with
            ``sampling``.
        generator: source of randomness; the same generator state gives the same rollout.
        compact: drop finished rows from the decode batch (faster; the result is unchanged).
        fused: decode with :class:`~grpolab.rollout.decode_step.FusedLlamaDecoder` when the model
            is a plain Llama it reproduces (same function, fewer ops: see
            :mod:`grpolab.rollout.decode_step`); ``False`` always calls the model's ``forward``.

    Returns:
        :class:`Rollout` with ``B = N * G`` rows and ``T`` = longest response generated.
    """
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    spec = _sampling_spec(sampling, sampling_kw).validate()

    device = _model_device(model)
    G = group_size
    prompt_ids_NP, prompt_mask_NP = left_pad(prompts, pad_token_id, device)
    N, P = prompt_ids_NP.shape
    B = N * G
    group_ids_B = torch.arange(N, device=device).repeat_interleave(G)
    prompt_ids_BP = prompt_ids_NP.repeat_interleave(G, dim=0)
    prompt_mask_BP = prompt_mask_NP.repeat_interleave(G, dim=0)

    if max_new_tokens == 0:
        return _empty_rollout(prompt_ids_BP, prompt_mask_BP, group_ids_B)

    eos_E = _as_id_tensor(eos_token_id, device)
    sig = ForwardSignature.of(model)
    # one uniform per (step, row), drawn up front: see the module docstring
    gen_device = generator.device if generator is not None else device
    u_TB = torch.rand(max_new_tokens, B, generator=generator, device=gen_device).to(device)

    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            out = _decode(model, sig, prompt_ids_NP, prompt_mask_NP, G, max_new_tokens, u_TB, eos_E, spec,
                          pad_token_id=pad_token_id, compact=compact, fused=fused)
    finally:
        model.train(was_training)

    return _as_rollout(prompt_ids_BP, prompt_mask_BP, group_ids_B, *out, eos_E)


def _empty_rollout(prompt_ids_BP, prompt_mask_BP, group_ids_B) -> Rollout:
    """The :class:`Rollout` of ``max_new_tokens=0``: ``B`` rows of ``T = 0`` response tokens."""
    B, device = prompt_ids_BP.shape[0], prompt_ids_BP.device
    empty_f = torch.zeros(B, 0, device=device)
    return Rollout(
        prompt_ids=prompt_ids_BP,
        prompt_mask=prompt_mask_BP,
        response_ids=torch.zeros(B, 0, dtype=torch.long, device=device),
        response_mask=empty_f,
        sample_logp=empty_f.clone(),
        group_ids=group_ids_B,
        finished=torch.zeros(B, dtype=torch.bool, device=device),
    )


def _as_rollout(prompt_ids_BP, prompt_mask_BP, group_ids_B, tokens_BT, live_BT, logp_BT, eos_E) -> Rollout:
    """The decode's ``[B, max_new_tokens]`` tokens, live mask and log-probs as a :class:`Rollout`,
    trimmed to the longest response; a row is finished when a live token is an end id."""
    lengths_B = live_BT.sum(dim=1)
    T = int(lengths_B.max())
    tokens_BT, live_BT, logp_BT = tokens_BT[:, :T], live_BT[:, :T], logp_BT[:, :T]
    finished_B = (torch.isin(tokens_BT, eos_E) & live_BT).any(dim=1)
    # clone out of inference mode: inference tensors cannot be saved for backward later
    return Rollout(
        prompt_ids=prompt_ids_BP.clone(),
        prompt_mask=prompt_mask_BP.clone(),
        response_ids=tokens_BT.clone(),
        response_mask=live_BT.float(),
        sample_logp=logp_BT.clone(),
        group_ids=group_ids_B.clone(),
        finished=finished_B.clone(),
    )


def _sampling_spec(sampling: SamplingSpec | None, loose: dict) -> SamplingSpec:
    """``sampling``, or the :class:`SamplingSpec` of the loose keywords (unknown ones are a TypeError)."""
    unknown = sorted(set(loose) - set(SAMPLING_KEYS))
    if unknown:
        raise TypeError(f"sample() got unexpected keyword arguments {unknown}; sampling settings are "
                        f"{', '.join(SAMPLING_KEYS)}")
    if sampling is not None and loose:
        raise TypeError(f"pass the sampling settings either as sampling=SamplingSpec(...) or as keywords, not both "
                        f"(got sampling and {sorted(loose)})")
    return sampling if sampling is not None else SamplingSpec(**loose)


def _prefill(model, sig: ForwardSignature, prompt_ids_NP, prompt_mask_NP, G: int, capacity: int):
    """The prompts' forward into a new cache: once per distinct prompt when the cache takes slabs
    (then copied ``G`` times), else once per row. Returns ``(cache, slabs, logits [N*G, V])`` with
    the logits of each row's last prompt position."""
    cache = new_cache(model)
    slabs = supports_slabs(cache)
    share_prefill = slabs and G > 1
    if share_prefill:
        pre_ids, pre_mask = prompt_ids_NP, prompt_mask_NP
    else:
        pre_ids = prompt_ids_NP.repeat_interleave(G, dim=0)
        pre_mask = prompt_mask_NP.repeat_interleave(G, dim=0)
    pre_pos = (pre_mask.cumsum(-1) - 1).clamp_(min=0)
    extra = {"logits_to_keep": 1} if sig.logits_to_keep else {}
    out = model(
        input_ids=pre_ids, attention_mask=pre_mask, position_ids=pre_pos, use_cache=True,
        **{sig.cache_kw: cache}, **extra,
    )
    logits_BV = out.logits[:, -1]
    if share_prefill:
        logits_BV = logits_BV.repeat_interleave(G, dim=0)
    if slabs:  # (otherwise -- old transformers -- the DynamicCache object was updated in place)
        expand_to_slabs(cache, capacity=capacity, repeats=G if share_prefill else 1)
    del out
    return cache, slabs, logits_BV


def _prompt_tokens_seen(prompt_ids_NP, prompt_mask_NP, G: int, V: int) -> torch.Tensor:
    """``[N*G, V]`` bool: the tokens each row's prompt holds (the repetition penalty's start)."""
    real = prompt_mask_NP.repeat_interleave(G, dim=0).bool()
    ids = torch.where(real, prompt_ids_NP.repeat_interleave(G, dim=0), V)  # padding -> a spare column
    return torch.zeros(real.shape[0], V + 1, dtype=torch.bool, device=real.device).scatter_(1, ids, True)[:, :V]


def _decode(model, sig: ForwardSignature, prompt_ids_NP, prompt_mask_NP, G: int, max_new_tokens: int, u_TB, eos_E,
            spec: SamplingSpec, *, pad_token_id: int, compact: bool, fused: bool):
    """The decode loop (under inference mode). Returns ``(tokens [B, T], live [B, T] bool, logp [B, T])``."""
    temperature, top_p, greedy, top_k, min_p = spec.temperature, spec.top_p, spec.greedy, spec.top_k, spec.min_p
    repetition_penalty = spec.repetition_penalty
    device = prompt_ids_NP.device
    N, P = prompt_ids_NP.shape
    B = N * G
    cache, slabs, logits_BV = _prefill(model, sig, prompt_ids_NP, prompt_mask_NP, G, P + max_new_tokens)

    # attention mask for the whole generation, sliced per step: prompt mask then ones
    attn_BL = torch.cat(
        [prompt_mask_NP.repeat_interleave(G, dim=0), torch.ones(B, max_new_tokens, dtype=torch.long, device=device)],
        dim=1,
    )
    pos0_B = prompt_mask_NP.sum(dim=1).repeat_interleave(G)  # position of the first generated token
    step = fused_decoder(model, cache, attn_BL, max_position=P + max_new_tokens) if fused and slabs else None
    tokens_BT = torch.full((B, max_new_tokens), pad_token_id, dtype=torch.long, device=device)
    live_BT = torch.zeros(B, max_new_tokens, dtype=torch.bool, device=device)
    logp_BT = torch.zeros(B, max_new_tokens, dtype=torch.float32, device=device)

    rows_b = torch.arange(B, device=device)  # original row of each row still in the decode batch
    done_b = torch.zeros(B, dtype=torch.bool, device=device)
    check_eos = eos_E.numel() > 0
    # repetition penalty: which tokens each row's prompt and response hold so far
    seen_bV = _prompt_tokens_seen(prompt_ids_NP, prompt_mask_NP, G, logits_BV.shape[-1]) \
        if repetition_penalty != 1.0 else None
    for t in range(max_new_tokens):
        draw = None
        if seen_bV is not None:
            lg = logits_BV.float()
            draw = torch.where(seen_bV, torch.where(lg > 0, lg / repetition_penalty, lg * repetition_penalty), lg)
        tok_b, logp_b = _next_tokens(logits_BV, u_TB[t, rows_b], temperature=temperature, top_p=top_p, greedy=greedy,
                                     top_k=top_k, min_p=min_p, draw_logits_BV=draw)
        if seen_bV is not None:
            seen_bV[torch.arange(tok_b.shape[0], device=device), tok_b] = True
        if t > 0:  # rows finished at an earlier step emit pad, masked out
            tok_b = tok_b.masked_fill(done_b, pad_token_id)
            logp_b = logp_b.masked_fill(done_b, 0.0)
        tokens_BT[rows_b, t] = tok_b
        logp_BT[rows_b, t] = logp_b
        live_BT[rows_b, t] = ~done_b
        if t == max_new_tokens - 1:
            break
        if check_eos:
            done_b = done_b | torch.isin(tok_b, eos_E)
            n_live = int((~done_b).sum())  # host sync, once per step
            if n_live == 0:
                break
            b = done_b.shape[0]
            if compact and slabs and (b - n_live) >= max(1, int(COMPACT_FRACTION * b)):
                keep = (~done_b).nonzero().squeeze(1)
                select_rows(cache, keep)
                if step is not None:
                    step.select_rows(keep)
                rows_b, done_b, tok_b = rows_b[keep], done_b[keep], tok_b[keep]
                if seen_bV is not None:
                    seen_bV = seen_bV[keep]
                attn_BL, pos0_B = attn_BL[keep], pos0_B[keep]
        if step is not None:
            logits_BV = step(tok_b, pos0_B + t)
            continue
        out = model(
            input_ids=tok_b.unsqueeze(1),
            attention_mask=attn_BL[:, : P + t + 1],
            position_ids=(pos0_B + t).unsqueeze(1),
            use_cache=True,
            **{sig.cache_kw: cache},
        )
        logits_BV = out.logits[:, -1]
        del out
    return tokens_BT, live_BT, logp_BT
