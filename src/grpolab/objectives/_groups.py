"""Shared internals of the objectives: per-group reductions (vectorised) and input checks."""

from __future__ import annotations

import torch


def group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Map arbitrary group ids ``[B]`` to contiguous indices ``[B]``; returns ``(index, K)``.

    ``K = B`` is an upper bound on the number of groups (unused slots stay empty), which avoids a
    device sync to read the true count.
    """
    if group_ids.dim() != 1:
        raise ValueError(f"group_ids must have shape [B], got {tuple(group_ids.shape)}")
    if group_ids.numel() == 0:
        return group_ids.long(), 0
    _, inv = torch.unique(group_ids, return_inverse=True)
    return inv, group_ids.numel()


def group_sum(values_B: torch.Tensor, idx_B: torch.Tensor, num_groups: int) -> torch.Tensor:
    """Sum ``values_B`` within groups: ``[B] -> [K]``."""
    out = torch.zeros(num_groups, dtype=values_B.dtype, device=values_B.device)
    return out.index_add(0, idx_B, values_B)


def check_advantages_shape(advantages: torch.Tensor, shape: torch.Size) -> None:
    """Raise unless ``advantages`` is ``[B]`` (one per sequence) or ``[B,T]`` (per token) for ``shape = [B,T]``."""
    if advantages.shape not in (shape[:1], shape):
        raise ValueError(
            f"advantages must have shape [B]={tuple(shape[:1])} or [B,T]={tuple(shape)}; "
            f"got {tuple(advantages.shape)}"
        )
