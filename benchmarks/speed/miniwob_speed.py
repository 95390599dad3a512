"""MiniWoB++ environment throughput as the trainer drives it, 1 browser vs 2 side by side (issue 17).

A training step plays ``prompts_per_step x group_size`` episodes turn by turn; each turn all live
episodes step through :func:`grpolab.envs.step_envs` at once (the browsers work in parallel). This
benchmark plays exactly such batches with the scripted experts' actions (so every episode runs
to the end in the browser, none is cut short by an invalid action) and times the environment
alone: episodes per second of browser time, for one-step tasks and for multi-step tasks, with 1
and 2 browsers in alternating rounds (timings on a shared machine are noisy; compare the ratio).
It also reports the browsers' memory (PSS of every process in a browser's tree).

    python benchmarks/speed/miniwob_speed.py --rounds 3

Prints a table and writes runs/bench/miniwob_speed.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from grpolab.envs import make_env, step_envs
from grpolab.envs.miniwob import MiniWoBPool, shared_pool
from grpolab.tasks import get_task
from grpolab import bench
from grpolab.utils.io import atomic_write_json

ONE_STEP = ["click-test-2", "click-button", "click-link", "click-dialog", "focus-text", "click-tab"]
MULTI_STEP = ["enter-text", "login-user", "click-checkboxes", "click-option"]


def pss_mib(pid: int) -> float:
    """Proportional set size of ``pid`` and all its descendants, MiB."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(d))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def play_batch(pool: MiniWoBPool, items, group_size: int) -> tuple[int, float]:
    """Play ``group_size`` expert episodes per item, turn by turn; ``(episodes, browser seconds)``."""
    envs, acts = [], []
    for it in items:
        a = [t for r, t in it.meta["transcript"] if r == "act"]
        for _ in range(group_size):
            env = make_env("miniwob", pool=pool)
            env.reset(it)
            envs.append(env)
            acts.append(a)
    live, turn, seconds = list(range(len(envs))), 0, 0.0
    while live:
        t0 = time.perf_counter()
        results = step_envs([envs[i] for i in live], [acts[i][turn] for i in live])
        seconds += time.perf_counter() - t0
        bad = [i for i, r in zip(live, results) if r.done and r.reward != 1.0]
        if bad:
            raise RuntimeError(f"an expert episode failed on replay: {[items[i // group_size].meta for i in bad][:2]}")
        live = [i for i, r in zip(live, results) if not r.done]
        turn += 1
    return len(envs), seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", type=int, default=16, help="items per batch (rollout.prompts_per_step)")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--out", default=str(bench.results_path("miniwob_speed.json")))
    args = ap.parse_args()
    kinds = {"one-step": ONE_STEP, "multi-step": MULTI_STEP}
    items = {k: [it for it in get_task("miniwob", tasks=t, elements="interactive").items("train", 8 * args.prompts)
                 if it.meta["expert_solved"]] for k, t in kinds.items()}
    shared_pool().close()  # the pool that built the items: idle browsers would only add noise
    pools = {n: MiniWoBPool(n).start() for n in (1, 2)}
    rates: dict[tuple[str, int], list[float]] = {}
    try:
        for _ in range(1):  # warm up: every task's tab loaded in every browser
            for n, pool in pools.items():
                for k in kinds:
                    play_batch(pool, items[k][: 2 * len(kinds[k])], 1)
        for r in range(args.rounds):
            for k in kinds:
                batch = items[k][r * args.prompts % len(items[k]):][: args.prompts]
                for n, pool in pools.items():
                    eps, sec = play_batch(pool, batch, args.group_size)
                    rates.setdefault((k, n), []).append(eps / sec)
        memory = {n: [pss_mib(pid) for pid in pool.pids] for n, pool in pools.items()}
        episodes = {n: pool.episodes for n, pool in pools.items()}
    finally:
        for pool in pools.values():
            pool.close()
    rows = []
    print(f"episodes/s of browser time, {args.prompts} items x {args.group_size} episodes per batch, "
          f"{args.rounds} rounds (median, min..max)\n")
    print("| tasks | 1 browser | 2 browsers | ratio |")
    print("|---|---|---|---|")
    for k in kinds:
        one, two = statistics.median(rates[(k, 1)]), statistics.median(rates[(k, 2)])
        rows.append({"tasks": k, "task_names": kinds[k], "one_browser": rates[(k, 1)], "two_browsers": rates[(k, 2)]})
        print(f"| {k} | {one:.1f} ({min(rates[(k, 1)]):.1f}..{max(rates[(k, 1)]):.1f}) | {two:.1f} "
              f"({min(rates[(k, 2)]):.1f}..{max(rates[(k, 2)]):.1f}) | {two / one:.2f} |")
    print(f"\nbrowser memory (PSS per browser tree, MiB): {memory}; episodes played: {episodes}")
    atomic_write_json(args.out, {"rows": rows, "memory_pss_mib": memory, "episodes": episodes,
                                 "prompts": args.prompts, "group_size": args.group_size, "rounds": args.rounds,
                                 "machine": bench.machine()})


if __name__ == "__main__":
    main()
