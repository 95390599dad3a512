"""grpolab.diagnostics.inference against independent references: published t-table values and closed
forms, brute-force sign enumeration, hand-computed cases, scipy (t, noncentral t, Wilcoxon) where
installed, and coverage simulations with known truth."""

import itertools
import math

import numpy as np
import pytest

from grpolab.diagnostics.inference import (
    MIN_BOOTSTRAP_UNITS,
    Verdict,
    betainc,
    bootstrap_interval,
    compare_family,
    holm,
    mcnemar_items,
    mde_paired,
    mean_interval,
    paired_seed_test,
    shared_items_test,
    sign_flip_p,
    t_cdf,
    t_power,
    t_ppf,
)
from grpolab.diagnostics.stats import bootstrap_ci

# two-sided 95%/90%/99% critical values from a printed t table (e.g. Fisher & Yates, Table III)
T_TABLE = [(0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 4, 2.776), (0.975, 9, 2.262), (0.975, 19, 2.093),
           (0.95, 1, 6.314), (0.95, 2, 2.920), (0.95, 9, 1.833), (0.995, 4, 4.604), (0.995, 29, 2.756)]


@pytest.mark.parametrize("p,df,value", T_TABLE)
def test_t_quantile_matches_the_printed_table(p, df, value):
    assert t_ppf(p, df) == pytest.approx(value, abs=6e-4)
    assert t_ppf(1 - p, df) == pytest.approx(-value, abs=6e-4)


def test_t_cdf_closed_forms():
    for t in (-30.0, -2.5, -0.3, 0.0, 0.7, 4.0, 100.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)  # Cauchy
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-13)
    assert t_cdf(1.96, 1e7) == pytest.approx(0.9750021, abs=1e-6)  # the normal limit


def test_incomplete_beta_closed_forms():
    for x in (0.0, 0.01, 0.3, 0.5, 0.77, 0.999, 1.0):
        assert betainc(1, 1, x) == pytest.approx(x, abs=1e-14)
        assert betainc(3.5, 1, x) == pytest.approx(x ** 3.5, abs=1e-14)
        assert betainc(1, 4, x) == pytest.approx(1 - (1 - x) ** 4, abs=1e-14)
    with pytest.raises(ValueError, match="0 <= x <= 1"):
        betainc(1, 1, 1.5)


def test_hand_case_three_seeds():
    # differences 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t = 2 sqrt(3), df 2
    c = paired_seed_test([1, 2, 3], [0, 0, 0])
    half = 4.302653 / math.sqrt(3)
    assert (c.mean, c.sd) == pytest.approx((2.0, 1.0))
    assert (c.low, c.high) == pytest.approx((2 - half, 2 + half), abs=1e-5)
    t = 2 * math.sqrt(3)
    assert c.t_p == pytest.approx(2 * (0.5 - t / (2 * math.sqrt(2 + t * t))), abs=1e-12)  # 0.0742
    # sign flips of (1, 2, 3): sums 6, 4, 2, 0, 0, -2, -4, -6; |sum| >= 6 in 2 of 8
    assert c.sign_flip_p == pytest.approx(0.25)
    assert c.p_value == pytest.approx(0.25) and c.verdict is Verdict.NOT_SIGNIFICANT
    assert (c.above, c.below) == (3, 0)


def test_sign_flip_against_brute_force():
    rng = np.random.default_rng(7)
    for n in range(1, 9):
        d = rng.normal(0.3, 1.0, size=n).round(2)
        obs = abs(sum(d))
        hits = sum(abs(sum(s * x for s, x in zip(signs, d))) >= obs - 1e-9
                   for signs in itertools.product((1, -1), repeat=n))
        assert sign_flip_p(d) == pytest.approx(hits / 2 ** n)
    assert sign_flip_p([0.1] * 5) == pytest.approx(2 / 32)  # the floor at 5 pairs: 0.0625


def test_significance_needs_both_tests_below_twenty_seeds():
    # 6 seeds, all up by about 1: t p tiny, sign-flip p = 2/64
    up = paired_seed_test([1.0, 1.1, 0.9, 1.05, 0.95, 1.0], [0] * 6)
    assert up.t_p < 1e-5 and up.sign_flip_p == pytest.approx(2 / 64)
    assert up.verdict is Verdict.SIGNIFICANT
    assert "significant at alpha = 0.05" in up.summary() and up.interval().startswith("+1.0 [")
    # 3 seeds, all up by about 1: t p ~0.001 but the sign-flip floor is 0.25 -> the tests disagree
    three = paired_seed_test([1.0, 1.1, 0.9], [0, 0, 0])
    assert three.t_p < 0.01 and three.excludes_zero() and three.sign_flip_p == pytest.approx(0.25)
    assert three.verdict is Verdict.INCONCLUSIVE
    s = three.summary()
    assert "the exact sign-flip test does not reject" in s and "0.25" in s and "significant at" not in s
    # 20 seeds: the t test alone
    rng = np.random.default_rng(0)
    big = paired_seed_test(rng.normal(1, 1, 20), np.zeros(20))
    assert big.sign_flip_p is None and big.p_value == big.t_p


def test_issue_examples_are_not_significant():
    """Issue 57's GEAR vs GRPO on SmolLM2 shape: a percentile bootstrap over 5 seeds excluded 0; the
    t interval and the exact test do not."""
    d = [0.20, 0.15, 0.10, -0.05, -0.025]
    c = paired_seed_test(d, [0] * 5)
    assert not c.excludes_zero() and c.verdict is Verdict.NOT_SIGNIFICANT
    assert f"{c.mde * 100:.1f}" in c.summary(scale=100)


def test_equivalence_needs_a_margin_and_tost():
    d = [0.001, -0.002, 0.0005, 0.0015, -0.001, 0.0, 0.002, -0.0015]
    eq = paired_seed_test(d, [0] * 8, margin=0.01)
    assert eq.verdict is Verdict.EQUIVALENT and "equivalent within +-1.0" in eq.summary(scale=100)
    assert paired_seed_test(d, [0] * 8).verdict is Verdict.NOT_SIGNIFICANT  # no margin: never "a tie"
    # grpolab vs TRL shape: 3 seeds, mean -0.6 points, wide interval -> not equivalent within 2 points
    wide = paired_seed_test([0.05, -0.06, -0.008], [0, 0, 0], margin=0.02)
    assert wide.verdict is Verdict.INCONCLUSIVE and "not shown equivalent" in wide.summary(scale=100)
    # TOST hand value (df 2 closed form): d = (0.1, -0.1, 0), margin 0.5, se = 0.1/sqrt(3)
    t = 0.5 / (0.1 / math.sqrt(3))
    hand = 0.5 - t / (2 * math.sqrt(2 + t * t))
    assert paired_seed_test([0.1, -0.1, 0.0], [0, 0, 0], margin=0.5).tost_p == pytest.approx(hand, abs=1e-12)
    with pytest.raises(ValueError, match="margin must be > 0"):
        paired_seed_test([1, 2], [0, 0], margin=0)


def test_holm_hand_values_and_family():
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]
    up = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0]
    fam = compare_family({"a": (up, [0] * 6), "b": (up, [0] * 6), "c": (up, [0] * 6)})
    # each raw p is 2/64 = 0.03125 (the sign-flip); Holm over 3: 0.09375 -> none significant
    assert all(c.adjusted_p == pytest.approx(3 * 2 / 64) for c in fam.values())
    assert all(c.verdict is Verdict.NOT_SIGNIFICANT for c in fam.values())
    assert "Holm-adjusted p = 0.0938" in fam["a"].summary()


def test_mde_hits_its_power_by_simulation():
    rng = np.random.default_rng(11)
    n, reps = 5, 4000
    delta = mde_paired(n, 1.0)
    x = rng.normal(delta, 1.0, size=(reps, n))
    t = x.mean(1) / (x.std(1, ddof=1) / math.sqrt(n))
    power = float(np.mean(np.abs(t) > 2.776445))  # t_{0.975, 4} from the table
    assert power == pytest.approx(0.8, abs=0.02)  # binomial sd at 4000 reps: 0.0063
    assert mde_paired(10, 2.0) == pytest.approx(2 * mde_paired(10, 1.0))  # scales with the sd
    assert mde_paired(3, 1.0) > mde_paired(5, 1.0) > mde_paired(10, 1.0)


def test_mcnemar_items_hand_case():
    a = [1] * 5 + [1] * 10 + [0] * 5
    b = [0] * 5 + [1] * 10 + [0] * 5  # 5 gained, 0 lost: p = 2 / 2**5
    c = mcnemar_items(a, b)
    assert (c.gained, c.lost, c.n) == (5, 0, 20)
    assert c.p_value == pytest.approx(0.0625) and c.verdict is Verdict.NOT_SIGNIFICANT
    assert c.difference == pytest.approx(0.25)
    assert "5 gained, 0 lost" in c.summary()


def test_shared_items_are_not_pooled():
    """Three seeds on the same 800 items, each 12 gained / 5 lost: pooling would test 36 vs 15
    (p < 0.01); the seed-level test with 3 seeds cannot go below 0.25."""
    def seed_outcomes():
        a = [1] * 12 + [0] * 5 + [1] * 300 + [0] * 483
        b = [0] * 12 + [1] * 5 + [1] * 300 + [0] * 483
        return a, b
    a, b = zip(*[seed_outcomes() for _ in range(3)])
    r = shared_items_test(list(a), list(b))
    assert [c.p_value for c in r.per_seed] == pytest.approx([0.1435] * 3, abs=1e-4)
    assert r.seed_level.n == 3 and r.seed_level.sign_flip_p == pytest.approx(0.25)
    assert r.verdict is not Verdict.SIGNIFICANT
    assert "800 shared items" in r.summary()


def test_bootstrap_refuses_few_units():
    with pytest.raises(ValueError, match="under-covers"):
        bootstrap_interval([0.1, 0.2, 0.3], unit="seeds")
    ci = bootstrap_interval(np.linspace(0, 1, MIN_BOOTSTRAP_UNITS))
    assert ci.low < 0.5 < ci.high


def test_mean_interval_edges():
    assert math.isnan(mean_interval([0.4]).low) and mean_interval([0.4]).value == 0.4
    assert mean_interval([]).n == 0
    c = mean_interval([1.0, 3.0])  # mean 2, sd sqrt(2), se 1: 2 +- 12.706
    assert (c.low, c.high) == pytest.approx((2 - 12.7062, 2 + 12.7062), abs=1e-3)


def _coverage(n: int, reps: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    t_hits = boot_hits = 0
    for x in rng.normal(0.0, 1.0, size=(reps, n)):
        c = mean_interval(x)
        t_hits += c.low <= 0.0 <= c.high
        if n == 3:
            b = bootstrap_ci(x, n_boot=400, seed=int(rng.integers(1 << 30)))
            boot_hits += b.low <= 0.0 <= b.high
    return t_hits / reps, boot_hits / reps


@pytest.mark.parametrize("n", [3, 5, 10])
def test_coverage_simulation(n):
    """Nominal 95% t interval over n seeds of normal differences: within 0.95 +- 0.015 at 3000 reps
    (binomial sd 0.004: +-3.8 sd; seeded, so deterministic). At 3 seeds the percentile bootstrap
    (what grpolab used before) covers about 0.75."""
    t_cov, boot_cov = _coverage(n, 3000, seed=100 + n)
    assert t_cov == pytest.approx(0.95, abs=0.015)
    if n == 3:
        assert boot_cov < 0.82


# --- scipy, where installed ---------------------------------------------------------------------


def test_against_scipy_t_and_ttest():
    st = pytest.importorskip("scipy.stats")
    for df in (1, 2, 3, 4, 9, 19, 57):
        for p in (0.6, 0.9, 0.975, 0.995):
            assert t_ppf(p, df) == pytest.approx(st.t.ppf(p, df), rel=1e-9)
        for t in (-6.0, -1.0, 0.4, 2.5):
            assert t_cdf(t, df) == pytest.approx(st.t.cdf(t, df), abs=1e-12)
    rng = np.random.default_rng(3)
    for n in (3, 5, 10, 25):
        a, b = rng.normal(0.5, 0.1, n), rng.normal(0.45, 0.1, n)
        ref = st.ttest_rel(a, b)
        c = paired_seed_test(a, b)
        assert c.t_p == pytest.approx(ref.pvalue, rel=1e-8)
        lo, hi = ref.confidence_interval(0.95)
        assert (c.low, c.high) == pytest.approx((lo, hi), rel=1e-8)
        tost = max(st.ttest_1samp(a - b, -0.05, alternative="greater").pvalue,
                   st.ttest_1samp(a - b, 0.05, alternative="less").pvalue)
        assert paired_seed_test(a, b, margin=0.05).tost_p == pytest.approx(tost, rel=1e-8)


def test_against_scipy_noncentral_t_power():
    st = pytest.importorskip("scipy.stats")
    for n in (2, 3, 5, 10):
        for d in (0.5, 1.0, 2.0):
            crit, ncp = st.t.ppf(0.975, n - 1), d * math.sqrt(n)
            ref = st.nct.sf(crit, n - 1, ncp) + st.nct.cdf(-crit, n - 1, ncp)
            assert t_power(d, n) == pytest.approx(ref, abs=1e-7)


def test_sign_flip_on_signed_ranks_is_exact_wilcoxon():
    st = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(5)
    for n in (4, 6, 9, 12):
        d = rng.normal(0.4, 1.0, n)
        ranks = st.rankdata(np.abs(d)) * np.sign(d)
        ref = st.wilcoxon(d, method="exact").pvalue
        assert sign_flip_p(ranks) == pytest.approx(ref, rel=1e-9)
