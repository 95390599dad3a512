"""`grpolab train` with no arguments (the product's main job), over several seeds.

For each seed: wall time of the whole command (warm start included, as a user runs it), held-out
greedy accuracy of the warm-started model (before RL) and after RL, and the gain. Targets (issue
"the main job"): <= 600 s on 2 CPU cores and a gain >= 15 points for every seed.

    python benchmarks/experiments/train_default.py --seeds 0 1 2

Prints a table and writes runs/bench/train_default.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from grpolab import bench
from grpolab.utils.io import atomic_write_json


def run_seed(seed: int, root: Path, extra: list[str]) -> dict:
    run_dir = root / f"seed{seed}"
    cmd = [sys.executable, "-m", "grpolab.cli", "train", "--set", f"trainer.seed={seed}",
           "--set", f"trainer.run_dir={run_dir}", "--set", "log.progress=false", *extra]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"seed {seed} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if r.get("eval/accuracy") is not None]
    sft = json.loads((run_dir / "sft" / "sft.json").read_text())
    start = next(line for line in proc.stdout.splitlines() if line.startswith("step 0"))
    start_acc = float(start.split()[-1])
    final_acc = evals[-1][1]
    return {
        "seed": seed, "wall_s": wall, "sft_steps": sft["steps"], "sft_s": sft["seconds"],
        "start_accuracy": start_acc, "final_accuracy": final_acc,
        "best_accuracy": max(a for _, a in evals), "gain_points": 100 * (final_acc - start_acc),
        "rl_steps": rows[-1]["step"], "mean_step_s": sum(r["time/step"] for r in rows) / len(rows),
        "eval_curve": evals,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--set", dest="extra", action="append", default=[], help="extra --set for grpolab train")
    ap.add_argument("--out", default=str(bench.results_path("train_default.json")))
    args = ap.parse_args()
    extra = sum((["--set", s] for s in args.extra), [])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            rows.append(run_seed(seed, Path(tmp), extra))
            r = rows[-1]
            print(f"seed {seed}: {r['wall_s']:.0f}s, accuracy {r['start_accuracy']:.3f} -> "
                  f"{r['final_accuracy']:.3f}", flush=True)
    print()
    print("| seed | wall s | SFT steps | RL steps | s/RL step | before RL | after RL | gain (points) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['wall_s']:.0f} | {r['sft_steps']} | {r['rl_steps']} | {r['mean_step_s']:.2f} "
              f"| {r['start_accuracy']:.3f} | {r['final_accuracy']:.3f} | {r['gain_points']:+.1f} |")
    ok_time = all(r["wall_s"] <= 600 for r in rows)
    ok_gain = all(r["gain_points"] >= 15 for r in rows)
    print(f"\ntargets: wall <= 600 s: {'met' if ok_time else 'MISSED'}; gain >= 15 points every seed: "
          f"{'met' if ok_gain else 'MISSED'}")
    atomic_write_json(args.out, {
        "machine": bench.machine(),
        "extra_overrides": args.extra, "runs": rows,
        "targets": {"wall_s_max": 600, "gain_points_min": 15, "time_met": ok_time, "gain_met": ok_gain},
    })


if __name__ == "__main__":
    main()
