"""Per-task paired comparison on real MiniWoB++ pages: a start model against models trained from it.

Every model plays the same held-out seeds greedily (``--per-task`` seeds per task of the
config's task list). For each trained model and each task the table shows success before and
after, the seeds it newly solves (gained) and the ones it no longer solves (lost), and the exact
two-sided McNemar p-value on those discordant seeds (``benchmarks/experiments/envs_paired.py``).

    python benchmarks/experiments/miniwob_paired.py --config examples/miniwob.yaml --per-task 200 \\
        --start runs/miniwob/sft runs/miniwob/final

Prints a table and writes runs/bench/miniwob_paired.json. ``--by-target`` adds, per task,
greedy success split by the page's target field (e.g. focus-text-2's "Focus into the 2nd input":
target 2): a policy that ignores the target solves one value and none of the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

from grpolab.diagnostics import mcnemar_exact, paired_seed_test
from grpolab.runs import greedy_episodes, heldout_items
from grpolab import bench

from grpolab.utils.io import atomic_write_json


def cache_key(model: str | Path, config: str | Path, n: int) -> str:
    """The --cache key of one model's outcomes: its path, a hash of its files' bytes, the config, n.

    The content hash keeps a model retrained into the same directory (e.g. a run resumed to more
    steps, whose ``final/`` is rewritten) from reusing the outcomes of the model it replaced.
    """
    digest = hashlib.sha256()
    for f in sorted(p for p in Path(model).rglob("*") if p.is_file()):
        digest.update(str(f.relative_to(model)).encode())
        digest.update(f.read_bytes())
    return f"{Path(model).resolve()}|{digest.hexdigest()[:16]}|{Path(config).resolve()}|{n}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--per-task", type=int, default=200, help="held-out seeds per task")
    ap.add_argument("--start", required=True, help="the start (warm-started) model directory")
    ap.add_argument("models", nargs="*", help="model directories trained from --start")
    ap.add_argument("--out", default=str(bench.results_path("miniwob_paired.json")))
    ap.add_argument("--cache", default=None, help="JSON file of per-model greedy outcomes to reuse and extend "
                    "(a model already evaluated on the same seeds is not played again)")
    ap.add_argument("--only", action="store_true", help="only evaluate the models into --cache, print nothing")
    ap.add_argument("--by-target", action="store_true", help="also split each task's success by the page's "
                    "target field (does the policy read the target, or pick one fixed element?)")
    args = ap.parse_args()
    from grpolab.config import load_config

    n_tasks = len(load_config(args.config).task.options.get("tasks", []))
    if n_tasks == 0:
        raise SystemExit("the config must list task.options.tasks")
    n = args.per_task * n_tasks
    cache = json.loads(Path(args.cache).read_text()) if args.cache and Path(args.cache).exists() else {}

    played: dict[str, dict] = {}  # this invocation's outcomes per model: its files are hashed once

    def outcomes(model: str):
        if model in played:
            return played[model]
        key = cache_key(model, args.config, n)
        if key not in cache:
            its, solved = greedy_episodes(model, args.config, n)
            cache[key] = {"solved": solved, "tasks": [it.meta["task"] for it in its],
                          "seeds": [it.meta["seed"] for it in its]}
            if args.cache:
                atomic_write_json(args.cache, cache)
        played[model] = cache[key]
        return played[model]

    if args.only:
        for m in [args.start, *args.models]:
            outcomes(m)
        return
    start = outcomes(args.start)
    items = [{"task": t, "seed": s} for t, s in zip(start["tasks"], start["seeds"])]
    base = start["solved"]
    tasks = list(dict.fromkeys(it["task"] for it in items))
    index = {task: [i for i, it in enumerate(items) if task == "all" or it["task"] == task] for task in tasks + ["all"]}
    start_rows = {task: sum(base[i] for i in idx) / len(idx) for task, idx in index.items()}
    out = {"start": args.start, "per_task": args.per_task, "start_success": start_rows, "models": []}
    print(f"greedy held-out success, {args.per_task} seeds per task; start = {args.start}")
    print("start model: " + ", ".join(f"{t} {v:.3f}" for t, v in start_rows.items()) + "\n")
    print("| model | task | start | trained | change (points) | gained | lost | McNemar p |")
    print("|---|---|---|---|---|---|---|---|")
    for m in args.models:
        res = outcomes(m)
        if res["seeds"] != start["seeds"]:
            raise SystemExit(f"{m} was evaluated on other seeds than the start model")
        solved = res["solved"]
        rows = []
        for task, idx in index.items():
            b = start_rows[task]
            s = sum(solved[i] for i in idx) / len(idx)
            gained = sum(solved[i] and not base[i] for i in idx)
            lost = sum(base[i] and not solved[i] for i in idx)
            p = mcnemar_exact(gained, lost)
            rows.append({"task": task, "n": len(idx), "start": b, "trained": s, "gained": gained, "lost": lost,
                         "p_mcnemar": p})
            print(f"| {m} | {task} | {b:.3f} | {s:.3f} | {100 * (s - b):+.1f} | {gained} | {lost} | {p:.3g} |")
        out["models"].append({"model": m, "rows": rows})
    if len(args.models) > 1:
        out["across_models"] = across_models(out["models"], tasks + ["all"])
        print(f"\nacross the {len(args.models)} trained models (seed-level test of the per-model changes; "
              "gained / lost summed for description only)\n")
        print("| task | start | mean change (points) [95% t] | models up / down / same | gained / lost | seed-level p |"
              " verdict |")
        print("|---|---|---|---|---|---|---|")
        for r in out["across_models"]:
            print(f"| {r['task']} | {r['start']:.3f} | {r['mean_change'] * 100:+.1f} [{r['low'] * 100:+.1f}, "
                  f"{r['high'] * 100:+.1f}] | {r['up']} / {r['down']} / {r['same']} | {r['gained']} / {r['lost']} | "
                  f"{r['p_seed_level']:.3g} | {r['verdict']} |")
    if args.by_target:
        its, _ = heldout_items(args.config, n)  # the pages are cached on disk: no browser needed
        targets = [str(it.meta.get("fields", {}).get("target", "-")) for it in its]
        if [it.meta["seed"] for it in its] != start["seeds"]:
            raise SystemExit("the config's held-out items are not the seeds the models were evaluated on")
        models = {"start": base, **{m: outcomes(m)["solved"] for m in args.models}}
        out["by_target"] = by_target(start["tasks"], targets, models)
        print("\ngreedy success by the page's target field (solved / seeds; tasks with at most 8 target values)\n")
        print("| task | target | " + " | ".join(models) + " |")
        print("|---|---|" + "---|" * len(models))
        for r in out["by_target"]:
            print(f"| {r['task']} | {r['target']} | " + " | ".join(f"{r['solved'][m]}/{r['n']}" for m in models) + " |")
    atomic_write_json(args.out, out)


def by_target(tasks: list[str], targets: list[str], models: dict[str, list[bool]],
              max_values: int = 8) -> list[dict]:
    """Per task and target value: the number of seeds and, per model, how many of them it solves.

    ``tasks``, ``targets`` and every ``models`` list are aligned by seed. Only tasks whose target
    takes at most ``max_values`` values are split (a tab number, a dialog button, a widget kind);
    free-text targets (click-link's words) would give one row per seed. Rows come grouped by task
    (in order of first appearance), targets sorted.
    """
    groups: dict[str, dict[str, list[int]]] = {}
    for i, (task, target) in enumerate(zip(tasks, targets)):
        groups.setdefault(task, {}).setdefault(target, []).append(i)
    return [{"task": task, "target": target, "n": len(idx),
             "solved": {m: sum(bool(solved[i]) for i in idx) for m, solved in models.items()}}
            for task, by in groups.items() if len(by) <= max_values
            for target, idx in sorted(by.items())]


def across_models(models: list[dict], tasks: list[str]) -> list[dict]:
    """Per task over several trained models (seeds) evaluated on the same items: mean change with the
    seed-level test (:func:`~grpolab.diagnostics.inference.paired_seed_test` of trained vs start
    accuracy, one value per model: t interval, exact sign-flip p), how many models went up / down /
    stayed, and gained / lost summed over models (a description, not a test).

    The models share their held-out items, so the items are not pooled into one McNemar test: the
    same item under three seeds is one item, not three independent ones (docs/statistics.md).
    """
    rows = []
    for task in tasks:
        per = [next(r for r in m["rows"] if r["task"] == task) for m in models]
        changes = [r["trained"] - r["start"] for r in per]
        c = paired_seed_test([r["trained"] for r in per], [r["start"] for r in per])
        rows.append({"task": task, "start": per[0]["start"], "mean_change": sum(changes) / len(changes),
                     "low": c.low, "high": c.high, "p_seed_level": c.p_value, "verdict": c.verdict.value,
                     "up": sum(x > 0 for x in changes), "down": sum(x < 0 for x in changes),
                     "same": sum(x == 0 for x in changes),
                     "gained": sum(r["gained"] for r in per), "lost": sum(r["lost"] for r in per)})
    return rows

if __name__ == "__main__":
    main()
