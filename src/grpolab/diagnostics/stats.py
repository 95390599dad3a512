"""Small statistics for diagnostics: the unbiased pass@k estimator, the percentile bootstrap, Wilson and McNemar.

* :func:`pass_at_k` -- Chen et al. 2021 (arXiv 2107.03374, eq. 1): ``1 - C(n-c, k) / C(n, k)``,
  computed as a product so it never overflows.
* :func:`bootstrap_ci` -- percentile bootstrap of a statistic of one sample (resampling units with
  replacement), deterministic for a given ``seed``. Only over many units (items): over a few seeds
  it under-covers; comparisons go through :mod:`grpolab.diagnostics.inference` (t interval, exact
  sign-flip test; its :func:`~grpolab.diagnostics.inference.bootstrap_interval` refuses < 20 units).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = ["CI", "bootstrap_ci", "mcnemar_exact", "pass_at_k", "wilson_interval"]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021).

    Args:
        n: samples drawn for the item; c: how many of them were correct; k: the budget.
    """
    if not 0 <= c <= n or k <= 0:
        raise ValueError(f"need 0 <= c <= n and k > 0; got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k samples per item; got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


@dataclass(frozen=True)
class CI:
    """A point estimate with a two-sided interval ``[low, high]`` at level ``level``."""

    value: float
    low: float
    high: float
    n: int
    level: float = 0.95

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def fmt(self, scale: float = 1.0, digits: int = 3) -> str:
        return (f"{self.value * scale:.{digits}f} [{self.low * scale:.{digits}f}, "
                f"{self.high * scale:.{digits}f}]")

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n, "level": self.level}


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[np.ndarray], float] = np.mean,
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> CI:
    """Percentile bootstrap interval of ``statistic`` over ``values`` (units resampled with replacement).

    ``values`` may be 1-D ``[N]`` (one number per unit) or 2-D ``[N, K]`` (rows are units, e.g. an
    item's k samples; the statistic then sees the resampled rows). With one unit the interval is
    the point itself; with none, every field is NaN.
    """
    x = np.asarray(values, dtype=float)
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    n = len(x)
    if n == 0:
        return CI(float("nan"), float("nan"), float("nan"), 0, level)
    point = float(statistic(x))
    if n == 1:
        return CI(point, point, point, 1, level)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    if statistic is np.mean and x.ndim == 1:
        stats = x[idx].mean(axis=1)  # vectorised fast path
    else:
        stats = np.array([statistic(x[i]) for i in idx])
    alpha = (1 - level) / 2
    lo, hi = np.quantile(stats, [alpha, 1 - alpha])
    return CI(point, float(lo), float(hi), n, level)


def mcnemar_exact(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value of paired binary outcomes: ``gained`` items solved only
    after, ``lost`` only before; ``P(|X - n/2| >= |gained - n/2|)``, ``X ~ Binomial(n, 1/2)``."""
    import math

    n = gained + lost
    if n == 0:
        return 1.0
    k = min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a proportion ``k / n`` (95% at ``z = 1.96``); ``(0, 1)`` when ``n = 0``.

    The item-sampling error of one accuracy measured on ``n`` items (e.g. one run's held-out accuracy).
    """
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))
