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

It prints a table and writes ``benchmarks/results/vs_trl.json`` (atomically) with the machine, all
settings, the prompt schedules' digests and every step's timings, lengths and rewards.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

import grpolab.utils.offline  # noqa: F401  (before transformers/trl: no Hub lookups or telemetry)
import torch

from grpolab.utils import bench
from grpolab.utils.io import atomic_write_json

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parent / "results" / "vs_trl.json"
#: a step is "quiet" when other processes kept fewer than this many cores busy on average during it
QUIET_CORES = 0.25
#: the verdict needs the two trainers' mean completion lengths within this relative difference
LENGTH_TOLERANCE = 0.10
SIDES = ("trl", "grpolab", "grpolab+skip")
#: --fixed-batch: grpolab with the shared-prompt forward (the default) and with the joint forward
FIXED_SIDES = ("trl", "grpolab", "grpolab-joint")


# ------------------------------------------------------------------------------------------------
# helpers


def cpu_seconds() -> float:
    """CPU time of this process, all threads (user + system)."""
    t = os.times()
    return t.user + t.system



def load_items(n: int):
    """The arith training items. Prefers the public ``grpolab.tasks.get_task``."""
    try:
        from grpolab.tasks import get_task

        source = "grpolab.tasks.get_task"
    except ImportError:
        # The public export was missing while grpolab.tasks was being written; the registry lives
        # in grpolab.tasks.base and the task registers itself on import of grpolab.tasks.arith.
        import grpolab.tasks.arith  # noqa: F401
        from grpolab.tasks.base import get_task

        source = "grpolab.tasks.base.get_task (grpolab.tasks.get_task not exported)"
    return get_task("arith").items("train", n), source


def build_checkpoint(path: Path, source: Path | None = None) -> dict:
    from grpolab.models import TinyModelConfig, build_tiny_model, build_tokenizer, load_model, save_model

    if source is not None:  # a warm-started model (e.g. `grpolab sft --out DIR`): rewards are mixed
        model, tok = load_model(source)
        save_model(model, tok, path)
        return {"n_params": bench.param_count(model), "vocab_size": len(tok),
                "source": str(source)}
    tok = build_tokenizer()
    model = build_tiny_model(tok, TinyModelConfig(), seed=0)
    save_model(model, tok, path)
    return {"n_params": bench.param_count(model), "vocab_size": len(tok),
            "config": dict(TinyModelConfig().__dict__)}




def cpu_counters():
    """``(wall, system busy CPU-seconds, this process's CPU-seconds)`` from /proc (None off Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        hz = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / hz  # all but idle and iowait (guest is in user)
    except (OSError, ValueError, IndexError):
        return None
    t = os.times()
    return time.perf_counter(), busy, t.user + t.system


def others_cores(a, b):
    """Average number of CPU cores busy with *other* processes between two :func:`cpu_counters`."""
    if a is None or b is None or b[0] <= a[0]:
        return None
    return max(0.0, ((b[1] - a[1]) - (b[2] - a[2])) / (b[0] - a[0]))


def wait_for_idle(max_wait: float, threshold: float = 0.25, window: float = 2.0) -> dict:
    """Wait (at most ``max_wait`` s) until other processes use < ``threshold`` cores over ``window`` s."""
    t0 = time.perf_counter()
    last = None
    while True:
        a = cpu_counters()
        time.sleep(window)
        last = others_cores(a, cpu_counters())
        if last is None or last < threshold or time.perf_counter() - t0 >= max_wait:
            return {"waited_s": round(time.perf_counter() - t0, 1), "others_cores": last}



def prompt_schedule(n_items: int, steps: int, per_step: int, seed: int) -> list[list[int]]:
    """Item indices per step, the same for both trainers: ``steps`` draws of ``per_step`` distinct items."""
    rng = random.Random(10_000 + seed)
    return [rng.sample(range(n_items), per_step) for _ in range(steps)]


def schedule_digest(schedule: list[list[int]]) -> str:
    return hashlib.sha256(json.dumps(schedule).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------------
# TRL


def trl_args(s: dict, steps: int, seed: int, work: Path):
    """TRL's config for the benchmark: one generation batch of B completions = one optimizer step."""
    from trl import GRPOConfig

    B = s["prompts_per_step"] * s["group_size"]
    return GRPOConfig(
        output_dir=str(work / "trl_out"),
        per_device_train_batch_size=B, gradient_accumulation_steps=1, num_generations=s["group_size"],
        num_iterations=1, max_completion_length=s["max_new_tokens"], temperature=s["temperature"],
        top_p=s["top_p"], top_k=0, beta=0.0, loss_type="dapo", epsilon=s["clip_low"], epsilon_high=s["clip_high"],
        scale_rewards="group", learning_rate=s["lr"], optim="adamw_torch", adam_beta1=s["beta1"],
        adam_beta2=s["beta2"], weight_decay=0.0, max_grad_norm=s["grad_clip"], lr_scheduler_type="constant",
        warmup_steps=0, max_steps=steps, report_to="none", save_strategy="no", eval_strategy="no",
        logging_steps=10**9, log_completions=False, disable_tqdm=True, use_cpu=True, bf16=False, fp16=False,
        dataloader_num_workers=0, seed=seed, shuffle_dataset=False,
        activation_checkpointing=s["trl_activation_checkpointing"],
    )


def run_trl(model_dir: Path, items, schedule, s: dict, seed: int, work: Path) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from grpolab.rewards import safe_score

    G = s["group_size"]
    order = [items[i] for step in schedule for i in step]  # the dataset in schedule order
    lengths: list[list[int]] = []  # per generation (= per step here)
    rewards_seen: list[float] = []
    mismatches: list[int] = []

    def arith_reward(prompts, completions, completion_ids=None, reference=None, reward_name=None, **kwargs):
        k = len(lengths)
        want = [items[i].prompt for i in schedule[k] for _ in range(G)] if k < len(schedule) else None
        if list(prompts) != want:
            mismatches.append(k)
        scores = [safe_score(name, c, ref).score for c, ref, name in zip(completions, reference, reward_name)]
        lengths.append([len(ids) for ids in completion_ids])  # tokens incl. EOS, like grpolab
        rewards_seen.append(statistics.fmean(scores))
        return scores

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.begin = self.counters = None
            self.durations: list[float] = []
            self.others: list = []
            self.gen_calls_at_end: list[int] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.counters = cpu_counters()
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.durations.append(time.perf_counter() - self.begin)
            self.others.append(others_cores(self.counters, cpu_counters()))
            self.gen_calls_at_end.append(len(lengths))

    ds = Dataset.from_dict({
        "prompt": [it.prompt for it in order],
        "reference": [it.reference for it in order],
        "reward_name": [it.reward for it in order],
    })
    B = s["prompts_per_step"] * G
    args = trl_args(s, len(schedule), seed, work)
    assert args.steps_per_generation == 1 and args.generation_batch_size == B
    timer = StepTimer()
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=arith_reward, args=args, train_dataset=ds,
                          callbacks=[timer])
    rollout_s: list[float] = []
    orig = trainer._generate_and_score_completions

    def timed(*a, **k):
        t = time.perf_counter()
        out = orig(*a, **k)
        rollout_s.append(time.perf_counter() - t)
        return out

    trainer._generate_and_score_completions = timed
    trainer.train()
    if timer.gen_calls_at_end != list(range(1, len(timer.durations) + 1)):
        raise RuntimeError(f"expected one generation per timed step, got {timer.gen_calls_at_end}")
    if mismatches:
        raise RuntimeError(f"TRL's generation batches {mismatches} did not hold the scheduled prompts")
    gen = [float(sum(x)) for x in lengths]
    return {
        "step_s": timer.durations, "rollout_s": rollout_s,
        "update_s": [a - b for a, b in zip(timer.durations, rollout_s)],
        "others_cores": timer.others,
        "mean_length": [statistics.fmean(x) for x in lengths],
        "gen_tokens": gen, "trained_tokens": gen,  # TRL runs forward/backward on every row
        "mean_reward": rewards_seen,
    }


# ------------------------------------------------------------------------------------------------
# grpolab


def grpolab_update_fn():
    """The trainer's public update for one rollout batch, called as ``train`` calls it:
    ``fn(policy, optimizer, scheduler, rollout, advantages, cfg)``."""
    from grpolab.train import Experience, UpdateSpec, update

    def fn(policy, optimizer, scheduler, rollout, advantages, cfg):
        return update(policy, optimizer, scheduler, Experience.from_rollout(rollout, advantages),
                      UpdateSpec.from_config(cfg))

    return fn, "grpolab.train.update"


def grpolab_setup(model_dir: Path, s: dict, seed: int, skip: bool, steps: int, share_prompts: bool = True):
    """Config, update function, generator, policy, tokenizer, optimizer and scheduler as ``train`` builds them."""
    from grpolab.config import load_config
    from grpolab.models import load_model
    from grpolab.train.loop import seed_everything
    from grpolab.train.optim import build_optimizer, build_scheduler

    overrides = {
        "model.path": str(model_dir), "model.device": "cpu", "sft.enabled": "no", "task.name": "arith",
        "rollout.prompts_per_step": s["prompts_per_step"], "rollout.group_size": s["group_size"],
        "rollout.max_new_tokens": s["max_new_tokens"], "rollout.temperature": s["temperature"],
        "rollout.top_p": s["top_p"], "objective.advantage": "grpo", "objective.ratio": "token",
        "objective.aggregation": "token", "objective.clip_low": s["clip_low"],
        "objective.clip_high": s["clip_high"], "objective.dual_clip": "none", "objective.kl_coef": 0.0, "optim.lr": s["lr"],
        "optim.beta1": s["beta1"], "optim.beta2": s["beta2"], "optim.weight_decay": 0.0,
        "optim.warmup_steps": 0, "optim.schedule": "constant", "optim.grad_clip": s["grad_clip"],
        "trainer.steps": steps, "trainer.epochs": 1, "trainer.mini_batches": 1,
        "trainer.micro_batch_size": 0, "trainer.skip_zero_advantage": "true" if skip else "false",
        "trainer.seed": seed, "trainer.share_prompts": "true" if share_prompts else "false",
    }
    cfg = load_config(overrides={k: str(v) for k, v in overrides.items()})
    update, update_name = grpolab_update_fn()
    gen = seed_everything(seed)
    policy, tok = load_model(model_dir)
    optimizer = build_optimizer(policy, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay,
                                betas=(cfg.optim.beta1, cfg.optim.beta2))
    scheduler = build_scheduler(optimizer, warmup_steps=0, total_steps=steps, schedule="constant")
    return cfg, update, update_name, gen, policy, tok, optimizer, scheduler


def run_grpolab(model_dir: Path, items, schedule, s: dict, seed: int, skip: bool) -> dict:
    from grpolab import objectives as obj
    from grpolab.tasks import PromptFormat
    from grpolab.train.collector import collector_for

    cfg, update, update_name, gen, policy, tok, optimizer, scheduler = grpolab_setup(
        model_dir, s, seed, skip, len(schedule))
    advantage_fn = obj.get_advantage_estimator("grpo")
    G = cfg.rollout.group_size
    collector = collector_for(cfg, tok, prompt_format=PromptFormat(chat_template="off"))  # the trainer's step
    out = {k: [] for k in ("step_s", "rollout_s", "update_s", "others_cores", "mean_length", "gen_tokens",
                           "trained_tokens", "mean_reward")}
    for step_items in schedule:
        batch = [items[i] for i in step_items]
        c0 = cpu_counters()
        t0 = time.perf_counter()
        exp = collector.collect(policy, batch, group_size=G, temperature=cfg.rollout.temperature,
                                top_p=cfg.rollout.top_p, generator=gen)
        rollout, rewards = exp.rollout, exp.rewards
        adv = advantage_fn(rewards, rollout.group_ids)
        t1 = time.perf_counter()
        update(policy, optimizer, scheduler, rollout, adv, cfg)
        t2 = time.perf_counter()
        lengths = rollout.response_mask.sum(-1)
        out["step_s"].append(t2 - t0)
        out["rollout_s"].append(t1 - t0)
        out["update_s"].append(t2 - t1)
        out["others_cores"].append(others_cores(c0, cpu_counters()))
        out["mean_length"].append(float(lengths.mean()))
        out["gen_tokens"].append(float(lengths.sum()))
        out["trained_tokens"].append(float(lengths[adv != 0].sum()) if skip else float(lengths.sum()))
        out["mean_reward"].append(float(rewards.mean()))
    out["update_fn"] = update_name
    return out


# ------------------------------------------------------------------------------------------------
# fixed batch: both trainers' update on the same completions (no sampling differences at all)


def fixed_batch(model_dir: Path, items, step_items: list[int], s: dict, seed: int):
    """One batch sampled once by grpolab from the starting model: ``(rollout, rewards [B], batch items)``."""
    from grpolab.models import load_model
    from grpolab.tasks import PromptFormat
    from grpolab.train.collector import SingleTurnCollector

    policy, tok = load_model(model_dir)
    batch = [items[i] for i in step_items]
    collector = SingleTurnCollector(tok, max_new_tokens=s["max_new_tokens"], prompt_format=PromptFormat(chat_template="off"))
    exp = collector.collect(policy, batch, group_size=s["group_size"], temperature=s["temperature"], top_p=s["top_p"],
                            generator=torch.Generator().manual_seed(seed))
    return exp.rollout, exp.rewards, batch


def run_fixed_trl(model_dir: Path, rollout, rewards, batch, s: dict, seed: int, steps: int, work: Path) -> dict:
    """TRL's own training step ``steps`` times on the fixed batch: ``_generate_and_score_completions``
    is replaced (instance attribute) by one that returns the fixed batch with TRL's advantages."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer
    from trl.trainer.utils import nanstd

    G = s["group_size"]
    grouped = rewards.view(-1, G)
    adv = (rewards - grouped.mean(1).repeat_interleave(G)) / (nanstd(grouped, dim=1).repeat_interleave(G) + 1e-4)
    mask = rollout.response_mask.long()
    prepared = {"prompt_ids": rollout.prompt_ids, "prompt_mask": rollout.prompt_mask,
                "completion_ids": rollout.response_ids, "completion_mask": mask, "advantages": adv,
                "num_items_in_batch": mask.sum()}
    durations: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            durations.append(time.perf_counter() - self.begin)

    ds = Dataset.from_dict({"prompt": [it.prompt for it in batch for _ in range(steps)]})
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=lambda completions, **k: [0.0] * len(completions),
                          args=trl_args(s, steps, seed, work), train_dataset=ds, callbacks=[StepTimer()])
    trainer._generate_and_score_completions = lambda generation_batch: {
        k: v.clone() if torch.is_tensor(v) else v for k, v in prepared.items()}
    trainer.train()
    return {"update_s": durations}


def run_fixed_grpolab(model_dir: Path, rollout, rewards, s: dict, seed: int, steps: int,
                      share_prompts: bool = True) -> dict:
    """grpolab's update ``steps`` times on the fixed batch (skipping off), with grpolab's advantages;
    ``share_prompts=False`` is the joint forward (every row recomputes its prompt, as TRL does)."""
    from grpolab import objectives as obj

    cfg, update, update_name, _, policy, _, optimizer, scheduler = grpolab_setup(
        model_dir, s, seed, False, steps, share_prompts=share_prompts)
    adv = obj.get_advantage_estimator("grpo")(rewards, rollout.group_ids)
    durations = []
    for _ in range(steps):
        t0 = time.perf_counter()
        update(policy, optimizer, scheduler, rollout, adv, cfg)
        durations.append(time.perf_counter() - t0)
    return {"update_s": durations, "update_fn": update_name}


def main_fixed(a, s: dict, seeds: list[int], machine: dict) -> int:
    """``--fixed-batch``: per seed one batch, both trainers' update timed on it, interleaved."""
    result: dict = {"machine": machine, "settings": dict(s, mode="fixed batch: update only, same completions"),
                    "runs": []}
    with tempfile.TemporaryDirectory(prefix="grpolab_vs_trl_fixed_") as tmp:
        work = Path(tmp)
        model_dir = work / "model"
        result["model"] = build_checkpoint(model_dir, a.model)
        items, _ = load_items(s["n_items"])
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


def pooled(runs: list[dict], skip: int = 1, quiet_only: bool = False) -> dict:
    """Medians and token rates over all runs of one side, each run's first ``skip`` steps left out."""
    cols = ("step_s", "rollout_s", "update_s", "mean_length", "gen_tokens", "trained_tokens", "mean_reward")
    v = {c: [] for c in cols}
    n_quiet = n_all = 0
    for r in runs:
        for i in range(skip, len(r["step_s"])):
            oc = r["others_cores"][i]
            quiet = oc is not None and oc < QUIET_CORES
            n_all += 1
            n_quiet += quiet
            if quiet_only and not quiet:
                continue
            for c in cols:
                v[c].append(r[c][i])
    if not v["step_s"]:
        return {"steps": 0, "quiet_steps": n_quiet, "all_steps": n_all}
    return {
        "steps": len(v["step_s"]), "quiet_steps": n_quiet, "all_steps": n_all,
        "median_s_per_step": statistics.median(v["step_s"]),
        "mean_s_per_step": statistics.fmean(v["step_s"]),
        "median_rollout_s": statistics.median(v["rollout_s"]),
        "median_update_s": statistics.median(v["update_s"]),
        "mean_length": statistics.fmean(v["mean_length"]),
        "mean_reward": statistics.fmean(v["mean_reward"]),
        "gen_tokens_per_step": statistics.fmean(v["gen_tokens"]),
        "trained_tokens_per_step": statistics.fmean(v["trained_tokens"]),
        "s_per_gen_token": sum(v["step_s"]) / sum(v["gen_tokens"]),
        "rollout_tokens_per_s": sum(v["gen_tokens"]) / sum(v["rollout_s"]),
        "update_tokens_per_s": sum(v["trained_tokens"]) / sum(v["update_s"]) if sum(v["trained_tokens"]) else None,
    }


def ratios(t: dict, g: dict) -> dict:
    """TRL / grpolab (>1: grpolab faster) per step, per generated token, rollout and update throughput."""
    if not t.get("steps") or not g.get("steps"):
        return {}
    out = {
        "s_per_step_median": t["median_s_per_step"] / g["median_s_per_step"],
        "s_per_step_mean": t["mean_s_per_step"] / g["mean_s_per_step"],
        "s_per_generated_token": t["s_per_gen_token"] / g["s_per_gen_token"],
        "rollout_tokens_per_s": g["rollout_tokens_per_s"] / t["rollout_tokens_per_s"],
        "rollout_s_median": t["median_rollout_s"] / g["median_rollout_s"],
        "update_s_median": t["median_update_s"] / g["median_update_s"],
        "mean_length_grpolab_over_trl": g["mean_length"] / t["mean_length"],
    }
    if t.get("update_tokens_per_s") and g.get("update_tokens_per_s"):
        out["update_tokens_per_s"] = g["update_tokens_per_s"] / t["update_tokens_per_s"]
    return out


def equal_work_verdict(res: dict, ratio_by_side: dict, runs: list[dict]) -> dict:
    """The >= 2x verdict, given only at equal work: TRL's and grpolab's (skipping off) mean
    completion lengths within ``LENGTH_TOLERANCE`` of their mean."""
    verdict = {"target": "TRL/grpolab s per step >= 2.0 at equal work, skipping off"}
    t, g = res.get("trl", {}), res.get("grpolab", {})
    if not (t.get("steps") and g.get("steps")):
        verdict["status"] = "no verdict: TRL or grpolab (skipping off) did not run"
        return verdict
    rel = abs(g["mean_length"] - t["mean_length"]) / (0.5 * (g["mean_length"] + t["mean_length"]))
    verdict.update(mean_length_trl=t["mean_length"], mean_length_grpolab=g["mean_length"],
                   relative_length_difference=rel)
    if rel > LENGTH_TOLERANCE:
        verdict["status"] = (f"no verdict: mean lengths differ by {100 * rel:.1f}% (> {100 * LENGTH_TOLERANCE:.0f}%), "
                             "the trainers did not do equal work")
    else:
        ratio = ratio_by_side["grpolab"]["s_per_step_median"]
        verdict.update(ratio=ratio, met=ratio >= 2.0)
        verdict["status"] = f"{'MET' if ratio >= 2.0 else 'NOT met'}: {ratio:.2f}x at equal work"
    oc = [x for r in runs for x in r["others_cores"][1:] if x is not None]
    verdict["others_cores_median"] = statistics.median(oc) if oc else None
    if oc and statistics.median(oc) >= QUIET_CORES:
        verdict["warning"] = (f"other processes used a median {statistics.median(oc):.2f} cores during the "
                              "steps: timings are contended; the ratio is of contended runs")
    return verdict


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
        items, source = load_items(s["n_items"])
        s["task_items_source"] = source
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
