"""Group advantages (GRPO / Dr.GRPO), leave-one-out (RLOO) and the estimator registry.

docs/methods.md ("Advantages"): A_i = (R_i - mean_g R) / (std_g R + 1e-6), std unbiased; Dr.GRPO drops the
division; RLOO subtracts the mean of the other G-1 rewards. A single-sample group gets 0.
"""
import math

import pytest
import torch

from grpolab.objectives import (ADVANTAGE_ESTIMATORS, get_advantage_estimator, group_advantages,
                                leave_one_out)

from .reference import ref_group_advantages, ref_leave_one_out

ATOL = 1e-10


def _uneven(seed, B=23, n_groups=6):
    g = torch.Generator().manual_seed(seed)
    gid = torch.randint(0, n_groups, (B,), generator=g) * 11 - 5      # negative ids too
    R = torch.randn(B, generator=g, dtype=torch.float64)
    return R, gid


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("normalize_std", [True, False])
def test_group_advantages_matches_loop(seed, normalize_std):
    R, gid = _uneven(seed)
    got = group_advantages(R, gid, normalize_std=normalize_std)
    exp = torch.tensor(ref_group_advantages(R, gid, normalize_std=normalize_std), dtype=torch.float64)
    assert got.shape == R.shape
    torch.testing.assert_close(got.to(torch.float64), exp, atol=ATOL, rtol=0)


@pytest.mark.parametrize("seed", range(5))
def test_leave_one_out_matches_loop(seed):
    R, gid = _uneven(seed)
    got = leave_one_out(R, gid)
    exp = torch.tensor(ref_leave_one_out(R, gid), dtype=torch.float64)
    torch.testing.assert_close(got.to(torch.float64), exp, atol=ATOL, rtol=0)


def test_group_advantages_hand_case():
    # group 0: R = [1, 0, 0, 1]: mean 0.5, unbiased var = 4*0.25/3 = 1/3, std = 0.57735027
    #   A = +-0.5 / (0.57735027 + 1e-6) = +-0.86602390...
    # group 1: R = [2, 4]: mean 3, var = (1+1)/1 = 2, std = 1.41421356, A = -+1/(1.41421356+1e-6)
    # group 2: R = [7]: single sample -> 0
    R = torch.tensor([1.0, 0.0, 2.0, 0.0, 4.0, 1.0, 7.0], dtype=torch.float64)
    gid = torch.tensor([0, 0, 1, 0, 1, 0, 2])
    a0 = 0.5 / (math.sqrt(1.0 / 3.0) + 1e-6)
    a1 = 1.0 / (math.sqrt(2.0) + 1e-6)
    exp = torch.tensor([a0, -a0, -a1, -a0, a1, a0, 0.0], dtype=torch.float64)
    torch.testing.assert_close(group_advantages(R, gid), exp, atol=1e-12, rtol=0)
    # Dr.GRPO: just R - mean
    exp_dr = torch.tensor([0.5, -0.5, -1.0, -0.5, 1.0, 0.5, 0.0], dtype=torch.float64)
    torch.testing.assert_close(group_advantages(R, gid, normalize_std=False), exp_dr, atol=1e-12, rtol=0)
    # RLOO: group 0, R=1: 1 - (0+0+1)/3 = 2/3 ; R=0: 0 - (1+0+1)/3 = -2/3 ; group 1: 2-4=-2, 4-2=2
    exp_loo = torch.tensor([2 / 3, -2 / 3, -2.0, -2 / 3, 2.0, 2 / 3, 0.0], dtype=torch.float64)
    torch.testing.assert_close(leave_one_out(R, gid), exp_loo, atol=1e-12, rtol=0)


def test_eps_is_used():
    # R=[0, 2]: mean 1, std sqrt(2); eps=0.5 -> A = +-1/(1.41421356+0.5) = +-0.52049...
    R = torch.tensor([0.0, 2.0], dtype=torch.float64)
    gid = torch.tensor([0, 0])
    a = 1.0 / (math.sqrt(2.0) + 0.5)
    torch.testing.assert_close(group_advantages(R, gid, eps=0.5),
                               torch.tensor([-a, a], dtype=torch.float64), atol=1e-12, rtol=0)


def test_all_equal_rewards_and_single_sample_groups_are_zero_and_finite():
    R = torch.tensor([1.0, 1.0, 1.0, 0.5, 3.0], dtype=torch.float64)
    gid = torch.tensor([0, 0, 0, 1, 2])                    # group 0 all equal; 1 and 2 singletons
    for fn in (lambda r, g: group_advantages(r, g), lambda r, g: group_advantages(r, g, normalize_std=False),
               leave_one_out):
        A = fn(R, gid)
        assert torch.isfinite(A).all()
        assert torch.equal(A, torch.zeros_like(A))


def test_group_sums_to_zero_and_rloo_identity():
    R, gid = _uneven(11, B=40, n_groups=5)
    A = group_advantages(R, gid)
    loo = leave_one_out(R, gid)
    dr = group_advantages(R, gid, normalize_std=False)
    for k in gid.unique():
        sel = gid == k
        G = int(sel.sum())
        assert abs(float(A[sel].sum())) < 1e-9
        if G > 1:
            # RLOO = G/(G-1) * (R - mean): a different formula from the loop reference
            torch.testing.assert_close(loo[sel], dr[sel] * G / (G - 1), atol=1e-12, rtol=0)


def test_registry():
    assert {"grpo", "drgrpo", "rloo"} <= set(ADVANTAGE_ESTIMATORS)
    R, gid = _uneven(3)
    torch.testing.assert_close(get_advantage_estimator("grpo")(R, gid),
                               torch.tensor(ref_group_advantages(R, gid), dtype=torch.float64),
                               atol=ATOL, rtol=0)
    torch.testing.assert_close(get_advantage_estimator("drgrpo")(R, gid),
                               torch.tensor(ref_group_advantages(R, gid, normalize_std=False),
                                            dtype=torch.float64), atol=ATOL, rtol=0)
    torch.testing.assert_close(get_advantage_estimator("rloo")(R, gid),
                               torch.tensor(ref_leave_one_out(R, gid), dtype=torch.float64),
                               atol=ATOL, rtol=0)
    with pytest.raises((ValueError, KeyError)):
        get_advantage_estimator("no-such-estimator")


def test_float32_close_to_reference():
    R, gid = _uneven(7)
    got = group_advantages(R.float(), gid)
    exp = torch.tensor(ref_group_advantages(R, gid), dtype=torch.float64)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), exp, atol=1e-5, rtol=1e-5)
