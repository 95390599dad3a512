"""Importance-ratio levels for off-policy correction (docs/methods.md, importance ratios).

Per-token log ratio ``d_t = clamp(logp_t - old_t, -20, 20) * mask_t``. Each level defines a value:

- ``token`` (PPO/GRPO): ``d_t``.
- ``sequence``: ``sum_t d_t`` (exact trajectory correction).
- ``gspo``: ``(1/|o|) sum_t d_t`` (GSPO, arXiv 2507.18071).
- ``cumulative`` (CTPO, arXiv 2605.07331): ``D_t = sum_{t' <= t} d_t'``, the prefix product of the
  per-token ratios in log space.

In every level the gradient flows only through the current token's own ``logp_t``:
``log_ratio_t = sg(value_t) + logp_t - sg(logp_t)`` (GSPO-token / the CTPO code). Positions where
``mask = 0`` return exactly 0 and get zero gradient, whatever ``logp`` holds there (NaN included).
"""

from __future__ import annotations

from typing import Callable

import torch

from grpolab.utils.registry import Registry

LOG_RATIO_CLAMP = 20.0

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
