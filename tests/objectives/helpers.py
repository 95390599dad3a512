"""Random ragged batches for the objective tests (seeded; float64 unless asked)."""
from __future__ import annotations

import torch

RATIO_LEVELS = ("token", "sequence", "gspo", "cumulative")
AGGREGATIONS = ("token", "sequence", "constant", "balanced")


def make_batch(seed: int, B: int = 12, T: int = 16, *, n_groups: int = 4, scale: float = 0.05,
               dtype=torch.float64, empty_rows: int = 1, gaps: float = 0.2,
               per_token_adv: bool = False, zero_adv: float = 0.15) -> dict:
    """A ragged batch: uneven groups (interleaved ids), some empty rows, tool-output gaps.

    ``logp - old_logp ~ N(0, scale)`` on valid tokens. Masked positions hold ordinary finite
    values (poison them explicitly where a test needs it).
    """
    g = torch.Generator().manual_seed(seed)
    # uneven group sizes: every group gets >= 1 row, the rest go to random groups
    gid = torch.cat([torch.arange(min(n_groups, B)),
                     torch.randint(0, max(min(n_groups, B), 1), (max(B - n_groups, 0),), generator=g)])
    gid = gid[torch.randperm(B, generator=g)] * 7 + 3          # non-contiguous, non-zero-based ids
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lens[:, None]).to(dtype)
    if gaps > 0:                                                # tool output inside responses
        holes = torch.rand(B, T, generator=g) < gaps
        mask = mask * (~holes).to(dtype)
        mask[:, 0] = (lens > 0).to(dtype)                       # keep row non-empty
    for k in range(min(empty_rows, B)):
        mask[(k * 5) % B] = 0.0
    logp = -3.0 * torch.rand(B, T, generator=g, dtype=torch.float64)
    old = logp - scale * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = logp - 0.1 * torch.randn(B, T, generator=g, dtype=torch.float64)
    rewards = torch.randint(0, 2, (B,), generator=g).to(torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    adv[torch.rand(B, generator=g) < zero_adv] = 0.0
    if per_token_adv:
        # per-token advantages share the sign of their sequence, magnitudes vary
        mag = 0.5 + torch.rand(B, T, generator=g, dtype=torch.float64)
        adv = adv[:, None] * mag
    return dict(logp=logp.to(dtype), old=old.to(dtype), ref=ref.to(dtype), adv=adv.to(dtype),
                mask=mask.to(dtype), gid=gid, rewards=rewards.to(dtype), max_len=T + 3)


def poison(x: torch.Tensor, mask: torch.Tensor, value: float) -> torch.Tensor:
    """Copy of ``x`` with ``value`` written wherever ``mask == 0``."""
    return torch.where(mask != 0, x, torch.full_like(x, value))


def t64(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)
