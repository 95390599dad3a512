"""Sequence-level advantages from rewards within prompt groups.

- ``grpo``: ``A_i = (R_i - mean_g R) / (std_g R + eps)``, std unbiased (DeepSeekMath, arXiv 2402.03300).
- ``drgrpo``: ``A_i = R_i - mean_g R`` (no std division; Dr.GRPO, arXiv 2503.20783).
- ``rloo``: ``A_i = R_i - mean_{j != i} R_j`` (leave-one-out baseline, Ahmadian et al. 2024).

A group with a single sample has no baseline: its advantage is 0 for every estimator (grpolab's
choice; the unbiased std of one sample is undefined). Groups are given by ``group_ids[B]``; the ids
need not be contiguous or sorted.
"""

from __future__ import annotations

from typing import Callable

import torch

from grpolab.objectives._groups import group_index, group_sum
from grpolab.utils.registry import Registry

AdvantageFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
ADVANTAGE_ESTIMATORS: Registry[AdvantageFn] = Registry("advantage estimator")


def _check(rewards: torch.Tensor, group_ids: torch.Tensor) -> None:
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(
            f"rewards and group_ids must both have shape [B]; got {tuple(rewards.shape)} and "
            f"{tuple(group_ids.shape)}"
        )
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf; a verifier must return a finite score")


def group_advantages(
    rewards: torch.Tensor,
    group_ids: torch.Tensor,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO group-normalised advantages.

    Args:
        rewards: ``[B]`` float scalar reward per sample.
        group_ids: ``[B]`` int prompt-group id per sample.
        normalize_std: divide by the group's unbiased std (GRPO); False gives Dr.GRPO.
        eps: added to the std.

    Returns:
        ``A[B]``, same dtype as ``rewards``; 0 for every sample of a single-sample group and for
        groups whose rewards are all equal.
    """
    _check(rewards, group_ids)
    idx, k = group_index(group_ids)
    ones = torch.ones_like(rewards)
    count_K = group_sum(ones, idx, k)
    mean_K = group_sum(rewards, idx, k) / count_K.clamp_min(1)
    dev_B = rewards - mean_K[idx]
    if not normalize_std:
        return dev_B
    var_K = group_sum(dev_B * dev_B, idx, k) / (count_K - 1).clamp_min(1)
    adv = dev_B / (var_K.sqrt()[idx] + eps)
    return torch.where(count_K[idx] > 1, adv, torch.zeros_like(adv))


def leave_one_out(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """RLOO advantages ``A_i = R_i - (sum_g R - R_i) / (G_g - 1)``: ``[B] -> [B]`` (0 if ``G_g = 1``)."""
    _check(rewards, group_ids)
    idx, k = group_index(group_ids)
    count_B = group_sum(torch.ones_like(rewards), idx, k)[idx]
    sum_B = group_sum(rewards, idx, k)[idx]
    baseline = (sum_B - rewards) / (count_B - 1).clamp_min(1)
    return torch.where(count_B > 1, rewards - baseline, torch.zeros_like(rewards))


ADVANTAGE_ESTIMATORS.add("grpo", lambda r, g: group_advantages(r, g, normalize_std=True))
ADVANTAGE_ESTIMATORS.add("drgrpo", lambda r, g: group_advantages(r, g, normalize_std=False))
ADVANTAGE_ESTIMATORS.add("rloo", leave_one_out)


def get_advantage_estimator(name: str) -> AdvantageFn:
    """Return the estimator ``(rewards[B], group_ids[B]) -> A[B]`` registered under ``name``."""
    return ADVANTAGE_ESTIMATORS.get(name)
