"""Paired per-item comparison of episode success: a start model against models trained from it.

Greedy held-out episodes on the same items for every model; for each trained model: success, the
items it solves that the start model does not (gained) and the reverse (lost), and the exact
two-sided McNemar p-value (a binomial test on the discordant items). More items than the training
run evaluated make the comparison less noisy, and none of them chose the models.

    python benchmarks/experiments/envs_paired.py --config examples/web_agent.yaml --n-eval 512 \
        --start runs/web_ws_e runs/web_bench_e/seed0/final runs/web_bench_e/seed1/final

Prints a table and writes runs/bench/envs_paired.json.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from grpolab.diagnostics import mcnemar_exact
from grpolab.runs import greedy_episodes
from grpolab import bench
from grpolab.utils.io import atomic_write_json


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="the environment's YAML config")
    ap.add_argument("--n-eval", type=int, default=512)
    ap.add_argument("--start", required=True, help="the start (warm-started) model directory")
    ap.add_argument("models", nargs="+", help="model directories trained from --start")
    ap.add_argument("--out", default=str(bench.results_path("envs_paired.json")))
    args = ap.parse_args()
    _, base = greedy_episodes(args.start, args.config, args.n_eval)
    n = len(base)
    rows = []
    for m in args.models:
        _, s = greedy_episodes(m, args.config, args.n_eval)
        gained = sum(x and not b for b, x in zip(base, s))
        lost = sum(b and not x for b, x in zip(base, s))
        rows.append({"model": m, "success": sum(s) / n, "solved": sum(s), "gained": gained, "lost": lost,
                     "p_mcnemar": mcnemar_exact(gained, lost)})
    print(f"start {args.start}: {sum(base)}/{n} = {sum(base) / n:.3f} (greedy, {n} held-out items)\n")
    print("| model | solved | success | change (points) | gained | lost | McNemar p |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['solved']}/{n} | {r['success']:.3f} | {100 * (r['success'] - sum(base) / n):+.1f} "
              f"| {r['gained']} | {r['lost']} | {r['p_mcnemar']:.3g} |")
    atomic_write_json(args.out, {"config": args.config, "n_eval": n, "start": {"model": args.start,
                      "solved": sum(base), "success": sum(base) / n}, "models": rows})


if __name__ == "__main__":
    main()
