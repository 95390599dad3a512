"""The one composition function: clipped policy-gradient loss (docs/methods.md: advantages, ratios, aggregation).

Per token, with ``r = exp(log_ratio)`` at the chosen ratio level and ``A`` the (possibly per-token)
advantage, the loss to minimise is

- ``token | sequence | gspo``: ``l = max(-A r, -A clip(r, 1 - clip_low, 1 + clip_high))`` and, for
  ``A < 0``, the dual clip ``l = min(l, -A * dual_clip)`` (Ye et al. 2020; ``dual_clip=None`` turns it
  off). The log ratio is capped at +20 before ``exp`` (a sequence-level sum can otherwise overflow;
  grpolab's guard, it changes nothing below ``r = e^20``).
- ``cumulative`` (CTPO, arXiv 2605.07331): position-adaptive clipping in log space with
  ``s_t = pos_t ** clip_power``, ``pos_t = cumsum(mask)_t`` (policy tokens only):
  ``log_ratio = min(log_ratio, 10)``, clipped ratio ``exp(clamp(log_ratio, -clip_low s_t, +clip_high s_t))``,
  PPO max, and for ``A < 0`` ``min(l, -A exp(clip_high s_t))``. CTPO's defaults are
  ``clip_low=0.025, clip_high=0.05, clip_power=0.5``.

Each level's rule lives with the level in the ratio registry (:data:`grpolab.objectives.ratios.RATIO_CLIPS`,
:func:`~grpolab.objectives.ratios.clip_ratio`); this function composes, it does not branch on the level.

An optional KL penalty ``kl_coef * kl_t`` to a reference policy is added per token, and the total is
aggregated with the weights of :func:`aggregation_weights` (or precomputed ``weights``, which is how
micro-batches reproduce the full-batch loss exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpolab.objectives._groups import check_advantages_shape
from grpolab.objectives.aggregation import AGGREGATIONS, aggregation_weights
from grpolab.objectives.kl import KL_ESTIMATORS, kl_penalty
from grpolab.objectives.ratios import (CTPO_LOG_RATIO_CAP, LOG_RATIO_CAP, LOG_RATIO_CLAMP, RATIO_LEVELS,  # noqa: F401
                                       ClippedRatio, clip_ratio, log_importance_ratio)

# Left edges (1-based policy-token positions) of the buckets used for the clip rate by position.
POSITION_BUCKETS: tuple[int, ...] = (1, 17, 65, 257, 1025)
# Positions after this one count as "late" for the drift statistic ``cum_log_ratio_sq_late``
# (CTPO's precondition: the cumulative ratio's spread at positions > 100, docs/results/ratio_long.md).
LATE_POSITION = 100


def position_bucket_labels() -> list[str]:
    """Human-readable labels of :data:`POSITION_BUCKETS`, e.g. ``["1-16", ..., "1025+"]``."""
    edges = POSITION_BUCKETS
    return [f"{a}-{b - 1}" for a, b in zip(edges, edges[1:])] + [f"{edges[-1]}+"]


def check_objective(
    *,
    ratio: str,
    aggregation: str,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None,
    clip_power: float,
    max_len: int | None,
    kl_coef: float,
    kl_estimator: str,
    has_group_ids: bool = True,
    has_ref: bool = True,
) -> None:
    """Validate a combination of objective settings; raise ``ValueError`` naming the fix."""
    RATIO_LEVELS.get(ratio)
    AGGREGATIONS.get(aggregation)
    KL_ESTIMATORS.get(kl_estimator)
    if clip_low < 0 or clip_high < 0:
        raise ValueError(f"clip_low and clip_high must be >= 0; got {clip_low}, {clip_high}")
    if ratio != "cumulative" and clip_low >= 1:
        raise ValueError(f"clip_low={clip_low} must be < 1 (the lower bound is 1 - clip_low)")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip must be > 1 or None (off); got {dual_clip}")
    if clip_power < 0:
        raise ValueError(f"clip_power must be >= 0; got {clip_power}")
    if aggregation == "constant" and (max_len is None or max_len <= 0):
        raise ValueError("aggregation='constant' needs max_len > 0 (the maximum response length)")
    if aggregation == "balanced" and not has_group_ids:
        raise ValueError("aggregation='balanced' needs group_ids (the prompt group of each sample)")
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0; got {kl_coef}")
    if kl_coef > 0 and not has_ref:
        raise ValueError("kl_coef > 0 needs ref_logp (log-probs under the reference policy)")


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    group_ids: torch.Tensor | None = None,
    ratio: str = "token",
    aggregation: str = "token",
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    dual_clip: float | None = 3.0,
    clip_power: float = 0.5,
    max_len: int | None = None,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_estimator: str = "k3",
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate loss with a chosen ratio level, aggregation and optional KL.

    Args:
        logp: ``[B,T]`` current-policy log-probs of the sampled tokens (with gradient).
        old_logp: ``[B,T]`` behaviour-policy log-probs.
        advantages: ``[B]`` sequence advantages or ``[B,T]`` per-token advantages.
        mask: ``[B,T]`` 1 on policy tokens, 0 on prompt, padding and tool output.
        group_ids: ``[B]`` prompt-group ids (needed by ``aggregation="balanced"``).
        ratio: ``"token" | "sequence" | "gspo" | "cumulative"``.
        aggregation: ``"token" | "sequence" | "constant" | "balanced"``.
        clip_low, clip_high: clip range (``[1-clip_low, 1+clip_high]``, or CTPO's log-space bounds).
        dual_clip: dual-clip constant for ``A < 0`` (non-cumulative levels); None disables it.
        clip_power: ``p`` in CTPO's ``s_t = pos_t ** p``.
        max_len: maximum response length, for ``aggregation="constant"``.
        ref_logp: ``[B,T]`` reference-policy log-probs, for the KL term.
        kl_coef: weight ``beta`` of the KL term.
        kl_estimator: ``"k1" | "k2" | "k3"``.
        weights: precomputed ``W[B,T]`` (e.g. a micro-batch slice of the full batch's weights);
            when given, ``aggregation`` is not recomputed.

    Returns:
        ``(loss, metrics)``: a scalar loss, and a dict of detached tensors (token means over valid
        tokens): ``loss, pg_loss, kl, clip_frac_low, clip_frac_high, clip_frac_dual, clip_frac,
        ratio_mean, ratio_min, ratio_max, approx_kl``, and ``clip_frac_by_pos`` /
        ``tokens_by_pos`` (``[len(POSITION_BUCKETS)]``); the drift of the behaviour policy, whatever the
        ratio level: ``cum_log_ratio_sq_by_pos`` (``[len(POSITION_BUCKETS)]``, the mean square of the
        cumulative token log ratio ``sum_{s<=t} (logp_s - old_logp_s)`` per position bucket, token means
        over ``tokens_by_pos``) and ``cum_log_ratio_sq_late`` / ``tokens_late`` (the same over
        positions > :data:`LATE_POSITION`, and how many tokens that is).
    """
    _check_inputs(logp, old_logp, advantages, mask, weights)
    check_objective(
        ratio=ratio, aggregation=aggregation, clip_low=clip_low, clip_high=clip_high,
        dual_clip=dual_clip, clip_power=clip_power, max_len=max_len if weights is None else 1,
        kl_coef=kl_coef, kl_estimator=kl_estimator,
        has_group_ids=group_ids is not None or weights is not None, has_ref=ref_logp is not None,
    )
    valid = mask.bool()
    mask_f = valid.to(logp.dtype)
    adv_BT = _token_advantages(advantages, valid, logp)
    log_ratio = log_importance_ratio(logp, old_logp, mask, ratio)
    clip = clip_ratio(ratio, log_ratio, mask_f, clip_low=clip_low, clip_high=clip_high, dual_clip=dual_clip,
                      clip_power=clip_power)
    pg_BT, dual_hit = _surrogate(adv_BT, clip, valid)
    if kl_coef > 0:
        kl_BT = kl_penalty(logp, ref_logp, kl_estimator, mask)  # type: ignore[arg-type]
    else:
        kl_BT = torch.zeros_like(pg_BT)
    per_token = pg_BT + kl_coef * kl_BT
    if weights is None:
        weights = aggregation_weights(mask, aggregation, advantages=advantages, group_ids=group_ids, max_len=max_len)
    W = torch.where(valid, weights.detach().to(logp.dtype), logp.new_zeros(()))
    loss = (W * per_token).sum()
    with torch.no_grad():
        neg = adv_BT < 0
        metrics = _metrics(_LossTerms(
            valid=valid, mask_f=mask_f, ratio_BT=clip.ratio_BT, logp=logp, old_logp=old_logp,
            low_clipped=clip.low_hit_BT & neg, high_clipped=clip.high_hit_BT & (adv_BT > 0), dual_clipped=dual_hit,
            W=W, pg_BT=pg_BT, kl_BT=kl_BT, loss=loss))
    return loss, metrics


def _check_inputs(logp, old_logp, advantages, mask, weights) -> None:
    """Raise ``ValueError`` unless the tensors have the shapes :func:`policy_loss` documents."""
    if logp.dim() != 2 or old_logp.shape != logp.shape or mask.shape != logp.shape:
        raise ValueError(
            f"logp, old_logp and mask must share shape [B,T]; got {tuple(logp.shape)}, "
            f"{tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )
    check_advantages_shape(advantages, logp.shape)
    if weights is not None and weights.shape != logp.shape:
        raise ValueError(f"weights must have shape [B,T]={tuple(logp.shape)}; got {tuple(weights.shape)}")


def _token_advantages(advantages: torch.Tensor, valid: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``[B,T]`` detached advantages in ``like``'s dtype, 0 off ``valid`` (``[B]`` is broadcast over ``T``)."""
    adv_BT = advantages.detach()
    if adv_BT.dim() == 1:
        adv_BT = adv_BT.unsqueeze(-1).expand_as(like)
    return torch.where(valid, adv_BT.to(like.dtype), like.new_zeros(()))


def _surrogate(adv_BT: torch.Tensor, clip: ClippedRatio, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The clipped surrogate ``l[B,T]`` (PPO's max, then the dual clip for ``A < 0`` where the level
    has one; 0 off ``valid``) and ``[B,T]`` where the dual clip binds."""
    pg_BT = torch.maximum(-adv_BT * clip.ratio_BT, -adv_BT * clip.clipped_BT)
    if clip.dual_BT is not None:
        neg = adv_BT < 0
        pg_BT = torch.where(neg, torch.minimum(pg_BT, -adv_BT * clip.dual_BT), pg_BT)
        dual_hit = neg & (clip.ratio_BT > clip.dual_BT)
    else:
        dual_hit = torch.zeros_like(valid)
    return torch.where(valid, pg_BT, adv_BT.new_zeros(())), dual_hit


@dataclass(frozen=True)
class _LossTerms:
    """What :func:`_metrics` reads of one loss evaluation (every tensor ``[B,T]`` but ``loss``)."""

    valid: torch.Tensor          # bool: policy tokens
    mask_f: torch.Tensor         # valid as the loss dtype
    ratio_BT: torch.Tensor       # the importance ratio at the chosen level
    logp: torch.Tensor
    old_logp: torch.Tensor
    low_clipped: torch.Tensor    # bool: the lower bound binds (A < 0)
    high_clipped: torch.Tensor   # bool: the upper bound binds (A > 0)
    dual_clipped: torch.Tensor   # bool: the dual clip binds
    W: torch.Tensor              # aggregation weights
    pg_BT: torch.Tensor          # clipped surrogate per token
    kl_BT: torch.Tensor          # KL penalty per token (0 without one)
    loss: torch.Tensor           # scalar


def _metrics(t: _LossTerms) -> dict[str, torch.Tensor]:
    valid, mask_f = t.valid, t.mask_f
    n = mask_f.sum().clamp_min(1)
    zero = mask_f.new_zeros(())

    def mean(x: torch.Tensor) -> torch.Tensor:
        return torch.where(valid, x.to(mask_f.dtype), zero).sum() / n

    any_valid = valid.any()
    inf = t.ratio_BT.new_full((), float("inf"))
    ratio_min = torch.where(any_valid, torch.where(valid, t.ratio_BT, inf).amin(), zero)
    ratio_max = torch.where(any_valid, torch.where(valid, t.ratio_BT, -inf).amax(), zero)
    # approx KL(old || new) from the token-level log ratio (Schulman's k3 form, d = logp - old)
    d = torch.where(valid, (t.logp - t.old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), zero)
    clipped = t.low_clipped | t.high_clipped | t.dual_clipped
    return {
        "loss": t.loss.detach(),
        "pg_loss": (t.W * t.pg_BT).sum().detach(),
        "kl": (t.W * t.kl_BT).sum().detach(),
        "clip_frac_low": mean(t.low_clipped),
        "clip_frac_high": mean(t.high_clipped),
        "clip_frac_dual": mean(t.dual_clipped),
        "clip_frac": mean(clipped),
        "ratio_mean": mean(t.ratio_BT),
        "ratio_min": ratio_min.detach(),
        "ratio_max": ratio_max.detach(),
        "approx_kl": mean(torch.expm1(d) - d),
        **_position_metrics(valid, mask_f, clipped, d),
    }


def _position_metrics(valid: torch.Tensor, mask_f: torch.Tensor, clipped: torch.Tensor,
                      d: torch.Tensor) -> dict[str, torch.Tensor]:
    """The clip rate and the behaviour policy's drift by policy-token position (:data:`POSITION_BUCKETS`).

    ``d``: ``[B,T]`` token log ratio ``logp - old_logp`` (0 off ``valid``); its prefix sum is what
    CTPO's cumulative ratio is before its cap.
    """
    zero = mask_f.new_zeros(())
    pos_BT = mask_f.cumsum(-1)
    cum_sq = torch.cumsum(d, -1).square()
    edges = list(POSITION_BUCKETS) + [float("inf")]
    by_pos, tokens_by_pos, cum_by_pos = [], [], []
    for lo, hi in zip(edges, edges[1:]):
        in_bucket = valid & (pos_BT >= lo) & (pos_BT < hi)
        cnt = in_bucket.sum().to(mask_f.dtype)
        tokens_by_pos.append(cnt)
        by_pos.append((clipped & in_bucket).sum().to(mask_f.dtype) / cnt.clamp_min(1))
        cum_by_pos.append(torch.where(in_bucket, cum_sq, zero).sum() / cnt.clamp_min(1))
    late = valid & (pos_BT > LATE_POSITION)
    tokens_late = late.sum().to(mask_f.dtype)
    return {
        "clip_frac_by_pos": torch.stack(by_pos),
        "tokens_by_pos": torch.stack(tokens_by_pos),
        "cum_log_ratio_sq_by_pos": torch.stack(cum_by_pos),
        "cum_log_ratio_sq_late": torch.where(late, cum_sq, zero).sum() / tokens_late.clamp_min(1),
        "tokens_late": tokens_late,
    }
