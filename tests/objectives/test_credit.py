"""Token-level credit (RLSD, GEAR, OPSD), docs/methods.md ("Token-level credit") and credit.py's GEAR rules.

Expected values come from tests/objectives/reference.py (float64 loops) or hand arithmetic in the
comments, never from grpolab.
"""
import math

import pytest
import torch

from grpolab.objectives import (
    CREDIT_METHODS,
    credit_advantages,
    gear_advantages,
    gear_segments,
    lam_schedule,
    opsd_advantages,
    opsd_loss,
    policy_loss,
    rlsd_advantages,
)

from .helpers import make_batch, poison, t64
from .reference import ref_gear, ref_policy_loss, ref_rlsd

ATOL = 1e-12


def _credit_batch(seed, B=12, T=16, spread=0.6, per_token_adv=False):
    """make_batch plus a teacher whose log-probs differ from the student's by N(0, spread)
    (enough to clip some weights at eps_w = 0.2) and a non-negative 'KL' divergence with spikes."""
    b = make_batch(seed, B=B, T=T, per_token_adv=per_token_adv, empty_rows=2)
    g = torch.Generator().manual_seed(seed + 1000)
    b["student"] = b["logp"]
    b["teacher"] = b["logp"] + spread * torch.randn(B, T, generator=g, dtype=torch.float64)
    base = 0.05 * torch.rand(B, T, generator=g, dtype=torch.float64)
    spikes = (torch.rand(B, T, generator=g) < 0.12).to(torch.float64) * (0.5 + torch.rand(B, T, generator=g, dtype=torch.float64))
    b["div"] = base + spikes
    b["boundary"] = (torch.rand(B, T, generator=g) < 0.15).to(torch.float64)
    b["span"] = (torch.rand(B, T, generator=g) < 0.7).to(torch.float64)
    return b


# ------------------------------------------------------------------ lam = 0 is GRPO exactly
@pytest.mark.parametrize("name", ["rlsd", "gear"])
def test_lam_zero_reproduces_grpo_exactly(name):
    b = _credit_batch(1, spread=3.0)
    res = credit_advantages(name, b["adv"], b["student"], b["teacher"], b["mask"], lam=0.0, eps_w=0.2,
                            divergence=b["div"])
    expected = b["adv"][:, None] * b["mask"]                      # A on every valid token, 0 elsewhere
    assert torch.equal(res.advantages, expected)
    # and the loss / gradient through policy_loss are bit-identical to the [B]-advantage GRPO run
    for agg in ("token", "sequence", "balanced"):
        lp1 = b["logp"].clone().requires_grad_(True)
        lp2 = b["logp"].clone().requires_grad_(True)
        l1, _ = policy_loss(lp1, b["old"], b["adv"], b["mask"], group_ids=b["gid"], aggregation=agg)
        l2, _ = policy_loss(lp2, b["old"], res.advantages, b["mask"], group_ids=b["gid"], aggregation=agg)
        l1.backward()
        l2.backward()
        assert l1.item() == l2.item()
        assert torch.equal(lp1.grad, lp2.grad)


# ------------------------------------------------------------------ sign never flips
@pytest.mark.parametrize("seed", range(4))
def test_sign_of_every_token_advantage_is_sign_of_A(seed):
    b = _credit_batch(seed, spread=50.0)                         # huge gaps: every weight clips
    g = torch.Generator().manual_seed(seed)
    for lam, eps_w in ((1.0, 0.999), (0.5, 0.2), (torch.rand(1, generator=g).item(), 0.9)):
        rl = rlsd_advantages(b["adv"], b["student"], b["teacher"], b["mask"], lam=lam, eps_w=eps_w)
        ge = gear_advantages(b["adv"], b["student"], b["teacher"], b["mask"], lam=lam, eps_w=eps_w,
                             divergence=b["div"] * 100).advantages
        expected = torch.sign(b["adv"])[:, None] * b["mask"]
        assert torch.equal(torch.sign(rl), expected)
        assert torch.equal(torch.sign(ge), expected)
        # and magnitudes stay in [1 - lam eps_w, 1 + lam eps_w] |A|
        valid = b["mask"].bool() & (b["adv"][:, None] != 0)
        for out in (rl, ge):
            ratio = (out / b["adv"][:, None])[valid]
            assert (ratio >= 1 - lam * eps_w - 1e-12).all() and (ratio <= 1 + lam * eps_w + 1e-12).all()


# ------------------------------------------------------------------ loop reference
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("opts", [
    {}, {"negative_only": True}, {"span": True}, {"lam": 1.0, "eps_w": 0.5}, {"per_token_adv": True},
])
def test_rlsd_matches_loop(seed, opts):
    opts = dict(opts)
    b = _credit_batch(10 + seed, per_token_adv=opts.pop("per_token_adv", False))
    span = b["span"] if opts.pop("span", False) else None
    got = rlsd_advantages(b["adv"], b["student"], b["teacher"], b["mask"], span_mask=span, **opts)
    ref = ref_rlsd(b["adv"], b["student"], b["teacher"], b["mask"], span_mask=span, **opts)
    torch.testing.assert_close(got, t64(ref), atol=ATOL, rtol=0)
    # the inputs exercise both clipped and unclipped weights
    d = ((b["teacher"] - b["student"]) * b["mask"]).abs()
    assert (d > math.log(1.2)).any() and ((d < 0.1) & b["mask"].bool()).any()


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("opts", [
    {},                                                         # KL divergence, MAD rule
    {"logratio": True},                                         # |delta| as divergence
    {"threshold": "quantile", "quantile": 0.8},
    {"boundary": True, "k": 1.0},
    {"boundary": True, "negative_only": True, "span": True, "lam": 1.0},
    {"min_divergence": 0.3, "k": 0.0},
    {"per_token_adv": True, "boundary": True},
    {"min_drop": 0.0, "boundary": True},                        # any teacher drop departs
])
@pytest.mark.parametrize("anchor", ["departure", "spike"])
def test_gear_matches_loop(seed, opts, anchor):
    opts = dict(opts)
    opts["anchor"] = anchor
    if anchor == "departure":  # the batch's teacher gap is N(0, 0.6): ln 2 leaves few anchors in 12 rows
        opts.setdefault("min_drop", 0.2)
    b = _credit_batch(20 + seed, per_token_adv=opts.pop("per_token_adv", False))
    div = None if opts.pop("logratio", False) else b["div"]
    bnd = b["boundary"] if opts.pop("boundary", False) else None
    span = b["span"] if opts.pop("span", False) else None
    got = gear_advantages(b["adv"], b["student"], b["teacher"], b["mask"], divergence=div,
                          boundary_mask=bnd, span_mask=span, **opts)
    ref = ref_gear(b["adv"], b["student"], b["teacher"], b["mask"], divergence=div, boundary_mask=bnd,
                   span_mask=span, **opts)
    assert got.segment_ids.tolist() == ref["segment_ids"]
    assert got.anchors.tolist() == ref["anchors"]
    torch.testing.assert_close(got.threshold, t64(ref["threshold"]), atol=ATOL, rtol=0)
    torch.testing.assert_close(got.advantages, t64(ref["advantages"]), atol=ATOL, rtol=0)
    assert (got.segment_ids > 0).any() and ((got.segment_ids == 0) & b["mask"].bool()).any()


# ------------------------------------------------------------------ GEAR segmentation by hand
def _seg(div_row, boundary=None, mask=None, **kw):
    D = t64([div_row])
    m = torch.ones_like(D) if mask is None else t64([mask])
    bnd = None if boundary is None else t64([boundary])
    seg, anchors, anchor_pos, tau = gear_segments(D, m, boundary_mask=bnd, **kw)
    return seg[0].tolist(), anchors[0].tolist(), anchor_pos[0].tolist(), tau[0].item()


def test_gear_single_spike():
    # values 0.1 x7 and 2.0: median 0.1, MAD 0 -> tau 0.1; only t=3 (2.0) is above it
    seg, anchors, pos, tau = _seg([0.1, 0.1, 0.1, 2.0, 0.1, 0.1, 0.1, 0.1])
    assert tau == pytest.approx(0.1, abs=1e-15)
    assert anchors == [False, False, False, True, False, False, False, False]
    assert seg == [0, 0, 0, 1, 1, 1, 1, 1]                # the spike owns the whole continuation
    assert pos == [-1, -1, -1, 3, 3, 3, 3, 3]


def test_gear_two_spikes():
    seg, anchors, _, _ = _seg([0.1, 1.5, 0.1, 0.1, 0.1, 3.0, 0.1, 0.1])
    assert [t for t, a in enumerate(anchors) if a] == [1, 5]
    assert seg == [0, 1, 1, 1, 1, 2, 2, 2]                # the second spike opens segment 2


def test_gear_spike_at_last_token():
    seg, anchors, _, _ = _seg([0.1, 0.1, 0.1, 0.1, 0.1, 0.9])
    assert anchors == [False] * 5 + [True]
    assert seg == [0, 0, 0, 0, 0, 1]


def test_gear_no_spike():
    seg, anchors, _, tau = _seg([0.4] * 6)                # flat: median 0.4, MAD 0, nothing > 0.4
    assert not any(anchors) and seg == [0] * 6 and tau == pytest.approx(0.4)
    # a gentle ramp under a wide MAD band: median 0.3, MAD 0.1, tau = 0.3 + 3 * 0.1 = 0.6 > 0.5
    seg, anchors, _, tau = _seg([0.1, 0.2, 0.3, 0.4, 0.5])
    assert tau == pytest.approx(0.6) and not any(anchors)


def test_gear_boundary_and_masked_gap_end_a_segment():
    # spike at 1; boundary token at 3 (it belongs to the segment); 4.. aligned until the spike at 6;
    # position 8 is masked (tool output) and closes segment 2; 9 is aligned again
    div = [0.1, 2.0, 0.1, 0.1, 0.1, 0.1, 2.0, 0.1, 0.0, 0.1]
    bnd = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    mask = [1, 1, 1, 1, 1, 1, 1, 1, 0, 1]
    seg, anchors, _, _ = _seg(div, boundary=bnd, mask=mask)
    assert [t for t, a in enumerate(anchors) if a] == [1, 6]
    assert seg == [0, 1, 1, 1, 0, 0, 2, 2, 0, 0]
    # an anchor right after a boundary opens its segment (anchor wins the tie)
    seg, _, _, _ = _seg([0.1, 2.0, 0.1, 3.0, 0.1], boundary=[0, 0, 1, 0, 0])
    assert seg == [0, 1, 1, 2, 2]


def test_gear_quantile_rule_and_floor():
    # sorted [0.1, 0.2, 0.3, 0.4, 0.5]: the lower 0.5-quantile is element floor(0.5 * 4) = 2 -> 0.3
    seg, anchors, _, tau = _seg([0.5, 0.1, 0.4, 0.2, 0.3], threshold="quantile", quantile=0.5)
    assert seg == [1, 1, 2, 2, 2]                          # anchors at 0 and 2 open segments 1 and 2
    assert tau == pytest.approx(0.3) and anchors == [True, False, True, False, False]
    _, anchors, _, tau = _seg([0.5, 0.1, 0.4, 0.2, 0.3], threshold="quantile", quantile=0.5,
                              min_divergence=0.45)
    assert tau == pytest.approx(0.45) and anchors == [True, False, False, False, False]


def test_gear_hand_weights():
    # one row, A = -1 (blame), lam = 1, eps_w = 0.5, KL divergence [0.05, 0.05, 0.3, 0.05]:
    # median 0.05, MAD 0 -> anchor at t=2, segment {2, 3}.
    # t=0: aligned, delta = ln 0.9  -> w = exp(-1 * ln 0.9) = 1/0.9 = 1.1111 -> A_t = -1.1111
    # t=1: aligned, delta = ln 2    -> w = exp(-ln 2) = 0.5 (= 1 - eps_w, not below) -> A_t = -0.5
    # t=2,3: segment, s = -sign(A) * 0.3 = +0.3 -> w = e^0.3 = 1.349859 -> A_t = -1.349859
    student = t64([[0.0, 0.0, 0.0, 0.0]]) - 2.0
    teacher = student + t64([[math.log(0.9), math.log(2.0), -5.0, 7.0]])   # segment ignores delta
    res = gear_advantages(t64([-1.0]), student, teacher, torch.ones(1, 4, dtype=torch.float64),
                          divergence=t64([[0.05, 0.05, 0.3, 0.05]]), lam=1.0, eps_w=0.5)
    expected = t64([[-1 / 0.9, -0.5, -math.exp(0.3), -math.exp(0.3)]])
    torch.testing.assert_close(res.advantages, expected, atol=1e-12, rtol=0)
    assert res.segment_ids.tolist() == [[0, 0, 1, 1]]
    # A = +2, lam = 0.5: segment tokens get less credit: 2 * (0.5 + 0.5 * e^-0.3) = 1.740818
    res = gear_advantages(t64([2.0]), student, teacher, torch.ones(1, 4, dtype=torch.float64),
                          divergence=t64([[0.05, 0.05, 0.3, 0.05]]), lam=0.5, eps_w=0.5)
    assert res.advantages[0, 2].item() == pytest.approx(2 * (0.5 + 0.5 * math.exp(-0.3)), abs=1e-12)


# ------------------------------------------------------------------ GEAR anchors: departures only
def _gear_row(div, delta, adv=1.0, **kw):
    student = torch.zeros((1, len(div)), dtype=torch.float64)  # 0: delta is exactly the teacher's value
    teacher = t64([delta])
    return gear_advantages(t64([adv]), student, teacher, torch.ones(1, len(div), dtype=torch.float64),
                           divergence=t64([div]), lam=1.0, eps_w=0.5, **kw)


def test_gear_anchor_is_a_spike_where_the_teacher_drops_the_token():
    # spikes at 1 and 4 (median 0.1, MAD 0 -> tau 0.1); at 1 the teacher is surer of the sampled
    # token than the student (delta +1.5: agreement), at 4 it gives it e^-2 of the student's
    # probability (a departure). The spike rule anchors both; the departure rule only 4.
    div, delta = [0.1, 2.0, 0.1, 0.1, 3.0, 0.1], [0.0, 1.5, 0.0, 0.0, -2.0, 0.0]
    spike = _gear_row(div, delta, anchor="spike")
    assert spike.segment_ids.tolist() == [[0, 1, 1, 1, 2, 2]]
    dep = _gear_row(div, delta)
    assert dep.segment_ids.tolist() == [[0, 0, 0, 0, 1, 1]] and dep.anchors[0].tolist() == [False] * 4 + [True, False]
    # A = +1, lam = 1, eps_w = 0.5: aligned tokens keep exp(delta) clipped to [0.5, 1.5]:
    # t0 e^0 = 1, t1 e^1.5 -> 1.5, t2, t3 1; the segment 4..5 gets exp(-3) -> 0.5
    torch.testing.assert_close(dep.advantages, t64([[1.0, 1.5, 1.0, 1.0, 0.5, 0.5]]), atol=1e-12, rtol=0)
    # a drop of e^-0.5 is not a departure under min_drop = ln 2 (half), but is under 0.4
    mild = [0.0, 0.0, 0.0, 0.0, -0.5, 0.0]
    assert not _gear_row(div, mild).anchors.any()
    assert _gear_row(div, mild, min_drop=0.4).segment_ids.tolist() == [[0, 0, 0, 0, 1, 1]]
    # exactly -ln 2 is not below -ln 2: strict, like the spike threshold
    assert not _gear_row(div, [0.0] * 4 + [-math.log(2.0), 0.0]).anchors.any()


def test_gear_does_not_mark_a_response_the_teacher_agrees_with():
    # a correct answer whose digits the teacher read off the solution: KL spikes on every answer
    # token, the teacher surer of each sampled token than the student. The spike rule put the
    # whole continuation after the first spike in a segment (credit cut to 1 - eps_w); the
    # departure rule leaves every token aligned, each with its own RLSD weight.
    div = [0.02, 0.9, 1.1, 0.03, 1.4, 0.02, 0.8, 0.05]
    delta = [0.0, 0.7, 0.9, 0.1, 1.2, 0.0, 0.6, 0.05]
    spike = _gear_row(div, delta, adv=1.0, anchor="spike")
    assert (spike.segment_ids > 0).float().mean().item() == pytest.approx(7 / 8)
    dep = _gear_row(div, delta, adv=1.0)
    assert not (dep.segment_ids > 0).any()
    expected = [min(max(math.exp(d), 0.5), 1.5) for d in delta]
    torch.testing.assert_close(dep.advantages, t64([expected]), atol=1e-12, rtol=0)


def test_gear_anchor_settings_are_checked():
    div, delta = [0.1, 2.0], [0.0, -1.0]
    with pytest.raises(ValueError, match="anchor rule"):
        _gear_row(div, delta, anchor="onset")
    with pytest.raises(ValueError, match="min_drop"):
        _gear_row(div, delta, min_drop=-0.1)
    with pytest.raises(ValueError, match="eligible"):
        gear_segments(t64([div]), torch.ones(1, 2), eligible=torch.ones(1, 3, dtype=torch.bool))


def test_gear_policy_gradient_matches_the_loop_and_gradcheck():
    # the update's gradient with GEAR's A_t (departure rule) equals the loop reference of the
    # clipped surrogate with the loop's A_t; and torch.autograd.gradcheck on the float64 loss
    from torch.autograd import gradcheck

    b = _credit_batch(5)
    kw = dict(lam=0.8, eps_w=0.3, min_drop=0.2, boundary_mask=b["boundary"])
    g = gear_advantages(b["adv"], b["student"], b["teacher"], b["mask"], divergence=b["div"], **kw)
    ref = ref_gear(b["adv"], b["student"], b["teacher"], b["mask"], divergence=b["div"], **kw)
    assert (g.segment_ids > 0).any()
    lp = b["logp"].clone().requires_grad_(True)
    loss, _ = policy_loss(lp, b["old"], g.advantages, b["mask"], group_ids=b["gid"], aggregation="token")
    loss.backward()
    r = ref_policy_loss(b["logp"], b["old"], ref["advantages"], b["mask"], group_ids=b["gid"],
                        aggregation="token")
    assert abs(loss.item() - r.loss) < 1e-10
    torch.testing.assert_close(lp.grad, t64(r.grad), atol=1e-10, rtol=0)
    f = lambda x: policy_loss(x, b["old"], g.advantages, b["mask"], group_ids=b["gid"],  # noqa: E731
                              aggregation="token")[0]
    assert gradcheck(f, (b["logp"].clone().requires_grad_(True),), eps=1e-6, atol=1e-8)


# ------------------------------------------------------------------ RLSD by hand
def test_rlsd_hand_case():
    # lam 0.5, eps_w 0.2, clip range [0.8, 1.2]
    # row0 A=+1, delta=ln 1.1 : w = 1.1            mult = 0.5 + 0.55 = 1.05  -> 1.05
    # row1 A=-2, delta=ln 2   : w = exp(-ln2)=0.5 -> clip 0.8, mult 0.9     -> -1.8
    # row2 A=-2, delta=-ln 1.1: w = 1.1            mult 1.05                 -> -2.1
    # row3 A=+1, delta=5      : w = e^5 -> clip 1.2, mult 1.1               -> 1.1
    # row4 A=0                : 0
    s = torch.zeros(5, 1, dtype=torch.float64)
    t = t64([[math.log(1.1)], [math.log(2.0)], [-math.log(1.1)], [5.0], [3.0]])
    out = rlsd_advantages(t64([1.0, -2.0, -2.0, 1.0, 0.0]), s, t, torch.ones(5, 1, dtype=torch.float64))
    torch.testing.assert_close(out, t64([[1.05], [-1.8], [-2.1], [1.1], [0.0]]), atol=1e-12, rtol=0)
    # negative_only: rows 0 and 3 keep A exactly
    out = rlsd_advantages(t64([1.0, -2.0, -2.0, 1.0, 0.0]), s, t, torch.ones(5, 1, dtype=torch.float64),
                          negative_only=True)
    torch.testing.assert_close(out, t64([[1.0], [-1.8], [-2.1], [1.0], [0.0]]), atol=1e-12, rtol=0)


# ------------------------------------------------------------------ poisoned padding
@pytest.mark.parametrize("value", [1e9, float("nan"), float("inf"), -float("inf")])
def test_poisoned_padding_changes_nothing(value):
    b = _credit_batch(7, per_token_adv=True)
    m = b["mask"]
    kw = dict(lam=0.7, eps_w=0.3)
    clean_r = rlsd_advantages(b["adv"], b["student"], b["teacher"], m, **kw)
    clean_g = gear_advantages(b["adv"], b["student"], b["teacher"], m, divergence=b["div"], **kw)
    clean_o = opsd_advantages(b["student"], b["teacher"], m)
    p = {k: poison(b[k], m, value) for k in ("adv", "student", "teacher", "div")}
    pois_r = rlsd_advantages(p["adv"], p["student"], p["teacher"], m, **kw)
    pois_g = gear_advantages(p["adv"], p["student"], p["teacher"], m, divergence=p["div"], **kw)
    assert torch.equal(pois_r, clean_r)
    assert torch.equal(pois_g.advantages, clean_g.advantages)
    assert torch.equal(pois_g.segment_ids, clean_g.segment_ids)
    assert torch.equal(pois_g.threshold, clean_g.threshold)
    assert torch.equal(opsd_advantages(p["student"], p["teacher"], m), clean_o)
    assert (clean_r[m == 0] == 0).all() and (clean_g.advantages[m == 0] == 0).all()


# ------------------------------------------------------------------ gradients
def test_credit_advantages_carry_no_gradient_and_the_update_gradient_matches_the_loop():
    # student/teacher log-probs with requires_grad: the advantages are detached; the policy
    # gradient with A_t equals the loop reference of the clipped surrogate with those A_t.
    b = _credit_batch(3)
    s = b["student"].clone().requires_grad_(True)
    adv_t = rlsd_advantages(b["adv"], s, b["teacher"], b["mask"], lam=0.5)
    assert not adv_t.requires_grad
    ref_adv = ref_rlsd(b["adv"], b["student"], b["teacher"], b["mask"], lam=0.5)
    lp = b["logp"].clone().requires_grad_(True)
    loss, _ = policy_loss(lp, b["old"], adv_t, b["mask"], group_ids=b["gid"], aggregation="balanced")
    loss.backward()
    r = ref_policy_loss(b["logp"], b["old"], ref_adv, b["mask"], group_ids=b["gid"], aggregation="balanced")
    assert abs(loss.item() - r.loss) < 1e-10
    torch.testing.assert_close(lp.grad, t64(r.grad), atol=1e-10, rtol=0)
    g = gear_advantages(b["adv"], s, b["teacher"], b["mask"], divergence=b["div"].requires_grad_(True))
    assert not g.advantages.requires_grad


def test_opsd_loss_value_and_gradient():
    # value: sum W (logp - teacher); gradient: W (logp - teacher) (the per-token policy gradient of
    # the reverse KL), checked against the explicit formula and against policy_loss with A_t = delta
    b = _credit_batch(5)
    m = b["mask"]
    W = m / m.sum()
    lp = b["logp"].clone().requires_grad_(True)
    loss, metrics = opsd_loss(lp, b["teacher"], m)
    loss.backward()
    d = (b["logp"] - b["teacher"]) * m
    assert abs(loss.item() - float((W * d).sum())) < 1e-12
    assert abs(metrics["kl"].item() - float((W * d).sum())) < 1e-12
    torch.testing.assert_close(lp.grad, W * d, atol=1e-14, rtol=0)
    lp2 = b["logp"].clone().requires_grad_(True)
    adv = opsd_advantages(b["student"], b["teacher"], m)
    loss2, _ = policy_loss(lp2, lp2.detach(), adv, m)             # on-policy: ratio 1, no clip
    loss2.backward()
    torch.testing.assert_close(lp2.grad, W * d, atol=1e-14, rtol=0)


def test_rlsd_policy_loss_gradcheck():
    # finite differences through the whole update with RLSD advantages (kink-free ratios: logp
    # close to old, no clip active) -- the reweighted A_t enter as constants
    b = _credit_batch(6, B=6, T=5)
    b["old"] = b["logp"] - 0.01
    adv_t = rlsd_advantages(b["adv"], b["student"], b["teacher"], b["mask"], lam=1.0)

    def f(lp):
        return policy_loss(lp, b["old"], adv_t, b["mask"], group_ids=b["gid"], aggregation="balanced")[0]

    assert torch.autograd.gradcheck(f, (b["logp"].clone().requires_grad_(True),), eps=1e-6, atol=1e-8)


# ------------------------------------------------------------------ registry, schedule, errors
def test_registry_and_dispatch():
    assert CREDIT_METHODS.names() == ["grpo", "rlsd", "gear", "opsd"]
    b = _credit_batch(8)
    g = credit_advantages("grpo", b["adv"], b["student"], b["teacher"], b["mask"], lam=0.9)
    assert torch.equal(g.advantages, b["adv"][:, None] * b["mask"])
    o = credit_advantages("opsd", b["adv"], b["student"], b["teacher"], b["mask"])
    torch.testing.assert_close(o.advantages, (b["teacher"] - b["student"]) * b["mask"], atol=0, rtol=0)
    r = credit_advantages("rlsd", b["adv"], b["student"], b["teacher"], b["mask"], lam=1.0, eps_w=0.2)
    assert 0 < r.metrics["clip_frac"].item() < 1
    ge = credit_advantages("gear", b["adv"], b["student"], b["teacher"], b["mask"], divergence=b["div"])
    assert ge.segment_ids is not None and ge.metrics["segments_per_seq"].item() > 0
    with pytest.raises(ValueError, match="unknown credit method 'rlds'.*rlsd"):
        credit_advantages("rlds", b["adv"], b["student"], b["teacher"], b["mask"])
    # a misspelled option is an error, not silently ignored (it used to vanish into **kwargs)
    with pytest.raises(TypeError, match="eps"):
        credit_advantages("rlsd", b["adv"], b["student"], b["teacher"], b["mask"], lam=1.0, epsw=0.2)
    with pytest.raises(TypeError, match="quantil"):
        credit_advantages("gear", b["adv"], b["student"], b["teacher"], b["mask"], quantil=0.5)


def test_credit_metrics_by_hand():
    # two rows; row0: segments [0,1,1,0,2] -> 2 segments of 2 and 1 tokens; row1 empty segments
    from grpolab.objectives import credit_metrics

    mask = t64([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    seg = torch.tensor([[0, 1, 1, 0, 2], [0, 0, 0, 0, 0]])
    delta = t64([[1, 1, 1, 1, 1], [-1, -1, -1, 99, 99]])        # valid: five 1s, three -1s
    clipped = torch.tensor([[True, False, False, False, False], [True, True, False, True, True]])
    rw = mask.bool()
    m = credit_metrics(delta, clipped, rw, mask, seg)
    assert m["clip_frac"].item() == pytest.approx(3 / 8)
    assert m["delta_mean"].item() == pytest.approx(2 / 8)
    assert m["delta_std"].item() == pytest.approx(math.sqrt(1 - (2 / 8) ** 2))
    assert m["segments_per_seq"].item() == pytest.approx(1.0)   # 2 segments / 2 sequences
    assert m["segment_len"].item() == pytest.approx(1.5)        # 3 tokens / 2 segments


def test_lam_schedule():
    assert lam_schedule(0) == 0.5 and lam_schedule(25) == pytest.approx(0.25)
    assert lam_schedule(50) == 0.0 and lam_schedule(500) == 0.0
    assert lam_schedule(10, start=1.0, end=0.2, steps=20) == pytest.approx(0.6)
    assert lam_schedule(99, start=0.3, kind="constant") == 0.3
    with pytest.raises(ValueError, match="lam schedule"):
        lam_schedule(0, kind="cosine")


@pytest.mark.parametrize("kw,match", [
    ({"lam": 1.5}, "lam must be in"),
    ({"eps_w": 1.0}, "eps_w must be in"),
])
def test_bad_settings_raise(kw, match):
    b = _credit_batch(2)
    with pytest.raises(ValueError, match=match):
        rlsd_advantages(b["adv"], b["student"], b["teacher"], b["mask"], **kw)


def test_bad_shapes_raise():
    b = _credit_batch(2)
    with pytest.raises(ValueError, match="teacher_logp must have the shape"):
        rlsd_advantages(b["adv"], b["student"], b["teacher"][:, :3], b["mask"])
    with pytest.raises(ValueError, match="advantages must have shape"):
        gear_advantages(b["adv"][:3], b["student"], b["teacher"], b["mask"])
    with pytest.raises(ValueError, match="unknown GEAR threshold"):
        gear_advantages(b["adv"], b["student"], b["teacher"], b["mask"], threshold="iqr")
