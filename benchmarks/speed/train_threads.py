"""Wall time of the README's main command, `grpolab train` on its default, at 1 and at 2 threads.

Each variant is the whole command as a user runs it (model built, warm start, 400 GRPO steps, the
report), in its own process with ``OMP_NUM_THREADS`` (and ``MKL_NUM_THREADS``) set to the thread
count, into a fresh run directory. The variants run in interleaved rounds (1, 2, 1, 2, ...) so that
other work on a shared machine weighs on both alike; the load average before and after each run and
the process's CPU seconds are recorded, so a reader can tell a loaded machine from a slow program.
The ratio reported is the median 1-thread wall time over the median 2-thread wall time.

    python benchmarks/speed/train_threads.py --rounds 2 --json docs/results/train_threads.json

Each run's console output is kept in ``--root`` (``t{threads}_r{round}.log``) with its run directory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from grpolab import bench


def run_once(threads: int, rnd: int, root: Path, extra: list[str]) -> dict:
    """One `grpolab train` at ``threads`` threads; its wall and CPU seconds, result and the load."""
    run_dir = root / f"t{threads}_r{rnd}"
    cmd = [sys.executable, "-c", "from grpolab.cli import main; raise SystemExit(main())", "train",
           "--set", f"trainer.run_dir={run_dir}", *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    load_before = os.getloadavg()[0]
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.time() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    (root / f"t{threads}_r{rnd}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{threads} thread(s), round {rnd} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"threads": threads, "round": rnd, "wall_s": wall,
            "cpu_s": (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime),
            "load_before": load_before, "load_after": os.getloadavg()[0],
            "start_accuracy": summary.get("start_accuracy"), "final_accuracy": summary.get("final_accuracy")}


def _each(runs: list[dict], key: str) -> str:
    return ", ".join(f"{r[key]:.0f}" for r in runs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=2, help="runs of each variant, interleaved (at least 2)")
    ap.add_argument("--root", default=str(bench.results_path("train_threads")), help="run directories and console logs")
    ap.add_argument("--json", default=str(bench.results_path("train_threads.json")),
                    help="the record; rewritten after every run (complete: false until the last)")
    ap.add_argument("--set", dest="extra", action="append", default=[],
                    help="extra --set override for every run (e.g. trainer.steps=20 for a quick look)")
    args = ap.parse_args(argv)
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    extra = [a for kv in args.extra for a in ("--set", kv)]
    runs: list[dict] = []
    for rnd in range(args.rounds):
        for threads in args.threads:
            r = run_once(threads, rnd, root, extra)
            runs.append(r)
            print(f"round {rnd}  {threads} thread(s)  {r['wall_s']:7.1f} s wall  {r['cpu_s']:7.1f} s CPU  "
                  f"load {r['load_before']:.1f} -> {r['load_after']:.1f}", flush=True)
            _write(args, argv, runs, complete=len(runs) == args.rounds * len(args.threads))
    medians = {t: statistics.median(r["wall_s"] for r in runs if r["threads"] == t) for t in args.threads}
    print("\n| threads | runs | wall s (each) | median wall s | CPU s (each) |\n|---|---|---|---|---|")
    for t in args.threads:
        mine = [r for r in runs if r["threads"] == t]
        print(f"| {t} | {len(mine)} | {_each(mine, 'wall_s')} | {medians[t]:.0f} | {_each(mine, 'cpu_s')} |")
    lo, hi = min(args.threads), max(args.threads)
    print(f"\nmedian wall time at {lo} thread(s) / at {hi}: {medians[lo] / medians[hi]:.2f}")
    print(f"wrote {args.json}")
    return 0


def _write(args, argv: list[str] | None, runs: list[dict], *, complete: bool) -> None:
    """The record so far (a benchmark cut short still leaves its runs)."""
    import torch

    done = sorted({r["threads"] for r in runs})
    medians = {str(t): statistics.median(r["wall_s"] for r in runs if r["threads"] == t) for t in done}
    lo, hi = str(min(args.threads)), str(max(args.threads))
    bench.write_json(args.json, {
        "command": "python " + " ".join([sys.argv[0], *(argv if argv is not None else sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__},
        "complete": complete, "extra_overrides": args.extra, "runs": runs, "median_wall_s": medians,
        "ratio": medians[lo] / medians[hi] if lo in medians and hi in medians else None,
        "ratio_of": f"median wall s at {lo} thread(s) / at {hi}",
    })


if __name__ == "__main__":
    sys.exit(main())
