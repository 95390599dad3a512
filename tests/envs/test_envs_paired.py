"""grpolab.diagnostics.mcnemar_exact (benchmarks/experiments/envs_paired.py, miniwob_paired.py): the exact McNemar test on discordant items, against hand values."""

import math

import pytest

from grpolab.diagnostics import mcnemar_exact


@pytest.mark.parametrize("gained,lost,p", [
    (8, 0, 2 / 256),  # 8 discordant items, all one way: 2 * 0.5**8
    (0, 8, 2 / 256),
    (5, 1, 2 * 7 / 64),  # 2 * (C(6,0) + C(6,1)) / 2**6
    (3, 3, 1.0),
    (0, 0, 1.0),
])
def test_mcnemar_exact_matches_hand_values(gained, lost, p):
    assert mcnemar_exact(gained, lost) == pytest.approx(p, rel=1e-12)


@pytest.mark.parametrize("gained,lost", [(20, 10), (7, 12), (1, 0), (13, 13)])
def test_mcnemar_exact_matches_the_definition(gained, lost):
    """Against the definition, summed over every outcome: P(|X - n/2| >= |gained - n/2|)."""
    n = gained + lost
    pmf = [math.comb(n, x) / 2**n for x in range(n + 1)]
    p = sum(q for x, q in enumerate(pmf) if abs(x - n / 2) >= abs(gained - n / 2) - 1e-12)
    assert mcnemar_exact(gained, lost) == pytest.approx(min(1.0, p), rel=1e-12)
