"""DAPO's batch pieces (grpolab.objectives.shaping) against slow loop twins written from the paper.

Loop twins: plain Python over rows and tokens, float64, written from DAPO (arXiv 2503.14476)
section 3.2 (dynamic sampling: keep groups with 0 < #correct < G) and section 3.4, eq. 13 (soft
overlong punishment), never from the implementation.
"""

from __future__ import annotations

import pytest
import torch

from grpolab.objectives.shaping import group_has_signal, overlong_penalty, truncation_mask


# ----------------------------------------------------------------------------- loop twins
def loop_group_has_signal(rewards, gids):
    groups: dict = {}
    for r, g in zip(rewards, gids):
        groups.setdefault(g, []).append(float(r))
    return [max(groups[g]) - min(groups[g]) > 1e-12 for g in gids]


def loop_overlong_penalty(mask, max_len, buffer, penalty):
    out = []
    for row in mask:
        n = sum(1 for v in row if v)  # |y|: the policy's tokens
        if n <= max_len - buffer:
            r = 0.0
        elif n <= max_len:
            r = ((max_len - buffer) - n) / buffer
        else:
            r = -1.0
        out.append(penalty * r)
    return out


def loop_truncation_mask(mask, finished):
    return [[float(v) if fin else 0.0 for v in row] for row, fin in zip(mask, finished)]


# ----------------------------------------------------------------------------- tests
@pytest.mark.parametrize("seed", range(6))
def test_group_has_signal_matches_loop(seed):
    g = torch.Generator().manual_seed(seed)
    B = 24
    gids = torch.randint(0, 7, (B,), generator=g) * 5 + 2  # uneven, non-contiguous, unsorted
    rewards = torch.randint(0, 2, (B,), generator=g).double()
    rewards[torch.rand(B, generator=g) < 0.2] = 0.5  # partial credit too
    got = group_has_signal(rewards, gids).tolist()
    assert got == loop_group_has_signal(rewards.tolist(), gids.tolist())


def test_group_has_signal_hand_case():
    # group 0: 1,1,1 (all correct, no signal); group 1: 0,1 (signal); group 2: 0,0 (none);
    # group 3: one sample (never signal)
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.7])
    gids = torch.tensor([0, 0, 1, 1, 2, 2, 0, 3])
    assert group_has_signal(rewards, gids).tolist() == [False, False, True, True, False, False, False, False]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("buffer,penalty", [(1, 1.0), (4, 1.0), (7, 0.5), (16, 2.0)])
def test_overlong_penalty_matches_loop(seed, buffer, penalty):
    g = torch.Generator().manual_seed(seed)
    B, T = 16, 16
    lens = torch.randint(0, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lens[:, None]).double()
    mask[torch.rand(B, T, generator=g) < 0.1] = 0.0  # holes (tool output) do not count as length
    got = overlong_penalty(mask, max_len=T, buffer=buffer, penalty=penalty)
    want = loop_overlong_penalty(mask.tolist(), T, buffer, penalty)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64), rtol=0, atol=1e-12)


def test_overlong_penalty_hand_case():
    # L_max = 10, L_cache = 4: no punishment up to 6 tokens; 7 -> -1/4, 8 -> -2/4, 10 -> -4/4
    lens = torch.tensor([0, 6, 7, 8, 10])
    mask = (torch.arange(10)[None] < lens[:, None]).float()
    got = overlong_penalty(mask, max_len=10, buffer=4, penalty=1.0)
    assert got.tolist() == [0.0, 0.0, -0.25, -0.5, -1.0]
    # responses longer than max_len (cannot happen in grpolab's sampler) stay at -penalty
    long = torch.ones(1, 14)
    assert overlong_penalty(long, max_len=10, buffer=4, penalty=0.5).tolist() == [-0.5]


def test_overlong_penalty_bad_settings():
    mask = torch.ones(2, 4)
    for kw in ({"buffer": 0}, {"buffer": 5}, {"buffer": 2, "penalty": -1.0}):
        with pytest.raises(ValueError):
            overlong_penalty(mask, max_len=4, **{"penalty": 1.0, **kw})


@pytest.mark.parametrize("seed", range(4))
def test_truncation_mask_matches_loop(seed):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(10, 9, generator=g) < 0.7).double()
    finished = torch.rand(10, generator=g) < 0.5
    got = truncation_mask(mask, finished)
    assert got.dtype == mask.dtype
    assert got.tolist() == loop_truncation_mask(mask.tolist(), finished.tolist())


def test_truncation_mask_removes_truncated_rows_from_the_loss():
    """With the mask applied, a truncated row neither pushes the gradient nor counts in the
    token normaliser: the loss equals the loss of the finished rows alone."""
    from grpolab.objectives import policy_loss

    g = torch.Generator().manual_seed(0)
    B, T = 6, 8
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    mask = torch.ones(B, T, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    finished = torch.tensor([True, False, True, True, False, True])
    loss, _ = policy_loss(logp, logp.detach(), adv, truncation_mask(mask, finished), aggregation="token")
    loss.backward()
    keep = finished.nonzero().squeeze(-1)
    logp2 = logp.detach()[keep].clone().requires_grad_()
    loss2, _ = policy_loss(logp2, logp2.detach(), adv[keep], mask[keep], aggregation="token")
    loss2.backward()
    torch.testing.assert_close(loss, loss2, rtol=0, atol=1e-12)
    assert torch.all(logp.grad[~finished] == 0)
    torch.testing.assert_close(logp.grad[keep], logp2.grad, rtol=0, atol=1e-12)
