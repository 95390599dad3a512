"""grpolab's trainer vs TRL's GRPOTrainer on the real SmolLM2 example: held-out accuracy after N steps
and the wall time to reach plain TRL's final accuracy.

Three sides, the same task, settings and seeds (examples/smollm2_sums.yaml: SmolLM2-135M-Instruct,
sums 0..20 in its chat template, LoRA r16, 4 prompts x 8 samples, 12 new tokens, T = 0.7, lr 5e-4,
10 steps; grpolab.integrations.trl.recipe carries every setting into TRL):

* ``grpolab``: ``grpolab.train.train`` on the YAML;
* ``adapter``: TRL's trainer with grpolab's objective (``GrpolabGRPOTrainer``);
* ``trl``: TRL's own ``GRPOTrainer`` (its token-level ``dapo`` loss), the same reward: grpolab's
  ``final_line`` verifier wrapped as a TRL reward function (``trl_recipe.task_reward``).

One evaluator for all: greedy, on all 219 held-out sums, through grpolab's evaluator and the run's
collector (``trl_recipe.heldout_accuracy``; ``grpolab train`` calls the same
``grpolab.measure.evaluate.evaluate`` with the same collector in its loop), after the steps in
``--eval-every`` and the last. Evaluation is outside the timers: a side's wall time is the sum of
its optimizer steps (sampling, reward, advantages, update), ``time/step`` in grpolab's metrics,
``on_step_begin -> on_step_end`` in TRL. Step 0 (the base model, identical for all sides) is the
grpolab run's own step-0 evaluation.

Time to TRL's accuracy: the target is plain TRL's final held-out accuracy (mean of the seeds); on
each side's seed-mean curve (accuracy and cumulative wall time at each evaluated step) the time of
the first evaluated step at or above it (:func:`time_to_accuracy`); the ratio is that time over
plain TRL's own on the same seeds. With evaluations every few steps the times are upper bounds at
that resolution. Every comparison is paired by seed (:func:`summarize`): ``seeds`` are those on
which grpolab and plain TRL both finished; the adapter is compared with plain TRL on the seeds it
shares with it.

Each (side, seed) runs in its own process at one torch thread (peak memory is per run), one after
another -- seed by seed, or in the order ``--plan side:seed,...`` gives -- and its result is kept
in ``--work``; a rerun skips finished runs, and the JSON and page are rewritten after every run (so
a cut-short measurement holds exactly the runs that finished).

    python benchmarks/speed/real_model_vs_trl.py [--seeds 0,1,2] [--sides grpolab,adapter,trl] [--eval-every 5]
        [--work runs/real_model_vs_trl] [--json PATH] [--md PATH]

writes runs/bench/real_model_vs_trl.json and .md by default; the committed record and page:
``--json docs/results/real_model_vs_trl.json --md docs/results/real_model_vs_trl.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from grpolab import bench

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SIDES = ("grpolab", "adapter", "trl")
LABELS = {"grpolab": "grpolab (own trainer)", "adapter": "TRL + grpolab objective (GrpolabGRPOTrainer)",
          "trl": "plain TRL GRPOTrainer"}
#: the record's required keys (:func:`check_record`)
RECORD_KEYS = ("seeds", "complete_seeds", "sides", "trl_final", "time_to_trl_final_s", "time_to_trl_final_ratio",
               "command", "commit")
SIDE_KEYS = ("seeds", "final", "final_mean", "wall_s", "wall_s_mean", "s_per_step_median", "peak_rss_gib", "curve")


# ------------------------------------------------------------------------------------------------
# pure functions (tests/benchmarks/test_real_model_vs_trl.py)


def time_to_accuracy(curve: list[dict], target: float, key: str = "wall_s") -> float | None:
    """Seconds (``key``: ``wall_s`` or ``cpu_s``) of the first point of ``curve`` (``[{wall_s,
    accuracy}]``, in step order) whose accuracy reaches ``target``; None if none does (or the
    curve has no ``key``)."""
    for point in curve:
        if point["accuracy"] is not None and point["accuracy"] >= target - 1e-12:
            return float(point[key]) if key in point else None
    return None


def mean_curve(runs: list[dict], start_accuracy: float | None) -> list[dict]:
    """The seed-mean curve ``[{step, accuracy, wall_s}]`` over the steps every run evaluated; step 0
    (wall 0) is ``start_accuracy`` when known."""
    steps = sorted(set.intersection(*[{p["step"] for p in r["curve"]} for r in runs])) if runs else []
    with_cpu = all("cpu_s" in p for r in runs for p in r["curve"])
    out = [{"step": 0, "accuracy": start_accuracy, "wall_s": 0.0, **({"cpu_s": 0.0} if with_cpu else {})}] \
        if start_accuracy is not None else []
    for s in steps:
        pts = [next(p for p in r["curve"] if p["step"] == s) for r in runs]
        out.append({"step": s, "accuracy": statistics.fmean(p["accuracy"] for p in pts),
                    "wall_s": statistics.fmean(p["wall_s"] for p in pts)})
        if with_cpu:
            out[-1]["cpu_s"] = statistics.fmean(p["cpu_s"] for p in pts)
    return out


def _side_summary(side: str, rs: list[dict], start: float | None) -> dict:
    later = [x for r in rs for x in r["step_s"][1:]]
    cpu_later = [x for r in rs for x in r.get("step_cpu_s", [])[1:]] if all("step_cpu_s" in r for r in rs) else []
    return {
        "label": LABELS.get(side, side), "seeds": [r["seed"] for r in rs],
        "final": [r["final"] for r in rs], "final_mean": statistics.fmean(r["final"] for r in rs),
        "wall_s": [r["wall_s"] for r in rs], "wall_s_mean": statistics.fmean(r["wall_s"] for r in rs),
        "s_per_step_median": statistics.median(later) if later else None,
        "cpu_s_per_step_median": statistics.median(cpu_later) if cpu_later else None,
        "first_step_s": [r["step_s"][0] for r in rs],
        "peak_rss_gib": [r["peak_rss_mb"] / 1024 for r in rs],
        "cpu_s": [r.get("cpu_s") for r in rs],
        "curve": mean_curve(rs, start),
        "per_seed": [{k: r[k] for k in ("seed", "final", "wall_s", "curve", "step_s", "step_cpu_s", "peak_rss_mb",
                                        "peak_rss_mb_steps", "cpu_s", "process_wall_s", "load_avg") if k in r}
                     for r in rs],
    }


def summarize(runs: list[dict], *, seeds: list[int], sides=SIDES, command: str, commit: str,
              extra: dict | None = None) -> dict:
    """The JSON record from the per-run results (``run_one``'s output).

    Every comparison is paired by seed: ``seeds`` are the seeds on which grpolab and plain TRL
    both finished (the headline); each other side is summarised on the seeds it shares with plain
    TRL (its own ``seeds``), and its time to TRL's final accuracy uses TRL's mean final and TRL's
    own time on exactly those seeds.
    """
    done = {(r["side"], r["seed"]): r for r in runs}
    head = [s for s in seeds if all((side, s) in done for side in sides if side in ("grpolab", "trl"))]
    starts = [r["start_accuracy"] for r in runs if r.get("start_accuracy") is not None]
    start = starts[0] if starts else None
    out_sides, t_to, t_trl_same, ratio, cpu_to, cpu_ratio = {}, {}, {}, {}, {}, {}
    for side in sides:
        own = head if side in ("grpolab", "trl") else [s for s in seeds if (side, s) in done and ("trl", s) in done]
        if not own:
            continue
        out_sides[side] = v = _side_summary(side, [done[(side, s)] for s in own], start)
        if "trl" not in sides:
            continue
        trl = _side_summary("trl", [done[("trl", s)] for s in own], start)
        v["trl_final_same_seeds"] = target = trl["final_mean"]
        t_to[side] = time_to_accuracy(v["curve"], target)
        t_trl_same[side] = time_to_accuracy(trl["curve"], target)
        ratio[side] = t_to[side] / t_trl_same[side] if t_to[side] is not None and t_trl_same[side] else None
        c_side, c_trl = time_to_accuracy(v["curve"], target, "cpu_s"), time_to_accuracy(trl["curve"], target, "cpu_s")
        cpu_to[side], cpu_ratio[side] = c_side, (c_side / c_trl if c_side is not None and c_trl else None)
    record = {
        "seeds": head, "requested_seeds": list(seeds), "complete_seeds": len(head),
        "all_sides_seeds": [s for s in seeds if all((side, s) in done for side in sides)],
        "start_accuracy": start, "sides": out_sides,
        "trl_final": out_sides["trl"]["final_mean"] if "trl" in out_sides else None,
        "time_to_trl_final_s": t_to, "trl_time_to_final_s_same_seeds": t_trl_same,
        "time_to_trl_final_ratio": ratio, "cpu_to_trl_final_s": cpu_to, "cpu_to_trl_final_ratio": cpu_ratio,
        "command": command, "commit": commit,
    }
    if extra:
        record.update(extra)
    return record


def check_record(record: dict) -> None:
    """Raise ValueError unless ``record`` has the documented schema (issue 46's "done when")."""
    missing = [k for k in RECORD_KEYS if k not in record]
    if missing:
        raise ValueError(f"record lacks {missing}")
    if not isinstance(record["seeds"], list) or record["complete_seeds"] != len(record["seeds"]):
        raise ValueError("seeds must list the complete seeds")
    for side, v in record["sides"].items():
        lack = [k for k in SIDE_KEYS if k not in v]
        if lack:
            raise ValueError(f"side {side!r} lacks {lack}")
        if len(v["final"]) != len(v["seeds"]) or len(v["wall_s"]) != len(v["seeds"]):
            raise ValueError(f"side {side!r}: one final and one wall_s per seed")
        if side in ("grpolab", "trl") and v["seeds"] != record["seeds"]:
            raise ValueError(f"side {side!r}: seeds {v['seeds']} are not the record's {record['seeds']}")
    for side, r in record["time_to_trl_final_ratio"].items():
        if r is not None and not (isinstance(r, float) and r >= 0):
            raise ValueError(f"time_to_trl_final_ratio[{side!r}] = {r!r}")


def markdown(record: dict) -> str:
    """The results page."""
    sides, seeds = record["sides"], record["seeds"]
    lines = [
        "# grpolab vs TRL on the real SmolLM2 example (issue 46)",
        "",
        "SmolLM2-135M-Instruct, `examples/smollm2_sums.yaml` (sums 0..20 in the model's chat template, LoRA r16, "
        "4 prompts x 8 samples, 12 new tokens, T = 0.7, lr 5e-4, 10 steps), trained three ways with the same "
        "settings, reward (grpolab's `final_line` verifier) and seeds, one process per run at one torch thread "
        "on the CPU. Held-out accuracy: greedy on all 219 held-out sums, one evaluator for all three "
        "(grpolab's, through the run's collector), outside the timers. Script: "
        "[benchmarks/speed/real_model_vs_trl.py](../../benchmarks/speed/real_model_vs_trl.py); raw record: "
        "[real_model_vs_trl.json](real_model_vs_trl.json).",
        "",
        f"Seeds: {', '.join(map(str, seeds)) or 'none'} ({record['complete_seeds']} of "
        f"{len(record['requested_seeds'])} requested finished for grpolab and plain TRL; every comparison is paired "
        "by seed, each side on the seeds it shares with plain TRL).",
        "",
        "| side | seeds | held-out accuracy after the last step, per seed | mean | wall s (training steps), per seed "
        "| training CPU s, per seed | median wall s/step (steps 2+) | median CPU s/step (steps 2+) | peak RSS GiB "
        "| time to plain TRL's final accuracy (same seeds): wall / CPU | ratio to plain TRL: wall / CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    def fmt(x, form, none="--"):
        return none if x is None else format(x, form)

    for side, v in sides.items():
        t, tc = record["time_to_trl_final_s"].get(side), record.get("cpu_to_trl_final_s", {}).get(side)
        r, rc = record["time_to_trl_final_ratio"].get(side), record.get("cpu_to_trl_final_ratio", {}).get(side)
        cpu = [r_["curve"][-1].get("cpu_s") for r_ in v["per_seed"]]
        reached = "not reached" if t is None else f"{t:.0f} s / {fmt(tc, '.0f')} s"
        lines.append(
            f"| {v['label']} | {', '.join(map(str, v['seeds']))} | {' / '.join(f'{x:.3f}' for x in v['final'])} | "
            f"{v['final_mean']:.3f} | {' / '.join(f'{x:.0f}' for x in v['wall_s'])} | "
            f"{' / '.join(fmt(x, '.0f') for x in cpu)} | {fmt(v['s_per_step_median'], '.1f')} | "
            f"{fmt(v.get('cpu_s_per_step_median'), '.1f')} | "
            f"{max(v['peak_rss_gib']):.2f} | {reached} | {fmt(r, '.2f')} / {fmt(rc, '.2f')} |")
    start = "--" if record["start_accuracy"] is None else f"{record['start_accuracy']:.3f}"
    target = "--" if record["trl_final"] is None else f"{record['trl_final']:.3f}"
    steps = [p["step"] for p in next(iter(sides.values()))["curve"]] if sides else []
    lines += ["", f"Start (base model, step 0): {start}; target = plain TRL's mean final accuracy {target}.", "",
              "## Seed-mean curves (held-out accuracy @ cumulative training wall seconds)", "",
              "| side | " + " | ".join(f"step {s}" for s in steps) + " |", "|---|" + "---|" * len(steps)]
    for side, v in sides.items():
        lines.append(f"| {side} | " + " | ".join(f"{p['accuracy']:.3f} @ {p['wall_s']:.0f} s" for p in v["curve"])
                     + " |")
    lines += ["", "## How it was run", "", "```bash", record["command"], "```", "", f"commit `{record['commit']}`.", ""]
    if record.get("notes"):
        lines += [record["notes"], ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# one run (in its own process)


def run_one(side: str, seed: int, config: str, eval_every: int, work: Path, set_: list[str]) -> dict:
    """Train one side for one seed; its curve, step times and peak memory."""
    import grpolab.utils.offline  # noqa: F401  (before transformers/trl)
    import torch

    torch.set_num_threads(1)
    from grpolab.config import load_config
    from grpolab.train.watch import memory_metrics

    t0, c0, load0 = time.time(), bench.process_cpu_seconds(), os.getloadavg()[0]
    over = [f"trainer.seed={seed}", "task.n_eval=all", *set_]
    rec: dict = {"side": side, "seed": seed}
    if side == "grpolab":
        import grpolab.train.loop as loop
        from grpolab.train import train
        from grpolab.train.metrics_log import read_metrics

        run_dir = work / f"grpolab_s{seed}"
        cfg = load_config(config, over + [f"trainer.run_dir={run_dir}", f"trainer.eval_every={eval_every}",
                                          "trainer.preflight=false", "log.completions_every=0", "log.plots=false",
                                          "log.progress=false", f"trainer.save_every=1000000"])
        # the training CPU seconds before each held-out evaluation: the process's CPU time since the
        # step-0 evaluation ended, less the evaluations' own (train() looks these functions up at call time)
        cpu = {"start": None, "evals": 0.0, "at": []}
        start_fn, now_fn = loop.evaluate_start, loop.evaluate_now

        def evaluate_start(*a, **k):
            out = start_fn(*a, **k)
            cpu["start"] = bench.process_cpu_seconds()
            return out

        def evaluate_now(*a, **k):
            c = bench.process_cpu_seconds()
            cpu["at"].append(c - cpu["start"] - cpu["evals"])
            out = now_fn(*a, **k)
            cpu["evals"] += bench.process_cpu_seconds() - c
            return out

        loop.evaluate_start, loop.evaluate_now = evaluate_start, evaluate_now
        res = train(cfg, overwrite=True, log=lambda s: print(s, file=sys.stderr))
        rows = read_metrics(run_dir)
        step_s = [r["time/step"] for r in rows]
        cum = 0.0
        curve = []
        for r in rows:
            cum += r["time/step"]
            if r.get("eval/accuracy") is not None:
                curve.append({"step": r["step"], "accuracy": r["eval/accuracy"], "wall_s": cum,
                              "cpu_s": cpu["at"][len(curve)]})
        rec.update(start_accuracy=res.start_accuracy, peak_rss_mb=rows[-1]["memory/peak_rss_mb"],
                   peak_rss_mb_steps=[r["memory/peak_rss_mb"] for r in rows])
    else:
        import tempfile

        from grpolab.integrations.trl.recipe import StepClock, build_trl_trainer, heldout_accuracy, trl_policy

        cfg = load_config(config, over)
        curve = []
        holder = {}

        def after(step, state):
            if step % eval_every == 0 or step == cfg.trainer.steps:
                tr = holder["trainer"]
                ev = heldout_accuracy(trl_policy(tr), tr.processing_class, holder["eval_items"], cfg, holder["fmt"])
                curve.append({"step": step, "accuracy": ev.accuracy, "wall_s": sum(clock.step_s),
                              "cpu_s": sum(clock.cpu_s)})
                print(f"{side} seed {seed} step {step}: held-out {ev.accuracy:.3f}", file=sys.stderr)

        clock = StepClock(after_step=after)
        with tempfile.TemporaryDirectory() as tmp:
            trainer, _, eval_items, fmt = build_trl_trainer(cfg, output_dir=tmp, adapter=side == "adapter",
                                                            callbacks=[clock], log=lambda s: print(s, file=sys.stderr))
            holder.update(trainer=trainer, eval_items=eval_items, fmt=fmt)
            trainer.train()
        step_s = clock.step_s
        rec.update(start_accuracy=None, peak_rss_mb=clock.peak_rss_mb[-1], step_cpu_s=clock.cpu_s,
                   peak_rss_mb_steps=clock.peak_rss_mb,
                   trl_rewards=[row["reward"] for row in trainer.state.log_history if "reward" in row])
    rec.update(step_s=step_s, curve=curve, final=curve[-1]["accuracy"], wall_s=sum(step_s),
               peak_rss_mb_end=memory_metrics()["memory/peak_rss_mb"], cpu_s=bench.process_cpu_seconds() - c0,
               process_wall_s=time.time() - t0, load_avg=[load0, os.getloadavg()[0]], steps=len(step_s))
    return rec


# ------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="examples/smollm2_sums.yaml")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--sides", default=",".join(SIDES))
    p.add_argument("--eval-every", type=int, default=5, help="held-out evaluation every N steps (and the last)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="grpolab config override for every side (e.g. trainer.steps=2 for a smoke test)")
    p.add_argument("--work", default="runs/real_model_vs_trl", help="per-run results and grpolab's run dirs")
    p.add_argument("--json", default=str(bench.results_path("real_model_vs_trl.json")))
    p.add_argument("--md", default=str(bench.results_path("real_model_vs_trl.md")))
    p.add_argument("--notes", default="", help="markdown appended to the page")
    p.add_argument("--plan", default="", help="run order as SIDE:SEED,... (default: seed by seed, every side)")
    p.add_argument("--after-pid", type=int, default=0, help="wait until this process has exited before running")
    p.add_argument("--report-only", action="store_true", help="rewrite the JSON and page from --work; run nothing")
    p.add_argument("--one", nargs=2, metavar=("SIDE", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    from grpolab.utils.io import atomic_write_json, atomic_write_text

    if args.one:
        side, seed = args.one[0], int(args.one[1])
        rec = run_one(side, seed, args.config, args.eval_every, work, args.overrides)
        atomic_write_json(work / f"{side}_s{seed}.json", rec)
        return 0

    seeds = [int(s) for s in args.seeds.split(",")]
    sides = [s for s in args.sides.split(",") if s]
    unknown = set(sides) - set(SIDES)
    if unknown:
        print(f"error: unknown sides {sorted(unknown)}; choose from {', '.join(SIDES)}", file=sys.stderr)
        return 2
    given = list(argv if argv is not None else sys.argv[1:])
    for flag, n in (("--after-pid", 2), ("--plan", 2), ("--report-only", 1), ("--notes", 2)):  # not what was measured
        if flag in given:
            k = given.index(flag)
            del given[k:k + n]
    command = "python benchmarks/speed/real_model_vs_trl.py " + " ".join(given)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()

    def report():
        runs = [json.loads(f.read_text()) for f in sorted(work.glob("*_s*.json"))]
        runs = [r for r in runs if r["side"] in sides and r["seed"] in seeds]
        if not runs:
            return
        rec = summarize(runs, seeds=seeds, sides=sides, command=command.strip(), commit=commit,
                        extra={"settings": {"config": args.config, "overrides": args.overrides,
                                            "eval_every": args.eval_every, "torch_threads": 1,
                                            "cpu_count": os.cpu_count()},
                               "notes": args.notes})
        check_record(rec)
        atomic_write_json(args.json, rec)
        atomic_write_text(args.md, markdown(rec))
        for side, v in rec["sides"].items():
            print(f"{side:8s} final {v['final_mean']:.3f} {v['final']}  wall {v['wall_s_mean']:.0f} s  "
                  f"ratio {rec['time_to_trl_final_ratio'].get(side)}")

    plan = [(x.split(":")[0], int(x.split(":")[1])) for x in args.plan.split(",") if x] or \
        [(side, seed) for seed in seeds for side in sides]
    while args.after_pid and Path(f"/proc/{args.after_pid}").exists():
        time.sleep(5)
    if not args.report_only:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        for side, seed in plan:
            out = work / f"{side}_s{seed}.json"
            if out.exists():
                continue
            cmd = [sys.executable, str(Path(__file__).resolve()), "--one", side, str(seed), "--config", args.config,
                   "--eval-every", str(args.eval_every), "--work", str(work)]
            for o in args.overrides:
                cmd += ["--set", o]
            t = time.time()
            print(f"run {side} seed {seed} ...", file=sys.stderr, flush=True)
            rc = subprocess.run(cmd, env=env).returncode
            print(f"run {side} seed {seed}: rc={rc} in {time.time() - t:.0f} s", file=sys.stderr, flush=True)
            if rc != 0:
                return rc
            report()
    report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
