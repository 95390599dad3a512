"""Per-token KL estimators between the current policy and a frozen reference (Schulman 2020).

With ``x = ref_logp - logp`` on tokens sampled from the current policy:
``k1 = -x = logp - ref``; ``k2 = 0.5 x^2``; ``k3 = exp(x) - x - 1`` (unbiased, non-negative, low
variance: the usual one). ``k3`` follows the formula exactly for ``x <= 50``; beyond that it
continues linearly with the slope it has at 50 (grpolab's guard: ``exp`` stays finite in float32
and bfloat16, and the penalty keeps pulling on tokens that drifted furthest from the reference,
unlike a clamp, which would zero their gradient).
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from grpolab.utils.registry import Registry

K3_LINEAR_FROM = 50.0
KLFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
KL_ESTIMATORS: Registry[KLFn] = Registry("KL estimator")


@KL_ESTIMATORS.register("k1")
def _k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return logp - ref_logp


@KL_ESTIMATORS.register("k2")
def _k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return 0.5 * (logp - ref_logp) ** 2


@KL_ESTIMATORS.register("k3")
def _k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    x = ref_logp - logp
    c = K3_LINEAR_FROM
    exact = torch.exp(x.clamp(max=c)) - x.clamp(max=c) - 1
    # beyond c: k3(c) + k3'(c) (x - c) with k3'(c) = e^c - 1 (the gradient flows through x)
    linear = (math.exp(c) - c - 1) + (math.exp(c) - 1) * (x - c)
    return torch.where(x <= c, exact, linear)


def kl_penalty(
    logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str = "k3", mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Per-token KL estimate ``[B,T]``; gradient flows through ``logp`` only; 0 where ``mask = 0``."""
    fn = KL_ESTIMATORS.get(estimator)
    ref = ref_logp.detach()
    if mask is None:
        return fn(logp, ref)
    valid = mask.bool()
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)
    out = fn(torch.where(valid, logp, zero), torch.where(valid, ref, zero))
    return torch.where(valid, out, zero)
