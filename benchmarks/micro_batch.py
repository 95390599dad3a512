"""Update throughput against the micro-batch token budget (``trainer.micro_batch_tokens``).

The default config's update phase (forward + backward + AdamW over one rollout batch), timed with
the same step as ``benchmarks/performance.py``, for several budgets in interleaved rounds (so a
noisy machine affects every budget alike). Useful GFLOP/s as in performance.py.

    python benchmarks/micro_batch.py --model runs/ws_arith --budgets 2048 4096 8192 16384

Prints a table and writes benchmarks/results/micro_batch.json.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import performance as perf
from grpolab.utils import bench


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="warm-started model dir")
    ap.add_argument("--budgets", type=int, nargs="+", default=[2048, 4096, 8192, 16384])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "micro_batch.json"))
    args = ap.parse_args()
    policy, tok = perf.load_model(args.model)
    start = {k: v.clone() for k, v in policy.state_dict().items()}
    rows: dict[int, list[dict]] = {b: [] for b in args.budgets}
    for rnd in range(args.rounds):
        for budget in args.budgets:
            cfg = perf.load_config(overrides={"trainer.micro_batch_tokens": str(budget)})
            items, _ = perf.build_task_splits(cfg.task, seed=0)
            policy.load_state_dict(start)  # every budget starts from the same weights
            steps = perf.timed_steps(policy, tok, cfg, items, steps=args.steps)
            update_s = perf.median(steps, "update_s")
            gflops = perf.median(steps, "update_flops") / update_s / 1e9
            rows[budget].append({"update_s": update_s, "gflops": gflops})
            print(f"round {rnd}  budget {budget:6d}  update {update_s:.3f} s  {gflops:.1f} GFLOP/s", flush=True)
    summary = {b: {"median_update_s": statistics.median(r["update_s"] for r in rs),
                   "median_gflops": statistics.median(r["gflops"] for r in rs)} for b, rs in rows.items()}
    print("\n| micro_batch_tokens | update s (median) | useful GFLOP/s (median) |\n|---|---|---|")
    for b, r in summary.items():
        print(f"| {b} | {r['median_update_s']:.3f} | {r['median_gflops']:.1f} |")
    bench.write_json(args.out, {"rounds": rows, "summary": summary, "machine": bench.machine()})
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
