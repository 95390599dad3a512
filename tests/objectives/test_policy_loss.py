"""policy_loss: clipped surrogate x ratio level x aggregation (+ KL), docs/methods.md.

l_t = max(-A r, -A clip(r, 1-clip_low, 1+clip_high)), for A<0 min(l_t, -A dual_clip);
cumulative (CTPO): log_ratio = min(log_ratio, 10), s_t = pos_t**clip_power, clipped ratio
exp(clamp(log_ratio, -clip_low s_t, clip_high s_t)), for A<0 min(., -A exp(clip_high s_t)).
loss = sum W l. Expected values come from tests/objectives/reference.py (float64 loops) or hand
arithmetic, never from grpolab.
"""
import math

import pytest
import torch

from grpolab.objectives import aggregation_weights, policy_loss

from .helpers import AGGREGATIONS, RATIO_LEVELS, make_batch, poison, t64
from .reference import ref_aggregation_weights, ref_policy_loss

ATOL = 1e-10
CTPO = dict(clip_low=0.025, clip_high=0.05, clip_power=0.5)


def run(b, *, ratio, aggregation, adv=None, **kw):
    """Implementation loss (float) and d loss / d logp."""
    lp = b["logp"].clone().requires_grad_(True)
    loss, metrics = policy_loss(lp, b["old"], b["adv"] if adv is None else adv, b["mask"],
                                group_ids=b["gid"], ratio=ratio, aggregation=aggregation,
                                max_len=b["max_len"], **kw)
    loss.backward()
    return loss.detach(), lp.grad, metrics


def ref(b, *, ratio, aggregation, adv=None, **kw):
    return ref_policy_loss(b["logp"], b["old"], b["adv"] if adv is None else adv, b["mask"],
                           group_ids=b["gid"], ratio=ratio, aggregation=aggregation,
                           max_len=b["max_len"], **kw)


def assert_matches(got_loss, got_grad, r, atol=ATOL):
    assert abs(got_loss.item() - r.loss) <= atol, (got_loss.item(), r.loss)
    torch.testing.assert_close(got_grad.to(torch.float64), t64(r.grad), atol=atol, rtol=0)


# ------------------------------------------------------------------ loop reference, all combos
@pytest.mark.parametrize("ratio", RATIO_LEVELS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("per_token_adv", [False, True])
def test_matches_loop(ratio, aggregation, per_token_adv):
    # scale 0.35: a mix of unclipped, low-clipped, high-clipped and dual-clipped tokens
    scale = 1.0 if ratio == "gspo" else 0.35            # gspo averages: needs wider per-token spread
    b = make_batch(100 + len(ratio) + 7 * len(aggregation), B=12, T=14, scale=scale,
                   per_token_adv=per_token_adv, empty_rows=2)
    kw = CTPO if ratio == "cumulative" else {}
    loss, grad, _ = run(b, ratio=ratio, aggregation=aggregation, **kw)
    r = ref(b, ratio=ratio, aggregation=aggregation, **kw)
    kinds = {w for row in r.which for w in row if w}
    assert len(kinds) >= 2, kinds              # the inputs really exercise the clips
    assert_matches(loss, grad, r)


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
def test_matches_loop_without_dual_clip_and_with_fixed_clip_cumulative(ratio):
    b = make_batch(7, B=10, T=12, scale=0.3)
    for aggregation in ("token", "balanced"):
        loss, grad, _ = run(b, ratio=ratio, aggregation=aggregation, dual_clip=None, clip_low=0.1,
                            clip_high=0.15, clip_power=0.0)
        assert_matches(loss, grad, ref(b, ratio=ratio, aggregation=aggregation, dual_clip=None,
                                       clip_low=0.1, clip_high=0.15, clip_power=0.0))


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
def test_explicit_weights_are_used(ratio):
    # arbitrary non-negative weights: the result must be sum W l with exactly these W
    b = make_batch(31, B=8, T=10, scale=0.3)
    W = torch.rand(8, 10, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * b["mask"]
    loss, grad, _ = run(b, ratio=ratio, aggregation="token", weights=W)
    assert_matches(loss, grad, ref(b, ratio=ratio, aggregation="token", weights=W))


# ------------------------------------------------------------------ gradient checks
def _kinkless_batch(seed, B=6, T=5, one_token=False):
    """log ratios drawn from {-1.0, ~0, 0.8, 1.5}: far from every clip / dual-clip kink
    (token clip kinks at log 0.8 = -0.223, log 1.28 = 0.247, dual at log 3 = 1.099)."""
    g = torch.Generator().manual_seed(seed)
    b = make_batch(seed, B=B, T=T, zero_adv=0.0)
    choices = t64([-1.0, 0.0, 0.8, 1.5])
    d = choices[torch.randint(0, 4, (B, T), generator=g)] + 0.01 * torch.randn(B, T, generator=g, dtype=torch.float64)
    b["old"] = b["logp"] - d
    b["adv"] = b["adv"].sign() * (0.3 + b["adv"].abs())
    if one_token:
        mask = torch.zeros(B, T, dtype=torch.float64)
        mask[torch.arange(B), torch.randint(0, T, (B,), generator=g)] = 1.0
        b["mask"] = mask
    return b


@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_gradcheck_token_level(aggregation):
    b = _kinkless_batch(3)

    def f(lp):
        return policy_loss(lp, b["old"], b["adv"], b["mask"], group_ids=b["gid"], ratio="token",
                           aggregation=aggregation, max_len=b["max_len"], ref_logp=b["ref"],
                           kl_coef=0.1)[0]

    assert torch.autograd.gradcheck(f, (b["logp"].clone().requires_grad_(True),), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
def test_gradcheck_one_token_sequences_all_levels(ratio):
    # With one valid token per sequence the value at t depends on logp_t only, so the
    # stop-gradient construction coincides with the true derivative and finite differences apply.
    # cumulative: pos = 1, s = 1, log-space bounds [-0.2, 0.28], dual cap log 0.28: still kink-free.
    b = _kinkless_batch(4, B=8, T=4, one_token=True)

    def f(lp):
        return policy_loss(lp, b["old"], b["adv"], b["mask"], group_ids=b["gid"], ratio=ratio,
                           aggregation="balanced", ref_logp=b["ref"], kl_coef=0.05)[0]

    assert torch.autograd.gradcheck(f, (b["logp"].clone().requires_grad_(True),), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("ratio", ["sequence", "gspo", "cumulative"])
def test_gradient_is_own_token_only(ratio):
    # On-policy (logp == old) and no clipping active, d loss / d logp_t = -W_t A_t exactly
    # (r = 1 everywhere, d log_ratio_t / d logp_s = [s == t]): the prefix / sequence terms of
    # the value must not leak into the gradient.
    b = make_batch(12, B=7, T=9)
    b["old"] = b["logp"].clone()
    for aggregation in AGGREGATIONS:
        loss, grad, _ = run(b, ratio=ratio, aggregation=aggregation)
        W = t64(ref_aggregation_weights(b["mask"], aggregation, advantages=b["adv"], group_ids=b["gid"],
                                        max_len=b["max_len"]))
        torch.testing.assert_close(grad, -W * b["adv"][:, None], atol=1e-14, rtol=0)
        assert abs(loss.item() - float(-(W * b["adv"][:, None]).sum())) < 1e-14


# ------------------------------------------------------------------ hand-computed cases
def test_hand_token_level_ppo_and_dual_clip():
    # four one-token sequences, token aggregation: W = 1/4 each; clip [0.8, 1.28], dual 3
    # row0 A=+1, d=0.5 : r=1.64872 > 1.28 -> l = max(-1.64872, -1.28) = -1.28          grad 0
    # row1 A=-1, d=1.5 : r=4.48169 -> max(4.48169, 1.28) = 4.48169 -> min(., 3) = 3     grad 0
    # row2 A=-1, d=-0.5: r=0.60653 -> max(0.60653, 0.8) = 0.8                            grad 0
    # row3 A=+2, d=0.1 : r=1.10517 -> l = -2.21034                       grad -2*1.10517/4 = -0.552585
    # loss = (-1.28 + 3 + 0.8 - 2.21034184) / 4 = 0.30965816 / 4 = 0.07741454
    old = t64([[0.0], [0.0], [0.0], [0.0]])
    logp = t64([[0.5], [1.5], [-0.5], [0.1]]).requires_grad_(True)
    adv = t64([1.0, -1.0, -1.0, 2.0])
    mask = torch.ones(4, 1, dtype=torch.float64)
    loss, _ = policy_loss(logp, old, adv, mask)
    loss.backward()
    assert abs(loss.item() - (2.52 - 2 * math.exp(0.1)) / 4) < 1e-14
    assert abs(loss.item() - 0.07741454) < 1e-8
    torch.testing.assert_close(logp.grad, t64([[0.0], [0.0], [0.0], [-2 * math.exp(0.1) / 4]]),
                               atol=1e-12, rtol=0)
    # dual clip off: row1 contributes 4.48169 instead of 3 -> loss = (0.3096582 + 1.4816891)/4
    loss2, _ = policy_loss(logp.detach(), old, adv, mask, dual_clip=None)
    assert abs(loss2.item() - (2.52 - 2 * math.exp(0.1) + math.exp(1.5) - 3.0) / 4) < 1e-14


def _ctpo_single(x, A, t, T=100, **kw):
    """One sequence of T policy tokens, d_1 = x and d_t = 0 after, so D_t = x for every t;
    one-hot weights at (1-based) position t return l_t itself."""
    old = torch.zeros(1, T, dtype=torch.float64)
    logp = torch.zeros(1, T, dtype=torch.float64)
    logp[0, 0] = x
    logp.requires_grad_(True)
    W = torch.zeros(1, T, dtype=torch.float64)
    W[0, t - 1] = 1.0
    loss, m = policy_loss(logp, old, t64([A]), torch.ones(1, T, dtype=torch.float64), ratio="cumulative",
                          weights=W, **{**CTPO, **kw})
    loss.backward()
    return loss.item(), logp.grad


@pytest.mark.parametrize("x,A,t,expected,grad_t", [
    # t=1: s = 1, bounds [exp(-0.025), exp(0.05)] = [0.975310, 1.051271]
    (0.2, +1.0, 1, -math.exp(0.05), 0.0),      # r=1.22140 clipped high: l = -1.051271
    (0.2, -1.0, 1, math.exp(0.05), 0.0),       # max(1.22140, 1.051271)=1.22140; dual min(., e^0.05)
    (-0.2, -1.0, 1, math.exp(-0.025), 0.0),    # r=0.818731 < 0.975310: l = max(.818731, .975310)
    (-0.2, +1.0, 1, -math.exp(-0.2), -math.exp(-0.2)),  # pessimistic: -0.818731, unclipped, grad -A r
    # t=100: s = 100**0.5 = 10, bounds [exp(-0.25), exp(0.5)] = [0.778801, 1.648721]
    (0.2, +1.0, 100, -math.exp(0.2), -math.exp(0.2)),   # inside: -1.221403, grad -A r
    (0.2, -1.0, 100, math.exp(0.2), math.exp(0.2)),     # inside, below the cap 1.648721
    (0.7, +1.0, 100, -math.exp(0.5), 0.0),              # r=2.013753 clipped: -1.648721
    (0.7, -1.0, 100, math.exp(0.5), 0.0),               # max(2.013753,1.648721) -> cap 1.648721
    (-0.5, -1.0, 100, math.exp(-0.25), 0.0),            # r=0.606531 < 0.778801: l = 0.778801
    (-0.5, +1.0, 100, -math.exp(-0.5), -math.exp(-0.5)),  # -0.606531, unclipped
])
def test_hand_ctpo_positions_1_and_100(x, A, t, expected, grad_t):
    loss, grad = _ctpo_single(x, A, t)
    assert abs(loss - expected) < 1e-12, (loss, expected)
    exp_grad = torch.zeros(1, 100, dtype=torch.float64)
    exp_grad[0, t - 1] = grad_t
    torch.testing.assert_close(grad, exp_grad, atol=1e-12, rtol=0)


def test_hand_ctpo_bound_values():
    # the arithmetic quoted in docs/methods.md ("Importance ratios"): t=1 -> [0.975, 1.05]; t=100 -> [0.78, 1.65]
    big, small = 3.0, -3.0
    assert abs(-_ctpo_single(big, 1.0, 1)[0] - 1.0512711) < 1e-7        # exp(0.05)
    assert abs(_ctpo_single(small, -1.0, 1)[0] - 0.9753099) < 1e-7      # exp(-0.025)
    assert abs(-_ctpo_single(big, 1.0, 100)[0] - 1.6487213) < 1e-7      # exp(0.5)
    assert abs(_ctpo_single(small, -1.0, 100)[0] - 0.7788008) < 1e-7    # exp(-0.25)


def test_hand_ctpo_position_counts_policy_tokens_only():
    # mask [1, 0, 0, 1] (two tool tokens), d_1 = 0.3, A = +1, clip_high = 0.05, clip_power = 1:
    # at index 3 pos = 2 (not 4): bound 0.05*2 = 0.1 -> l = -exp(0.1) = -1.105171
    # (counting raw positions would give bound 0.2 -> -exp(0.2) = -1.221403)
    old = torch.zeros(1, 4, dtype=torch.float64)
    logp = t64([[0.3, 0.0, 0.0, 0.0]])
    W = t64([[0, 0, 0, 1.0]])
    loss, _ = policy_loss(logp, old, t64([1.0]), t64([[1, 0, 0, 1]]), ratio="cumulative", weights=W,
                          clip_low=0.025, clip_high=0.05, clip_power=1.0)
    assert abs(loss.item() + math.exp(0.1)) < 1e-12


def test_hand_ctpo_log_ratio_capped_at_10():
    # clip_power = 1, clip_high = 0.05: at pos 300 the bound is 15 > 10.
    # D = 12 -> min(12, 10) = 10 -> A=+1: l = -exp(10) = -22026.4658, gradient 0 (cap saturated)
    # A=-1: l = exp(10) (cap exp(15) not reached), gradient 0
    for A, expected in ((1.0, -math.exp(10.0)), (-1.0, math.exp(10.0))):
        loss, grad = _ctpo_single(12.0, A, 300, T=300, clip_power=1.0)
        assert abs(loss - expected) < 1e-8 * math.exp(10.0)
        assert torch.equal(grad, torch.zeros_like(grad))


def test_hand_aggregation_in_loss():
    # on-policy (r = 1): l = -A on every valid token, so loss = -sum W A
    # mask rows: [1,1,0] (A=+1), [1,0,0] (A=-1), [1,1,1] (A=+1), one group
    # token:    W=1/6       -> -(2*1 - 1 + 3*1)/6 = -4/6
    # sequence: n=3         -> -(1 - 1 + 1)/3 = -1/3
    # constant: L=5, n=3    -> -(2 - 1 + 3)/15 = -4/15
    # balanced: G=3, S+={0,2} 5 tokens, S-={1} 1 token: -( (2/3)*1 + (1/3)*(-1) ) = -1/3
    mask = t64([[1, 1, 0], [1, 0, 0], [1, 1, 1]])
    lp = t64([[-1.0, -2.0, -3.0], [-0.5, -0.6, -0.7], [-1.1, -1.2, -1.3]])
    adv = t64([1.0, -1.0, 1.0])
    gid = torch.tensor([0, 0, 0])
    for agg, exp in (("token", -4 / 6), ("sequence", -1 / 3), ("constant", -4 / 15), ("balanced", -1 / 3)):
        loss, _ = policy_loss(lp, lp.clone(), adv, mask, group_ids=gid, aggregation=agg, max_len=5)
        assert abs(loss.item() - exp) < 1e-14, agg


# ------------------------------------------------------------------ poisoned padding
@pytest.mark.parametrize("ratio", RATIO_LEVELS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_poisoned_padding(ratio, aggregation):
    b = make_batch(55, B=9, T=10, scale=0.3, per_token_adv=True)
    kw = dict(ref_logp=b["ref"], kl_coef=0.2, **(CTPO if ratio == "cumulative" else {}))
    clean_loss, clean_grad, clean_m = run(b, ratio=ratio, aggregation=aggregation, **kw)
    m = b["mask"]
    for bad in (1e9, float("nan")):
        pb = dict(b, logp=poison(b["logp"], m, bad), old=poison(b["old"], m, -bad if bad == bad else bad),
                  adv=poison(b["adv"], m, bad))
        kw_p = dict(kw, ref_logp=poison(b["ref"], m, bad))
        loss, grad, metrics = run(pb, ratio=ratio, aggregation=aggregation, **kw_p)
        assert torch.isfinite(loss) and torch.isfinite(grad).all()
        assert torch.equal(grad[m == 0], torch.zeros_like(grad[m == 0]))
        torch.testing.assert_close(loss, clean_loss, atol=1e-14, rtol=0)
        torch.testing.assert_close(grad, clean_grad, atol=1e-14, rtol=0)
        for k in ("loss", "clip_frac_low", "clip_frac_high", "clip_frac_dual", "ratio_mean",
                  "ratio_min", "ratio_max", "approx_kl"):
            assert torch.isfinite(metrics[k]).all(), (k, bad)
            torch.testing.assert_close(metrics[k], clean_m[k], atol=1e-12, rtol=0, msg=k)


# ------------------------------------------------------------------ micro-batch invariance
@pytest.mark.parametrize("ratio", RATIO_LEVELS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_micro_batches_reproduce_full_batch(ratio, aggregation):
    b = make_batch(77, B=13, T=11, scale=0.3, n_groups=4, empty_rows=2)
    kw = dict(ref_logp=b["ref"], kl_coef=0.05, **(CTPO if ratio == "cumulative" else {}))
    full_loss, full_grad, _ = run(b, ratio=ratio, aggregation=aggregation, **kw)
    W = aggregation_weights(b["mask"], aggregation, advantages=b["adv"], group_ids=b["gid"],
                            max_len=b["max_len"])
    lp = b["logp"].clone().requires_grad_(True)
    total = 0.0
    for s in (slice(0, 3), slice(3, 4), slice(4, 9), slice(9, 13)):   # splits cut through groups
        loss_s, _ = policy_loss(lp[s], b["old"][s], b["adv"][s], b["mask"][s], group_ids=b["gid"][s],
                                ratio=ratio, aggregation=aggregation, max_len=b["max_len"],
                                ref_logp=b["ref"][s], kl_coef=0.05, weights=W[s],
                                **(CTPO if ratio == "cumulative" else {}))
        loss_s.backward()
        total = total + loss_s.detach()
    torch.testing.assert_close(total, full_loss, atol=1e-13, rtol=0)
    torch.testing.assert_close(lp.grad, full_grad, atol=1e-13, rtol=0)


# ------------------------------------------------------------------ numerical safety
def _finite(loss, grad):
    return bool(torch.isfinite(loss)) and bool(torch.isfinite(grad).all())


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_fully_masked_batch(ratio, aggregation):
    b = make_batch(1, B=4, T=6, scale=0.3)
    b["mask"] = torch.zeros(4, 6, dtype=torch.float64)
    loss, grad, metrics = run(b, ratio=ratio, aggregation=aggregation, ref_logp=b["ref"], kl_coef=0.1)
    assert loss.item() == 0.0
    assert torch.equal(grad, torch.zeros_like(grad))
    for k, v in metrics.items():
        assert not torch.isinf(v).any(), k


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_all_equal_rewards_give_zero_loss(ratio, aggregation):
    from grpolab.objectives import group_advantages
    b = make_batch(2, B=8, T=7, scale=0.3)
    b["adv"] = group_advantages(torch.ones(8, dtype=torch.float64), b["gid"])
    loss, grad, _ = run(b, ratio=ratio, aggregation=aggregation)
    assert loss.item() == 0.0
    assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_edge_batches_match_reference(ratio, aggregation):
    # singleton groups, a group whose advantages are all positive (S- empty), a group that is all
    # negative (S+ empty), zero-length responses, and a group with only an empty response
    mask = t64([[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1], [0, 1, 0, 0], [1, 1, 0, 0],
                [0, 0, 0, 0]])
    gid = torch.tensor([0, 0, 1, 2, 2, 3, 4])
    adv = t64([0.7, 1.2, -0.4, -1.0, -2.0, 0.9, 1.0])
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(7, 4, generator=g, dtype=torch.float64)
    b = dict(logp=logp, old=logp - 0.3 * torch.randn(7, 4, generator=g, dtype=torch.float64), adv=adv,
             mask=mask, gid=gid, max_len=6)
    kw = CTPO if ratio == "cumulative" else {}
    loss, grad, _ = run(b, ratio=ratio, aggregation=aggregation, **kw)
    assert _finite(loss, grad)
    assert_matches(loss, grad, ref(b, ratio=ratio, aggregation=aggregation, **kw))


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_ratios_of_plus_minus_50(ratio, aggregation, dtype):
    # |logp - old| = 50 on every token (clamped to 20 per token; the sequence sum reaches 200).
    # With the default dual clip every loss term is finite (A>0: the clipped branch wins;
    # A<0: capped at -A*3 or -A*exp(clip_high s)), so loss and gradient must be finite.
    b = make_batch(9, B=8, T=10, zero_adv=0.0, dtype=dtype)
    g = torch.Generator().manual_seed(1)
    sign = torch.where(torch.rand(8, 10, generator=g) < 0.5, -1.0, 1.0).to(dtype)
    sign[:4] = 1.0                           # rows 0-3 all +50, rows 4-7 mixed
    sign[4:6] = -1.0                         # rows 4-5 all -50
    b["old"] = b["logp"] - 50.0 * sign
    kw = CTPO if ratio == "cumulative" else {}
    loss, grad, metrics = run(b, ratio=ratio, aggregation=aggregation, **kw)
    assert _finite(loss, grad), (loss, grad)
    if dtype == torch.float64:
        r = ref(b, ratio=ratio, aggregation=aggregation, **kw)
        assert abs(loss.item() - r.loss) <= 1e-9 * max(1.0, abs(r.loss))
        torch.testing.assert_close(grad, t64(r.grad), atol=1e-9, rtol=1e-9)


def test_sequence_ratio_beyond_e20_is_capped_by_the_documented_guard():
    # grpolab deviates from the papers here on purpose (docs/methods.md, "Guard"): for the
    # non-cumulative levels the log ratio is capped at +20 before exp, because a sequence-level sum
    # of per-token log ratios (each up to 20) overflows float32 otherwise (verl caps GSPO's at 10).
    # Sequence level, two tokens with d = 15 each -> value 30, capped to 20; A = -1, dual clip off:
    # l_t = max(e^20, 1.28) = e^20 = 4.85165e8; token aggregation W = 1/2 -> loss = e^20, and
    # the cap's gradient is 0 beyond it (the token is as "clipped" as it can be).
    logp = t64([[15.0, 15.0]]).requires_grad_(True)
    loss, _ = policy_loss(logp, torch.zeros(1, 2, dtype=torch.float64), t64([-1.0]),
                          torch.ones(1, 2, dtype=torch.float64), ratio="sequence", dual_clip=None)
    loss.backward()
    e20 = math.exp(20.0)
    assert abs(loss.item() - e20) <= 1e-12 * e20, (loss.item(), e20)
    torch.testing.assert_close(logp.grad, t64([[0.0, 0.0]]), atol=0, rtol=0)
    # below the cap the formula holds exactly: d = 9 each -> value 18, loss e^18, grad e^18 / 2
    logp = t64([[9.0, 9.0]]).requires_grad_(True)
    loss, _ = policy_loss(logp, torch.zeros(1, 2, dtype=torch.float64), t64([-1.0]),
                          torch.ones(1, 2, dtype=torch.float64), ratio="sequence", dual_clip=None)
    loss.backward()
    e18 = math.exp(18.0)
    assert abs(loss.item() - e18) <= 1e-12 * e18
    torch.testing.assert_close(logp.grad, t64([[e18 / 2, e18 / 2]]), atol=0, rtol=1e-12)


# ------------------------------------------------------------------ metrics
REQUIRED_METRICS = ("loss", "clip_frac_low", "clip_frac_high", "clip_frac_dual", "ratio_mean",
                    "ratio_min", "ratio_max", "approx_kl")


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
def test_metrics_are_detached_and_sane(ratio):
    b = make_batch(5, B=8, T=9, scale=0.4)
    _, _, m = run(b, ratio=ratio, aggregation="token", **(CTPO if ratio == "cumulative" else {}))
    for k in REQUIRED_METRICS:
        assert k in m, k
        assert isinstance(m[k], torch.Tensor) and not m[k].requires_grad, k
        assert torch.isfinite(m[k]).all(), k
    for k in ("clip_frac_low", "clip_frac_high", "clip_frac_dual"):
        assert 0.0 <= m[k].item() <= 1.0, k
    assert m["ratio_min"] <= m["ratio_mean"] <= m["ratio_max"]
    if ratio == "cumulative":
        assert "clip_frac_by_pos" in m
        v = m["clip_frac_by_pos"]
        assert not v.requires_grad and not torch.isinf(v).any()
        fin = v[torch.isfinite(v)]
        assert ((fin >= 0) & (fin <= 1)).all()


def test_metrics_loss_equals_loss():
    b = make_batch(6, B=6, T=8, scale=0.3)
    loss, _, m = run(b, ratio="token", aggregation="balanced")
    assert m["loss"].item() == loss.item()


@pytest.mark.parametrize("ratio", RATIO_LEVELS)
def test_metrics_on_policy(ratio):
    b = make_batch(8, B=7, T=9)
    b["old"] = b["logp"].clone()
    _, _, m = run(b, ratio=ratio, aggregation="token")
    for k in ("clip_frac_low", "clip_frac_high", "clip_frac_dual", "approx_kl"):
        assert m[k].item() == 0.0, k
    for k in ("ratio_mean", "ratio_min", "ratio_max"):
        assert abs(m[k].item() - 1.0) < 1e-14, k


def test_metrics_clip_fractions_hand():
    # token level, 3 valid tokens each case; W token
    mask = t64([[1, 1, 1, 0]])
    lp = torch.zeros(1, 4, dtype=torch.float64)
    # A>0, r = e^1 = 2.718 > 1.28 on every valid token: all clipped high
    _, m = policy_loss(lp, lp - 1.0, t64([1.0]), mask)
    assert m["clip_frac_high"].item() == 1.0 and m["clip_frac_low"].item() == 0.0
    # A<0, r = e^-1 = 0.368 < 0.8: all clipped low
    _, m = policy_loss(lp, lp + 1.0, t64([-1.0]), mask)
    assert m["clip_frac_low"].item() == 1.0 and m["clip_frac_high"].item() == 0.0
    # A<0, r = e^1.5 = 4.48 > 3: all dual-clipped
    _, m = policy_loss(lp, lp - 1.5, t64([-1.0]), mask)
    assert m["clip_frac_dual"].item() == 1.0
    # ratio min / max over valid tokens only: d = [0.1, -0.2, 0.3, (masked 5.0)]
    _, m = policy_loss(lp, -t64([[0.1, -0.2, 0.3, 5.0]]), t64([1.0]), mask)
    assert abs(m["ratio_min"].item() - math.exp(-0.2)) < 1e-14
    assert abs(m["ratio_max"].item() - math.exp(0.3)) < 1e-14


def test_ctpo_clip_frac_by_pos_hand():
    # D_t = 0.2 for every t of a 40-token sequence, A=+1, clip_high=0.05, p=0.5:
    # clipped high where 0.05 sqrt(pos) < 0.2 <=> pos < 16 -> positions 1..15 clipped, 16..40 not.
    from grpolab.objectives import POSITION_BUCKETS
    T = 40
    logp = torch.zeros(1, T, dtype=torch.float64)
    logp[0, 0] = 0.2
    _, m = policy_loss(logp, torch.zeros(1, T, dtype=torch.float64), t64([1.0]),
                       torch.ones(1, T, dtype=torch.float64), ratio="cumulative", **CTPO)
    v = m["clip_frac_by_pos"]
    edges = list(POSITION_BUCKETS) + [10**9]
    assert v.shape == (len(POSITION_BUCKETS),)
    for k in range(len(POSITION_BUCKETS)):
        positions = [p for p in range(1, T + 1) if edges[k] <= p < edges[k + 1]]
        if not positions:
            continue
        exp = sum(1 for p in positions if p < 16) / len(positions)
        assert abs(v[k].item() - exp) < 1e-12, (k, v[k].item(), exp)


# ------------------------------------------------------------------ float32 and bad configs
@pytest.mark.parametrize("ratio", RATIO_LEVELS)
def test_float32_close_to_float64_reference(ratio):
    b = make_batch(40, B=10, T=12, scale=0.3, dtype=torch.float32)
    kw = CTPO if ratio == "cumulative" else {}
    loss, grad, _ = run(b, ratio=ratio, aggregation="balanced", **kw)
    assert loss.dtype == torch.float32 and grad.dtype == torch.float32
    r = ref(b, ratio=ratio, aggregation="balanced", **kw)
    assert abs(loss.item() - r.loss) < 1e-5
    torch.testing.assert_close(grad.double(), t64(r.grad), atol=1e-5, rtol=1e-4)


def test_inputs_not_modified():
    b = make_batch(41, B=6, T=7, scale=0.3, per_token_adv=True)
    copies = {k: v.clone() for k, v in b.items() if isinstance(v, torch.Tensor)}
    for ratio in RATIO_LEVELS:
        for agg in AGGREGATIONS:
            run(b, ratio=ratio, aggregation=agg, ref_logp=b["ref"], kl_coef=0.1)
    for k, v in copies.items():
        assert torch.equal(b[k], v), k


def test_invalid_configs_raise():
    b = make_batch(0, B=4, T=5)
    lp = b["logp"]
    with pytest.raises((ValueError, KeyError)):
        policy_loss(lp, b["old"], b["adv"], b["mask"], ratio="nope")
    with pytest.raises((ValueError, KeyError)):
        policy_loss(lp, b["old"], b["adv"], b["mask"], aggregation="nope")
    with pytest.raises((ValueError, KeyError, TypeError)):
        policy_loss(lp, b["old"], b["adv"], b["mask"], aggregation="constant")          # no max_len
    with pytest.raises((ValueError, KeyError)):
        policy_loss(lp, b["old"], b["adv"], b["mask"], ref_logp=b["ref"], kl_coef=0.1, kl_estimator="k9")


def test_cum_log_ratio_drift_by_position_matches_loop_reference():
    # the mean square of the prefix sum of token log ratios, per position bucket and after
    # position 100, over policy tokens only: a loop reference, with an inner tool-output gap and
    # poisoned (huge) values on the masked tokens that must change nothing
    from grpolab.objectives import LATE_POSITION, POSITION_BUCKETS
    g = torch.Generator().manual_seed(3)
    B, T = 3, 140
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[0, 120:] = 0          # short row
    mask[1, 30:40] = 0         # tool output in the middle
    mask[2, :5] = 0            # leading non-policy tokens
    logp = -torch.rand(B, T, generator=g, dtype=torch.float64)
    old = logp + 0.05 * torch.randn(B, T, generator=g, dtype=torch.float64)
    logp = torch.where(mask.bool(), logp, torch.full_like(logp, -1e6))
    old = torch.where(mask.bool(), old, torch.full_like(old, 1e6))
    _, m = policy_loss(logp, old, t64([1.0, -1.0, 0.5]), mask)
    edges = list(POSITION_BUCKETS) + [10**9]
    sq = [[] for _ in POSITION_BUCKETS]
    late = []
    for b in range(B):
        cum, pos = 0.0, 0
        for t in range(T):
            if not mask[b, t]:
                continue
            pos += 1
            cum += float(logp[b, t] - old[b, t])
            k = next(i for i in range(len(POSITION_BUCKETS)) if edges[i] <= pos < edges[i + 1])
            sq[k].append(cum * cum)
            if pos > LATE_POSITION:
                late.append(cum * cum)
    for k, vals in enumerate(sq):
        exp = sum(vals) / len(vals) if vals else 0.0
        assert abs(m["cum_log_ratio_sq_by_pos"][k].item() - exp) < 1e-12, k
    assert m["tokens_late"].item() == len(late) > 0
    assert abs(m["cum_log_ratio_sq_late"].item() - sum(late) / len(late)) < 1e-12
    # on-policy: no drift anywhere
    _, m0 = policy_loss(logp, logp.clone(), t64([1.0, -1.0, 0.5]), mask)
    assert m0["cum_log_ratio_sq_by_pos"].abs().max().item() == 0.0
    assert m0["cum_log_ratio_sq_late"].item() == 0.0
