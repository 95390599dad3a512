"""pass@k and the item bootstrap against hand-computed values (the headroom statistics: tests/diagnostics/test_preflight*.py)."""

import numpy as np
import pytest

from grpolab.diagnostics import bootstrap_ci, pass_at_k
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
