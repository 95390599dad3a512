"""RLSD and GEAR on SmolLM2 where the teacher reads at token level (issue 44).

Setting (studies/real_credit_reads.yaml): SmolLM2-135M-Instruct after a short supervised warm start
on worked, column-by-column solutions of two-digit sums (``short_arith`` ``digits: [2, 2]``,
``demonstration: worked``), so that responses show their working (~43 tokens) and a teacher shown
the solution can point at the first wrong step. Subcommands:

    # 1. the precondition: teacher readability per template on >= 256 responses of the warm start
    python benchmarks/experiments/real_credit_reads.py precondition --out docs/results/real_credit_reads.json --warm-start runs/reads_ws --prompts 32
    # 2. headroom of the warm start (greedy vs sampled vs pass@k: grpolab preflight's headroom section)
    python benchmarks/experiments/real_credit_reads.py headroom --out docs/results/real_credit_reads.json --warm-start runs/reads_ws
    # 3. the study: GRPO, RLSD, GEAR, OPSD from the warm start, one seed at a time (1 thread)
    python benchmarks/experiments/real_credit_reads.py study --out docs/results/real_credit_reads.json --warm-start runs/reads_ws_ps50 --seeds 0 1 2 3 4 --jobs 2
    # a GEAR test fixture: SmolLM2's sampled responses with their teacher / student log-probs
    python benchmarks/experiments/real_credit_reads.py fixture --model models/smollm2-135m-instruct \
        --config studies/real_credit.yaml --out tests/objectives/data/smollm2_short_answers.pt

Every subcommand merges its part into ``--out`` (``runs/bench/real_credit_reads.json`` by default;
the committed record: ``--out docs/results/real_credit_reads.json``) (written atomically
after every finished piece, so a partial study survives): ``model``, ``task``, ``response_tokens``,
``precondition`` (``teacher_auc`` and ``template`` of the best template, every template tried),
``headroom``, ``variants.{grpo,rlsd,gear,opsd}`` (``seeds``, ``start``, ``final``, ``curve``, area,
seconds per step, teacher seconds per step), ``variants.rlsd.steps_to_grpo_final``,
``paired_vs_grpo`` (:func:`grpolab.sweep.study.paired`), ``wilson_final``
(:func:`grpolab.diagnostics.wilson_interval`), ``command``, ``commit``. Prints the tables of
docs/results/real_credit_reads.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from grpolab.utils import offline  # noqa: F401  (nothing reaches the Hub)
from grpolab.config import DEFAULT_CHAT_TEACHER_TEMPLATE
from grpolab import bench

ROOT = Path(__file__).resolve().parents[2]
#: default output (runs/bench/, git-ignored); the committed record is written with
#: ``--out docs/results/real_credit_reads.json`` (its page gives the commands)
OUT = bench.results_path("real_credit_reads.json")
CONFIG = ROOT / "studies" / "real_credit_reads.yaml"
METHODS = ("grpo", "rlsd", "gear", "opsd")
METRICS = ["time/step", "time/rollout", "time/update", "length/mean", "credit/segment_token_frac",
           "credit/clip_frac", "credit/kl_sampled"]


def _commit() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def save(path: Path, doc: dict) -> None:
    from grpolab.utils.io import atomic_write_json

    doc["commit"] = _commit()
    doc.setdefault("model", "SmolLM2-135M-Instruct (models/smollm2-135m-instruct, float32), full-weight "
                            "supervised warm start on worked solutions, then LoRA r=16 alpha 32 for RL")
    doc.setdefault("task", "short_arith two-digit sums (digits [2, 2]), answered with the worked column-by-column "
                           "solution ending 'Answer: N' (final_line verifier), ChatML chat template; privileged "
                           "context = the worked solution")
    doc.setdefault("prompt_format", "the tokenizer's chat template (task.chat_template=on), its default system line, "
                                    "prompt '{prompt}'")
    atomic_write_json(path, doc)


def _record_command(doc: dict, cmd: str) -> None:
    cmds = doc.setdefault("command", [])
    if cmd not in cmds:
        cmds.append(cmd)


# --------------------------------------------------------------------------------------- precondition
#: Teacher templates tried (chat-template runs: where the privileged context goes and how it reads).
TEMPLATES = {
    "user_bare": {"privileged_placement": "user", "chat_template": "{prompt}\n\n{privileged}"},
    "user": {"privileged_placement": "user", "chat_template": DEFAULT_CHAT_TEACHER_TEMPLATE},  # the default text
    "system": {"privileged_placement": "system"},
    "system_bare": {"privileged_placement": "system", "system_template": "{privileged}"},
    "user_solution_first": {"privileged_placement": "user", "chat_template": "{privileged}\n\n{prompt}"},
}


def precondition(args) -> None:
    """Teacher readability of each template on one batch of the warm start's samples."""
    import dataclasses

    import torch

    from grpolab.runs import open_run
    from grpolab.measure.readability import readability_row, sample_responses, teacher_delta

    torch.set_num_threads(args.threads)
    opened = open_run(args.warm_start, config=str(args.config), overrides=args.set, train_items=True)
    cfg = opened.config
    items = opened.train_items[: args.prompts]
    G, T = cfg.rollout.group_size, cfg.rollout.temperature
    t0 = time.time()
    exp = sample_responses(opened.collector, opened.model, items, group_size=G, temperature=T, seed=args.seed)
    print(f"sampled {len(exp.texts)} responses in {time.time() - t0:.0f}s", flush=True)
    hr = headroom_of_batch(opened, items, exp, G)
    print(f"headroom on the same {len(items)} prompts: {hr['verdict']} (greedy {hr['overall'].get('greedy')}, "
          f"sampled {hr['overall'].get('sampled')})", flush=True)
    rows = {}
    for name in args.templates:
        credit = dataclasses.replace(cfg.credit, **TEMPLATES[name])
        d = teacher_delta(opened.model, opened.tokenizer, opened.prompt_format, credit, exp, temperature=T)
        row = readability_row(opened.tokenizer, exp, d)
        rows[name] = row
        print(json.dumps({"template": name, **{k: v for k, v in row.items() if k != "template_text"}}), flush=True)
    best = max((n for n in rows if rows[n]["teacher_auc"] is not None), key=lambda n: rows[n]["teacher_auc"],
               default=None)
    doc = load(args.out)
    tried = doc.setdefault("settings_tried", [])
    entry = {"warm_start": str(args.warm_start), "prompts": len(items), "group_size": G, "seed": args.seed,
             "extra": args.set, "by_template": rows, "best_template": best,
             "examples": [{"text": exp.texts[i], "reward": float(exp.rewards[i])} for i in range(0, len(exp.texts), G)][:4]}
    entry["headroom"] = hr
    tried[:] = [e for e in tried if not (e["warm_start"] == entry["warm_start"] and e["extra"] == entry["extra"])]
    tried.append(entry)
    pick = rows[best] if best else None
    if pick is not None and (not doc.get("precondition") or args.adopt):
        doc["precondition"] = {
            "teacher_auc": {"value": pick["teacher_auc"], "template": best, "needs": pick["needs"],
                            "met": pick["met"], "responses": pick["responses"],
                            "wrong_responses_localised": pick["wrong_responses_localised"],
                            "tokens_before": pick["tokens_before"]},
            "response_auc": pick["response_auc"], "warm_start": str(args.warm_start),
            "correct_frac": pick["correct_frac"], "mean_response_tokens": pick["mean_response_tokens"],
        }
        doc["response_tokens"] = {"mean": pick["mean_response_tokens"], "of": pick["responses"],
                                  "needs": 30, "met": pick["mean_response_tokens"] >= 30}
        doc["headroom"] = {"source": "the precondition's batch: greedy once and the same samples, per prompt",
                           "warm_start": str(args.warm_start), **hr}
    _record_command(doc, "python benchmarks/experiments/real_credit_reads.py precondition " + " ".join(sys.argv[2:]))
    save(args.out, doc)
    print(f"best template: {best}; wrote {args.out}")


def headroom_of_batch(opened, items, exp, group_size: int) -> dict:
    """The headroom section of :func:`grpolab.diagnostics.preflight.preflight_from_outcomes` on the sampled
    batch ``exp`` (``group_size`` samples per item) and one greedy response per item: greedy vs sampled
    (one paired interval) vs pass@k, the GRPO verdict, per family."""
    from grpolab.diagnostics.preflight import preflight_from_outcomes

    greedy = opened.collector.collect(opened.model, list(items), group_size=1, greedy=True)
    sampled = exp.rewards.view(len(items), group_size).tolist()
    fams = [f"family={(it.meta or {}).get('family', 'all')}" for it in items]
    res = preflight_from_outcomes([float(x) for x in greedy.rewards], sampled, group_size=group_size,
                                  max_new_tokens=opened.config.rollout.max_new_tokens, families=fams)
    return {"verdict": res.verdict().value, "overall": res.stats.to_dict(),
            "families": {lab: f.to_dict() for lab, f in res.families.items()},
            "temperature": opened.config.rollout.temperature,
            "source": "benchmarks/experiments/real_credit_reads.py precondition"}


# --------------------------------------------------------------------------------------- headroom
def headroom(args) -> None:
    """``grpolab preflight``'s measurement of the warm start (its headroom section), with the run's prompt format."""
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="reads_headroom_"))
    cmd = ["grpolab", "preflight", str(args.warm_start), "--config", str(args.config), "--n", str(args.n),
           "--k", str(args.k), "--no-readability", "--out", str(out)] + sum((["--set", s] for s in args.set), [])
    print(" ".join(cmd), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
    print(proc.stdout[-3000:], proc.stderr[-3000:])
    if proc.returncode != 0:
        raise SystemExit(f"error: grpolab preflight failed ({proc.returncode}); see above")
    found = sorted(out.rglob("*.json"))
    res = json.loads(found[0].read_text()) if found else {"stdout": proc.stdout[-2000:]}
    doc = load(args.out)
    doc["headroom"] = {"warm_start": str(args.warm_start), "items": args.n, "k": args.k, "result": res}
    _record_command(doc, " ".join(cmd))
    save(args.out, doc)
    print(f"wrote {args.out}")


# --------------------------------------------------------------------------------------- study
def per_run(rows: list[dict]) -> dict:
    """What one run's step rows say beyond its curve: teacher seconds per step and peak memory."""
    teach = [float(r["time/teacher"]) for r in rows if isinstance(r.get("time/teacher"), (int, float))]
    rss = [float(r["memory/peak_rss_mb"]) for r in rows if isinstance(r.get("memory/peak_rss_mb"), (int, float))]
    return {"teacher_seconds": sum(teach) / len(teach) if teach else None, "peak_rss_mb": max(rss) if rss else None}


#: a variant's per-seed lists besides ``seeds`` and the curve (same order as ``seeds``)
PER_SEED = ("final", "start", "best", "auc", "max_drop", "teacher_seconds_per_step", "peak_rss_mb")


def carry_recorded(variants: dict, recorded: dict) -> dict[str, list[int]]:
    """Add to ``variants`` (built from the runs on disk) each seed of ``recorded`` (an earlier record's
    ``variants``) whose run is not on disk, as it was recorded; seed order kept. Returns the carried
    seeds per method. For a study whose first seeds ran on a machine that is gone: the record keeps
    their numbers, the runs directory does not."""
    carried: dict[str, list[int]] = {}
    for name, old in recorded.items():
        v = variants.get(name)
        have = set(v["seeds"]) if v else set()
        keep = [i for i, s in enumerate(old["seeds"]) if s not in have]
        if not keep:
            continue
        if v is None:
            v = variants[name] = {"seeds": [], **{k: [] for k in PER_SEED}, "collapsed": 0,
                                  "curve": {"steps": old["curve"]["steps"], "accuracy": []},
                                  "metrics": {m: [] for m in old.get("metrics", {})}}
        if v["curve"]["steps"] != old["curve"]["steps"]:
            raise SystemExit(f"error: {name}'s recorded seeds were evaluated at steps {old['curve']['steps']}, "
                             f"the runs on disk at {v['curve']['steps']}; drop --carry-recorded or rerun them")
        n_old = len(old["seeds"])
        for i in keep:
            v["seeds"].append(old["seeds"][i])
            v["curve"]["accuracy"].append(old["curve"]["accuracy"][i])
            for k in PER_SEED:
                v[k].append((old.get(k) or [None] * n_old)[i])
            for m in v["metrics"]:
                v["metrics"][m].append((old.get("metrics", {}).get(m) or [None] * n_old)[i])
        order = sorted(range(len(v["seeds"])), key=lambda j: v["seeds"][j])
        for k in ("seeds", *PER_SEED):
            v[k] = [v[k][j] for j in order]
        v["curve"]["accuracy"] = [v["curve"]["accuracy"][j] for j in order]
        v["metrics"] = {m: [xs[j] for j in order] for m, xs in v["metrics"].items()}
        v["collapsed"] = sum(int(min(c[1:] or c) < 0.5 * c[0]) for c in v["curve"]["accuracy"])
        carried[name] = [old["seeds"][i] for i in keep]
    return carried


def build_variants(study: Path, heldout: int, recorded: dict | None = None) -> tuple[dict, dict, dict]:
    """``(variants, paired_vs_grpo, carried)`` of the finished runs in a ``grpolab compare``
    directory; with ``recorded`` (an earlier record's ``variants``), its seeds that have no run on
    disk are kept (:func:`carry_recorded`; ``carried`` names them per method)."""
    from grpolab.diagnostics import wilson_interval
    from grpolab.sweep.study import collect, paired

    variants = collect(study, METRICS, per_run=per_run) if (study / "sweep.json").exists() else {}
    for v in variants.values():
        runs = v.pop("per_run")
        v["teacher_seconds_per_step"] = [r["teacher_seconds"] for r in runs]
        v["peak_rss_mb"] = [r["peak_rss_mb"] for r in runs]
    carried = carry_recorded(variants, recorded) if recorded else {}
    variants = {m: variants[m] for m in METHODS if m in variants}
    pairs = paired(variants, "grpo") if "grpo" in variants else {}
    for v in variants.values():
        v["seconds_per_step"] = v["metrics"]["time/step"]
        v["wilson_final"] = [list(wilson_interval(round(a * heldout), heldout)) for a in v["final"]]
        v.setdefault("steps_to_baseline_final", [])
    if "rlsd" in variants:
        r = variants["rlsd"]
        r["steps_to_grpo_final"] = r["steps_to_baseline_final"]
        # the claim (RLSD reaches GRPO's final accuracy in fewer steps) reads only where GRPO gained:
        # where GRPO ended below its start every method "reaches" it at step 0
        g = variants.get("grpo", {})
        gained = {s: f > st for s, f, st in zip(g.get("seeds", []), g.get("final", []), g.get("start", []))}
        r["grpo_gained"] = [gained.get(s) for s in r["seeds"] if s in gained]
    return variants, pairs, carried


def _update_record(doc: dict, variants: dict, pairs: dict, carried: dict, heldout: int) -> None:
    doc.update({"heldout_items": heldout, "baseline": "grpo", "variants": variants, "paired_vs_grpo": pairs,
                "seeds_run": sorted({s for v in variants.values() for s in v["seeds"]})})
    doc.pop("study", None)  # an earlier "not run" note
    if carried:
        doc["carried_seeds"] = {"seeds": carried, "why": "these seeds' runs are not on disk (they ran on a machine "
                                "that is gone); their numbers are the earlier record's, kept by report --carry-recorded"}
    else:
        doc.pop("carried_seeds", None)


def study(args) -> None:
    """Every seed's runs planned at once (one ``sweep.json``: a partial study collects what finished),
    then run seed by seed, ``--jobs`` at a time; the JSON rewritten after each seed. Re-running the
    same command skips finished runs and resumes interrupted ones from their checkpoint."""
    from grpolab.sweep.runner import plan_sweep, run_sweep

    root = Path(args.root)
    overrides = [f"model.path={args.warm_start}", "sft.enabled=no", *args.set]
    grid = ["credit.name=" + ",".join(args.methods)]
    out, specs = plan_sweep(args.config, overrides, grid, args.seeds, root)
    doc = load(args.out)
    doc["schedule"] = (f"{args.steps_label}; from one warm start ({args.warm_start}); "
                       "credit lam 0.5 -> 0 linear over the run; teacher = the warm start (LoRA adapters off)")
    sets = " ".join(f"--set {s}" for s in args.set)
    _record_command(doc, f"python benchmarks/experiments/real_credit_reads.py study --warm-start {args.warm_start} "
                         f"--seeds {' '.join(map(str, args.seeds))} --jobs {args.jobs} --root {root} "
                         f"{'--carry-recorded ' if getattr(args, 'carry_recorded', False) else ''}"
                         f"--out {args.out} {sets}".strip())
    save(args.out, doc)
    for seed in args.seeds:
        t0 = time.time()
        res = run_sweep(out, [s for s in specs if s.seed == seed], jobs=args.jobs)
        failed = sorted(n for n, st in res.status.items() if st == "failed")
        print(f"seed {seed}: {time.time() - t0:.0f}s wall, {res.cpu_seconds:.0f}s CPU"
              + (f"; FAILED: {', '.join(failed)}" if failed else ""), flush=True)
        doc = load(args.out)
        recorded = doc.get("variants", {}) if getattr(args, "carry_recorded", False) else None
        variants, pairs, carried = build_variants(root, args.heldout, recorded)
        _update_record(doc, variants, pairs, carried, args.heldout)
        save(args.out, doc)
        print(table(doc), flush=True)
    print(f"wrote {args.out}")


def report(args) -> None:
    """Rebuild ``variants`` from the finished runs of ``--root`` (no training), draw the figure. With
    ``--carry-recorded``, seeds already in ``--out`` whose runs are not under ``--root`` are kept."""
    root = Path(args.root)
    doc = load(args.out)
    recorded = doc.get("variants", {}) if getattr(args, "carry_recorded", False) else None
    variants, pairs, carried = build_variants(root, args.heldout, recorded)
    _update_record(doc, variants, pairs, carried, args.heldout)
    if args.figure:
        doc["figure"] = str(args.figure)
        figure(doc, args.figure)
    save(args.out, doc)
    print(table(doc))
    print(f"wrote {args.out}" + (f" and {args.figure}" if args.figure else ""))


def figure(doc: dict, path: Path) -> None:
    """Held-out greedy accuracy per method over the steps (thin: each seed, thick: the mean), titled
    with the task and captioned with the prompt format and each method's peak memory."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    memory = []
    for i, (name, v) in enumerate(doc.get("variants", {}).items()):
        steps, curves = v["curve"]["steps"], v["curve"]["accuracy"]
        color = f"C{i}"
        for c in curves:
            ax.plot(steps, c, color=color, alpha=0.25, lw=0.8)
        mean = [sum(c[j] for c in curves) / len(curves) for j in range(len(steps))]
        ax.plot(steps, mean, color=color, lw=2.2, marker="o", label=f"{name} ({len(curves)} seeds)")
        rss = [x for x in v.get("peak_rss_mb", []) if x is not None]
        memory.append(f"{name} {max(rss):.0f} MiB" if rss else f"{name} not recorded")
    ax.set_xlabel("RL step")
    ax.set_ylabel(f"held-out greedy accuracy ({doc.get('heldout_items', '?')} items)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("SmolLM2-135M-Instruct, worked two-digit sums: GRPO vs RLSD / GEAR / OPSD", fontsize=10)
    import textwrap

    caption = (f"prompts: {doc.get('prompt_format', '?')}. Peak memory (RSS, one run on CPU): "
               f"{', '.join(memory)}. {doc.get('schedule', '')}")
    text = "\n".join(textwrap.wrap(caption, 110))
    fig.text(0.01, 0.01, text, fontsize=6, color="0.3", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.03 * (text.count("\n") + 1) + 0.01, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def table(doc: dict) -> str:
    from grpolab.sweep.study import fmt_diff

    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    lines = ["| method | seeds | start | final per seed | final - grpo (paired) | curve area | steps to grpo's final "
             "| s/step | teacher s/step (share) | departed tokens |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, v in doc.get("variants", {}).items():
        p = doc.get("paired_vs_grpo", {}).get(name)
        step = _mean(v["metrics"]["time/step"])
        teach = _mean(v["teacher_seconds_per_step"])
        share = f" ({teach / step:.0%})" if teach is not None and step else ""
        gained = v.get("grpo_gained") or [True] * len(v.get("steps_to_baseline_final", []))
        reach = ", ".join("-" if s is None else (str(s) if ok else f"({s}: grpo lost)")
                          for s, ok in zip(v.get("steps_to_baseline_final", []), gained))
        dep = _mean(v["metrics"]["credit/segment_token_frac"])
        lines.append(f"| {name} | {len(v['seeds'])} | {f(_mean(v['start']), '.3f')} | "
                     f"{' '.join(f'{x:.3f}' for x in v['final'])} | "
                     f"{fmt_diff(p['final']) if p else '(baseline)'} | {f(_mean(v['auc']), '.3f')} | {reach} | "
                     f"{f(step, '.1f')} | {f(teach, '.1f')}{share} | {f(dep, '.3f') if name == 'gear' else ''} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------- fixture
def fixture(args) -> None:
    """SmolLM2's own sampled responses with teacher/student log-probs, KL and GEAR boundaries, for
    tests/objectives/test_credit_real.py (a few KB: float32, response positions only)."""
    import dataclasses

    import torch

    from grpolab import objectives as obj
    from grpolab.runs import open_run
    from grpolab.teacher_text import CreditTokens
    from grpolab.measure.readability import sample_responses, teacher_delta

    torch.set_num_threads(args.threads)
    opened = open_run(args.model, config=str(args.config), overrides=args.set, train_items=True)
    cfg = opened.config
    credit = dataclasses.replace(cfg.credit, **TEMPLATES[args.template])
    items = opened.train_items[: args.prompts]
    G, T = cfg.rollout.group_size, cfg.rollout.temperature
    exp = sample_responses(opened.collector, opened.model, items, group_size=G, temperature=T, seed=args.seed)
    d = teacher_delta(opened.model, opened.tokenizer, opened.prompt_format, credit, exp, temperature=T)
    r = exp.rollout
    boundary, _ = CreditTokens(opened.tokenizer, boundaries=cfg.credit.gear_boundaries).masks(r.response_ids,
                                                                                               r.response_mask)
    adv = obj.group_advantages(exp.rewards, r.group_ids)
    data = {"student_logp": d["student_logp"].float(), "teacher_logp": d["teacher_logp"].float(),
            "kl": d["kl"].float(), "mask": r.response_mask.to(torch.uint8), "boundary": boundary.to(torch.uint8),
            "rewards": exp.rewards.float(), "advantages": adv.float(), "group_ids": r.group_ids,
            "texts": list(exp.texts),
            "about": {"model": str(args.model), "config": str(args.config), "template": args.template,
                      "prompts": len(items), "group_size": G, "temperature": T, "seed": args.seed,
                      "extra": args.set, "commit": _commit()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    torch.save(data, tmp)
    os.replace(tmp, args.out)
    m = r.response_mask.bool()
    print(f"{len(exp.texts)} responses, {int(m.sum())} tokens, correct {float((exp.rewards >= 1).float().mean()):.3f}; "
          f"wrote {args.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("precondition", "headroom", "study"):
        p = sub.add_parser(name)
        p.add_argument("--warm-start", required=True)
        p.add_argument("--config", type=Path, default=CONFIG)
        p.add_argument("--set", action="append", default=[])
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--out", type=Path, default=OUT)
    pre = sub.choices["precondition"]
    pre.add_argument("--prompts", type=int, default=32)
    pre.add_argument("--seed", type=int, default=0)
    pre.add_argument("--templates", nargs="+", default=list(TEMPLATES), choices=list(TEMPLATES))
    pre.add_argument("--adopt", action="store_true", help="make this measurement the recorded precondition")
    hr = sub.choices["headroom"]
    hr.add_argument("--n", type=int, default=64)
    hr.add_argument("--k", type=int, default=8)
    st = sub.choices["study"]
    st.add_argument("--seeds", type=int, nargs="+", default=[0])
    st.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    st.add_argument("--root", default=str(ROOT / "runs" / "study_real_credit_reads"))
    st.add_argument("--jobs", type=int, default=2, help="runs at a time (each gets cores // jobs torch threads)")
    st.add_argument("--heldout", type=int, default=200)
    st.add_argument("--carry-recorded", action="store_true",
                    help="keep the seeds of --out's variants that have no run under --root (a study resumed on "
                         "another machine; recorded as carried_seeds)")
    st.add_argument("--steps-label", default="10 steps x 4 prompts x 8 samples, lr 5e-4, T=0.7, 200 held-out "
                    "sums greedy at steps 0, 5, 10")
    rp = sub.add_parser("report", help="rebuild the record and figure from the study's finished runs (no training)")
    rp.add_argument("--root", default=str(ROOT / "runs" / "study_real_credit_reads"))
    rp.add_argument("--heldout", type=int, default=200)
    rp.add_argument("--carry-recorded", action="store_true",
                    help="keep the seeds of --out's variants that have no run under --root (recorded as carried_seeds)")
    rp.add_argument("--out", type=Path, default=OUT)
    rp.add_argument("--figure", type=Path, default=None, help="PNG of the held-out curves (e.g. "
                    "docs/results/figures/real_credit_reads.png)")
    fx = sub.add_parser("fixture")
    fx.add_argument("--model", required=True)
    fx.add_argument("--config", type=Path, default=ROOT / "studies" / "real_credit.yaml")
    fx.add_argument("--set", action="append", default=[])
    fx.add_argument("--template", default="user_bare", choices=list(TEMPLATES))
    fx.add_argument("--prompts", type=int, default=8)
    fx.add_argument("--seed", type=int, default=0)
    fx.add_argument("--threads", type=int, default=1)
    fx.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    {"precondition": precondition, "headroom": headroom, "study": study, "report": report,
     "fixture": fixture}[args.cmd](args)


if __name__ == "__main__":
    main()
