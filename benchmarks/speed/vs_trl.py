"""TRL's ``GRPOTrainer`` vs grpolab at equal work: seconds per step, per generated and per trained token.

Both trainers start from the same checkpoint (grpolab's tiny Llama, or ``--model DIR``, saved with
``grpolab.models.save_model``) and, for each seed, see **the same prompts at every step**: one
seeded schedule of 16 ``arith`` training items per step, fed to TRL as a dataset in schedule
order (``shuffle_dataset=False``; the reward function checks that each generation batch holds the
scheduled prompts) and to grpolab directly. Each step samples 16 prompts x 8 = 128 completions of
at most 48 tokens (temperature 1.0, top_p 1.0), scores them with the same verifier, takes
group-normalised advantages and makes one AdamW step on a token-level ("dapo") loss, clip
0.2 / 0.28, no KL, gradient clipping 1.0, on the CPU.

Equal work needs a learning rate at which neither policy breaks: at lr 1e-3 (this script's old
setting) the tiny policy collapses after one Adam step in both trainers and then drifts, per its
own random draws, to long or short outputs, so one trainer generated and trained on about twice the
tokens of the other. The default here is lr 1e-5 (``--lr``), so lengths stay those of the starting
model in both; the script reports both trainers' mean completion lengths side by side and gives a
verdict only when they agree within 10% (``LENGTH_TOLERANCE``). Several seeds (``--seeds``), the
trainers interleaved per seed (the order alternates between seeds), step 1 of each run is warm-up.

What is timed (evaluation, checkpointing and logging are outside both timers):

* TRL: a ``TrainerCallback``, ``on_step_begin`` -> ``on_step_end`` of each optimizer step:
  generation (``model.generate``), decoding, reward, advantages (``_generate_and_score_completions``,
  timed through an instance-attribute wrapper: the "rollout" phase), loss + backward, grad clip,
  ``optimizer.step``, scheduler, ``zero_grad`` (the "update" phase = step - rollout). With
  ``per_device_train_batch_size=128``, ``gradient_accumulation_steps=1`` generation happens inside
  every step and the old-log-prob forward is skipped. TRL's activation checkpointing is off
  (``--trl-checkpointing`` keeps it).
* grpolab: the calls of one step of ``grpolab.train.train``, made here so the prompts can follow the
  shared schedule: the trainer's collector (``collector_for``: sample, decode, score) -> advantage
  estimator (the "rollout" phase), then ``grpolab.train.update`` (forward + backward, grad clip, AdamW, scheduler: the
  "update" phase). Being on-policy with one optimizer step it skips the old-log-prob pass too.
  ``grpolab`` has ``trainer.skip_zero_advantage`` off (every row goes through forward/backward,
  like TRL: the equal-work comparison); ``grpolab+skip`` has it on (rows whose advantage is exactly
  zero are skipped: exact, their gradient is zero) and is reported alongside.

Token counts: "generated" = completion tokens up to and including EOS; "trained" = completion
tokens of the rows that go through forward + backward (TRL and ``grpolab``: all rows;
``grpolab+skip``: rows with a non-zero advantage). Rates are totals over the summarised steps
(tokens / seconds), so rollout tokens/s = generated tokens / rollout seconds and update tokens/s =
trained tokens / update seconds. The machine may be shared: each step records how many cores other
processes used, and ``--wait-idle`` waits for a quiet CPU before each run.

Run::

    python benchmarks/speed/vs_trl.py [--model DIR] [--seeds 0,1,2] [--steps 5] [--lr 1e-5]
                                [--sides trl,grpolab,grpolab+skip] [--wait-idle 0] [--out PATH]
    python benchmarks/speed/vs_trl.py --fixed-batch [--seeds 0,1,2] [--steps 4]

``--fixed-batch`` removes sampling differences entirely: per seed, grpolab samples one batch from the
starting model once; then TRL's own training step (its ``_generate_and_score_completions`` replaced,
on the instance, by one returning that batch with TRL's advantages) and grpolab's update (skipping
off) each run ``--steps`` times on it; the update seconds are compared (first step = warm-up).
grpolab runs twice: ``grpolab`` with the shared-prompt forward (``trainer.share_prompts``, the
default: each distinct prompt forwarded once per micro-batch) and ``grpolab-joint`` with the joint
forward over ``[prompt; response]`` per row, as TRL computes it.

It prints a table and writes ``runs/bench/vs_trl.json`` (atomically) with the machine, all
settings, the prompt schedules' digests and every step's timings, lengths and rewards.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import grpolab.utils.offline  # noqa: F401  (before transformers/trl: no Hub lookups or telemetry)
import torch

from grpolab.bench.trl_equal_work import (LENGTH_TOLERANCE, build_checkpoint, equal_work_verdict, fixed_batch,
                                                 load_items, pooled, prompt_schedule, ratios, run_fixed_grpolab,
                                                 run_fixed_trl, run_grpolab, run_trl, schedule_digest)
from grpolab import bench
from grpolab.bench import cpu_counters, others_cores, wait_for_idle
from grpolab.utils.io import atomic_write_json

DEFAULT_OUT = bench.results_path("vs_trl.json")
SIDES = ("trl", "grpolab", "grpolab+skip")
#: --fixed-batch: grpolab with the shared-prompt forward (the default) and with the joint forward
FIXED_SIDES = ("trl", "grpolab", "grpolab-joint")


def main_fixed(a, s: dict, seeds: list[int], machine: dict) -> int:
    """``--fixed-batch``: per seed one batch, both trainers' update timed on it, interleaved."""
    result: dict = {"machine": machine, "settings": dict(s, mode="fixed batch: update only, same completions"),
                    "runs": []}
    with tempfile.TemporaryDirectory(prefix="grpolab_vs_trl_fixed_") as tmp:
        work = Path(tmp)
        model_dir = work / "model"
        result["model"] = build_checkpoint(model_dir, a.model)
        items = load_items(s["n_items"])
        for k, seed in enumerate(seeds):
            step_items = prompt_schedule(len(items), 1, s["prompts_per_step"], seed)[0]
            rollout, rewards, batch = fixed_batch(model_dir, items, step_items, s, seed)
            tokens = float(rollout.response_mask.sum())
            sides = FIXED_SIDES if k % 2 == 0 else FIXED_SIDES[::-1]
            for side in sides:
                c0 = cpu_counters()
                if side == "trl":
                    run_work = work / f"trl_{seed}"
                    run_work.mkdir()
                    r = run_fixed_trl(model_dir, rollout, rewards, batch, s, seed, a.steps, run_work)
                else:
                    r = run_fixed_grpolab(model_dir, rollout, rewards, s, seed, a.steps,
                                          share_prompts=side == "grpolab")
                r.update(side=side, seed=seed, completion_tokens=tokens, others_cores=others_cores(c0, cpu_counters()))
                result["runs"].append(r)
                print(f"seed {seed} {side}: update s {[round(x, 3) for x in r['update_s']]} on {tokens:.0f} "
                      f"completion tokens", flush=True)
    med = {side: statistics.median([x for r in result["runs"] if r["side"] == side for x in r["update_s"][1:]])
           for side in FIXED_SIDES}
    result["median_update_s"] = med
    result["ratio_trl_over_grpolab_update"] = med["trl"] / med["grpolab"]
    result["ratio_trl_over_grpolab_joint_update"] = med["trl"] / med["grpolab-joint"]
    result["ratio_joint_over_shared_update"] = med["grpolab-joint"] / med["grpolab"]
    per_seed = {}
    for seed in seeds:
        m = {side: statistics.median([x for r in result["runs"] if r["side"] == side and r["seed"] == seed
                                      for x in r["update_s"][1:]]) for side in FIXED_SIDES}
        per_seed[str(seed)] = {"trl_over_grpolab": m["trl"] / m["grpolab"],
                               "trl_over_grpolab_joint": m["trl"] / m["grpolab-joint"],
                               "joint_over_shared": m["grpolab-joint"] / m["grpolab"]}
    result["ratios_per_seed"] = per_seed
    print(f"fixed batch, update only ({len(seeds)} seeds x {a.steps - 1} timed steps): median TRL {med['trl']:.3f} s, "
          f"grpolab {med['grpolab']:.3f} s (shared prompts), grpolab-joint {med['grpolab-joint']:.3f} s; "
          f"TRL/grpolab {result['ratio_trl_over_grpolab_update']:.2f}x, "
          f"TRL/grpolab-joint {result['ratio_trl_over_grpolab_joint_update']:.2f}x, "
          f"joint/shared {result['ratio_joint_over_shared_update']:.2f}x")
    for seed, r in per_seed.items():
        print(f"  seed {seed}: " + ", ".join(f"{k} {v:.2f}x" for k, v in r.items()))
    out = a.out if a.out != DEFAULT_OUT else DEFAULT_OUT.with_name("vs_trl_fixed_batch.json")
    atomic_write_json(out, result)
    print(f"wrote {out}")
    return 0


# ------------------------------------------------------------------------------------------------
# summaries


def fmt(x, spec=".3f"):
    return "-" if x is None else format(x, spec)



def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (prompt schedule, sampling, init order)")
    p.add_argument("--steps", type=int, default=5, help="optimizer steps per run (the first is warm-up)")
    p.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate for both (1e-3 breaks the tiny policy)")
    p.add_argument("--sides", default=",".join(SIDES), help=f"which trainers, comma-separated, from {SIDES}")
    p.add_argument("--model", type=Path, default=None,
                   help="start from this HF model directory (e.g. a warm start from `grpolab sft --out DIR`, "
                        "so rewards are mixed); default: the untrained tiny model")
    p.add_argument("--trl-checkpointing", action="store_true",
                   help="keep TRL's default activation checkpointing (off by default here: grpolab has none)")
    p.add_argument("--wait-idle", type=float, default=0.0,
                   help="before each run wait up to this many seconds for other processes to leave the CPU")
    p.add_argument("--fixed-batch", action="store_true",
                   help="time only the update, both trainers on the same fixed batch of completions per seed")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    a = p.parse_args(argv)
    if a.steps < 2:
        p.error("--steps must be >= 2 (step 1 is warm-up)")
    if not a.lr > 0:
        p.error("--lr must be > 0")
    try:
        seeds = [int(x) for x in a.seeds.split(",") if x.strip()]
    except ValueError:
        p.error(f"--seeds must be comma-separated integers, got {a.seeds!r}")
    sides = [x.strip() for x in a.sides.split(",") if x.strip()]
    bad = [x for x in sides if x not in SIDES]
    if bad or not sides or not seeds:
        p.error(f"--sides must name some of {SIDES} (got {a.sides!r}) and --seeds at least one seed")

    s = {
        "steps": a.steps, "seeds": seeds, "warmup_steps_skipped_per_run": 1, "n_items": 256,
        "prompts_per_step": 16, "group_size": 8, "completions_per_step": 128, "max_new_tokens": 48,
        "temperature": 1.0, "top_p": 1.0, "clip_low": 0.2, "clip_high": 0.28, "kl_coef_beta": 0.0,
        "loss": "token-level (TRL loss_type=dapo, grpolab objective.aggregation=token)",
        "advantage": "group mean/std (TRL scale_rewards=group, std eps 1e-4; grpolab grpo, std eps 1e-6)",
        "lr": a.lr, "optimizer": "AdamW", "beta1": 0.9, "beta2": 0.99, "weight_decay": 0.0,
        "lr_schedule": "constant, no warm-up", "grad_clip": 1.0, "device": "cpu", "dtype": "float32",
        "task": "arith", "prompt_order": "one seeded schedule per seed, shared by both trainers",
        "model": f"{a.model}" if a.model else "grpolab tiny Llama (TinyModelConfig defaults), build seed 0",
        "trl_activation_checkpointing": bool(a.trl_checkpointing),
        "length_tolerance_for_verdict": LENGTH_TOLERANCE,
    }
    machine = bench.machine(packages=("grpolab", "torch", "transformers", "trl", "accelerate"))
    print(f"torch threads: {torch.get_num_threads()}, cpus: {machine['cpu_count']}, load average: {bench.load_average()}, "
          f"versions: {machine['versions']}", flush=True)
    if a.fixed_batch:
        return main_fixed(a, s, seeds, machine)
    result: dict = {"machine": machine, "settings": s, "runs": [], "schedules": {}, "errors": []}
    with tempfile.TemporaryDirectory(prefix="grpolab_vs_trl_") as tmp:
        work = Path(tmp)
        model_dir = work / "model"
        result["model"] = build_checkpoint(model_dir, a.model)
        items = load_items(s["n_items"])
        s["task_items_source"] = "grpolab.tasks.get_task"
        for k, seed in enumerate(seeds):
            schedule = prompt_schedule(len(items), a.steps, s["prompts_per_step"], seed)
            result["schedules"][str(seed)] = {"sha256_16": schedule_digest(schedule), "items": schedule}
            order = sides if k % 2 == 0 else sides[::-1]  # alternate the order between seeds
            for side in order:
                print(f"\n=== seed {seed}: {side}, {a.steps} steps ===", flush=True)
                idle = wait_for_idle(a.wait_idle) if a.wait_idle > 0 else None
                run_work = work / f"{side.replace('+', '_')}_{seed}"
                run_work.mkdir()
                t0 = time.perf_counter()
                try:
                    if side == "trl":
                        r = run_trl(model_dir, items, schedule, s, seed, run_work)
                    else:
                        r = run_grpolab(model_dir, items, schedule, s, seed, skip=side == "grpolab+skip")
                except Exception:
                    tb = traceback.format_exc()
                    result["errors"].append({"side": side, "seed": seed, "traceback": tb})
                    print(f"{side} FAILED:\n{tb}", file=sys.stderr, flush=True)
                    continue
                r.update(side=side, seed=seed, wall_s=time.perf_counter() - t0, wait_idle=idle)
                result["runs"].append(r)
                print(f"{side}: s/step {[round(x, 3) for x in r['step_s']]}, mean length "
                      f"{[round(x, 1) for x in r['mean_length']]}, reward {[round(x, 3) for x in r['mean_reward']]}, "
                      f"other processes' cores {[fmt(x, '.2f') for x in r['others_cores']]}", flush=True)

    res = result["results"] = {side: pooled([r for r in result["runs"] if r["side"] == side]) for side in sides}
    result["results_quiet_steps"] = {side: pooled([r for r in result["runs"] if r["side"] == side], quiet_only=True)
                                     for side in sides}
    result["ratios_trl_over"] = {side: ratios(res.get("trl", {}), res[side]) for side in sides if side != "trl"}
    per_seed = {}
    for seed in seeds:
        t = pooled([r for r in result["runs"] if r["side"] == "trl" and r["seed"] == seed])
        per_seed[str(seed)] = {side: ratios(t, pooled([r for r in result["runs"] if r["side"] == side and r["seed"] == seed]))
                               for side in sides if side != "trl"}
    result["ratios_per_seed"] = per_seed

    result["verdict"] = verdict = equal_work_verdict(res, result["ratios_trl_over"], result["runs"])

    # ---- table ----
    print(f"\nper side, steps 2..{a.steps} of {len(seeds)} seed(s), lr {a.lr:g}; {s['prompts_per_step']} prompts x "
          f"{s['group_size']} = {s['completions_per_step']} completions, <= {s['max_new_tokens']} tokens; "
          f"torch threads {machine['torch_threads']}, {machine['cpu_count']} CPUs")
    hdr = (f"{'trainer':<13} {'steps':>5} {'median s/step':>13} {'rollout s':>9} {'update s':>8} {'mean len':>8} "
           f"{'reward':>6} {'gen tok/step':>12} {'trained tok/step':>16} {'rollout tok/s':>13} {'update tok/s':>12}")
    print(hdr)
    print("-" * len(hdr))
    for side in sides:
        m = res[side]
        if not m.get("steps"):
            print(f"{side:<13} (no steps)")
            continue
        print(f"{side:<13} {m['steps']:>5} {m['median_s_per_step']:>13.3f} {m['median_rollout_s']:>9.3f} "
              f"{m['median_update_s']:>8.3f} {m['mean_length']:>8.1f} {m['mean_reward']:>6.3f} "
              f"{m['gen_tokens_per_step']:>12.0f} {m['trained_tokens_per_step']:>16.0f} "
              f"{m['rollout_tokens_per_s']:>13.0f} {fmt(m['update_tokens_per_s'], '.0f'):>12}")
    for side, r in result["ratios_trl_over"].items():
        if r:
            print(f"TRL / {side}: s/step {r['s_per_step_median']:.2f}x (mean {r['s_per_step_mean']:.2f}x), "
                  f"s per generated token {r['s_per_generated_token']:.2f}x, rollout tokens/s "
                  f"{r['rollout_tokens_per_s']:.2f}x, update tokens/s {fmt(r.get('update_tokens_per_s'), '.2f')}x; "
                  f"lengths {side}/TRL {r['mean_length_grpolab_over_trl']:.3f}")
    for seed, rs in per_seed.items():
        print(f"  seed {seed}: " + "; ".join(f"{side} {fmt(r.get('s_per_step_median'), '.2f')}x s/step, lengths "
                                             f"{fmt(r.get('mean_length_grpolab_over_trl'), '.3f')}"
                                             for side, r in rs.items() if r))
    if "warning" in verdict:
        print("WARNING: " + verdict["warning"])
    print(f"VERDICT ({verdict['target']}): {verdict['status']}")
    atomic_write_json(a.out, result)
    print(f"wrote {a.out}")
    return 1 if result["errors"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
