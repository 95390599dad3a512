"""Token-level credit (issue 4): overhead of the teacher forward, and quality of grpo/rlsd/gear/opsd.

Speed: mean seconds per training step of ``credit=grpo``, ``credit=rlsd`` and ``credit=gear``
(full-vocabulary KL) on the default config, from the same warm start, each in its own process
(so peak memory is its own), interleaved over ``--rounds`` rounds so that a change in machine
load hits all three alike. The first step of every run is dropped (allocator warm-up). Targets:
rlsd <= 1.4x grpo, gear+KL <= 1.6x grpo.

Quality: held-out greedy accuracy of grpo, rlsd, gear and opsd after ``--steps`` RL steps, for
each seed, from one shared warm start (``model.path``), same config otherwise.

    python benchmarks/experiments/credit.py --warm-start DIR speed --steps 8 --rounds 2
    python benchmarks/experiments/credit.py --warm-start DIR quality --steps 100 --seeds 0 1 2
    python benchmarks/experiments/credit.py --warm-start DIR signal --prompts 32
    python benchmarks/experiments/credit.py --warm-start DIR signal --prompts 32 --templates config \
        --config studies/credit_teacher.yaml --out docs/results/credit_teacher_signal.json
    python benchmarks/experiments/credit.py signal --templates config --config studies/credit_teacher.yaml \
        --min-auc 0.8 --warm-starts runs/ws.snapshots/step_*     # which snapshot to start from

Signal: on one batch sampled from the warm start, does the privileged teacher raise the log-prob
of correct responses and lower it for wrong ones (per template)? If it cannot, RLSD/GEAR only add
noise to GRPO's magnitudes.

``DIR`` is a warm-started model (e.g. ``RUN_DIR/sft`` of a default run, or ``grpolab sft --out DIR``).
Prints a table and writes ``runs/bench/credit_{speed,quality}.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grpolab.diagnostics.readability import accepted_targets, auc, first_wrong_token, localisation
from grpolab import bench

__all__ = ["accepted_targets", "first_wrong_token", "localisation", "measure_signal", "choose_warm_start"]

RESULTS = bench.RESULTS_DIR
SPEED_METHODS = {
    "grpo": ["credit.name=grpo"],
    "rlsd": ["credit.name=rlsd"],
    "gear_kl": ["credit.name=gear", "credit.divergence=kl"],
}
QUALITY_METHODS = {
    "grpo": ["credit.name=grpo"],
    "rlsd": ["credit.name=rlsd"],
    "gear": ["credit.name=gear"],
    "opsd": ["credit.name=opsd"],
}
COMMON = ["log.progress=false", "log.plots=false", "log.tensorboard=false", "trainer.preflight=false"]


def worker(args) -> None:
    """Run one training run in this process and print one JSON line."""
    import torch

    from grpolab.config import load_config
    from grpolab.train import train
    from grpolab.train.metrics_log import read_metrics

    if args.clock == "cpu":
        # CPU seconds of this process instead of wall seconds: on a shared, overloaded machine the
        # wall clock measures the neighbours; one thread so that CPU time is work, not spinning
        import grpolab.rollout.collector as collector_mod
        import grpolab.train.credit as credit_mod
        import grpolab.train.loop as loop_mod

        torch.set_num_threads(1)

        class _CpuClock:
            time = staticmethod(time.process_time)

        loop_mod.time = _CpuClock
        credit_mod.time = _CpuClock
        collector_mod.time = _CpuClock
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = [f"model.path={args.warm_start}", f"trainer.run_dir={args.run_dir}", f"trainer.steps={args.steps}",
                 f"trainer.seed={args.seed}", *COMMON, *args.set]
    cfg = load_config(overrides=overrides)
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.time()
    res = train(cfg, log=lambda *_: None)
    rows = read_metrics(args.run_dir)
    step_times = [r["time/step"] for r in rows]
    evals = [(r["step"], r["eval/accuracy"]) for r in rows if r.get("eval/accuracy") is not None]
    keys = ("credit/clip_frac", "credit/delta_mean", "credit/delta_std", "credit/kl", "credit/kl_sampled",
            "credit/segments_per_seq", "credit/segment_len", "credit/leak_mention_frac", "credit/leak_copy_frac",
            "time/teacher", "length/mean", "reward/mean")
    means = {}
    for k in keys:
        vals = [r[k] for r in rows if r.get(k) is not None]
        if vals:
            means[k] = sum(vals) / len(vals)
    out = {
        "wall_s": time.time() - t0, "steps": res.steps,
        "step_times": step_times,
        "mean_step_s": sum(step_times[1:]) / max(len(step_times) - 1, 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_cuda_mb": torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None,
        "start_accuracy": res.start_accuracy, "final_accuracy": res.final_accuracy,
        "best_accuracy": res.best_accuracy, "eval_curve": evals, "means": means,
    }
    print("RESULT " + json.dumps(out))


def _run(warm_start, run_dir, steps, seed, sets, nice: int, clock: str = "wall", threads: int = 0) -> dict:
    cmd = ["nice", "-n", str(nice), sys.executable, __file__, "--warm-start", str(warm_start), "worker",
           "--run-dir", str(run_dir), "--steps", str(steps), "--seed", str(seed), "--clock", clock,
           "--threads", str(threads)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def speed(args) -> None:
    from grpolab.utils.io import atomic_write_json

    root = Path(tempfile.mkdtemp(prefix="credit_speed_"))
    times: dict[str, list[float]] = {m: [] for m in SPEED_METHODS}
    rss: dict[str, float] = {m: 0.0 for m in SPEED_METHODS}
    cuda: dict[str, float | None] = {m: None for m in SPEED_METHODS}
    machine = bench.machine()  # its loadavg: at the start
    for rnd in range(args.rounds):
        for m, sets in SPEED_METHODS.items():
            r = _run(args.warm_start, root / f"{m}_{rnd}", args.steps, 0,
                     sets + ["trainer.eval_every=100000", "trainer.save_every=100000", *args.set], args.nice,
                     args.clock)
            times[m] += r["step_times"][1:]
            rss[m] = max(rss[m], r["peak_rss_mb"])
            cuda[m] = r["peak_cuda_mb"]
            print(f"round {rnd} {m:8s} mean step {r['mean_step_s']:.3f}s  peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    base = sum(times["grpo"]) / len(times["grpo"])
    rows = []
    print(f"\nclock: {args.clock}")
    print("\n| credit | mean s/step | x grpo | target | peak RSS MB | peak CUDA MB |\n|---|---|---|---|---|---|")
    for m, target in (("grpo", None), ("rlsd", 1.4), ("gear_kl", 1.6)):
        mean = sum(times[m]) / len(times[m])
        rows.append({"credit": m, "mean_step_s": mean, "ratio": mean / base, "target": target,
                     "peak_rss_mb": rss[m], "peak_cuda_mb": cuda[m], "n_steps": len(times[m])})
        print(f"| {m} | {mean:.3f} | {mean / base:.2f} | {'' if target is None else f'<= {target}'} | "
              f"{rss[m]:.0f} | {cuda[m] if cuda[m] is not None else '-'} |")
    machine["loadavg_at_end"] = bench.load_average()
    out = Path(args.out or RESULTS / "credit_speed.json")
    atomic_write_json(out, {"machine": machine, "clock": args.clock, "steps_per_run": args.steps, "rounds": args.rounds,
                            "extra": args.set, "rows": rows})
    print(f"wrote {out}")


def quality(args) -> None:
    from grpolab.utils.io import atomic_write_json

    root = Path(args.root or tempfile.mkdtemp(prefix="credit_quality_"))
    out = Path(args.out or RESULTS / "credit_quality.json")
    machine = bench.machine()  # its loadavg: at the start
    results = []
    methods = {m: QUALITY_METHODS[m] for m in args.methods}
    for seed in args.seeds:
        for m, sets in methods.items():
            r = _run(args.warm_start, root / f"{m}_seed{seed}", args.steps, seed,
                     sets + [f"trainer.eval_every={args.eval_every}", *args.set], args.nice,
                     threads=args.threads)
            row = {"credit": m, "seed": seed, **{k: r[k] for k in ("start_accuracy", "final_accuracy",
                                                                   "best_accuracy", "eval_curve", "mean_step_s",
                                                                   "wall_s", "means")}}
            results.append(row)
            print(f"seed {seed} {m:5s} {r['start_accuracy']:.3f} -> {r['final_accuracy']:.3f} "
                  f"(best {r['best_accuracy']:.3f}) {r['wall_s']:.0f}s  curve {r['eval_curve']}", flush=True)
            machine["loadavg_at_end"] = bench.load_average()
            atomic_write_json(out, {"machine": machine, "steps": args.steps, "seeds": args.seeds,
                                    "extra": args.set, "warm_start": str(args.warm_start), "runs": results})
    print("\n| credit | " + " | ".join(f"seed {s}" for s in args.seeds) + " | mean final | mean gain |")
    print("|---|" + "---|" * (len(args.seeds) + 2))
    for m in methods:
        rs = [r for r in results if r["credit"] == m]
        cells = [f"{r['start_accuracy']:.3f} -> {r['final_accuracy']:.3f}" for r in rs]
        mf = sum(r["final_accuracy"] for r in rs) / len(rs)
        mg = sum(r["final_accuracy"] - r["start_accuracy"] for r in rs) / len(rs)
        print(f"| {m} | " + " | ".join(cells) + f" | {mf:.3f} | {100 * mg:+.1f} |")
    print(f"wrote {out}")


# the pure readability measures live in the package (grpolab.diagnostics.readability); these names
# stay importable from this script for the studies that used them
_auc = auc


def signal(args) -> None:
    """Can the privileged teacher tell right from wrong? One batch from each warm start, per template.

    For every sampled response: the sum and the mean over tokens of ``delta = teacher - student``
    log-prob, and the full-vocabulary KL. A teacher that reads the reference should raise the
    log-prob of correct responses relative to the student (delta > 0) and lower it for wrong ones;
    the AUC of the per-response mean delta for "correct vs wrong" measures that (0.5 = no signal).
    Localisation: over the wrong responses, the mean delta on the tokens before the first token that
    departs from the reference solution, at that token, and after it (:func:`localisation`).
    ``--templates config`` (default: all) measures the run's own ``credit.template``.

    The run is opened as training opens it (:func:`grpolab.runs.open_run`): its prompt format, and
    on a chat-template run the teacher prompts the trainer's credit step builds
    (:meth:`grpolab.train.credit.CreditStep.teacher_prompts`), one per variant of
    :data:`CHAT_VARIANTS` (placement in the user turn or the system message, template text, what
    the privileged context holds).

    Several warm starts (``signal --warm-starts DIR...``, e.g. a warm start's snapshots, ``OUT.snapshots/step_*``):
    the signal is a property of a checkpoint, not of a recipe (it rose and fell along one warm start
    in docs/results/credit_teacher.md), so each is measured on the same prompts and sampling seed,
    and :func:`choose_warm_start` names the first and the best that reach ``--min-auc``.
    """
    from grpolab.utils.io import atomic_write_json

    results = []
    warm_starts = args.warm_starts or [args.warm_start]
    for ws in warm_starts:
        if len(warm_starts) > 1:
            print(f"== {ws}", flush=True)
        results.append({"warm_start": str(ws), "prompts": args.prompts, "seed": args.seed, "extra": args.set,
                        **measure_signal(ws, args)})
    out = Path(args.out or RESULTS / "credit_signal.json")
    if len(results) == 1:
        atomic_write_json(out, results[0])
    else:
        template = (args.templates or list(TEMPLATES))[0]
        choice = choose_warm_start(results, template, args.min_auc, f"auc_{args.auc_of}_delta")
        print(signal_table(results, template, choice))
        atomic_write_json(out, {"template": template, "min_auc": args.min_auc, "auc_of": args.auc_of, **choice,
                                "by_warm_start": results})
    print(f"wrote {out}")


def _variants(cfg, opened, names) -> dict:
    """``{name: (credit settings, items)}`` to measure: the plain-text templates of
    :data:`TEMPLATES`, or on a chat-template run the :data:`CHAT_VARIANTS`; ``config``: the run's own."""
    import dataclasses

    chat = opened.prompt_format.chat_template == "on"
    table = CHAT_VARIANTS if chat else {k: {"template": v} for k, v in TEMPLATES.items()}
    names = names or list(table)
    out = {}
    for name in names:
        if name == "config":
            out[name] = (cfg.credit, None)
            continue
        if name not in table:
            raise SystemExit(f"signal: template {name!r} is not one of {sorted(table)} + ['config'] "
                             f"for a {'chat-template' if chat else 'plain-text'} run")
        spec = dict(table[name])
        kind = spec.pop("privileged", None)
        out[name] = (dataclasses.replace(cfg.credit, **spec), kind)
    return out


def _with_privileged(items, kind, task_cfg):
    """The same items with ``privileged`` rebuilt as ``kind`` (solution | hint | answer) by the task."""
    if kind is None:
        return items
    import dataclasses

    from grpolab.train.setup import build_task_splits

    opts = {**task_cfg.options, "privileged": kind}
    train, _ = build_task_splits(dataclasses.replace(task_cfg, options=opts), seed=0)
    by_prompt = {it.prompt: it for it in train}
    return [dataclasses.replace(it, privileged=by_prompt[it.prompt].privileged) for it in items]


def measure_signal(warm_start, args) -> dict:
    """``{"group_size", "prompt_format", "rows"}`` of :func:`signal` for one model directory (a row per variant).

    Each row is :func:`grpolab.measure.readability.measure_readability` of the variant on one shared
    sampled batch, plus the share of RLSD weights clipped at ``eps_w = 0.2``."""
    from grpolab import objectives as obj
    from grpolab.runs import open_run
    from grpolab.measure.readability import readability_row, sample_responses, teacher_delta

    opened = open_run(warm_start, config=args.config, overrides=args.set, train_items=True)
    cfg, model, tok = opened.config, opened.model, opened.tokenizer
    items = opened.train_items[: args.prompts]
    G, T = cfg.rollout.group_size, cfg.rollout.temperature
    exp = sample_responses(opened.collector, model, items, group_size=G, temperature=T, seed=args.seed)
    r = exp.rollout
    adv = obj.group_advantages(exp.rewards, r.group_ids)
    mask = r.response_mask.bool()
    rows = []
    for name, (credit, kind) in _variants(cfg, opened, args.templates).items():
        shown = _with_privileged(items, kind, cfg.task)
        d = teacher_delta(model, tok, opened.prompt_format, credit, exp, temperature=T, items=shown)
        m = readability_row(tok, exp, d)
        # RLSD at lam = 1: the multiplier is the clipped weight itself; at a bound = clipped
        lam1 = obj.rlsd_advantages(adv, d["student_logp"], d["teacher_logp"], r.response_mask, lam=1.0, eps_w=0.2)
        mult = (lam1 / adv[:, None])[mask & (adv[:, None] != 0)]
        row = {"template": name, "privileged": kind or "task", **m,
               "clip_frac_eps_0.2": float(((mult <= 0.8 + 1e-6) | (mult >= 1.2 - 1e-6)).float().mean())
               if mult.numel() else None}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "template_text"}), flush=True)
    return {"group_size": G, "prompt_format": opened.prompt_format.chat_template, "rows": rows}


def choose_warm_start(results: list[dict], template: str, min_auc: float, key: str = "auc_sum_delta") -> dict:
    """Which of several measured warm starts (:func:`measure_signal` results, in the order given,
    e.g. by step) to start a credit study from: ``first_meeting`` (the first whose AUC ``key`` for
    ``template`` is >= ``min_auc``), ``best`` (the highest AUC) and ``best_auc``; None where no
    warm start has a defined AUC (a batch with only right or only wrong responses) or none meets it.
    ``key``: ``auc_sum_delta`` (the summed delta; the AUC docs/results/credit_teacher.md reports)
    or ``auc_mean_delta`` (per-token mean)."""
    aucs = []
    for res in results:
        row = next((r for r in res["rows"] if r["template"] == template), None)
        aucs.append(None if row is None else row[key])
    known = [(a, res["warm_start"]) for a, res in zip(aucs, results) if a is not None]
    first = next((ws for a, ws in known if a >= min_auc), None)
    best_auc, best = max(known, key=lambda t: t[0]) if known else (None, None)
    return {"first_meeting": first, "best": best, "best_auc": best_auc}


def signal_table(results: list[dict], template: str, choice: dict) -> str:
    """Markdown table of the signal per warm start (``template``'s row) and the choice."""
    f = lambda v, fmt: "-" if v is None else format(v, fmt)  # noqa: E731
    lines = [f"| warm start | correct | AUC sum [mean] ({template}) | delta before / at first wrong | RLSD weights clipped |",
             "|---|---|---|---|---|"]
    for res in results:
        row = next((r for r in res["rows"] if r["template"] == template), {})
        lines.append(f"| {res['warm_start']} | {f(row.get('correct_frac'), '.3f')} | {f(row.get('auc_sum_delta'), '.3f')} "
                     f"[{f(row.get('auc_mean_delta'), '.3f')}] | "
                     f"{f(row.get('delta_before_first_wrong'), '+.2f')} / {f(row.get('delta_at_first_wrong'), '+.2f')} | "
                     f"{f(row.get('clip_frac_eps_0.2'), '.2f')} |")
    lines += ["", f"first to reach the AUC bound: {choice['first_meeting'] or 'none'}; "
              f"best: {choice['best'] or 'none'} ({f(choice['best_auc'], '.3f')})"]
    return "\n".join(lines)


#: Chat-template runs: where the privileged context goes and how it is introduced
#: (:class:`grpolab.config.CreditConfig` fields; ``privileged``: what the task puts there).
CHAT_VARIANTS = {
    "user": {"privileged_placement": "user"},
    "system": {"privileged_placement": "system"},
    "user_bare": {"privileged_placement": "user", "chat_template": "{prompt}\n\n{privileged}"},
    "user_answer": {"privileged_placement": "user", "privileged": "answer"},
    "user_reference": {"privileged_placement": "user", "chat_template": "{prompt}\n\n(The correct answer is {reference}.)"},
    "system_bare": {"privileged_placement": "system", "system_template": "{privileged}"},
    "system_answer": {"privileged_placement": "system", "privileged": "answer"},
}

TEMPLATES = {
    "default": "{prompt}\nhere is a reference solution: {privileged}\nsolve it in your own way.\n{prompt}",
    "compact": "{privileged}\n{prompt}",
    "answer_only": "{reference}\n{prompt}",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warm-start", default=None, help="warm-started model directory (HF format)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--run-dir", required=True)
    w.add_argument("--steps", type=int, required=True)
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--set", action="append", default=[])
    w.add_argument("--clock", choices=["wall", "cpu"], default="wall")
    w.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    s = sub.add_parser("speed")
    s.add_argument("--steps", type=int, default=8)
    s.add_argument("--rounds", type=int, default=2)
    s.add_argument("--set", action="append", default=[], help="extra config override for every run")
    s.add_argument("--nice", type=int, default=5)
    s.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                   help="wall seconds (default), or CPU seconds of the run's process with 1 thread "
                   "(robust on a shared, overloaded machine)")
    s.add_argument("--out", default=None)
    q = sub.add_parser("quality")
    q.add_argument("--steps", type=int, default=100)
    q.add_argument("--eval-every", type=int, default=25)
    q.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    q.add_argument("--methods", nargs="+", default=list(QUALITY_METHODS), choices=list(QUALITY_METHODS))
    q.add_argument("--set", action="append", default=[], help="extra config override for every run")
    q.add_argument("--nice", type=int, default=5)
    q.add_argument("--threads", type=int, default=0, help="torch threads per run (0: torch's default)")
    q.add_argument("--root", default=None, help="where the runs go (default: a temp dir)")
    q.add_argument("--out", default=None)
    g = sub.add_parser("signal")
    g.add_argument("--prompts", type=int, default=32)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--set", action="append", default=[])
    g.add_argument("--config", default=None, help="YAML config (e.g. a studies/*.yaml) under the --set overrides")
    g.add_argument("--templates", nargs="+", default=None,
                   help="teacher variants to measure (default: all; plain-text runs: TEMPLATES, chat-template "
                   "runs: CHAT_VARIANTS; 'config': the run's credit section)")
    g.add_argument("--warm-starts", nargs="+", default=None, metavar="DIR",
                   help="measure several warm starts (e.g. OUT.snapshots/step_*) on the same batch and choose one")
    g.add_argument("--min-auc", type=float, default=0.8,
                   help="with --warm-starts: the AUC (of the first --templates entry) a warm start must reach "
                   "to be chosen (issue 16: 0.8)")
    g.add_argument("--auc-of", choices=["sum", "mean"], default="sum",
                   help="the AUC that chooses: of the summed (default) or the per-token mean delta")
    g.add_argument("--out", default=None)
    args = ap.parse_args()
    several = getattr(args, "warm_starts", None)
    if several and args.warm_start:
        ap.error("give --warm-start DIR or signal --warm-starts DIR..., not both")
    if not (several or args.warm_start):
        ap.error("--warm-start DIR is required" + (" (or signal --warm-starts DIR...)" if args.cmd == "signal" else ""))
    {"worker": worker, "speed": speed, "quality": quality, "signal": signal}[args.cmd](args)


if __name__ == "__main__":
    main()
