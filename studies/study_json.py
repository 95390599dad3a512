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
  largest fall below the best accuracy so far: :func:`grpolab.sweep.study.max_drop`), and the step-mean of each
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

from grpolab.diagnostics import mean_interval
from grpolab.sweep.study import (collect, curve_auc, eval_curve, first_reach, fmt_diff, max_drop,  # noqa: F401
                                 paired)
from grpolab.utils.io import atomic_write_json

ROOT = Path(__file__).resolve().parents[1]


def tables(variants: dict[str, dict], pairs: dict[str, dict], baseline: str, metrics: list[str]) -> str:
    def ci(xs):
        c = mean_interval(xs).to_dict()
        return f"{c['value']:.3f} [{c['low']:.3f}, {c['high']:.3f}]" if len(xs) > 1 else f"{c['value']:.3f} (1 seed)"

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
