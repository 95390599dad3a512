"""KL estimators (docs/methods.md, "KL to a reference policy"): k1 = logp - ref, k2 = 0.5 (logp - ref)^2,
k3 = exp(ref - logp) - (ref - logp) - 1."""
import math

import pytest
import torch

from grpolab.objectives import KL_ESTIMATORS, kl_penalty, policy_loss

from .helpers import make_batch, poison, t64
from .reference import KL_NAMES, ref_kl, ref_kl_penalty, ref_policy_loss


def _pair(seed, B=5, T=7, spread=3.0):
    g = torch.Generator().manual_seed(seed)
    logp = -4 * torch.rand(B, T, generator=g, dtype=torch.float64)
    ref = logp + spread * torch.randn(B, T, generator=g, dtype=torch.float64).clamp(-1.6, 1.6)
    return logp, ref


def test_registry_names():
    assert set(KL_NAMES) <= set(KL_ESTIMATORS)


@pytest.mark.parametrize("est", KL_NAMES)
def test_values_and_gradient_match_formula(est):
    logp, ref = _pair(1)
    lp = logp.clone().requires_grad_(True)
    out = kl_penalty(lp, ref, est)
    torch.testing.assert_close(out, t64(ref_kl_penalty(logp, ref, est)), atol=1e-10, rtol=1e-12)
    out.sum().backward()
    exp_grad = [[ref_kl(float(logp[i, t]), float(ref[i, t]), est)[1] for t in range(logp.shape[1])]
                for i in range(logp.shape[0])]
    torch.testing.assert_close(lp.grad, t64(exp_grad), atol=1e-10, rtol=1e-12)


def test_hand_values():
    # logp = -1, ref = -2: x = ref - logp = -1
    # k1 = 1 ; k2 = 0.5 ; k3 = e^-1 - (-1) - 1 = 0.36787944117
    logp, ref = t64([[-1.0]]), t64([[-2.0]])
    assert abs(float(kl_penalty(logp, ref, "k1")) - 1.0) < 1e-12
    assert abs(float(kl_penalty(logp, ref, "k2")) - 0.5) < 1e-12
    assert abs(float(kl_penalty(logp, ref, "k3")) - math.exp(-1.0)) < 1e-12


def test_k3_k2_nonnegative_zero_at_equality_and_k3_close_to_k2_for_small_gaps():
    logp, ref = _pair(2)
    assert (kl_penalty(logp, ref, "k3") >= 0).all()
    assert (kl_penalty(logp, ref, "k2") >= 0).all()
    for est in KL_NAMES:
        z = kl_penalty(logp, logp.clone(), est)
        assert torch.equal(z, torch.zeros_like(z)), est
    # k3 = x^2/2 + O(x^3): for |x| <= 1e-3 it agrees with k2 to ~1e-10
    small_ref = logp + 1e-3 * torch.tanh(torch.randn(logp.shape, dtype=torch.float64,
                                                      generator=torch.Generator().manual_seed(0)))
    torch.testing.assert_close(kl_penalty(logp, small_ref, "k3"), kl_penalty(logp, small_ref, "k2"),
                               atol=1e-9, rtol=0)


def test_masked_kl_poisoned():
    b = make_batch(3, B=6, T=8)
    clean = kl_penalty(b["logp"], b["ref"], "k3", mask=b["mask"])
    torch.testing.assert_close(clean, t64(ref_kl_penalty(b["logp"], b["ref"], "k3")) * b["mask"],
                               atol=1e-12, rtol=0)
    dirty = kl_penalty(poison(b["logp"], b["mask"], float("nan")), poison(b["ref"], b["mask"], 1e9),
                       "k3", mask=b["mask"])
    assert torch.equal(dirty, clean)


@pytest.mark.parametrize("est", KL_NAMES)
@pytest.mark.parametrize("aggregation", ["token", "balanced"])
def test_kl_term_in_policy_loss(est, aggregation):
    b = make_batch(6, B=10, T=9, scale=0.1)
    lp = b["logp"].clone().requires_grad_(True)
    loss, _ = policy_loss(lp, b["old"], b["adv"], b["mask"], group_ids=b["gid"], aggregation=aggregation,
                          ref_logp=b["ref"], kl_coef=0.3, kl_estimator=est)
    loss.backward()
    ref = ref_policy_loss(b["logp"], b["old"], b["adv"], b["mask"], group_ids=b["gid"],
                          aggregation=aggregation, ref_logp=b["ref"], kl_coef=0.3, kl_estimator=est)
    assert abs(loss.item() - ref.loss) < 1e-10
    torch.testing.assert_close(lp.grad, t64(ref.grad), atol=1e-10, rtol=0)
    # the KL term really contributes (the test could fail if it were ignored)
    no_kl = ref_policy_loss(b["logp"], b["old"], b["adv"], b["mask"], group_ids=b["gid"],
                            aggregation=aggregation)
    assert abs(ref.loss - no_kl.loss) > 1e-4


@pytest.mark.parametrize("x", [25.0, -25.0])
def test_k3_beyond_20_nats_follows_the_formula(x):
    # (grpolab's k3 is exact up to x = 50 and linear beyond; see test_k3_linear_beyond_50)
    # docs/methods.md ("KL to a reference policy"): k3 = exp(x) - x - 1 with x = ref - logp, no
    # clamp. Both values are finite in float64 (and float32):
    #   x = +25: k3 = e^25 - 26 = 7.2004899e10,  d k3 / d logp = 1 - e^25 = -7.2004899e10
    #   x = -25: k3 = e^-25 + 24 = 24.0000000000, d k3 / d logp = 1 - e^-25 = 0.99999999999
    # A clamp of x to +-20 would give 4.85e8 / 19 and a zero gradient: the KL penalty would stop
    # pulling exactly the tokens that drifted furthest from the reference.
    lp = torch.zeros(1, 1, dtype=torch.float64, requires_grad=True)
    v = kl_penalty(lp, t64([[x]]), "k3")
    v.sum().backward()
    exp_v, exp_g = math.exp(x) - x - 1.0, 1.0 - math.exp(x)
    assert abs(v.item() - exp_v) <= 1e-12 * max(1.0, abs(exp_v)), (v.item(), exp_v)
    assert abs(lp.grad.item() - exp_g) <= 1e-12 * max(1.0, abs(exp_g)), (lp.grad.item(), exp_g)


def test_k3_linear_beyond_50():
    # Guard (docs/methods.md): beyond x = 50, k3 continues with its tangent at 50:
    # k3(60) = (e^50 - 51) + (e^50 - 1) * 10, gradient d/dlogp = -(e^50 - 1), finite in float32.
    lp = torch.zeros(1, 1, dtype=torch.float32, requires_grad=True)
    v = kl_penalty(lp, torch.full((1, 1), 60.0), "k3")
    v.sum().backward()
    e50 = math.exp(50.0)
    assert math.isfinite(v.item()) and abs(v.item() - ((e50 - 51) + (e50 - 1) * 10)) <= 1e-6 * 11 * e50
    assert abs(lp.grad.item() + (e50 - 1)) <= 1e-6 * e50
