"""Coverage of grpolab's seed-level intervals, and the error rate of its tests, by simulation.

For n seeds of paired differences drawn from a known distribution with mean 0 (normal, and a skewed
centred exponential), per method: how often the nominal 95% interval covers 0 (the t interval of
grpolab.diagnostics.inference.mean_interval, and the percentile bootstrap grpolab used before), and
how often a test rejects at alpha 0.05 (the t test, the exact sign-flip test, and the rule
paired_seed_test applies below 20 seeds: both). docs/statistics.md shows the table.

    python benchmarks/experiments/coverage.py --out docs/results/coverage.json
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from grpolab.diagnostics.inference import EXACT_MAX_SEEDS, mean_interval, paired_seed_test
from grpolab.diagnostics.stats import bootstrap_ci
from grpolab.bench import results_path
from grpolab.utils.io import atomic_write_json

DISTRIBUTIONS = {
    "normal": lambda rng, size: rng.normal(0.0, 1.0, size),
    "exponential (centred)": lambda rng, size: rng.exponential(1.0, size) - 1.0,
}


def simulate(dist: str, n: int, reps: int, seed: int, n_boot: int) -> dict:
    """One cell: ``reps`` samples of ``n`` differences from ``dist`` (true mean 0)."""
    rng = np.random.default_rng(seed)
    draw = DISTRIBUTIONS[dist]
    t_cov = boot_cov = t_rej = sf_rej = both_rej = 0
    for _ in range(reps):
        x = draw(rng, n)
        c = mean_interval(x)
        t_cov += c.low <= 0.0 <= c.high
        b = bootstrap_ci(x, n_boot=n_boot, seed=int(rng.integers(1 << 30)))
        boot_cov += b.low <= 0.0 <= b.high
        p = paired_seed_test(x, np.zeros(n))
        t_rej += p.t_p < 0.05
        sf_rej += p.sign_flip_p is not None and p.sign_flip_p < 0.05
        both_rej += p.p_value < 0.05
    se = math.sqrt(0.95 * 0.05 / reps)
    return {"distribution": dist, "seeds": n, "reps": reps, "t_coverage": t_cov / reps,
            "bootstrap_coverage": boot_cov / reps, "t_test_rejects": t_rej / reps,
            "sign_flip_rejects": sf_rej / reps if n < EXACT_MAX_SEEDS else None,
            "grpolab_rule_rejects": both_rej / reps, "binomial_se_at_95": se}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[3, 5, 10, 20])
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(results_path("coverage.json")))
    args = ap.parse_args()
    rows = [simulate(d, n, args.reps, args.seed + 1000 * i + n, args.n_boot)
            for i, d in enumerate(DISTRIBUTIONS) for n in args.seeds]
    print("| differences | seeds | t interval covers | percentile bootstrap covers | t test rejects | "
          "sign-flip rejects | grpolab's rule rejects |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        sf = "-" if r["sign_flip_rejects"] is None else f"{r['sign_flip_rejects']:.3f}"
        print(f"| {r['distribution']} | {r['seeds']} | {r['t_coverage']:.3f} | {r['bootstrap_coverage']:.3f} | "
              f"{r['t_test_rejects']:.3f} | {sf} | {r['grpolab_rule_rejects']:.3f} |")
    print(f"\n{args.reps} samples per cell (binomial standard error at 0.95: {rows[0]['binomial_se_at_95']:.4f})")
    atomic_write_json(args.out, {"name": "coverage", "nominal": 0.95, "alpha": 0.05, "reps": args.reps,
                                 "n_boot": args.n_boot, "seed": args.seed,
                                 "command": "python benchmarks/experiments/coverage.py --out docs/results/coverage.json",
                                 "rows": rows})


if __name__ == "__main__":
    main()
