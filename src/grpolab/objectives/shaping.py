"""Batch shaping: DAPO's three batch-level pieces besides clip-higher and token aggregation (arXiv 2503.14476).

Pure tensor functions (no model, no config):

- :func:`group_has_signal` -- dynamic sampling's filter (DAPO section 3.2, eq. 11's constraint
  ``0 < |{o_i : is_equivalent(a, o_i)}| < G``; verl ``algorithm.filter_groups``): a prompt group
  whose rewards are all equal has every GRPO advantage 0 and teaches nothing. grpolab keeps a
  group when its rewards are not all equal, which for a 0/1 verifier is exactly DAPO's
  "accuracy neither 0 nor 1".
- :func:`overlong_penalty` -- soft overlong punishment (DAPO section 3.4, eq. 13; verl
  ``reward_model.overlong_buffer``). With ``L_max`` the longest response and ``L_cache`` the buffer:
  ``R_length(y) = 0`` if ``|y| <= L_max - L_cache``, ``((L_max - L_cache) - |y|) / L_cache`` inside the
  buffer, ``-1`` beyond ``L_max``; the result is multiplied by ``penalty`` (verl's
  ``penalty_factor``) and added to the verifier reward. A grpolab response can never exceed
  ``L_max`` (sampling stops at ``max_new_tokens``), so the punishment reaches ``-penalty`` at the cap.
- :func:`truncation_mask` -- overlong filtering (DAPO section 3.4; TRL
  ``mask_truncated_completions``): the loss mask of a response that hit the length cap without
  ending is zeroed, so it neither pushes the policy nor counts in the token normaliser.

Each has a loop twin in ``tests/objectives/test_shaping.py``.
"""

from __future__ import annotations

import torch

from grpolab.objectives._groups import group_index

__all__ = ["group_has_signal", "overlong_penalty", "truncation_mask"]


def group_has_signal(rewards_B: torch.Tensor, group_ids_B: torch.Tensor, *, tol: float = 1e-12) -> torch.Tensor:
    """Which rows belong to a group whose rewards are not all equal.

    Args:
        rewards_B: ``[B]`` float reward per sample.
        group_ids_B: ``[B]`` int prompt-group id per sample (any ids, any order).
        tol: rewards closer than this count as equal.

    Returns:
        ``BoolTensor [B]``: True on every row of a group with ``max - min > tol``; a one-sample
        group never has signal.
    """
    if rewards_B.dim() != 1 or group_ids_B.shape != rewards_B.shape:
        raise ValueError(f"rewards and group_ids must both have shape [B]; got {tuple(rewards_B.shape)} "
                         f"and {tuple(group_ids_B.shape)}")
    idx, k = group_index(group_ids_B)
    r = rewards_B.detach()
    hi_K = torch.full((k,), -float("inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, idx, r, "amax")
    lo_K = torch.full((k,), float("inf"), dtype=r.dtype, device=r.device).scatter_reduce(0, idx, r, "amin")
    return (hi_K - lo_K > tol)[idx]


def overlong_penalty(mask_BT: torch.Tensor, *, max_len: int, buffer: int, penalty: float = 1.0) -> torch.Tensor:
    """DAPO's soft overlong punishment of each response (to be added to its reward).

    Args:
        mask_BT: ``[B,T]`` 1 on the tokens the policy generated; ``|y| = mask.sum(-1)``.
        max_len: ``L_max``, the longest response (``rollout.max_new_tokens``).
        buffer: ``L_cache``, the punishment buffer in tokens, ``0 < buffer <= max_len``.
        penalty: the punishment at ``|y| = L_max`` (DAPO: 1).

    Returns:
        ``[B]`` in ``[-penalty, 0]`` (``mask``'s float dtype): 0 up to ``max_len - buffer`` tokens,
        then falling linearly to ``-penalty`` at ``max_len`` (and staying there beyond it).
    """
    if mask_BT.dim() != 2:
        raise ValueError(f"mask must have shape [B,T], got {tuple(mask_BT.shape)}")
    if not 0 < buffer <= max_len:
        raise ValueError(f"buffer={buffer} must be in (0, max_len={max_len}]")
    if penalty < 0:
        raise ValueError(f"penalty={penalty} must be >= 0")
    dtype = mask_BT.dtype if mask_BT.is_floating_point() else torch.float32
    length_B = mask_BT.to(dtype).sum(-1)
    expected = max_len - buffer
    # eq. 13 with the -1 branch folded in: (expected - |y|) / L_cache, clipped to [-1, 0]
    frac = ((expected - length_B) / buffer).clamp(-1.0, 0.0)
    return penalty * frac


def truncation_mask(mask_BT: torch.Tensor, finished_B: torch.Tensor) -> torch.Tensor:
    """The loss mask with every truncated response removed.

    Args:
        mask_BT: ``[B,T]`` loss mask (1 on policy tokens).
        finished_B: ``BoolTensor [B]``; True where the response ended (EOS / end of episode),
            False where it hit the length cap.

    Returns:
        ``[B,T]``, ``mask_BT``'s dtype: ``mask_BT`` on finished rows, 0 on truncated ones.
    """
    if mask_BT.dim() != 2 or finished_B.shape != mask_BT.shape[:1]:
        raise ValueError(f"mask must be [B,T] and finished [B]; got {tuple(mask_BT.shape)} and "
                         f"{tuple(finished_B.shape)}")
    return mask_BT * finished_B.to(mask_BT.device).bool().unsqueeze(-1).to(mask_BT.dtype)
