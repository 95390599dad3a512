"""DAPO's dynamic sampling vs plain GRPO: the share of each step's trained groups that carry signal.

One warm start (``grpolab sft`` with the default settings) is shared by every run; each seed trains
``--steps`` RL steps twice from it, without and with ``rollout.dynamic_sampling``, at one or more
batch sizes. Per run: the mean share of trained groups with signal (rewards not all equal, so a
non-zero advantage), steps that had no such group, the share of *sampled* groups with signal, the
sampling rounds per step, the mean step time, and held-out greedy accuracy before and after.

    python benchmarks/experiments/dynamic_sampling.py --seeds 0 1 2 --steps 40 --prompts 32 4

Prints a table (dynamic / plain ratios side by side) and writes runs/bench/dynamic_sampling.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from grpolab.config import load_config
from grpolab.train import train
from grpolab.train.metrics_log import read_metrics
from grpolab import bench
from grpolab.utils.io import atomic_write_json

VARIANTS = {"grpo": [], "dynamic": ["rollout.dynamic_sampling=true"]}


def run(ws: Path, root: Path, seed: int, prompts: int, variant: str, steps: int) -> dict:
    run_dir = root / f"p{prompts}_{variant}_s{seed}"
    overrides = [f"model.path={ws}", "sft.enabled=no", f"trainer.steps={steps}", "trainer.eval_every=10",
                 "trainer.save_every=1000", "trainer.preflight=false", "log.progress=false", "log.plots=false",
                 "log.tensorboard=false", "log.completions_every=0", f"trainer.seed={seed}",
                 f"rollout.prompts_per_step={prompts}", f"trainer.run_dir={run_dir}", *VARIANTS[variant]]
    t0 = time.time()
    if (run_dir / "summary.json").exists():  # finished by an earlier invocation (--root): reuse it
        s = json.loads((run_dir / "summary.json").read_text())
        res = argparse.Namespace(start_accuracy=s["accuracy"]["before_rl"], final_accuracy=s["accuracy"]["final"])
        wall = s["seconds"]
    else:
        res = train(load_config(overrides=overrides), overwrite=run_dir.exists(), log=lambda *_: None)
        wall = time.time() - t0
    rows = read_metrics(run_dir)
    share = [r["groups/with_signal"] / prompts for r in rows]
    sampled = [r["dynamic_sampling/signal_frac"] if r.get("dynamic_sampling/signal_frac") is not None
               else 1 - r["groups/all_equal_frac"] for r in rows]
    rounds = [r.get("dynamic_sampling/rounds") or 1.0 for r in rows]
    return {"seed": seed, "prompts_per_step": prompts, "variant": variant, "steps": steps,
            "trained_signal_share": sum(share) / len(share),
            "steps_without_signal": sum(1 for r in rows if r["groups/with_signal"] == 0),
            "steps_full": sum(1 for s in share if s >= 1.0),
            "sampled_signal_share": sum(sampled) / len(sampled),
            "rounds_per_step": sum(rounds) / len(rounds),
            # the cost in generation, independent of the machine's load: groups sampled per step
            "sampled_groups_per_step": sum(r.get("dynamic_sampling/sampled_groups") or prompts for r in rows) / len(rows),
            "rollout_s_per_step": sum(r["time/rollout"] for r in rows) / len(rows),
            "mean_step_s": sum(r["time/step"] for r in rows) / len(rows), "wall_s": wall,
            "start_accuracy": res.start_accuracy, "final_accuracy": res.final_accuracy,
            "eval_curve": [[r["step"], r["eval/accuracy"]] for r in rows if r.get("eval/accuracy") is not None]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--prompts", type=int, nargs="+", default=[32, 4])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(bench.results_path("dynamic_sampling.json")))
    ap.add_argument("--root", default=None, help="work directory (default: a new temporary one); finished "
                    "runs found there are reused, so an interrupted invocation continues")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root = Path(args.root) if args.root else Path(tempfile.mkdtemp(prefix="grpolab_ds_"))
    ws = root / "ws"
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "grpolab.cli", "sft", "--out", str(ws)], check=True,
                   capture_output=True, text=True)  # kept when already built with the same settings
    ws_s = time.time() - t0
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs = []
    for p in args.prompts:
        for s in args.seeds:
            for v in VARIANTS:
                runs.append(run(ws, root, s, p, v, args.steps))
                atomic_write_json(out, {"command": "python " + " ".join(sys.argv), "commit": commit,
                                        "machine": bench.machine(threads=args.threads),
                                        "warm_start_s": ws_s, "complete": False, "runs": runs})
    print(f"warm start {ws_s:.0f} s; {args.steps} RL steps per run, {args.threads} thread(s)")
    print("| prompts/step | seed | trained groups with signal (plain -> dynamic) | steps without signal | "
          "sampled groups with signal | rounds/step | groups sampled/step | step s (ratio) | "
          "held-out acc final (plain / dynamic) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in args.prompts:
        for s in args.seeds:
            a, b = (next(r for r in runs if (r["prompts_per_step"], r["seed"], r["variant"]) == (p, s, v))
                    for v in VARIANTS)
            print(f"| {p} | {s} | {a['trained_signal_share']:.3f} -> {b['trained_signal_share']:.3f} | "
                  f"{a['steps_without_signal']} -> {b['steps_without_signal']} | "
                  f"{a['sampled_signal_share']:.3f} / {b['sampled_signal_share']:.3f} | {b['rounds_per_step']:.2f} | "
                  f"{a['sampled_groups_per_step']:.1f} / {b['sampled_groups_per_step']:.1f} | "
                  f"{a['mean_step_s']:.2f} / {b['mean_step_s']:.2f} ({b['mean_step_s'] / a['mean_step_s']:.2f}x) | "
                  f"{a['final_accuracy']:.3f} / {b['final_accuracy']:.3f} (start {a['start_accuracy']:.3f}) |")
    atomic_write_json(out, {"command": "python " + " ".join(sys.argv), "commit": commit,
                            "machine": bench.machine(threads=args.threads),
                            "warm_start_s": ws_s, "complete": True, "runs": runs})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
