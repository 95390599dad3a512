"""Teacher readability that can fail, on SmolLM2 (issue 60 item 1; docs/credit.md, "Readability that can fail").

Samples ``--group-size`` responses to ``--prompts`` training prompts of a model (a model directory or
a warm start's run directory), runs the teacher forward once (the model shown the worked solution,
as the trainer's frozen teacher at step 0), and measures on the same batch:

* the new measure, :func:`grpolab.measure.readability.error_readability_row`: AUC of ``delta`` at
  re-derived first errors vs the departed tokens of correct-but-reworded responses (and vs every
  token of correct responses), intervals by a bootstrap over responses;
* the old one, :func:`grpolab.measure.readability.readability_row`'s first-departure ``teacher_auc``;
* the share of correct responses' tokens GEAR's default rule puts in departed segments.

    python benchmarks/experiments/readability_errors.py --model models/smollm2-135m-instruct \\
        --label base --prompts 32 --group-size 4 --out docs/results/readability_errors.json

Each run is merged into ``--out`` under ``runs.<label>`` (written atomically; default
``runs/bench/readability_errors.json``); the script prints the table of every run recorded there.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from grpolab.utils import offline  # noqa: F401  (nothing reaches the Hub)
from grpolab.utils import bench

ROOT = Path(__file__).resolve().parents[2]
OUT = bench.results_path("readability_errors.json")
CONFIG = ROOT / "studies" / "real_credit_reads.yaml"
#: the prompt that asks an instruct model for a worked answer the short_arith re-deriver reads
WORKED_PROMPT = ("{prompt} Work it out column by column (ones first, then tens, with any carry), "
                 "then end with a line 'Answer: N'.")


def _commit() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def _fmt(ci: dict | None) -> str:
    if ci is None:
        return "undefined"
    lo, hi = ci["low"], ci["high"]
    bounds = "" if lo != lo else f" [{lo:.3f}, {hi:.3f}]"  # NaN: too few responses for an interval
    return f"{ci['value']:.3f}{bounds}"


def table(doc: dict) -> str:
    head = ("| run | responses | error / reworded / verbatim / unlabelled | new AUC: error vs reworded | "
            "error vs all correct | old first-departure AUC | GEAR share of correct tokens |")
    lines = [head, "|" + "---|" * 7]
    for label, r in doc.get("runs", {}).items():
        m = r["measure"]
        c = m["counts"]
        share = m["gear_departed_share_correct"]
        lines.append(f"| {label} | {m['responses']} | {c['error']} / {c['reworded']} / {c['verbatim']} / "
                     f"{c['unlabelled']} | {_fmt(m['auc_error_vs_reworded'])} | {_fmt(m['auc_error_vs_correct'])} | "
                     f"{_fmt(m['auc_first_departure'])} | {'-' if share is None else f'{share:.3f}'} |")
    return "\n".join(lines)


def measure(args) -> dict:
    import torch

    from grpolab.measure.readability import (error_readability_row, readability_row, sample_responses,
                                             teacher_delta)
    from grpolab.runs import open_run

    from grpolab.config import load_config

    torch.set_num_threads(args.threads)
    config = load_config(args.config, list(args.set))
    if args.prompt_template:
        config.task.prompt_template = args.prompt_template  # a dict value: no YAML parsing of "{prompt}"
    config.validate()
    opened = open_run(args.model, config=config, train_items=True, max_new_tokens=args.max_new_tokens)
    cfg = opened.config
    items = opened.train_items[: args.prompts]
    T = cfg.rollout.temperature
    t0 = time.time()
    exp = sample_responses(opened.collector, opened.model, items, group_size=args.group_size, temperature=T,
                           seed=args.seed)
    t_sample = time.time() - t0
    d = teacher_delta(opened.model, opened.tokenizer, opened.prompt_format, cfg.credit, exp, temperature=T,
                      return_kl=cfg.credit.divergence == "kl")
    res = error_readability_row(opened.tokenizer, exp, d, cfg.credit, task=cfg.task.name, seed=args.seed)
    old = readability_row(opened.tokenizer, exp, d)
    from grpolab.diagnostics.readability_errors import label_responses

    r = exp.rollout
    labels = label_responses(opened.tokenizer, r.response_ids, r.response_mask, exp.items, args.group_size,
                             exp.rewards >= 1.0, r.finished, cfg.task.name)
    examples = {}
    for text, lab in zip(exp.texts, labels):
        ex = examples.setdefault(lab.category, [])
        if len(ex) < 3:
            rd = lab.rederivation
            ex.append({"text": text, "error_kind": rd.error_kind, "written": rd.written, "expected": rd.expected})
    return {"model": str(args.model), "label": args.label, "note": args.note, "prompts": len(items),
            "group_size": args.group_size, "seed": args.seed, "temperature": T, "task": cfg.task.name,
            "task_options": dict(cfg.task.options), "prompt_template": cfg.task.prompt_template,
            "teacher_template": cfg.credit.chat_template, "placement": cfg.credit.privileged_placement,
            "max_new_tokens": cfg.rollout.max_new_tokens, "divergence": cfg.credit.divergence,
            "correct_frac": float((exp.rewards >= 1.0).float().mean()),
            "mean_response_tokens": float(r.response_mask.sum(-1).float().mean()),
            "measure": res.to_dict(), "old": {k: old[k] for k in ("teacher_auc", "wrong_responses_localised",
                                                                  "tokens_before", "response_auc")},
            "examples": examples, "seconds": {"sample": t_sample, "total": time.time() - t0},
            "command": "python benchmarks/experiments/readability_errors.py " + " ".join(sys.argv[1:]),
            "commit": _commit()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", help="the model directory to measure (student, and teacher shown the solution)")
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--set", action="append", default=[], help="config override key=value (repeatable)")
    ap.add_argument("--prompt-template", default=WORKED_PROMPT,
                    help="task.prompt_template ('' keeps the config's)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--label", default="run")
    ap.add_argument("--note", default="")
    ap.add_argument("--table-only", action="store_true", help="print the table of --out and exit")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    doc = json.loads(args.out.read_text()) if args.out.exists() else {}
    if not args.table_only:
        if not args.model:
            ap.error("--model is required unless --table-only")
        from grpolab.utils.io import atomic_write_json

        row = measure(args)
        doc = json.loads(args.out.read_text()) if args.out.exists() else {}  # merge with runs finished meanwhile
        doc.setdefault("runs", {})[args.label] = row
        args.out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(args.out, doc)
        print(json.dumps({k: row[k] for k in ("label", "correct_frac", "mean_response_tokens", "old")}))
    print(table(doc))


if __name__ == "__main__":
    main()
