"""Loss aggregation as weights: ``loss = sum_{i,t} W[i,t] * l[i,t]`` (docs/methods.md, aggregation).

``W`` depends only on ``mask``, the advantages' signs, ``group_ids`` and ``max_len`` -- never on the
model -- so it is computed once over the whole rollout batch and sliced per micro-batch, which makes
gradient accumulation exact for every mode. Sequences with no valid token are left out of every
count.

- ``token`` (DAPO, arXiv 2503.14476): ``W = mask / sum(mask)``.
- ``sequence`` (GRPO): ``W = mask / (|o_i| * n)``, ``n`` = number of non-empty sequences.
- ``constant`` (Dr.GRPO, arXiv 2503.20783): ``W = mask / (n * L)``, ``L = max_len``.
- ``balanced`` (Balanced Aggregation, arXiv 2605.04077): within each prompt group ``g`` of ``G_g``
  non-empty samples, ``J_g = (|S+|/G_g) * tokenmean(l over S+) + (|S-|/G_g) * tokenmean(l over S-)``
  with ``S+ = {A > 0}``, ``S- = {A < 0}`` (zero-advantage samples are in neither subset but count in
  ``G_g``); the loss is the mean of ``J_g`` over the groups that have a non-empty sample. So token
  ``t`` of a positive sample ``i`` in group ``g`` weighs ``|S+_g| / (G_g * N+_g * K)`` with ``N+_g``
  the token count of ``S+_g`` and ``K`` the number of groups.

With per-token advantages ``[B,T]`` (credit reweighting), the sign of a sequence is the sign of the
sum of its valid advantages; reweighting never flips the sign, so this is the sign of ``A``.
"""

from __future__ import annotations

from typing import Callable

import torch

from grpolab.objectives._groups import check_advantages_shape, group_index, group_sum
from grpolab.utils.registry import Registry

AGGREGATIONS: Registry[Callable[..., torch.Tensor]] = Registry("aggregation")


def _valid_counts(mask_BT: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    length_B = mask_BT.sum(-1)
    nonempty_B = length_B > 0
    n = nonempty_B.sum().to(mask_BT.dtype)
    return length_B, nonempty_B, n


@AGGREGATIONS.register("token")
def _token(mask_BT: torch.Tensor, **_: object) -> torch.Tensor:
    return mask_BT / mask_BT.sum().clamp_min(1)


@AGGREGATIONS.register("sequence")
def _sequence(mask_BT: torch.Tensor, **_: object) -> torch.Tensor:
    length_B, _, n = _valid_counts(mask_BT)
    return mask_BT / (length_B.clamp_min(1) * n.clamp_min(1)).unsqueeze(-1)


@AGGREGATIONS.register("constant")
def _constant(mask_BT: torch.Tensor, *, max_len: int | None = None, **_: object) -> torch.Tensor:
    if max_len is None or max_len <= 0:
        raise ValueError(
            "aggregation 'constant' needs max_len > 0 (the configured maximum response length, "
            f"Dr.GRPO's L); got max_len={max_len!r}"
        )
    _, _, n = _valid_counts(mask_BT)
    return mask_BT / (n.clamp_min(1) * float(max_len))


def sequence_signs(advantages: torch.Tensor, mask_BT: torch.Tensor) -> torch.Tensor:
    """Sign of each sequence's advantage: ``[B]`` or ``[B,T]`` advantages -> ``[B]`` in {-1, 0, 1}."""
    if advantages.dim() == 1:
        adv_B = advantages
    else:
        valid = mask_BT.bool()
        adv_B = torch.where(valid, advantages, advantages.new_zeros(())).sum(-1)
    return torch.sign(adv_B.detach()).to(mask_BT.dtype)


@AGGREGATIONS.register("balanced")
def _balanced(
    mask_BT: torch.Tensor,
    *,
    advantages: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    **_: object,
) -> torch.Tensor:
    if advantages is None or group_ids is None:
        raise ValueError(
            "aggregation 'balanced' needs advantages= (to split samples by sign) and group_ids= "
            "(the prompt group of each sample); pass both, or use aggregation='token'"
        )
    length_B, nonempty_B, _ = _valid_counts(mask_BT)
    sign_B = sequence_signs(advantages, mask_BT) * nonempty_B.to(mask_BT.dtype)
    idx, k = group_index(group_ids.to(mask_BT.device))
    ones_B = nonempty_B.to(mask_BT.dtype)
    size_K = group_sum(ones_B, idx, k)  # G_g: non-empty samples of group g
    num_groups = (size_K > 0).sum().to(mask_BT.dtype).clamp_min(1)
    pos_B = (sign_B > 0).to(mask_BT.dtype)
    neg_B = (sign_B < 0).to(mask_BT.dtype)
    weight_B = torch.zeros_like(length_B)
    for side_B in (pos_B, neg_B):
        count_K = group_sum(side_B, idx, k)  # |S_g|
        tokens_K = group_sum(side_B * length_B, idx, k)  # token count of S_g
        w_K = count_K / (size_K.clamp_min(1) * tokens_K.clamp_min(1) * num_groups)
        weight_B = weight_B + side_B * w_K[idx]
    return mask_BT * weight_B.unsqueeze(-1)


def aggregation_weights(
    mask: torch.Tensor,
    mode: str,
    *,
    advantages: torch.Tensor | None = None,
    group_ids: torch.Tensor | None = None,
    max_len: int | None = None,
) -> torch.Tensor:
    """Aggregation weights ``W[B,T]`` such that the loss is ``(W * per_token_loss).sum()``.

    Args:
        mask: ``[B,T]`` 1 on policy tokens, 0 elsewhere.
        mode: ``"token" | "sequence" | "constant" | "balanced"``.
        advantages: ``[B]`` or ``[B,T]``; needed by ``balanced`` (only the signs are used).
        group_ids: ``[B]`` prompt-group ids; needed by ``balanced``.
        max_len: the maximum response length ``L``; needed by ``constant``.

    Returns:
        ``W[B,T]`` (detached, dtype of ``mask`` if floating else float32); all zeros for a fully
        masked batch.
    """
    fn = AGGREGATIONS.get(mode)
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape [B,T], got {tuple(mask.shape)}")
    mask_BT = mask.detach()
    if not mask_BT.is_floating_point():
        mask_BT = mask_BT.float()
    if advantages is not None:
        check_advantages_shape(advantages, mask.shape)
    return fn(mask_BT, advantages=advantages, group_ids=group_ids, max_len=max_len).detach()
