"""Learning inside verl's real trainer on CPU: GRPO and RLSD, beside grpolab's own trainer.

One warm start, four runs on the same task, seed and held-out items:

1. ``grpolab sft`` (the default run's warm start: grpolab's tiny 1.8 M-parameter Llama on the
   ``arith`` task, seed 0) -> ``WORK/sft``;
2. grpolab's own trainer from it (``grpolab train --set model.path=WORK/sft --set sft.enabled=no``),
   GRPO and RLSD, ``--steps`` steps, held-out greedy accuracy every ``--eval-every`` steps;
3. verl's real trainer from the same weights (``python -m grpolab.integrations.verl.cpu main_ppo`` /
   ``verl_main``: Ray, TransferQueue, verl's FSDP2 engine, the ``hf_cpu`` rollout with weight
   sync, verl's reward manager calling ``grpolab.integrations.verl.cpu.toy.compute_score``), the
   same batch (32 prompts x 8 samples, up to 48 new tokens, temperature 1), learning rate (1e-4),
   one optimizer step per batch, no KL; held-out greedy reward (verl's validation, ``val-core``)
   on the same items every ``--eval-every`` steps.

The reward is binary (the final answer after ``#``), so the held-out mean reward is the accuracy
in both trainers. Needs CI's verl environment (``pip install -c constraints-cpu.txt -e
".[test,verl]"``)::

    OMP_NUM_THREADS=1 .venv-ci-verl/bin/python benchmarks/speed/verl_cpu.py --steps 40 --eval-every 5

Prints a table and writes runs/bench/verl_cpu.json (``--out``; the committed record: ``--out
docs/results/verl_cpu.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from grpolab import bench

ROOT = Path(__file__).resolve().parents[2]
N_EVAL = 256  # grpolab's trainer.n_eval default: the same held-out items in both trainers
TEACHER = "{prompt} here is a reference solution: {privileged} solve it in your own way. {prompt}"


def sh(cmd: list[str], log: Path, env: dict | None = None) -> float:
    t0 = time.time()
    with open(log, "w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise RuntimeError(f"{' '.join(cmd[:6])} ... failed (exit {proc.returncode}); end of {log}:\n{tail}")
    return time.time() - t0


def warm_start(work: Path) -> Path:
    out = work / "sft"
    if not (out / "sft.json").exists():
        sh([sys.executable, "-m", "grpolab.cli", "sft", "--out", str(out)], work / "sft.log")
    return out


def grpolab_run(work: Path, sft: Path, variant: str, steps: int, eval_every: int, seed: int) -> dict:
    run_dir = work / f"grpolab_{variant}"
    shutil.rmtree(run_dir, ignore_errors=True)
    sets = [f"model.path={sft}", "sft.enabled=no", "task.chat_template=off", f"trainer.steps={steps}",
            f"trainer.eval_every={eval_every}", f"trainer.seed={seed}", f"trainer.run_dir={run_dir}",
            "trainer.preflight=false", "log.progress=false", f"task.n_eval={N_EVAL}"]
    if variant == "rlsd":
        sets += ["credit.name=rlsd"]
    cmd = [sys.executable, "-m", "grpolab.cli", "train"] + [a for s in sets for a in ("--set", s)]
    wall = sh(cmd, work / f"grpolab_{variant}.log")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    curve = grpolab_start(work / f"grpolab_{variant}.log")
    curve += [[r["step"], r["eval/accuracy"]] for r in rows if r.get("eval/accuracy") is not None]
    steps_t = [r["time/step"] for r in rows if r.get("time/step") is not None]
    return {"curve": curve, "wall_s": wall, "seconds_per_step": sum(steps_t) / max(len(steps_t), 1),
            "command": " ".join(cmd)}


def grpolab_start(log: Path) -> list[list]:
    """``[[0, accuracy]]`` from the ``step 0 ... <accuracy>`` line `grpolab train` prints before RL."""
    for line in log.read_text().splitlines():
        if line.startswith("step 0"):
            return [[0, float(line.split()[-1])]]
    return []


def verl_data(work: Path, seed: int) -> tuple[Path, Path]:
    from grpolab.integrations.verl.cpu import toy

    train = toy.write_arith_parquet(work / "train.parquet", toy.arith_items("train", 4096, seed=seed))
    val = toy.write_arith_parquet(work / "val.parquet", toy.arith_items("eval", N_EVAL, seed=seed), split="eval")
    return train, val


def verl_run(work: Path, model: Path, data: tuple[Path, Path], variant: str, steps: int, eval_every: int,
             seed: int, reuse: bool = False) -> dict:
    """One verl run (or, with ``reuse``, the log of a finished one with the same steps: no wall time then)."""
    log_path = work / f"verl_{variant}.jsonl"
    cmd = verl_command(work, model, data, variant, steps, eval_every, seed)
    if reuse and log_path.exists():
        parsed = parse_verl_log(log_path)
        if parsed["curve"] and parsed["curve"][-1][0] == steps:
            return {**parsed, "wall_s": None, "command": "python " + " ".join(cmd[1:])}
    log_path.unlink(missing_ok=True)
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(log_path), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    wall = sh(cmd, work / f"verl_{variant}.log", env=env)
    return {**parse_verl_log(log_path), "wall_s": wall, "command": "python " + " ".join(cmd[1:])}


def verl_command(work: Path, model: Path, data: tuple[Path, Path], variant: str, steps: int, eval_every: int,
                 seed: int) -> list[str]:
    """The launcher command of one verl run (the metric log's path goes through VERL_FILE_LOGGER_PATH)."""
    toy_file = ROOT / "src/grpolab/integrations/verl/cpu/toy.py"
    overrides = [
        f"data.train_files={data[0]}", f"data.val_files={data[1]}", "data.train_batch_size=32",
        "data.max_prompt_length=32", "data.max_response_length=48", f"data.seed={seed}",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.actor.optim.lr=1e-4", "actor_rollout_ref.actor.optim.lr_warmup_steps=5",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.actor.ppo_epochs=1", "actor_rollout_ref.actor.grad_clip=1.0",
        "actor_rollout_ref.actor.clip_ratio_low=0.2", "actor_rollout_ref.actor.clip_ratio_high=0.28",
        "actor_rollout_ref.actor.use_kl_loss=false", "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        "actor_rollout_ref.rollout.n=8", "actor_rollout_ref.rollout.temperature=1.0",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=false", "actor_rollout_ref.rollout.val_kwargs.temperature=0",
        "algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=false",
        f"reward.custom_reward_function.path={toy_file}", "reward.custom_reward_function.name=compute_score",
        f"trainer.total_training_steps={steps}", f"trainer.test_freq={eval_every}", "trainer.val_before_train=true",
        "trainer.save_freq=-1", "trainer.logger=[console,file]", "trainer.project_name=verl_cpu",
        f"trainer.experiment_name={variant}", f"trainer.default_local_dir={work / 'ckpt'}", f"actor_rollout_ref.rollout.seed={seed}",
    ]
    target = "main_ppo"
    if variant == "rlsd":
        target = "verl_main"
        overrides += ["+grpolab.credit.name=rlsd", "+grpolab.credit.privileged_key=solution",
                      f"+grpolab.credit.chat_template='{TEACHER}'"]
    return [sys.executable, "-m", "grpolab.integrations.verl.cpu", target, *overrides]


def parse_verl_log(log_path: Path) -> dict:
    """Curve and timings from verl's ``file`` logger: row ``step`` 0 holds the validation before
    training (``val_before_train``), row ``k`` the metrics of step ``k`` and, every ``test_freq``
    steps, the validation after its update. The held-out value is verl's ``val-core/<source>/acc/mean@1``
    (the reward manager's score of the greedy response: 1 or 0)."""
    rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    curve, step_s, metrics = [], [], {}
    for r in rows:
        d = r["data"]
        val = [v for k, v in sorted(d.items()) if k.startswith("val-core/") and k.endswith("/mean@1")]
        if val:
            curve.append([int(r["step"]), float(val[0])])
        if "timing_s/step" in d:
            step_s.append(float(d["timing_s/step"]))
            metrics = {k: v for k, v in d.items() if k.startswith(("credit/", "actor/grpolab/", "actor/grad_norm",
                                                                    "training/rollout_probs_diff"))}
    return {"curve": curve, "seconds_per_step": sum(step_s) / max(len(step_s), 1),
            "seconds_per_step_after_first": sum(step_s[1:]) / max(len(step_s) - 1, 1),
            "last_step_metrics": metrics}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="/var/tmp/grpolab_verl_cpu")
    ap.add_argument("--variants", nargs="+", default=["grpo", "rlsd"])
    ap.add_argument("--out", default=str(bench.results_path("verl_cpu.json")))
    ap.add_argument("--reuse-verl", action="store_true",
                    help="reuse the verl logs in --work of finished runs with the same --steps (no rerun)")
    ap.add_argument("--reparse", action="store_true",
                    help="rebuild --out from the verl logs in --work (after a run whose parsing failed)")
    args = ap.parse_args()
    if args.reparse:
        result = json.loads(Path(args.out).read_text())
        for v, r in result["variants"].items():
            r.update(parse_verl_log(Path(args.work) / f"verl_{v}.jsonl"))
            result["seconds_per_step"][f"verl_{v}"] = r["seconds_per_step"]
        for v, r in result["grpolab_trainer"].items():
            if r["curve"] and r["curve"][0][0] != 0:
                r["curve"] = grpolab_start(Path(args.work) / f"grpolab_{v}.log") + r["curve"]
        bench.write_json(args.out, result)
        print_table(result)
        return 0
    import verl

    from grpolab.integrations.verl.cpu import toy

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    sft = warm_start(work)
    model = work / "model"
    shutil.rmtree(model, ignore_errors=True)
    shutil.copytree(sft, model)
    toy.add_chat_template(model)
    data = verl_data(work, args.seed)
    result = {"verl_version": verl.__version__, "steps": args.steps, "eval_every": args.eval_every,
              "seed": args.seed, "task": "arith (grpolab default), warm start: grpolab sft (default config)",
              "held_out_items": N_EVAL, "variants": {}, "grpolab_trainer": {}}
    for v in args.variants:
        print(f"verl {v} ...", flush=True)
        result["variants"][v] = verl_run(work, model, data, v, args.steps, args.eval_every, args.seed,
                                         reuse=args.reuse_verl)
        print(f"  {result['variants'][v]['curve']}", flush=True)
    for v in args.variants:
        print(f"grpolab {v} ...", flush=True)
        result["grpolab_trainer"][v] = grpolab_run(work, sft, v, args.steps, args.eval_every, args.seed)
        print(f"  {result['grpolab_trainer'][v]['curve']}", flush=True)
    result["seconds_per_step"] = {f"verl_{v}": result["variants"][v]["seconds_per_step"] for v in args.variants}
    result["seconds_per_step"].update({f"grpolab_{v}": result["grpolab_trainer"][v]["seconds_per_step"]
                                       for v in args.variants})
    result["command"] = "OMP_NUM_THREADS=1 " + bench.command_line()
    result["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                      cwd=ROOT).stdout.strip()
    result["machine"] = bench.machine()
    bench.write_json(args.out, result)
    print_table(result)
    return 0


def print_table(result: dict) -> None:
    print("| trainer | variant | held-out reward: start -> end (best) | s/step |\n|---|---|---|---|")
    for name, runs in (("verl", result["variants"]), ("grpolab", result["grpolab_trainer"])):
        for v, r in runs.items():
            c = r["curve"]
            if not c:
                print(f"| {name} | {v} | (no curve) | {r['seconds_per_step']:.1f} |")
                continue
            print(f"| {name} | {v} | {c[0][1]:.3f} -> {c[-1][1]:.3f} ({max(x for _, x in c):.3f}) "
                  f"| {r['seconds_per_step']:.1f} |")


if __name__ == "__main__":
    raise SystemExit(main())
