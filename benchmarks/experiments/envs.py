"""Built-in environments: does a warm-started tiny model improve under GRPO? (issue 5)

For one environment: a supervised warm start on the scripted expert's transcripts (or a given
warm-started model), then GRPO from it with several seeds. Reports held-out *greedy* episode
success of the warm start and of each seed's final model, overall and by item family
(``meta["family"]`` for web, ``meta["n_terms"]`` for tool_arith), on the same eval items.

    # warm start + 3 seeds (the settings of examples/web_agent.yaml, docs/results/envs_log.md "Measured")
    python benchmarks/experiments/envs.py --env web --seeds 0 1 2
    # reuse a warm start; extra overrides go to `grpolab train`
    python benchmarks/experiments/envs.py --env web --warm-start runs/web_ws --set trainer.steps=60 --jobs 2

Prints a table and writes runs/bench/envs.json (one entry per environment, merged into
the file if it exists).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


from grpolab.runs import greedy_episodes
from grpolab import bench
from grpolab.utils.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[2]

CONFIGS = {"web": "examples/web_agent.yaml", "tool_arith": "examples/tool_arith.yaml",
           "miniwob": "examples/miniwob.yaml"}


def _grpolab(args: list[str], log: Path) -> float:
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, "-m", "grpolab.cli", *args], stdout=f, stderr=subprocess.STDOUT,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"grpolab {' '.join(args)} failed; see {log}")
    return time.time() - t0


def episode_family(item) -> str:
    """The family name of an episode item (its ``family``, else ``n_terms``, else ``all``) for the
    per-family table; :func:`grpolab.diagnostics.preflight.family_of` is the ``KIND=NAME`` label."""
    meta = item.meta
    return str(meta.get("family", meta.get("n_terms", "all")))


def greedy_by_family(model_dir: Path, config: str, n_eval: int) -> dict:
    """Greedy held-out episode success of ``model_dir``: overall and per family (counts)."""
    items, solved = greedy_episodes(model_dir, config, n_eval)
    fam: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
    for it, ok in zip(items, solved):
        fam[episode_family(it)][0] += int(ok)
        fam[episode_family(it)][1] += 1
    return {"success": sum(solved) / len(items), "n": len(items), "solved": sum(solved),
            "by_family": {k: {"solved": a, "n": b} for k, (a, b) in sorted(fam.items())}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", choices=sorted(CONFIGS), default="web")
    ap.add_argument("--config", default=None, help="YAML config (default: the environment's example)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--warm-start", default=None, help="a warm-started model directory (skips the warm start)")
    ap.add_argument("--sft-set", action="append", default=[], help="extra --set for `grpolab sft`")
    ap.add_argument("--set", dest="extra", action="append", default=[], help="extra --set for `grpolab train`")
    ap.add_argument("--n-eval", type=int, default=128, help="held-out items (same for every seed)")
    ap.add_argument("--jobs", type=int, default=1, help="seeds trained at once")
    ap.add_argument("--root", default=None, help="where runs go (default runs/bench_envs_ENV)")
    ap.add_argument("--out", default=str(bench.results_path("envs.json")))
    args = ap.parse_args()
    config = args.config or str(ROOT / CONFIGS[args.env])
    root = Path(args.root or ROOT / "runs" / f"bench_envs_{args.env}")
    root.mkdir(parents=True, exist_ok=True)
    t_all = time.time()

    sft_info: dict = {}
    if args.warm_start:
        ws = Path(args.warm_start)
        sft_info["model"] = str(ws)
    else:
        ws = root / "warm_start"
        sft_args = sum((["--set", s] for s in args.sft_set), [])
        # --overwrite: each invocation builds (and times) its own warm start
        wall = _grpolab(["sft", config, "--out", str(ws), "--overwrite", *sft_args], root / "sft.log")
        last = [line for line in (root / "sft.log").read_text().splitlines() if line.startswith("saved")]
        sft_info = {"model": str(ws), "wall_s": wall, "summary": last[-1] if last else "", "overrides": args.sft_set}

    def run_seed(seed: int) -> dict:
        run_dir = root / f"seed{seed}"
        train_args = ["train", config, "--set", f"model.path={ws}", "--set", "sft.enabled=no",
                      "--set", f"trainer.seed={seed}", "--set", f"trainer.run_dir={run_dir}",
                      "--set", f"task.n_eval={args.n_eval}", "--set", "log.progress=false"]
        train_args += sum((["--set", s] for s in args.extra), [])
        wall = _grpolab(train_args, root / f"seed{seed}.log")
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        k = max(1, len(rows) // 5)
        return {
            "seed": seed, "wall_s": wall, "rl_steps": rows[-1]["step"],
            "mean_step_s": sum(r["time/step"] for r in rows) / len(rows),
            "eval_curve": [(r["step"], r["eval/accuracy"]) for r in rows if "eval/accuracy" in r],
            "train_reward_first": sum(r["reward/mean"] for r in rows[:k]) / k,
            "train_reward_last": sum(r["reward/mean"] for r in rows[-k:]) / k,
            "invalid_first": sum(r.get("episode/invalid_actions", 0.0) for r in rows[:k]) / k,
            "invalid_last": sum(r.get("episode/invalid_actions", 0.0) for r in rows[-k:]) / k,
            "end": greedy_by_family(run_dir / "final", config, args.n_eval),
        }

    start = greedy_by_family(ws, config, args.n_eval)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(run_seed, args.seeds))

    fams = sorted(start["by_family"])
    print(f"\nenvironment {args.env}: held-out greedy success on {args.n_eval} items (warm start {ws})")
    print("| seed | RL steps | s/step | start | end | change | " + " | ".join(f"{f} start->end" for f in fams) + " |")
    print("|---" * (6 + len(fams)) + "|")
    for r in runs:
        fam_cells = [f"{start['by_family'][f]['solved']}->{r['end']['by_family'][f]['solved']}"
                     f"/{start['by_family'][f]['n']}" for f in fams]
        print(f"| {r['seed']} | {r['rl_steps']} | {r['mean_step_s']:.1f} | {start['success']:.3f} "
              f"| {r['end']['success']:.3f} | {r['end']['success'] - start['success']:+.3f} | "
              + " | ".join(fam_cells) + " |")
    mean_change = sum(r["end"]["success"] - start["success"] for r in runs) / len(runs)
    print(f"mean change {mean_change:+.3f}; total wall {time.time() - t_all:.0f} s")

    out = Path(args.out)
    data = json.loads(out.read_text()) if out.exists() else {}
    data[args.env] = {
        "machine": bench.machine(),
        "config": config, "train_overrides": args.extra, "warm_start": sft_info, "n_eval": args.n_eval,
        "start": start, "runs": runs, "mean_change": mean_change,
    }
    atomic_write_json(out, data)


if __name__ == "__main__":
    main()
