"""Property-based tests (hypothesis) over random ragged masks and uneven groups, plus the
Balanced-Aggregation facts that follow from docs/methods.md ("Aggregation")."""
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grpolab.objectives import aggregation_weights, group_advantages, policy_loss

from .helpers import AGGREGATIONS, RATIO_LEVELS, make_batch, poison, t64
from .reference import ref_aggregation_weights, ref_group_advantages, ref_policy_loss

SETTINGS = dict(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def batches(draw, per_token=None):
    B = draw(st.integers(1, 10))
    T = draw(st.integers(1, 12))
    b = make_batch(draw(st.integers(0, 2**31 - 1)), B=B, T=T,
                   n_groups=draw(st.integers(1, 4)),
                   scale=draw(st.sampled_from([0.0, 0.05, 0.4, 1.5])),
                   empty_rows=draw(st.integers(0, 2)),
                   gaps=draw(st.sampled_from([0.0, 0.3, 0.7])),
                   per_token_adv=draw(st.booleans()) if per_token is None else per_token,
                   zero_adv=draw(st.sampled_from([0.0, 0.3, 1.0])))
    return b


def _impl(b, **kw):
    lp = b["logp"].clone().requires_grad_(True)
    loss, _ = policy_loss(lp, b["old"], b["adv"], b["mask"], group_ids=b["gid"], max_len=b["max_len"], **kw)
    loss.backward()
    return loss.detach(), lp.grad


@settings(**SETTINGS)
@given(b=batches(), ratio=st.sampled_from(RATIO_LEVELS), aggregation=st.sampled_from(AGGREGATIONS),
       dual=st.sampled_from([3.0, None]), ctpo=st.booleans())
def test_policy_loss_matches_loop(b, ratio, aggregation, dual, ctpo):
    kw = dict(ratio=ratio, aggregation=aggregation, dual_clip=dual, ref_logp=b["ref"], kl_coef=0.1)
    if ctpo:
        kw.update(clip_low=0.025, clip_high=0.05, clip_power=0.5)
    loss, grad = _impl(b, **kw)
    r = ref_policy_loss(b["logp"], b["old"], b["adv"], b["mask"], group_ids=b["gid"], max_len=b["max_len"], **kw)
    assert abs(loss.item() - r.loss) <= 1e-10 * max(1.0, abs(r.loss))
    torch.testing.assert_close(grad, t64(r.grad), atol=1e-10, rtol=1e-10)


@settings(**SETTINGS)
@given(b=batches(), mode=st.sampled_from(AGGREGATIONS))
def test_weights_match_loop_and_are_finite(b, mode):
    W = aggregation_weights(b["mask"], mode, advantages=b["adv"], group_ids=b["gid"], max_len=b["max_len"])
    assert torch.isfinite(W).all()
    torch.testing.assert_close(W, t64(ref_aggregation_weights(b["mask"], mode, advantages=b["adv"],
                                                              group_ids=b["gid"], max_len=b["max_len"])),
                               atol=1e-12, rtol=0)


@settings(**SETTINGS)
@given(b=batches(), ratio=st.sampled_from(RATIO_LEVELS), aggregation=st.sampled_from(AGGREGATIONS),
       cuts=st.lists(st.integers(0, 10), max_size=4))
def test_micro_batch_invariance(b, ratio, aggregation, cuts):
    B = b["mask"].shape[0]
    kw = dict(ratio=ratio, aggregation=aggregation)
    full_loss, full_grad = _impl(b, **kw)
    W = aggregation_weights(b["mask"], aggregation, advantages=b["adv"], group_ids=b["gid"], max_len=b["max_len"])
    edges = sorted({0, B, *[c for c in cuts if c < B]})
    lp = b["logp"].clone().requires_grad_(True)
    total = torch.zeros((), dtype=torch.float64)
    for a, z in zip(edges, edges[1:]):
        s = slice(a, z)
        loss, _ = policy_loss(lp[s], b["old"][s], b["adv"][s], b["mask"][s], group_ids=b["gid"][s],
                              max_len=b["max_len"], weights=W[s], **kw)
        loss.backward()
        total = total + loss.detach()
    assert abs(total.item() - full_loss.item()) < 1e-12
    torch.testing.assert_close(lp.grad, full_grad, atol=1e-12, rtol=0)


@settings(**SETTINGS)
@given(b=batches(), ratio=st.sampled_from(RATIO_LEVELS), aggregation=st.sampled_from(AGGREGATIONS),
       bad=st.sampled_from([1e9, -1e9, float("nan"), float("inf")]))
def test_poisoned_padding_changes_nothing(b, ratio, aggregation, bad):
    kw = dict(ratio=ratio, aggregation=aggregation, ref_logp=b["ref"], kl_coef=0.1)
    loss, grad = _impl(b, **kw)
    m = b["mask"]
    pb = dict(b, logp=poison(b["logp"], m, bad), old=poison(b["old"], m, bad), adv=poison(b["adv"], m, bad)
              if b["adv"].dim() == 2 else b["adv"])
    ploss, pgrad = _impl(pb, **dict(kw, ref_logp=poison(b["ref"], m, bad)))
    assert torch.isfinite(ploss) and torch.isfinite(pgrad).all()
    assert ploss.item() == loss.item()
    assert torch.equal(pgrad, grad)
    assert torch.equal(pgrad[m == 0], torch.zeros_like(pgrad[m == 0]))


@settings(**SETTINGS)
@given(b=batches(per_token=False), mode=st.sampled_from(AGGREGATIONS))
def test_weight_totals(b, mode):
    """sum W: token 1, sequence 1, constant N/(nL), balanced mean_g (|S+|+|S-|)/G_g (0 if no tokens)."""
    mask, adv, gid = b["mask"], b["adv"], b["gid"]
    W = aggregation_weights(mask, mode, advantages=adv, group_ids=gid, max_len=b["max_len"])
    lens = mask.sum(1)
    N, n = float(lens.sum()), int((lens > 0).sum())
    if N == 0:
        assert W.abs().sum().item() == 0.0
        return
    if mode in ("token", "sequence"):
        exp = 1.0
    elif mode == "constant":
        exp = N / (n * b["max_len"])
    else:
        fracs = []
        for g in gid.unique():
            live = (gid == g) & (lens > 0)
            if live.sum() == 0:
                continue
            fracs.append(float(((adv != 0) & live).sum()) / float(live.sum()))
        exp = sum(fracs) / len(fracs)
    assert abs(W.sum().item() - exp) < 1e-12


# ------------------------------------------------------------------ Balanced Aggregation facts
@settings(**SETTINGS)
@given(seed=st.integers(0, 2**31 - 1), n_groups=st.integers(1, 4), G=st.integers(2, 8),
       T=st.integers(1, 16), ratio=st.sampled_from(RATIO_LEVELS))
def test_ba_binary_rewards_push_balance(seed, n_groups, G, T, ratio):
    """Binary rewards, GRPO advantages, r = 1, every response non-empty: in each group
    (|S+|/G) A+ = (|S-|/G) |A-| (because k (1-k/G) = (G-k) k/G), so the positive and negative
    pushes cancel and the BA loss is 0 -- for any response lengths."""
    g = torch.Generator().manual_seed(seed)
    B = n_groups * G
    gid = torch.arange(n_groups).repeat_interleave(G)[torch.randperm(B, generator=g)]
    rewards = torch.randint(0, 2, (B,), generator=g).to(torch.float64)
    lens = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lens[:, None]).to(torch.float64)
    A = group_advantages(rewards, gid)
    torch.testing.assert_close(A, t64(ref_group_advantages(rewards, gid)), atol=1e-12, rtol=0)
    lp = -torch.rand(B, T, generator=g, dtype=torch.float64)
    W = t64(ref_aggregation_weights(mask, "balanced", advantages=A, group_ids=gid))
    Wi = aggregation_weights(mask, "balanced", advantages=A, group_ids=gid)
    torch.testing.assert_close(Wi, W, atol=1e-12, rtol=0)
    push = (Wi * A[:, None] * mask)
    for k in range(n_groups):
        sel = gid == k
        pos = push[sel & (A > 0)].sum().item()
        neg = -push[sel & (A < 0)].sum().item()
        assert abs(pos - neg) < 1e-9, (pos, neg)
    loss, _ = policy_loss(lp, lp.clone(), A, mask, group_ids=gid, ratio=ratio, aggregation="balanced")
    assert abs(loss.item()) < 1e-9


def test_token_mode_is_not_balanced_when_lengths_differ():
    # The counter-example showing the BA property above can fail: one group, rewards [1, 0],
    # A = [+0.7071, -0.7071]; right answer 1 token, wrong answer 3 tokens, r = 1.
    # token: W = 1/4 -> loss = -(1*0.7071 - 3*0.7071)/4 = +0.3536 (negative side dominates)
    # balanced: (1/2)(-0.7071) + (1/2)(+0.7071) = 0
    mask = t64([[1, 0, 0], [1, 1, 1]])
    gid = torch.tensor([0, 0])
    A = group_advantages(t64([1.0, 0.0]), gid)
    lp = torch.zeros(2, 3, dtype=torch.float64)
    tok, _ = policy_loss(lp, lp, A, mask, group_ids=gid, aggregation="token")
    ba, _ = policy_loss(lp, lp, A, mask, group_ids=gid, aggregation="balanced")
    a = 0.5 / (2 ** 0.5 / 2 + 1e-6)           # (1 - 0.5) / (std 0.70711 + 1e-6)
    assert abs(tok.item() - 2 * a / 4) < 1e-12
    assert abs(ba.item()) < 1e-15


@settings(**SETTINGS)
@given(b=batches(per_token=False), sign=st.sampled_from([1.0, -1.0]), ratio=st.sampled_from(RATIO_LEVELS))
def test_ba_equals_token_for_one_group_one_sign(b, sign, ratio):
    B = b["mask"].shape[0]
    b = dict(b, gid=torch.zeros(B, dtype=torch.long), adv=sign * (0.05 + b["adv"].abs()))
    lt, gt = _impl(b, ratio=ratio, aggregation="token")
    lb, gb = _impl(b, ratio=ratio, aggregation="balanced")
    assert abs(lt.item() - lb.item()) < 1e-12
    torch.testing.assert_close(gb, gt, atol=1e-12, rtol=0)


@settings(**SETTINGS)
@given(b=batches(per_token=False), scale=st.floats(0.01, 100.0))
def test_ba_weights_invariant_to_advantage_magnitude(b, scale):
    W1 = aggregation_weights(b["mask"], "balanced", advantages=b["adv"], group_ids=b["gid"])
    W2 = aggregation_weights(b["mask"], "balanced", advantages=b["adv"] * scale, group_ids=b["gid"])
    torch.testing.assert_close(W1, W2, atol=1e-15, rtol=0)


@settings(**SETTINGS)
@given(b=batches(), ratio=st.sampled_from(RATIO_LEVELS), aggregation=st.sampled_from(AGGREGATIONS))
def test_group_relabeling_and_row_permutation(b, ratio, aggregation):
    """Renaming group ids and permuting rows permutes the gradient and keeps the loss."""
    loss, grad = _impl(b, ratio=ratio, aggregation=aggregation)
    B = b["mask"].shape[0]
    perm = torch.randperm(B, generator=torch.Generator().manual_seed(B))
    pb = {k: (v[perm] if isinstance(v, torch.Tensor) else v) for k, v in b.items()}
    pb["gid"] = pb["gid"] * -3 + 1000
    ploss, pgrad = _impl(pb, ratio=ratio, aggregation=aggregation)
    assert abs(ploss.item() - loss.item()) < 1e-12
    torch.testing.assert_close(pgrad, grad[perm], atol=1e-12, rtol=0)


@settings(**SETTINGS)
@given(b=batches(), ratio=st.sampled_from(RATIO_LEVELS), aggregation=st.sampled_from(AGGREGATIONS),
       extreme=st.sampled_from([50.0, -50.0]))
def test_no_nan_with_extreme_log_ratios(b, ratio, aggregation, extreme):
    b = dict(b, old=b["logp"] - extreme, logp=b["logp"].float(), adv=b["adv"].float(), mask=b["mask"].float())
    b["old"] = b["old"].float()
    loss, grad = _impl(b, ratio=ratio, aggregation=aggregation)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
