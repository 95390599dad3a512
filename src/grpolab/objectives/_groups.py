"""Vectorised per-group reductions (no Python loop over groups or sequences)."""

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
