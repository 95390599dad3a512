"""Tables and JSON of docs/results/aggregation_coupled.md from a finished ``grpolab compare`` run.

    python studies/aggregation_coupled_tables.py runs/study_aggregation_coupled \
        --precondition docs/results/raw/aggregation_coupled_lengths_pairsum.json \
        --window 10 --out docs/results/aggregation_coupled.json

Per variant and seed: held-out greedy accuracy before RL and at the end (``result.json``), and the
within-group lengths of right and wrong responses (``length/mixed_correct``,
``length/mixed_incorrect``, ``length/mixed_ratio``) plus the truncated share, each averaged over the
first and the last ``--window`` steps (``metrics.jsonl``): how the lengths move during training.
Keeps the ``attempts`` of the existing ``--out`` file (the earlier, unmet measurements) and adds the
new precondition as the first attempt. Prints markdown tables; writes ``--out`` atomically.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from grpolab.diagnostics import mean_ci, paired_bootstrap_ci  # noqa: E402
from grpolab.utils.io import atomic_write_json  # noqa: E402

KEYS = ("length/mixed_correct", "length/mixed_incorrect", "length/mixed_ratio", "length/truncated_frac",
        "length/mean", "accuracy")


def _mean(values):
    v = [x for x in values if isinstance(x, (int, float)) and not math.isnan(x)]
    return sum(v) / len(v) if v else None


def read_run(run_dir: Path, window: int) -> dict:
    result = json.loads((run_dir / "result.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "length/mean" in r]
    first, last = rows[:window], rows[-window:]
    return {
        "start": result["start_accuracy"], "final": result["final_accuracy"], "best": result["best_accuracy"],
        "seconds": result.get("seconds"),
        "first": {k: _mean([r.get(k) for r in first]) for k in KEYS},
        "last": {k: _mean([r.get(k) for r in last]) for k in KEYS},
        "curve": {k: [r.get(k) for r in rows] for k in ("length/mixed_correct", "length/mixed_incorrect")},
    }


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
    runs: dict[str, dict[int, dict]] = {}
    for d in sorted((Path(args.study) / "runs").iterdir()):
        if not (d / "result.json").exists():
            continue
        factors = dict(kv.split("=", 1) for kv in d.name.split(","))
        runs.setdefault(factors["aggregation"], {})[int(factors["seed"])] = read_run(d, args.window)
    order = ["token", "sequence", "constant", "balanced"]
    runs = dict(sorted(runs.items(), key=lambda kv: order.index(kv[0]) if kv[0] in order else len(order)))
    base = runs[args.baseline]
    variants = {}
    print("| variant | seeds | before RL | final (95% CI) | final - token (paired) |")
    print("|---|---|---|---|---|")
    for name, by_seed in runs.items():
        seeds = sorted(by_seed)
        final = [by_seed[s]["final"] for s in seeds]
        ci = asdict(mean_ci(final))
        entry = {"seeds": seeds, "final": final, "start": [by_seed[s]["start"] for s in seeds],
                 "best": [by_seed[s]["best"] for s in seeds], "final_ci": ci,
                 "lengths_first": {k: _mean([by_seed[s]["first"][k] for s in seeds]) for k in KEYS},
                 "lengths_last": {k: _mean([by_seed[s]["last"][k] for s in seeds]) for k in KEYS},
                 "per_seed": {str(s): {"first": by_seed[s]["first"], "last": by_seed[s]["last"]} for s in seeds}}
        common = [s for s in seeds if s in base]
        if name != args.baseline and common:
            entry["diff_vs_token"] = asdict(paired_bootstrap_ci([by_seed[s]["final"] for s in common],
                                                                [base[s]["final"] for s in common]))
        variants[name] = entry
        d = entry.get("diff_vs_token")
        dtxt = "(baseline)" if d is None else f"{d['value']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
        print(f"| {name} | {len(seeds)} | {entry['start'][0]:.3f} | {ci['value']:.3f} [{ci['low']:.3f}, "
              f"{ci['high']:.3f}] | {dtxt} |")
    print()
    seeds = sorted({s for v in runs.values() for s in v})
    print("| variant | " + " | ".join(f"seed {s}" for s in seeds) + " |")
    print("|---|" + "---|" * len(seeds))
    for name, by_seed in runs.items():
        print(f"| {name} | " + " | ".join(f"{by_seed[s]['final']:.3f}" if s in by_seed else "-" for s in seeds) + " |")
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
