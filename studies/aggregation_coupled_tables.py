"""Tables and JSON of docs/results/aggregation_coupled.md from a finished ``grpolab compare`` run.

    python studies/aggregation_coupled_tables.py runs/study_aggregation_coupled \
        --precondition docs/results/raw/aggregation_coupled_lengths_pairsum.json \
        --window 10 --out docs/results/aggregation_coupled.json

Per variant and seed: held-out greedy accuracy before RL, best and at the end, and the paired
difference to ``--baseline`` (:func:`grpolab.sweep.study.collect` and :func:`~grpolab.sweep.study.paired`), plus what this
study adds: the within-group lengths of right and wrong responses (``length/mixed_correct``,
``length/mixed_incorrect``, ``length/mixed_ratio``) and the truncated share, each averaged over the
first and the last ``--window`` steps (``metrics.jsonl``): how the lengths move during training.
Keeps the ``attempts`` of the existing ``--out`` file (the earlier, unmet measurements) and adds the
new precondition as the first attempt. Prints markdown tables; writes ``--out`` atomically.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
from pathlib import Path

from grpolab.diagnostics import mean_interval
from grpolab.sweep.study import collect, fmt_diff, paired
from grpolab.utils.io import atomic_write_json

KEYS = ("length/mixed_correct", "length/mixed_incorrect", "length/mixed_ratio", "length/truncated_frac",
        "length/mean", "accuracy")


def _mean(values):
    v = [x for x in values if isinstance(x, (int, float)) and not math.isnan(x)]
    return sum(v) / len(v) if v else None


def length_windows(rows: list[dict], window: int) -> dict:
    """Each of KEYS averaged (NaN left out) over a run's first and last ``window`` training steps."""
    rows = [r for r in rows if "length/mean" in r]
    first, last = rows[:window], rows[-window:]
    return {"first": {k: _mean([r.get(k) for r in first]) for k in KEYS},
            "last": {k: _mean([r.get(k) for r in last]) for k in KEYS}}


def _attempt(setting: str, measured: dict) -> dict:
    return {"setting": setting, **{k: v for k, v in measured.items()
                                   if isinstance(v, (int, float)) and not isinstance(v, bool)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study")
    ap.add_argument("--precondition", required=True)
    ap.add_argument("--window", type=int, default=10)
    ap.add_argument("--baseline", default="token")
    ap.add_argument("--out", required=True)
    ap.add_argument("--attempt", action="append", default=[], metavar="LABEL=FILE",
                    help="an earlier precondition measurement to record under attempts (repeatable)")
    ap.add_argument("--command", action="append", default=[])
    args = ap.parse_args()
    runs = collect(Path(args.study), [], per_run=lambda rows: length_windows(rows, args.window))
    pairs = paired(runs, args.baseline)
    variants = {}
    print(f"| variant | seeds | before RL | final (95% CI) | final - {args.baseline} (paired) |")
    print("|---|---|---|---|---|")
    for name, run in runs.items():
        seeds, windows = run["seeds"], run["per_run"]
        ci = mean_interval(run["final"]).to_dict()
        entry = {"seeds": seeds, "final": run["final"], "start": run["start"], "best": run["best"], "final_ci": ci,
                 "lengths_first": {k: _mean([w["first"][k] for w in windows]) for k in KEYS},
                 "lengths_last": {k: _mean([w["last"][k] for w in windows]) for k in KEYS},
                 "per_seed": {str(s): w for s, w in zip(seeds, windows)}}
        if name in pairs:
            entry["diff_vs_token"] = pairs[name]["final"]
        variants[name] = entry
        d = entry.get("diff_vs_token")
        print(f"| {name} | {len(seeds)} | {entry['start'][0]:.3f} | {ci['value']:.3f} [{ci['low']:.3f}, "
              f"{ci['high']:.3f}] | {'(baseline)' if d is None else fmt_diff(d)} |")
    print()
    seeds = sorted({s for v in variants.values() for s in v["seeds"]})
    print("| variant | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("|---|" + "---|" * len(seeds))
    for name, e in variants.items():
        final = dict(zip(e["seeds"], e["final"]))
        print(f"| {name} | " + " | ".join(f"{final[s]:.3f}" if s in final else "-" for s in seeds) + " |")
    print()
    print(f"| variant | right, first {args.window} steps | right, last {args.window} | wrong, first | wrong, last "
          "| ratio first | ratio last | truncated first | truncated last | batch accuracy first | last |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, e in variants.items():
        f, la = e["lengths_first"], e["lengths_last"]
        print(f"| {name} | {f['length/mixed_correct']:.2f} | {la['length/mixed_correct']:.2f} | "
              f"{f['length/mixed_incorrect']:.2f} | {la['length/mixed_incorrect']:.2f} | {f['length/mixed_ratio']:.3f} | "
              f"{la['length/mixed_ratio']:.3f} | {f['length/truncated_frac']:.3f} | {la['length/truncated_frac']:.3f} | "
              f"{f['accuracy']:.3f} | {la['accuracy']:.3f} |")
    pre = json.loads(Path(args.precondition).read_text())
    out = Path(args.out)
    old = json.loads(out.read_text()) if out.exists() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    precondition = {k: v for k, v in pre.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    precondition["required_fail_success_length_ratio"] = 1.25
    doc = {
        "name": "aggregation_coupled",
        "status": "precondition met on pairsum; 4 variants x 5 seeds run" if (
            pre["fail_success_length_ratio"] or 0) >= 1.25 else "precondition not met on pairsum",
        "precondition": precondition,
        "attempts": [_attempt(f"pairsum ({pre.get('task_options') or 'defaults'}), max_new_tokens {pre['max_new_tokens']}", pre)]
        + [_attempt(*a.split("=", 1)[0:1], json.loads(Path(a.split("=", 1)[1]).read_text())) for a in args.attempt]
        + [a for a in old.get("attempts", []) if not a["setting"].startswith("pairsum")],
        "variants": variants,
        "window_steps": args.window,
        "command": args.command,
        "commit": commit,
    }
    atomic_write_json(out, doc)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
