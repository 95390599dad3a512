"""Write a finished comparison's per-seed results into ``docs/results/<name>.json`` and print its tables.

    python studies/study_json.py runs/study_credit_teacher --name credit_teacher \
        [--baseline grpo] [--metric credit/segments_per_seq ...] [--command "grpolab compare ..."]

Reads ``OUT/sweep.json`` and every finished run's ``metrics.jsonl`` and ``result.json`` (its
``start_accuracy`` is the step-0 point of the curve; a ``grpolab compare`` output directory), and merges into the study's JSON (keeping its ``precondition`` and everything else):

- ``variants``: per variant, ``seeds`` and ``final`` (held-out greedy accuracy at the last step, same
  order), ``start``, ``best``, ``auc`` (the area under the held-out accuracy curve over the run,
  divided by its length: the mean accuracy over training, trapezoid rule), ``curve`` (eval steps and
  per-seed accuracies), ``steps_to_baseline_final`` (per seed, the first eval step at which the
  variant reached the baseline's final accuracy *of the same seed*; null if it never did),
  ``collapsed`` (runs whose accuracy fell below half of their start), ``max_drop`` (per seed, the
  largest fall below the best accuracy so far: :func:`max_drop`), and the step-mean of each
  ``--metric`` per seed;
- ``paired_vs_baseline``: per variant, the paired (by seed) mean difference of final, auc and max_drop with a
  95% bootstrap interval, and how many seeds are above / below the baseline;
- ``command`` and ``commit``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from grpolab.diagnostics import mean_ci, paired_bootstrap_ci  # noqa: E402
from grpolab.train.metrics_log import read_metrics  # noqa: E402
from grpolab.utils.io import atomic_write_json  # noqa: E402


def eval_curve(rows: list[dict]) -> tuple[list[int], list[float]]:
    """``(steps, accuracies)`` of the rows that carry ``eval/accuracy`` (step 0 = before RL)."""
    pts = [(int(r["step"]), float(r["eval/accuracy"])) for r in rows if r.get("eval/accuracy") is not None]
    pts = sorted(dict(pts).items())
    return [s for s, _ in pts], [a for _, a in pts]


def curve_auc(steps: list[int], acc: list[float]) -> float:
    """Trapezoid area under ``acc(steps)`` divided by the step range: the mean accuracy over training."""
    if len(steps) < 2:
        return acc[0]
    area = sum((steps[i + 1] - steps[i]) * (acc[i] + acc[i + 1]) / 2 for i in range(len(steps) - 1))
    return area / (steps[-1] - steps[0])


def max_drop(acc: list[float]) -> float:
    """The largest fall of ``acc`` below its best so far (0 when it never falls): how far a run
    that learned went back, a milder instability than a collapse."""
    best, drop = float("-inf"), 0.0
    for a in acc:
        best = max(best, a)
        drop = max(drop, best - a)
    return drop


def first_reach(steps: list[int], acc: list[float], target: float) -> int | None:
    """First eval step with ``acc >= target`` (None if never)."""
    return next((s for s, a in zip(steps, acc) if a >= target - 1e-12), None)


def collect(out: Path, metrics: list[str], per_run: Callable[[list[dict]], Any] | None = None) -> dict[str, dict]:
    """Per variant (``sweep.json``'s factor values), its finished runs' results in seed order.

    With ``per_run``, each run's ``per_run(metrics.jsonl rows)`` too, under ``"per_run"`` (same order)."""
    plan = json.loads((out / "sweep.json").read_text())
    variants: dict[str, dict] = {}
    for run in plan["runs"]:
        run_dir = out / "runs" / run["name"]
        if not (run_dir / "result.json").exists():
            continue
        rows = read_metrics(run_dir)
        steps, acc = eval_curve(rows)
        start = json.loads((run_dir / "result.json").read_text()).get("start_accuracy")
        if start is not None and (not steps or steps[0] > 0):  # the step-0 evaluation is in result.json
            steps, acc = [0, *steps], [float(start), *acc]
        if not steps:
            continue
        name = ",".join(str(v) for v in run["factors"].values())
        v = variants.setdefault(name, {"seeds": [], "final": [], "start": [], "best": [], "auc": [], "max_drop": [],
                                       "curve": {"steps": steps, "accuracy": []}, "collapsed": 0,
                                       "metrics": {m: [] for m in metrics}, **({"per_run": []} if per_run else {})})
        v["seeds"].append(run["seed"])
        v["final"].append(acc[-1])
        v["start"].append(acc[0])
        v["best"].append(max(acc))
        v["auc"].append(curve_auc(steps, acc))
        v["max_drop"].append(max_drop(acc))
        v["curve"]["accuracy"].append(acc)
        v["collapsed"] += int(min(acc[1:] or acc) < 0.5 * acc[0])
        for m in metrics:
            vals = [float(r[m]) for r in rows if isinstance(r.get(m), (int, float))]
            v["metrics"][m].append(sum(vals) / len(vals) if vals else None)
        if per_run:
            v["per_run"].append(per_run(rows))
    for v in variants.values():  # seed order
        order = sorted(range(len(v["seeds"])), key=lambda i: v["seeds"][i])
        for k in ("seeds", "final", "start", "best", "auc", "max_drop", *(("per_run",) if per_run else ())):
            v[k] = [v[k][i] for i in order]
        v["curve"]["accuracy"] = [v["curve"]["accuracy"][i] for i in order]
        v["metrics"] = {m: [xs[i] for i in order] for m, xs in v["metrics"].items()}
    return variants


def paired(variants: dict[str, dict], baseline: str) -> dict[str, dict]:
    base = variants[baseline]
    by_seed = {s: i for i, s in enumerate(base["seeds"])}
    out = {}
    for name, v in variants.items():
        idx = [(i, by_seed[s]) for i, s in enumerate(v["seeds"]) if s in by_seed]
        steps = v["curve"]["steps"]
        v["steps_to_baseline_final"] = [
            first_reach(steps, v["curve"]["accuracy"][i], base["final"][j]) for i, j in idx]
        if name == baseline or not idx:
            continue
        entry = {"seeds": [v["seeds"][i] for i, _ in idx]}
        for k in ("final", "auc", "max_drop"):
            a, b = [v[k][i] for i, _ in idx], [base[k][j] for _, j in idx]
            entry[k] = paired_bootstrap_ci(a, b).to_dict() if len(idx) > 1 else {"value": a[0] - b[0]}
            entry[f"{k}_above"] = sum(x > y for x, y in zip(a, b))
            entry[f"{k}_below"] = sum(x < y for x, y in zip(a, b))
        out[name] = entry
    return out


def fmt_diff(c: dict) -> str:
    """A paired difference from :func:`paired`: ``+0.012 [-0.003, +0.027]`` (no interval with one seed)."""
    return f"{c['value']:+.3f}" + (f" [{c['low']:+.3f}, {c['high']:+.3f}]" if "low" in c else "")


def tables(variants: dict[str, dict], pairs: dict[str, dict], baseline: str, metrics: list[str]) -> str:
    def ci(xs):
        c = mean_ci(xs).to_dict() if len(xs) > 1 else {"value": xs[0], "low": xs[0], "high": xs[0]}
        return f"{c['value']:.3f} [{c['low']:.3f}, {c['high']:.3f}]"

    lines = ["| variant | seeds | start | final, per seed | final | auc | final - " + baseline
             + " | auc - " + baseline + " | steps to " + baseline + "'s final | largest drop | collapsed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in variants.items():
        p = pairs.get(name)
        reach = ", ".join("-" if s is None else str(s) for s in v["steps_to_baseline_final"])
        lines.append(
            f"| {name} | {len(v['seeds'])} | {sum(v['start']) / len(v['start']):.3f} | "
            f"{' '.join(f'{x:.3f}' for x in v['final'])} | {ci(v['final'])} | {ci(v['auc'])} | "
            f"{fmt_diff(p['final']) + ' (' + str(p['final_above']) + ' up, ' + str(p['final_below']) + ' down)' if p else '(baseline)'} | "
            f"{fmt_diff(p['auc']) if p else ''} | {reach} | {max(v['max_drop']):.3f} | {v['collapsed']}/{len(v['seeds'])} |")
    if metrics:
        lines += ["", "| variant | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
        for name, v in variants.items():
            cells = []
            for m in metrics:
                xs = [x for x in v["metrics"][m] if x is not None]
                cells.append(f"{sum(xs) / len(xs):.4g}" if xs else "")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="a grpolab compare output directory (holds sweep.json and runs/)")
    ap.add_argument("--name", required=True, help="the study's name: docs/results/<name>.json")
    ap.add_argument("--baseline", default=None, help="the variant the others are paired with (default: the first)")
    ap.add_argument("--metric", action="append", default=[], help="a metrics.jsonl key to average per run")
    ap.add_argument("--command", action="append", default=[], help="the command(s) that made OUT")
    ap.add_argument("--results", default=str(ROOT / "docs" / "results"))
    args = ap.parse_args()
    variants = collect(Path(args.out), args.metric)
    if not variants:
        sys.exit(f"error: no finished runs with eval/accuracy in {args.out}; run the comparison first")
    baseline = args.baseline or next(iter(variants))
    if baseline not in variants:
        sys.exit(f"error: baseline {baseline!r} is not one of the variants {list(variants)}")
    pairs = paired(variants, baseline)
    path = Path(args.results) / f"{args.name}.json"
    doc = json.loads(path.read_text()) if path.exists() else {"name": args.name}
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    doc.update({"baseline": baseline, "variants": variants, "paired_vs_baseline": pairs,
                "commit": commit or doc.get("commit")})
    if args.command:
        doc["command"] = args.command
    atomic_write_json(path, doc)
    print(tables(variants, pairs, baseline, args.metric))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
