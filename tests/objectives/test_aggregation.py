"""aggregation_weights: token / sequence / constant / balanced (docs/methods.md, "Aggregation").

loss = sum_{i,t} W[i,t] l[i,t]. token W = mask/sum(mask); sequence W = mask/(|o_i| n); constant
W = mask/(n L); balanced: mean over groups of J_g = (|S+|/G_g) L+ + (|S-|/G_g) L-, with L+- token
means over the sign subsets, G_g counting the non-empty samples of the group.
"""
import pytest
import torch

from grpolab.objectives import aggregation_weights

from .helpers import AGGREGATIONS, make_batch, poison, t64
from .reference import ref_aggregation_weights

ATOL = 1e-10


def _W(b, mode, **kw):
    return aggregation_weights(b["mask"], mode, advantages=b["adv"], group_ids=b["gid"],
                               max_len=b["max_len"], **kw)


@pytest.mark.parametrize("mode", AGGREGATIONS)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("per_token_adv", [False, True])
def test_matches_loop(mode, seed, per_token_adv):
    b = make_batch(seed, B=14, T=12, n_groups=4, per_token_adv=per_token_adv, empty_rows=2)
    got = _W(b, mode)
    exp = ref_aggregation_weights(b["mask"], mode, advantages=b["adv"], group_ids=b["gid"],
                                  max_len=b["max_len"])
    assert got.shape == b["mask"].shape
    torch.testing.assert_close(got, t64(exp), atol=ATOL, rtol=0)


# ------------------------------------------------------------------ hand-computed, one per mode
MASK = t64([[1, 1, 0, 0],     # |o_0| = 2
            [1, 0, 0, 0],     # |o_1| = 1
            [0, 0, 0, 0],     # empty
            [1, 1, 1, 0]])    # |o_3| = 3   ; total 6 tokens, n = 3 non-empty sequences


def test_token_hand():
    # 6 valid tokens -> every valid token weighs 1/6
    exp = MASK / 6.0
    torch.testing.assert_close(aggregation_weights(MASK, "token"), exp, atol=1e-15, rtol=0)


def test_sequence_hand():
    # n = 3 non-empty sequences: row0 1/(2*3) = 1/6, row1 1/(1*3) = 1/3, row3 1/(3*3) = 1/9
    exp = t64([[1 / 6, 1 / 6, 0, 0], [1 / 3, 0, 0, 0], [0, 0, 0, 0], [1 / 9, 1 / 9, 1 / 9, 0]])
    torch.testing.assert_close(aggregation_weights(MASK, "sequence"), exp, atol=1e-15, rtol=0)


def test_constant_hand():
    # n = 3, L = 8: every valid token weighs 1/(3*8) = 1/24 regardless of its sequence length
    exp = MASK / 24.0
    torch.testing.assert_close(aggregation_weights(MASK, "constant", max_len=8), exp, atol=1e-15, rtol=0)


def test_balanced_hand():
    # group 5: rows 0..4, A = [+1, +2, -1, 0, +3], lengths [2, 1, 3, 2, 0]
    #   row 4 is empty -> left out of every count: G = 4, S+ = {0, 1} (3 tokens), S- = {2} (3 tokens)
    #   J = (2/4) * (1/3) * sum_{S+} l + (1/4) * (1/3) * sum_{S-} l ; zero-advantage row 3 weighs 0
    # group 9: row 5, A = -0.5, length 2: G = 1, S- = {5}: J = (1/1) * (1/2) * sum l
    # group 7: row 6, empty: not counted -> 2 groups, every weight is halved:
    #   S+ of group 5: 1/6 / 2 = 1/12 ; S- of group 5: 1/12 / 2 = 1/24 ; row 5: 1/2 / 2 = 1/4
    mask = t64([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 1], [0, 0, 0], [0, 1, 1], [0, 0, 0]])
    adv = t64([1.0, 2.0, -1.0, 0.0, 3.0, -0.5, 1.0])
    gid = torch.tensor([5, 5, 5, 5, 5, 9, 7])
    exp = t64([[1 / 12, 1 / 12, 0], [1 / 12, 0, 0], [1 / 24, 1 / 24, 1 / 24], [0, 0, 0], [0, 0, 0],
               [0, 1 / 4, 1 / 4], [0, 0, 0]])
    got = aggregation_weights(mask, "balanced", advantages=adv, group_ids=gid)
    torch.testing.assert_close(got, exp, atol=1e-15, rtol=0)
    # per-token advantages with the same signs (different magnitudes, junk on masked tokens)
    adv_bt = adv[:, None] * t64([[1.0, 2.0, 0.5]]).expand(7, 3)
    adv_bt = poison(adv_bt, mask, float("nan"))
    got_bt = aggregation_weights(mask, "balanced", advantages=adv_bt, group_ids=gid)
    torch.testing.assert_close(got_bt, exp, atol=1e-15, rtol=0)


# ------------------------------------------------------------------ structural facts
@pytest.mark.parametrize("seed", range(3))
def test_sums(seed):
    b = make_batch(seed, B=16, T=10, n_groups=5, empty_rows=2)
    mask = b["mask"]
    lens = mask.sum(1)
    n = int((lens > 0).sum())
    W = {m: _W(b, m) for m in AGGREGATIONS}
    assert abs(float(W["token"].sum()) - 1.0) < 1e-12
    assert abs(float(W["sequence"].sum()) - 1.0) < 1e-12
    for i in range(mask.shape[0]):       # every non-empty sequence carries 1/n in sequence mode
        if lens[i] > 0:
            assert abs(float(W["sequence"][i].sum()) - 1.0 / n) < 1e-12
    assert abs(float(W["constant"].sum()) - float(lens.sum()) / (n * b["max_len"])) < 1e-12
    for m in AGGREGATIONS:
        assert torch.equal(W[m][mask == 0], torch.zeros_like(W[m][mask == 0])), m
        assert (W[m] >= 0).all(), m


@pytest.mark.parametrize("mode", AGGREGATIONS)
def test_fully_masked_batch_gives_zero_weights(mode):
    mask = torch.zeros(3, 5, dtype=torch.float64)
    W = aggregation_weights(mask, mode, advantages=t64([1.0, -1.0, 0.0]), group_ids=torch.tensor([0, 0, 1]),
                            max_len=5)
    assert torch.isfinite(W).all()
    assert torch.equal(W, torch.zeros_like(W))


def test_balanced_all_zero_advantages_is_zero_not_nan():
    mask = t64([[1, 1], [1, 0]])
    W = aggregation_weights(mask, "balanced", advantages=t64([0.0, 0.0]), group_ids=torch.tensor([0, 0]))
    assert torch.equal(W, torch.zeros_like(W))


def test_balanced_depends_on_sign_only():
    b = make_batch(21, B=12, T=8, n_groups=3)
    W1 = _W(b, "balanced")
    g = torch.Generator().manual_seed(0)
    b2 = dict(b, adv=b["adv"] * (0.1 + 5 * torch.rand(12, generator=g, dtype=torch.float64)))
    torch.testing.assert_close(_W(b2, "balanced"), W1, atol=1e-15, rtol=0)


def test_balanced_empty_sample_does_not_change_counts():
    # Appending an empty A>0 sample to a group must not change any weight (G_g counts non-empty).
    mask = t64([[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    adv = t64([1.0, -1.0, 0.0])
    gid = torch.tensor([0, 0, 0])
    W = aggregation_weights(mask, "balanced", advantages=adv, group_ids=gid)
    # G=3: S+ = {0}: (1/3)/3 = 1/9 per token; S- = {1}: (1/3)/1 = 1/3; zero row: 0
    torch.testing.assert_close(W, t64([[1 / 9] * 3, [1 / 3, 0, 0], [0, 0, 0]]), atol=1e-15, rtol=0)
    W2 = aggregation_weights(torch.cat([mask, torch.zeros(1, 3, dtype=torch.float64)]), "balanced",
                             advantages=torch.cat([adv, t64([2.0])]), group_ids=torch.tensor([0, 0, 0, 0]))
    torch.testing.assert_close(W2[:3], W, atol=1e-15, rtol=0)
    assert torch.equal(W2[3], torch.zeros(3, dtype=torch.float64))


def test_balanced_equals_token_for_one_group_one_sign():
    b = make_batch(4, B=9, T=11, n_groups=1, zero_adv=0.0)
    for sign in (1.0, -1.0):
        adv = sign * (0.1 + b["adv"].abs())
        Wb = aggregation_weights(b["mask"], "balanced", advantages=adv, group_ids=torch.zeros(9, dtype=torch.long))
        torch.testing.assert_close(Wb, aggregation_weights(b["mask"], "token"), atol=1e-15, rtol=0)


def test_balanced_equals_sequence_for_equal_lengths_and_group_sizes():
    # equal group sizes, equal lengths within each group, no zero advantage:
    # BA W = (|S|/G)/(|S| len_g)/n_groups = 1/(len_g * G * n_groups) = 1/(len_g n) = sequence W
    mask = t64([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0],
                [1, 0, 1, 1], [1, 1, 1, 0], [0, 1, 1, 1]])
    adv = t64([1.0, -2.0, 0.5, -1.0, -1.0, 3.0])
    gid = torch.tensor([0, 0, 0, 1, 1, 1])
    Wb = aggregation_weights(mask, "balanced", advantages=adv, group_ids=gid)
    torch.testing.assert_close(Wb, aggregation_weights(mask, "sequence"), atol=1e-15, rtol=0)


def test_permutation_equivariance():
    b = make_batch(17, B=11, T=9, n_groups=3, per_token_adv=True)
    perm = torch.randperm(11, generator=torch.Generator().manual_seed(1))
    for mode in AGGREGATIONS:
        W = _W(b, mode)
        bp = dict(b, mask=b["mask"][perm], adv=b["adv"][perm], gid=b["gid"][perm])
        torch.testing.assert_close(_W(bp, mode), W[perm], atol=1e-15, rtol=0, msg=mode)


def test_poisoned_advantages_on_padding_do_not_change_weights():
    b = make_batch(9, B=10, T=8, per_token_adv=True)
    W = _W(b, "balanced")
    for bad in (1e9, -1e9, float("nan")):
        bp = dict(b, adv=poison(b["adv"], b["mask"], bad))
        torch.testing.assert_close(_W(bp, "balanced"), W, atol=0, rtol=0)


def test_bad_arguments_raise():
    mask = t64([[1, 0]])
    with pytest.raises((ValueError, KeyError, TypeError)):
        aggregation_weights(mask, "constant")                      # max_len missing
    with pytest.raises((ValueError, KeyError)):
        aggregation_weights(mask, "no-such-mode")
    with pytest.raises((ValueError, KeyError, TypeError)):
        aggregation_weights(mask, "balanced", advantages=t64([1.0]))   # group_ids missing
