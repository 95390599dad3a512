"""Importance-ratio levels for off-policy correction (docs/methods.md, importance ratios).

Per-token log ratio ``d_t = clamp(logp_t - old_t, -20, 20) * mask_t``. Each level defines a value:

- ``token`` (PPO/GRPO): ``d_t``.
- ``sequence``: ``sum_t d_t`` (exact trajectory correction).
- ``gspo``: ``(1/|o|) sum_t d_t`` (GSPO, arXiv 2507.18071).
- ``cumulative`` (CTPO, arXiv 2605.07331): ``D_t = sum_{t' <= t} d_t'``, the prefix product of the
  per-token ratios in log space.

Each level also has its clipping rule (:data:`RATIO_CLIPS`, :func:`clip_ratio`): ``token``,
``sequence`` and ``gspo`` clip the ratio to ``[1 - clip_low, 1 + clip_high]`` (the log ratio capped at
+20 before ``exp``), with an optional dual clip for ``A < 0``; ``cumulative`` clips in log space with
position-adaptive bounds ``[-clip_low s_t, +clip_high s_t]``, ``s_t = t^clip_power`` (``t`` the
1-based policy-token position), caps the log ratio at 10 first, and always applies the dual clip
at ``exp(clip_high s_t)`` for ``A < 0``.

In every level the gradient flows only through the current token's own ``logp_t``:
``log_ratio_t = sg(value_t) + logp_t - sg(logp_t)`` (GSPO-token / the CTPO code). Positions where
``mask = 0`` return exactly 0 and get zero gradient, whatever ``logp`` holds there (NaN included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from grpolab.utils.registry import Registry

#: Clamp on the per-token log ratio ``logp - old`` (written once: the ratio levels and the loss's
#: approximate-KL metric both use it).
LOG_RATIO_CLAMP = 20.0
#: Cap on the log ratio before ``exp`` (a sequence-level sum can otherwise overflow).
LOG_RATIO_CAP = 20.0
#: CTPO's cap on the cumulative log ratio, ``log_ratio = min(log_ratio, 10)``.
CTPO_LOG_RATIO_CAP = 10.0

RatioValueFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
RATIO_LEVELS: Registry[RatioValueFn] = Registry("ratio level")


@RATIO_LEVELS.register("token")
def _token(d_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    return d_BT


@RATIO_LEVELS.register("sequence")
def _sequence(d_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    return d_BT.sum(-1, keepdim=True).expand_as(d_BT)


@RATIO_LEVELS.register("gspo")
def _gspo(d_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    length_B1 = mask_BT.sum(-1, keepdim=True).clamp_min(1)
    return (d_BT.sum(-1, keepdim=True) / length_B1).expand_as(d_BT)


@RATIO_LEVELS.register("cumulative")
def _cumulative(d_BT: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    return d_BT.cumsum(-1)


def log_importance_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, level: str
) -> torch.Tensor:
    """Log importance ratio at ``level``.

    Args:
        logp: ``[B,T]`` current-policy log-prob of each sampled token (carries the gradient).
        old_logp: ``[B,T]`` behaviour-policy log-prob (no gradient is taken through it).
        mask: ``[B,T]`` 1 on policy tokens, 0 on prompt, padding and tool output.
        level: ``"token" | "sequence" | "gspo" | "cumulative"``.

    Returns:
        ``[B,T]`` log ratio; 0 where ``mask = 0``.
    """
    value_fn = RATIO_LEVELS.get(level)
    if logp.shape != old_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp, old_logp and mask must share shape [B,T]; got {tuple(logp.shape)}, "
            f"{tuple(old_logp.shape)}, {tuple(mask.shape)}"
        )
    valid = mask.bool()
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    logp = torch.where(valid, logp, zero)
    old = torch.where(valid, old_logp.detach(), zero)
    d_BT = torch.where(valid, (logp.detach() - old).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP), zero)
    value_BT = value_fn(d_BT, valid.to(logp.dtype))
    log_ratio = value_BT.detach() + logp - logp.detach()
    return torch.where(valid, log_ratio, zero)


@dataclass
class ClippedRatio:
    """One ratio level's clipping of ``[B,T]`` log ratios.

    Attributes:
        log_ratio_BT: the log ratio after the level's cap (``cumulative``: at most 10; the others
            leave it as it is and cap only inside ``exp``).
        ratio_BT: the ratio ``r``.
        clipped_BT: the clipped ratio of the surrogate ``max(-A r, -A clip(r))``.
        dual_BT: the dual-clip bound for ``A < 0`` (``min(., -A dual)``), or None for none.
        low_hit_BT, high_hit_BT: bool, ``r`` below the lower / above the upper bound.
    """

    log_ratio_BT: torch.Tensor
    ratio_BT: torch.Tensor
    clipped_BT: torch.Tensor
    dual_BT: torch.Tensor | None
    low_hit_BT: torch.Tensor
    high_hit_BT: torch.Tensor


ClipFn = Callable[..., ClippedRatio]
#: Clipping rule per ratio level (every level has one; see the module docstring).
RATIO_CLIPS: Registry[ClipFn] = Registry("ratio clip")


def _bounded(log_ratio_BT, mask_BT, *, clip_low, clip_high, dual_clip, clip_power) -> ClippedRatio:
    ratio_BT = torch.exp(log_ratio_BT.clamp(max=LOG_RATIO_CAP))
    return ClippedRatio(
        log_ratio_BT=log_ratio_BT, ratio_BT=ratio_BT, clipped_BT=ratio_BT.clamp(1 - clip_low, 1 + clip_high),
        dual_BT=None if dual_clip is None else torch.full_like(ratio_BT, dual_clip),
        low_hit_BT=ratio_BT < 1 - clip_low, high_hit_BT=ratio_BT > 1 + clip_high)


for _level in ("token", "sequence", "gspo"):
    RATIO_CLIPS.register(_level)(_bounded)


@RATIO_CLIPS.register("cumulative")
def _position_adaptive(log_ratio_BT, mask_BT, *, clip_low, clip_high, dual_clip, clip_power) -> ClippedRatio:
    """CTPO: bounds ``[-clip_low s_t, clip_high s_t]`` in log space, ``s_t = t^clip_power``; the dual
    clip ``exp(clip_high s_t)`` always applies (``dual_clip`` is not used)."""
    log_ratio_BT = log_ratio_BT.clamp(max=CTPO_LOG_RATIO_CAP)
    scale_BT = mask_BT.cumsum(-1).clamp_min(1) ** clip_power
    lower_BT, upper_BT = -clip_low * scale_BT, clip_high * scale_BT
    return ClippedRatio(
        log_ratio_BT=log_ratio_BT, ratio_BT=torch.exp(log_ratio_BT), clipped_BT=torch.exp(torch.clamp(log_ratio_BT, lower_BT, upper_BT)),
        dual_BT=torch.exp(upper_BT), low_hit_BT=log_ratio_BT < lower_BT, high_hit_BT=log_ratio_BT > upper_BT)


def clip_ratio(level: str, log_ratio_BT: torch.Tensor, mask_BT: torch.Tensor, *, clip_low: float,
               clip_high: float, dual_clip: float | None = None, clip_power: float = 0.0) -> ClippedRatio:
    """The ratio, its clipped value and the clip hits of ``level`` (``mask_BT``: float ``[B,T]``)."""
    return RATIO_CLIPS.get(level)(log_ratio_BT, mask_BT, clip_low=clip_low, clip_high=clip_high,
                                  dual_clip=dual_clip, clip_power=clip_power)
