"""TRL's ``GRPOTrainer`` and grpolab's step side by side at equal work: the harness of the speed
comparisons (benchmarks/speed/vs_trl.py on the tiny model, benchmarks/speed/real_model_speed.py's
TRL part on a real one; docs/performance.md reads their numbers).

For each seed both trainers start from the same checkpoint (:func:`build_checkpoint`) and see the
same prompts at every step (:func:`prompt_schedule`): TRL as a dataset in schedule order, its reward
function checking that each generation batch holds the scheduled prompts; grpolab through the
trainer's collector (:func:`grpolab.rollout.collector.collector_for`) and its public
:func:`grpolab.train.update`. What each side times is in benchmarks/speed/vs_trl.py's docstring.

- :func:`run_trl`, :func:`run_grpolab` -- one seed's run of a side: per step ``step_s``,
  ``rollout_s``, ``update_s``, ``others_cores`` (cores other processes kept busy,
  :func:`grpolab.bench.others_cores`), ``mean_length``, ``gen_tokens``, ``trained_tokens``,
  ``mean_reward``.
- :func:`fixed_batch`, :func:`run_fixed_trl`, :func:`run_fixed_grpolab` -- the update alone, both
  trainers on one batch of completions (no sampling differences at all).
- :func:`pooled`, :func:`ratios`, :func:`equal_work_verdict` -- medians and token rates of a side,
  TRL / grpolab ratios, and the verdict given only when both did equal work (mean completion
  lengths within :data:`LENGTH_TOLERANCE`).

``s`` is the settings dict both sides read: ``prompts_per_step``, ``group_size``,
``max_new_tokens``, ``temperature``, ``top_p``, ``clip_low``, ``clip_high``, ``lr``, ``beta1``,
``beta2``, ``grad_clip``, ``trl_activation_checkpointing``. TRL, datasets and transformers are
imported inside the functions that need them (``pip install 'grpolab[trl]'``).
"""

from __future__ import annotations

import hashlib
import json
import random
import statistics
import time
from pathlib import Path

import torch

from grpolab import bench
from grpolab.bench import cpu_counters, others_cores

__all__ = ["LENGTH_TOLERANCE", "QUIET_CORES", "build_checkpoint", "equal_work_verdict", "fixed_batch",
           "grpolab_setup", "grpolab_update_fn", "load_items", "pooled", "prompt_schedule", "ratios",
           "run_fixed_grpolab", "run_fixed_trl", "run_grpolab", "run_trl", "schedule_digest", "trl_args"]

#: a step is "quiet" when other processes kept fewer than this many cores busy on average during it
QUIET_CORES = 0.25
#: the verdict needs the two trainers' mean completion lengths within this relative difference
LENGTH_TOLERANCE = 0.10


# ------------------------------------------------------------------------------------------------
# the shared start: items, checkpoint, prompt schedule


def load_items(n: int):
    """The first ``n`` arith training items (``grpolab.tasks.get_task("arith")``)."""
    from grpolab.tasks import get_task

    return get_task("arith").items("train", n)


def build_checkpoint(path: Path, source: Path | None = None) -> dict:
    """Save the starting checkpoint both trainers load at ``path``: the model at ``source`` (e.g. a
    warm start from ``grpolab sft --out DIR``, so rewards are mixed) or grpolab's untrained tiny
    Llama (``TinyModelConfig`` defaults, build seed 0). Returns what the results record of it."""
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


def prompt_schedule(n_items: int, steps: int, per_step: int, seed: int) -> list[list[int]]:
    """Item indices per step, the same for both trainers: ``steps`` draws of ``per_step`` distinct items."""
    rng = random.Random(10_000 + seed)
    return [rng.sample(range(n_items), per_step) for _ in range(steps)]


def schedule_digest(schedule: list[list[int]]) -> str:
    """The first 16 hex digits of the schedule's SHA-256 (the results name each seed's schedule by it)."""
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
    """TRL's ``GRPOTrainer`` on ``schedule`` (item indices per step) from ``model_dir``, one
    generation batch per optimizer step; ``work`` holds its output folder. Per step: the step
    (callback ``on_step_begin`` -> ``on_step_end``), its rollout (``_generate_and_score_completions``)
    and update (the rest); raises when a generation batch did not hold the scheduled prompts."""
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
    from grpolab.rollout import Experience
    from grpolab.train import UpdateSpec, update

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
    """grpolab's step on ``schedule``: the trainer's collector (sample, decode, score) and the
    advantage estimator (the rollout), then :func:`grpolab.train.update` (the update). ``skip``:
    ``trainer.skip_zero_advantage`` on (rows with a zero advantage are not trained on)."""
    from grpolab import objectives as obj
    from grpolab.tasks import PromptFormat
    from grpolab.rollout.collector import collector_for

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
    from grpolab.rollout.collector import SingleTurnCollector

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


# ------------------------------------------------------------------------------------------------
# summaries


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
