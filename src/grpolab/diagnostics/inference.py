"""Inference for comparisons of training runs: which test, over which units, with which verdict.

Numbers in, frozen dataclasses out; no scipy (the t distribution is computed here, from the
regularised incomplete beta function). docs/statistics.md says which function to use when and why;
in short:

* **Seeds are the units of replication.** :func:`paired_seed_test` compares two conditions run on
  the same seeds: a t interval of the mean paired difference and, for fewer than
  :data:`EXACT_MAX_SEEDS` seeds, an exact sign-flip (permutation) p-value over all ``2**n`` sign
  assignments. Below that many seeds a difference is called significant only when *both* tests are
  below ``alpha`` (the t test assumes normal differences, which 3-10 seeds cannot check; the
  sign-flip test assumes only symmetry, and with ``n`` seeds cannot go below ``2 / 2**n``:
  0.25 at 3 seeds, 0.0625 at 5). :func:`mean_interval` is the t interval of one mean.
* **A bootstrap only over many units** (:func:`bootstrap_interval`: items, or at least
  :data:`MIN_BOOTSTRAP_UNITS` seeds). Over 3-5 seeds a percentile bootstrap's "95%" interval
  covers about 75-83% of the time (docs/results/coverage.json); it refuses them.
* **Items within one run**: :func:`mcnemar_items` (exact McNemar on paired binary items).
* **Several seeds that share items**: :func:`shared_items_test`. The seed-level test of the
  per-seed accuracy differences decides; the per-seed McNemar tests are reported with Holm's
  correction. Items are never pooled across seeds as if independent (the same item under three
  seeds is one item, three times).
* **Several variants against one baseline**: :func:`compare_family` applies Holm's correction
  (:func:`holm`) to the variants' p-values.
* **"No difference" needs an equivalence test**: pass ``margin`` (the largest difference that
  counts as none, in the data's units) and :func:`paired_seed_test` runs TOST (two one-sided t
  tests); a non-significant result without a margin is "not significant", never "a tie", and
  states the minimum detectable effect (:func:`mde_paired`: paired t, two-sided, 80% power).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from enum import Enum
from statistics import NormalDist
from typing import Callable, Sequence

import numpy as np

from grpolab.diagnostics.stats import CI, bootstrap_ci, mcnemar_exact

__all__ = [
    "EXACT_MAX_SEEDS", "MIN_BOOTSTRAP_UNITS", "ItemComparison", "PairedComparison", "SharedItemsComparison",
    "Verdict", "betainc", "bootstrap_interval", "compare_family", "holm", "mcnemar_items", "mde_paired",
    "mean_interval", "paired_seed_test", "shared_items_test", "sign_flip_p", "t_cdf", "t_power", "t_ppf",
]

#: below this many seeds the exact sign-flip test runs (all ``2**n`` sign assignments) next to the t test
EXACT_MAX_SEEDS = 20
#: the fewest units a percentile bootstrap is run over (fewer under-cover; docs/statistics.md)
MIN_BOOTSTRAP_UNITS = 20
_NORMAL = NormalDist()


class Verdict(str, Enum):
    """What a comparison licenses a page to say."""

    SIGNIFICANT = "significant"  #: the test(s) reject "no difference" at alpha
    NOT_SIGNIFICANT = "not significant"  #: no rejection, no equivalence margin asked: not a tie
    EQUIVALENT = "equivalent"  #: TOST: the difference lies within +-margin at alpha
    INCONCLUSIVE = "inconclusive"  #: neither a difference nor equivalence within the margin; or the tests disagree


# --- the t distribution --------------------------------------------------------------------------

def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz; Numerical Recipes 6.4)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            return h
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (a={a}, b={b}, x={x})")


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)`` for ``a, b > 0`` and ``0 <= x <= 1``."""
    if not (a > 0 and b > 0 and 0.0 <= x <= 1.0):
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1; got a={a}, b={b}, x={x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """``P(T <= t)`` for Student's t with ``df`` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"the t distribution needs df > 0, got {df}")
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


@functools.lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a quantile needs 0 < p < 1, got {p}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-13 * max(1.0, hi):
            break
    return 0.5 * (lo + hi)


def _t_two_sided_p(t: float, df: float) -> float:
    return min(1.0, 2.0 * t_cdf(-abs(t), df))


_ERF = np.vectorize(math.erf, otypes=[float])


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(160)


def _power_at(ncp: float, crit: float, df: int) -> float:
    """``P(|T| > crit)`` for the noncentral t with ``df`` degrees of freedom and noncentrality ``ncp``:
    ``T = (Z + ncp) / (W / sqrt(df))`` with ``W = sqrt(chi2_df)``, integrated over ``W`` by Gauss-Legendre
    on ``sqrt(df) -+ 12`` (W's sd is below 0.71; within 1e-8 of scipy's noncentral t, tests)."""
    lo, hi = max(0.0, math.sqrt(df) - 12.0), math.sqrt(df) + 12.0
    w = 0.5 * (hi - lo) * _GL_NODES + 0.5 * (hi + lo)
    log_norm = -(df / 2 - 1) * math.log(2) - math.lgamma(df / 2)
    dens = np.exp(log_norm + (df - 1) * np.log(w) - w * w / 2)
    s = crit * w / math.sqrt(df)
    rejects = 0.5 * (1 - _ERF((s - ncp) / math.sqrt(2))) + 0.5 * (1 + _ERF((-s - ncp) / math.sqrt(2)))
    return min(1.0, 0.5 * (hi - lo) * float(np.sum(_GL_WEIGHTS * dens * rejects)))


def t_power(effect: float, n: int, alpha: float = 0.05) -> float:
    """Power of the two-sided one-sample (paired) t test at level ``alpha`` with ``n`` units when the true
    mean difference is ``effect`` standard deviations (the noncentral t, integrated over the sample SD)."""
    if n < 2:
        raise ValueError(f"a t test needs at least 2 units, got {n}")
    return _power_at(effect * math.sqrt(n), t_ppf(1 - alpha / 2, n - 1), n - 1)


def mde_paired(n: int, sd: float, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean paired difference a two-sided paired t test over ``n`` units detects with
    probability ``power`` at level ``alpha``, when the differences' standard deviation is ``sd``."""
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    if sd == 0:
        return 0.0
    if n < 2:
        raise ValueError(f"a t test needs at least 2 units, got {n}")
    crit, root_n = t_ppf(1 - alpha / 2, n - 1), math.sqrt(n)
    lo, hi = 0.0, 1.0
    while _power_at(hi * root_n, crit, n - 1) < power:
        lo, hi = hi, hi * 2
        if hi > 1e6:
            raise ArithmeticError(f"no effect reaches power {power} with n={n}")
    for _ in range(34):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _power_at(mid * root_n, crit, n - 1) < power else (lo, mid)
    return 0.5 * (lo + hi) * sd


# --- intervals of one mean ------------------------------------------------------------------------

def mean_interval(values: Sequence[float], *, level: float = 0.95) -> CI:
    """The t interval of the mean of ``values`` (one per seed, or per item). With fewer than 2 values
    the bounds are NaN (one seed says nothing about the spread over seeds)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = [float(v) for v in values]
    n = len(x)
    if n == 0:
        return CI(float("nan"), float("nan"), float("nan"), 0, level)
    m = math.fsum(x) / n
    if n == 1:
        return CI(m, float("nan"), float("nan"), 1, level)
    sd = math.sqrt(math.fsum((v - m) ** 2 for v in x) / (n - 1))
    half = t_ppf(1 - (1 - level) / 2, n - 1) * sd / math.sqrt(n)
    return CI(m, m - half, m + half, n, level)


def bootstrap_interval(values: Sequence[float] | np.ndarray, statistic: Callable[[np.ndarray], float] = np.mean, *,
                       n_boot: int = 2000, level: float = 0.95, seed: int = 0, unit: str = "items") -> CI:
    """Percentile bootstrap interval of ``statistic`` over units (rows of ``values``), for many units only.

    Raises:
        ValueError: fewer than :data:`MIN_BOOTSTRAP_UNITS` units -- over a few seeds the percentile
            bootstrap under-covers; use :func:`mean_interval` or :func:`paired_seed_test` instead.
    """
    n = len(values)
    if n < MIN_BOOTSTRAP_UNITS:
        raise ValueError(
            f"a percentile bootstrap over {n} {unit} under-covers (a '95%' interval covers about 75% of the "
            f"time at 3 units); it needs at least {MIN_BOOTSTRAP_UNITS}: use mean_interval (t interval) for a "
            f"mean or paired_seed_test for a paired comparison over seeds")
    return bootstrap_ci(values, statistic, n_boot=n_boot, level=level, seed=seed)


# --- paired comparisons over seeds ---------------------------------------------------------------

def sign_flip_p(differences: Sequence[float]) -> float:
    """Two-sided exact permutation p-value of the mean of paired differences: the share of all ``2**n``
    sign assignments whose absolute sum is at least the observed one (the observed one included)."""
    d = np.asarray(differences, dtype=float)
    if d.ndim != 1 or len(d) == 0:
        raise ValueError(f"sign_flip_p needs a non-empty 1-D sequence of differences, got shape {d.shape}")
    if len(d) > 24:
        raise ValueError(f"{len(d)} differences make 2**{len(d)} sign assignments; use the t test at >= 20 seeds")
    sums = np.zeros(1)
    for x in d:
        sums = np.concatenate([sums + x, sums - x])
    observed = abs(float(d.sum()))
    tol = 1e-9 * max(1.0, float(np.abs(d).sum()))
    return float(np.mean(np.abs(sums) >= observed - tol))


@dataclass(frozen=True)
class PairedComparison:
    """A paired comparison of condition A minus condition B over ``n`` shared seeds (or other paired units).

    ``p_value`` is the one the verdict uses: the larger of the t and sign-flip p-values below
    :data:`EXACT_MAX_SEEDS` units, else the t p-value; ``adjusted_p`` is it after Holm's correction
    within a family of comparisons (equal to ``p_value`` alone). ``low``/``high``: the t interval at
    ``1 - alpha``. ``mde``: the minimum detectable effect (two-sided paired t, 80% power, at the
    observed SD). ``tost_p``: the TOST p-value when a ``margin`` was given.
    """

    n: int
    differences: tuple[float, ...]
    mean: float
    sd: float
    low: float
    high: float
    t_p: float
    sign_flip_p: float | None
    p_value: float
    adjusted_p: float
    above: int
    below: int
    mde: float
    alpha: float
    margin: float | None
    tost_p: float | None
    verdict: Verdict
    unit: str = "seeds"

    @property
    def level(self) -> float:
        return 1 - self.alpha

    def excludes_zero(self) -> bool:
        """Whether the t interval excludes 0 (not the verdict: below 20 seeds the sign-flip test must agree)."""
        return self.low > 0 or self.high < 0

    def interval(self, scale: float = 1.0, digits: int = 1) -> str:
        """``+7.5 [-4.8, +19.8]`` (the mean difference and its t interval, times ``scale``)."""
        return (f"{self.mean * scale:+.{digits}f} [{self.low * scale:+.{digits}f}, {self.high * scale:+.{digits}f}]")

    def summary(self, scale: float = 1.0, digits: int = 1, what: str = "A - B") -> str:
        """One sentence that agrees with the numbers, e.g. for a page (``scale=100`` for points)."""
        pct = round(100 * self.level)
        ps = f"t p = {self.t_p:.3g}"
        if self.sign_flip_p is not None:
            ps += f", exact sign-flip p = {self.sign_flip_p:.3g}"
        if self.adjusted_p != self.p_value:
            ps += f", Holm-adjusted p = {self.adjusted_p:.3g}"
        head = (f"{what}: {self.interval(scale, digits)} ({pct}% t interval, n = {self.n} {self.unit}, "
                f"{self.above} up / {self.below} down; {ps})")
        mde = f"{self.mde * scale:.{digits}f}"
        if self.verdict is Verdict.SIGNIFICANT:
            return f"{head}: significant at alpha = {self.alpha:g}."
        if self.verdict is Verdict.EQUIVALENT:
            return (f"{head}: equivalent within +-{self.margin * scale:.{digits}f} (TOST p = {self.tost_p:.3g}).")
        tost = "" if self.margin is None else (
            f"; not shown equivalent within +-{self.margin * scale:.{digits}f} (TOST p = {self.tost_p:.3g})")
        floor = "" if self.sign_flip_p is None else f"; the smallest sign-flip p {self.n} {self.unit} allow is {2 / 2 ** self.n:.3g}"
        disagree = (" the t interval excludes 0 but the exact sign-flip test does not reject;"
                    if self.excludes_zero() and self.adjusted_p == self.p_value and self.t_p < self.alpha else "")
        return (f"{head}:{disagree} {self.verdict.value} at alpha = {self.alpha:g}{tost}; the design detects "
                f"differences of about {mde} or more with 80% power{floor}.")

    def to_dict(self) -> dict:
        return {"n": self.n, "differences": list(self.differences), "value": self.mean, "sd": self.sd,
                "low": self.low, "high": self.high, "level": self.level, "t_p": self.t_p,
                "sign_flip_p": self.sign_flip_p, "p_value": self.p_value, "adjusted_p": self.adjusted_p,
                "above": self.above, "below": self.below, "mde": self.mde, "alpha": self.alpha,
                "margin": self.margin, "tost_p": self.tost_p, "verdict": self.verdict.value, "unit": self.unit}


def _tost_p(mean: float, se: float, df: int, margin: float) -> float:
    if se == 0:
        return 0.0 if abs(mean) < margin else 1.0
    p_low = 1.0 - t_cdf((mean + margin) / se, df)  # H0: true difference <= -margin
    p_high = t_cdf((mean - margin) / se, df)  # H0: true difference >= +margin
    return max(p_low, p_high)


def _verdict(p: float, alpha: float, tost_p: float | None, t_p: float, sign_p: float | None) -> Verdict:
    if p < alpha:
        return Verdict.SIGNIFICANT
    if tost_p is not None and tost_p < alpha:
        return Verdict.EQUIVALENT
    if tost_p is not None or (sign_p is not None and (t_p < alpha) != (sign_p < alpha)):
        return Verdict.INCONCLUSIVE
    return Verdict.NOT_SIGNIFICANT


def paired_seed_test(a: Sequence[float], b: Sequence[float], *, alpha: float = 0.05, margin: float | None = None,
                     adjusted_p: float | None = None, unit: str = "seeds") -> PairedComparison:
    """Condition ``a`` minus condition ``b``, paired by position (``a[i]`` and ``b[i]`` share seed ``i``).

    Args:
        a, b: one number per seed, ``[n]`` each, ``n >= 2``.
        alpha: the test level (the interval is at ``1 - alpha``).
        margin: the equivalence margin (> 0, the data's units) for TOST; None: no equivalence test.
        adjusted_p: this comparison's Holm-adjusted p-value within its family (:func:`compare_family`
            passes it); None: the comparison stands alone.
    """
    if len(a) != len(b):
        raise ValueError(f"paired samples need one value per seed in each; got {len(a)} and {len(b)}")
    if len(a) < 2:
        raise ValueError(f"a paired comparison needs at least 2 seeds, got {len(a)}; run more seeds")
    if margin is not None and not margin > 0:
        raise ValueError(f"the equivalence margin must be > 0, got {margin}")
    d = [float(x) - float(y) for x, y in zip(a, b)]
    n, df = len(d), len(d) - 1
    m = math.fsum(d) / n
    sd = math.sqrt(math.fsum((v - m) ** 2 for v in d) / df)
    se = sd / math.sqrt(n)
    half = t_ppf(1 - alpha / 2, df) * se
    t_p = (1.0 if m == 0 else 0.0) if se == 0 else _t_two_sided_p(m / se, df)
    sign_p = sign_flip_p(d) if n < EXACT_MAX_SEEDS else None
    p = max(t_p, sign_p) if sign_p is not None else t_p
    adj = p if adjusted_p is None else max(p, adjusted_p)
    tost = None if margin is None else _tost_p(m, se, df, margin)
    return PairedComparison(
        n=n, differences=tuple(d), mean=m, sd=sd, low=m - half, high=m + half, t_p=t_p, sign_flip_p=sign_p,
        p_value=p, adjusted_p=adj, above=sum(v > 0 for v in d), below=sum(v < 0 for v in d),
        mde=mde_paired(n, sd, alpha=alpha), alpha=alpha, margin=margin, tost_p=tost,
        verdict=_verdict(adj, alpha, tost, t_p, sign_p), unit=unit)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given): reject ``i`` at ``alpha`` when ``adj[i] < alpha``;
    controls the family-wise error rate over the ``m`` comparisons under any dependence."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adj, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(pvalues[i])))
        adj[i] = running
    return adj


def compare_family(variants: dict[str, tuple[Sequence[float], Sequence[float]]], *, alpha: float = 0.05,
                   margin: float | None = None) -> dict[str, PairedComparison]:
    """The variants of one comparison against their baseline (``name -> (variant values, baseline values)``,
    paired by seed), with Holm's correction across them: each verdict uses its adjusted p-value."""
    raw = {k: paired_seed_test(a, b, alpha=alpha, margin=margin) for k, (a, b) in variants.items()}
    adj = holm([c.p_value for c in raw.values()])
    return {k: paired_seed_test(*variants[k], alpha=alpha, margin=margin, adjusted_p=p) for k, p in zip(raw, adj)}


# --- items -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ItemComparison:
    """Paired binary outcomes of ``n`` items under A and B within one run (one seed): exact McNemar.

    ``gained``: items A solves and B does not; ``lost``: the reverse. ``low``/``high``: the t interval
    of the mean per-item difference (values in {-1, 0, 1}; many items). ``mde``: the smallest
    accuracy difference detectable with 80% power at alpha (normal approximation at the observed
    discordant rate).
    """

    n: int
    accuracy_a: float
    accuracy_b: float
    gained: int
    lost: int
    low: float
    high: float
    p_value: float
    mde: float
    alpha: float
    verdict: Verdict

    @property
    def difference(self) -> float:
        return self.accuracy_a - self.accuracy_b

    def summary(self, scale: float = 100.0, digits: int = 1, what: str = "A - B") -> str:
        head = (f"{what}: {self.difference * scale:+.{digits}f} [{self.low * scale:+.{digits}f}, "
                f"{self.high * scale:+.{digits}f}] over {self.n} items ({self.gained} gained, {self.lost} lost; "
                f"exact McNemar p = {self.p_value:.3g})")
        if self.verdict is Verdict.SIGNIFICANT:
            return f"{head}: significant at alpha = {self.alpha:g} for this run's items (one seed)."
        return (f"{head}: not significant at alpha = {self.alpha:g}; detectable with 80% power: about "
                f"{self.mde * scale:.{digits}f}.")

    def to_dict(self) -> dict:
        return {"n": self.n, "accuracy_a": self.accuracy_a, "accuracy_b": self.accuracy_b, "value": self.difference,
                "gained": self.gained, "lost": self.lost, "low": self.low, "high": self.high,
                "p_value": self.p_value, "mde": self.mde, "alpha": self.alpha, "verdict": self.verdict.value}


def mcnemar_items(a: Sequence[bool | float], b: Sequence[bool | float], *, alpha: float = 0.05) -> ItemComparison:
    """A vs B on the same items within one run: ``a[i]``, ``b[i]`` are item ``i``'s outcomes (solved = 1)."""
    if len(a) != len(b):
        raise ValueError(f"paired items need one outcome per item in each; got {len(a)} and {len(b)}")
    if len(a) < 2:
        raise ValueError(f"an item-level test needs at least 2 items, got {len(a)}")
    xa = [float(v) >= 0.5 for v in a]
    xb = [float(v) >= 0.5 for v in b]
    n = len(xa)
    gained = sum(x and not y for x, y in zip(xa, xb))
    lost = sum(y and not x for x, y in zip(xa, xb))
    ci = mean_interval([float(x) - float(y) for x, y in zip(xa, xb)], level=1 - alpha)
    p = mcnemar_exact(gained, lost)
    z = _NORMAL.inv_cdf(1 - alpha / 2) + _NORMAL.inv_cdf(0.8)
    mde = z * math.sqrt((gained + lost) / n / n)
    return ItemComparison(n=n, accuracy_a=sum(xa) / n, accuracy_b=sum(xb) / n, gained=gained, lost=lost,
                          low=ci.low, high=ci.high, p_value=p, mde=mde, alpha=alpha,
                          verdict=Verdict.SIGNIFICANT if p < alpha else Verdict.NOT_SIGNIFICANT)


@dataclass(frozen=True)
class SharedItemsComparison:
    """A vs B over several seeds evaluated on the same items.

    ``seed_level`` decides (the per-seed accuracy differences, :func:`paired_seed_test`); ``per_seed``
    holds each seed's item-level McNemar test and ``per_seed_holm`` their Holm-adjusted p-values, a
    description of where the difference shows, not a pooled test."""

    seed_level: PairedComparison
    per_seed: tuple[ItemComparison, ...]
    per_seed_holm: tuple[float, ...] = field(default_factory=tuple)

    @property
    def verdict(self) -> Verdict:
        return self.seed_level.verdict

    def summary(self, scale: float = 100.0, digits: int = 1, what: str = "A - B") -> str:
        per = ", ".join(f"{c.difference * scale:+.{digits}f} (p {c.p_value:.2g}, Holm {h:.2g})"
                        for c, h in zip(self.per_seed, self.per_seed_holm))
        return (f"{self.seed_level.summary(scale, digits, what)} Per seed on {self.per_seed[0].n} shared items: "
                f"{per}.")

    def to_dict(self) -> dict:
        return {"seed_level": self.seed_level.to_dict(), "per_seed": [c.to_dict() for c in self.per_seed],
                "per_seed_holm": list(self.per_seed_holm), "verdict": self.verdict.value}


def shared_items_test(a: Sequence[Sequence[bool | float]], b: Sequence[Sequence[bool | float]], *,
                      alpha: float = 0.05, margin: float | None = None) -> SharedItemsComparison:
    """A vs B where seed ``s`` evaluated both on the same items: ``a[s][i]``, ``b[s][i]`` (``[seeds, items]``).

    The seed-level test on the per-seed accuracy differences is the verdict: items shared by the seeds
    are not independent across seeds, so the items are not pooled."""
    if len(a) != len(b) or any(len(x) != len(y) for x, y in zip(a, b)):
        raise ValueError("shared_items_test needs the same seeds and, per seed, the same items in a and b")
    per = tuple(mcnemar_items(x, y, alpha=alpha) for x, y in zip(a, b))
    seed_level = paired_seed_test([c.accuracy_a for c in per], [c.accuracy_b for c in per], alpha=alpha,
                                  margin=margin)
    return SharedItemsComparison(seed_level=seed_level, per_seed=per,
                                 per_seed_holm=tuple(holm([c.p_value for c in per])))
