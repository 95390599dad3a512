"""pass@k, the item bootstrap and headroom statistics against hand-computed values."""

import numpy as np
import pytest

from grpolab.diagnostics import bootstrap_ci, headroom_from_outcomes, headroom_markdown, pass_at_k
from grpolab.measure.evaluate import pass_at_k as pass_at_k_from_train


def test_pass_at_k_hand_values():
    # n=4, c=2, k=2: 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6, abs=1e-12)
    # n=10, c=3, k=5: 1 - C(7,5)/C(10,5) = 1 - 21/252 = 11/12
    assert pass_at_k(10, 3, 5) == pytest.approx(11 / 12, abs=1e-12)
    # k=1 is the plain success rate c/n
    assert pass_at_k(8, 3, 1) == pytest.approx(3 / 8, abs=1e-12)
    assert pass_at_k(8, 0, 8) == 0.0 and pass_at_k(8, 1, 8) == 1.0
    with pytest.raises(ValueError, match="at least k samples"):
        pass_at_k(2, 1, 3)
    with pytest.raises(ValueError, match="0 <= c <= n"):
        pass_at_k(2, 3, 1)


def test_one_pass_at_k_implementation():
    assert pass_at_k_from_train is pass_at_k


def test_bootstrap_constant_and_single():
    ci = bootstrap_ci([0.3] * 20)
    assert (ci.value, ci.low, ci.high) == pytest.approx((0.3, 0.3, 0.3))
    one = bootstrap_ci([0.7])
    assert (one.low, one.high, one.n) == (0.7, 0.7, 1)
    assert np.isnan(bootstrap_ci([]).value)


def test_bootstrap_matches_normal_theory_and_shrinks_with_n():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 1.0, size=400)
    ci = bootstrap_ci(x, seed=3)
    half = 1.96 * x.std(ddof=1) / np.sqrt(len(x))  # normal-theory half width ~0.098
    assert ci.low < x.mean() < ci.high
    assert (ci.high - ci.low) / 2 == pytest.approx(half, rel=0.15)
    small = bootstrap_ci(x[:25], seed=3)
    assert small.high - small.low > ci.high - ci.low
    assert bootstrap_ci(x, seed=3) == ci  # deterministic per seed


def test_headroom_hand_case():
    # 4 items, k=4: greedy solves item 0 only; samples solve 0/4, 4/4, 2/4, 0/4
    res = headroom_from_outcomes([1, 0, 0, 0], [0, 4, 2, 0], 4, ["a", "a", "b", "b"])
    o = res.overall
    assert o.greedy.value == pytest.approx(0.25)
    assert o.sampled.value == pytest.approx((0 + 1 + 0.5 + 0) / 4)  # 0.375
    assert o.pass_at_k[4].value == pytest.approx(0.5)  # items 1 and 2
    # pass@2 per item: 0, 1, 1 - C(2,2)/C(4,2) = 5/6, 0 -> mean 11/24
    assert o.pass_at_k[2].value == pytest.approx(11 / 24)
    assert o.gap.value == pytest.approx(0.125)
    assert o.pass_gap.value == pytest.approx(0.25)
    assert res.families["a"].greedy.value == pytest.approx(0.5)
    assert res.families["b"].sampled.value == pytest.approx(0.25)
    assert "| overall | 4 |" in headroom_markdown(res)


def test_headroom_verdicts():
    n = 200
    # sampling clearly better than greedy
    assert headroom_from_outcomes([0] * n, [4] * (n // 2) + [0] * (n // 2), 8).verdict == "headroom"
    # greedy clearly better and samples never solve anything greedy misses
    v = headroom_from_outcomes([1] * (n // 2) + [0] * (n // 2), [2] * (n // 2) + [0] * (n // 2), 8)
    assert v.verdict == "no headroom"
    # greedy beats the mean sample, but pass@k solves many items greedy misses
    v = headroom_from_outcomes([1] * (n // 2) + [0] * (n // 2), [2] * n, 8)
    assert v.verdict == "pass@k headroom"
    assert headroom_from_outcomes([1] * n, [8] * n, 8).verdict == "saturated"
    # greedy beats the mean sample, but on 8 items pass@8 - greedy = +1/8 with an interval from 0:
    # too few items to call it either way
    small = headroom_from_outcomes([1] * 4 + [0] * 4, [2] * 4 + [1, 0, 0, 0], 8)
    assert small.overall.pass_gap.value == pytest.approx(0.125) and small.overall.gap.high < 0
    assert small.verdict == "unclear"
    with pytest.raises(ValueError, match=r"\[0, k=4\]"):
        headroom_from_outcomes([1], [5], 4)
