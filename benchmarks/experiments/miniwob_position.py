"""Does a MiniWoB++ policy read the target's text, or click by position? (click-link, click-button, ...)

    python benchmarks/experiments/miniwob_position.py --config studies/miniwob_gain_text.yaml --task click-link \\
        --per-task 200 runs/ws_ch50_text60 runs/mg_text/runs/seed=*/final

For each model, greedy episodes on the task's first ``--per-task`` held-out seeds (the items of
``benchmarks/experiments/miniwob_paired.py``), split by where the target element sits among the page's elements
of its kind (its element id: 1 = first): how many pages put it there, how many the model solves, and
which element id the model clicks. A policy that reads the target solves every position alike; one
that clicks by position solves the pages whose target happens to sit where it clicks.
Prints a table per model and writes ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
from pathlib import Path

from grpolab import bench


_CLICK = re.compile(r"click\((\d+)\)")


def target_id(meta: dict) -> int | None:
    """The element id whose text is the page's target (``meta["fields"]["target"]``; case and
    surrounding space ignored); None when no element carries it."""
    target = str((meta.get("fields") or {}).get("target", "")).strip().lower()
    ids = [e["id"] for e in meta.get("elements", []) if str(e.get("text", "")).strip().lower() == target]
    return ids[0] if ids else None


def clicked_id(completion: str) -> int | None:
    """The element id of the last ``click(N)`` in an episode's transcript (None: no click)."""
    found = _CLICK.findall(completion)
    return int(found[-1]) if found else None


def by_position(metas: list[dict], scores: list[float], completions: list[str]) -> dict:
    """``{target_id: {"n", "solved", "clicked": {id: count}}}`` (key "none": no element has the
    target's text), ids as strings, in id order."""
    out: dict = collections.defaultdict(lambda: {"n": 0, "solved": 0, "clicked": collections.Counter()})
    for meta, score, text in zip(metas, scores, completions, strict=True):
        row = out[str(target_id(meta) or "none")]
        row["n"] += 1
        row["solved"] += int(score >= 1.0 - 1e-9)
        row["clicked"][str(clicked_id(text) or "none")] += 1
    key = lambda k: (k == "none", int(k) if k.isdigit() else 0)  # noqa: E731
    return {k: {"n": v["n"], "solved": v["solved"], "clicked": dict(sorted(v["clicked"].items(), key=lambda kv: key(kv[0])))}
            for k, v in sorted(out.items(), key=lambda kv: key(kv[0]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--task", required=True, help="one MiniWoB++ task of the config (e.g. click-link)")
    ap.add_argument("--per-task", type=int, default=200, help="held-out seeds")
    ap.add_argument("models", nargs="+", help="model directories")
    ap.add_argument("--out", default=str(bench.results_path("miniwob_position.json")))
    args = ap.parse_args()

    from grpolab.runs import greedy_eval, heldout_items

    from grpolab.config import load_config
    from grpolab.utils.io import atomic_write_json

    n_tasks = len(load_config(args.config).task.options.get("tasks") or [])
    if n_tasks == 0:
        sys.exit("error: the config must list task.options.tasks")
    items, cfg = heldout_items(args.config, args.per_task * n_tasks)  # the same items as miniwob_paired.py
    items = [it for it in items if it.meta.get("task") == args.task][: args.per_task]
    if not items:
        sys.exit(f"error: no held-out items of task {args.task!r} in {args.config}; is it in task.options.tasks?")
    result = {"config": args.config, "task": args.task, "n": len(items), "models": {}}
    for m in args.models:
        res = greedy_eval(m, items, cfg.env)
        table = by_position([it.meta for it in items], res.scores, res.completions)
        result["models"][m] = {"solved": sum(v["solved"] for v in table.values()), "by_target_id": table}
        print(f"\n{m}: {result['models'][m]['solved']}/{len(items)} solved")
        print("| target element id | pages | solved | clicked ids (count) |\n|---|---|---|---|")
        for k, v in table.items():
            print(f"| {k} | {v['n']} | {v['solved']} | {', '.join(f'{i}: {c}' for i, c in v['clicked'].items())} |")
    atomic_write_json(Path(args.out), result)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
