"""The training loop: sample -> reward -> advantages -> update -> evaluate -> log -> checkpoint.

One function, :func:`train`, reads top to bottom. Everything interchangeable (advantage estimator,
ratio level, aggregation, KL estimator, task, reward) comes from a registry chosen by the config.

Batch structure per step: ``rollout.prompts_per_step`` prompts x ``rollout.group_size`` samples.
Each step makes ``trainer.epochs x trainer.mini_batches`` optimizer steps over that batch;
mini-batches are split along prompt groups (balanced aggregation needs whole groups, CTPO whole
sequences), and the aggregation weights of each mini-batch are computed once over the whole
mini-batch and sliced per micro-batch, so gradient accumulation is exact.
"""

from __future__ import annotations

import copy
import random
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import yaml

from grpolab import objectives as obj
from grpolab.config import Config, config_from_dict
from grpolab.rewards import score_batch
from grpolab.rollout import Rollout, response_logprobs, sample
from grpolab.train.checkpoint import latest_checkpoint, rng_state, save_checkpoint, set_rng_state
from grpolab.train.credit import CreditStep
from grpolab.train.evaluate import SOLVED, evaluate, run_env_episodes
from grpolab.train.metrics_log import MetricsLog
from grpolab.train.optim import build_optimizer, build_scheduler
from grpolab.train.report import write_report
from grpolab.train.setup import build_policy, build_task_splits, resolve_device, warm_start
from grpolab.train.text import decode_responses, encode_prompts
from grpolab.utils.io import atomic_write_text


@dataclass
class TrainResult:
    run_dir: Path
    steps: int
    start_accuracy: float  # greedy held-out accuracy before RL (after any warm start)
    final_accuracy: float
    best_accuracy: float
    seconds: float


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def train(cfg: Config, *, resume: bool = False, log: Callable[[str], None] = print) -> TrainResult:
    """Run RL training as configured; with ``resume=True`` continue from the run's last checkpoint."""
    t_start = time.time()
    run_dir = Path(cfg.trainer.run_dir)
    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume and ckpt is None:
        log(f"no checkpoint in {run_dir}; starting from step 0")
    run_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run_dir / "config.yaml", yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    gen = seed_everything(cfg.trainer.seed)
    device = resolve_device(cfg.model.device)

    # ---- model, task, warm start ----------------------------------------------------------
    train_items, eval_items = build_task_splits(cfg.task, seed=cfg.trainer.seed)
    policy, tokenizer, from_scratch = build_policy(cfg.model, seed=cfg.trainer.seed, device=device)
    policy = warm_start(cfg, policy, tokenizer, from_scratch, train_items, eval_items, run_dir, log=log)
    if ckpt is not None:
        policy.load_state_dict(_load_weights(ckpt.model_dir, policy))
    policy.to(device)
    reference = _frozen_copy(policy) if cfg.objective.kl_coef > 0 else None
    behaviour = _frozen_copy(policy) if cfg.trainer.policy_lag > 0 else None
    credit = CreditStep(cfg, policy, tokenizer) if cfg.credit.name != "grpo" else None  # holds the teacher

    optimizer_steps = cfg.trainer.steps * cfg.trainer.epochs * cfg.trainer.mini_batches
    optimizer = build_optimizer(policy, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay,
                                betas=(cfg.optim.beta1, cfg.optim.beta2))
    scheduler = build_scheduler(optimizer, warmup_steps=cfg.optim.warmup_steps,
                                total_steps=optimizer_steps, schedule=cfg.optim.schedule)
    snapshots: deque = deque(maxlen=cfg.trainer.policy_lag + 1)
    data_rng = random.Random(cfg.trainer.seed)
    history: dict[str, Any] = {"eval": []}
    step = 0
    if ckpt is not None:
        state = ckpt.load_state()
        if state["reference"] is not None and reference is not None:
            reference.load_state_dict(state["reference"])
        if credit is not None:
            credit.load_state_dict(state.get("credit"))
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        snapshots.extend(state["snapshots"])
        data_rng.setstate(state["data_rng"])
        history = state["history"]
        set_rng_state(state["rng"], gen)
        step = ckpt.step
        log(f"resumed {run_dir} at step {step}")
    else:
        snapshots.append(_cpu_state(policy) if behaviour is not None else None)
        start = _evaluate(policy, tokenizer, eval_items, cfg)
        history["eval"].append({"step": 0, "accuracy": start.accuracy, "mean_reward": start.mean_reward})
        log(f"step 0  held-out greedy accuracy {start.accuracy:.3f}")
        if cfg.trainer.headroom:  # own generator: the training RNG streams are untouched
            from grpolab.train.headroom import run_headroom_check

            run_headroom_check(policy, tokenizer, eval_items, cfg, run_dir, log=log)
    metrics_log = MetricsLog(run_dir, tensorboard=cfg.log.tensorboard, wandb=cfg.log.wandb,
                             wandb_project=cfg.log.wandb_project, config=cfg.to_dict(),
                             resume_step=step if ckpt is not None else None)
    progress = _progress(cfg, initial=step)
    advantage_fn = obj.get_advantage_estimator(cfg.objective.advantage)

    while step < cfg.trainer.steps:
        t0 = time.time()
        # ---- 1. sample G responses per prompt from the behaviour policy ------------------
        items = data_rng.sample(train_items, cfg.rollout.prompts_per_step)
        sampler = policy
        if behaviour is not None:
            behaviour.load_state_dict(snapshots[0])
            sampler = behaviour
        episodes = None
        if cfg.env.name:  # multi-turn: episodes against the environment (observations mask 0)
            episodes = run_env_episodes(sampler, tokenizer, items, cfg.env, group_size=cfg.rollout.group_size,
                                        temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                                        generator=gen)
            rollout = episodes.rollout
        else:
            rollout = sample(
                sampler, encode_prompts(tokenizer, [it.prompt for it in items]),
                group_size=cfg.rollout.group_size, max_new_tokens=cfg.rollout.max_new_tokens,
                temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p,
                eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, generator=gen,
            )
        t_rollout = time.time() - t0

        # ---- 2. verify: rewards (a verifier that fails scores 0 and is counted) ----------
        t1 = time.time()
        G = cfg.rollout.group_size
        if episodes is not None:  # the environment already scored each episode
            completions = episodes.transcripts
            rewards, reward_errors = episodes.rewards, 0
        else:
            completions = decode_responses(tokenizer, rollout.response_ids, rollout.response_mask)
            results = score_batch([(items[i // G], c) for i, c in enumerate(completions)],
                                  workers=cfg.rollout.reward_workers)
            rewards = torch.tensor([r.score for r in results], dtype=torch.float32)
            reward_errors = sum("error" in r.info for r in results)
        t_reward = time.time() - t1

        # ---- 3. advantages; behaviour and reference log-probs ----------------------------
        t2 = time.time()
        advantages = advantage_fn(rewards, rollout.group_ids.cpu()).to(device)
        on_policy = behaviour is None and cfg.trainer.epochs * cfg.trainer.mini_batches == 1
        with torch.no_grad():
            # On-policy with one optimizer step, old = current logp detached: ratio exactly 1.
            old_logp = None if on_policy else _logprobs(sampler, rollout, cfg)
            ref_logp = _logprobs(reference, rollout, cfg) if reference is not None else None

        # ---- 3b. credit: a privileged self-teacher reweights each token (RLSD/GEAR/OPSD) ----
        credit_row: dict[str, float] = {}
        if credit is not None:
            # on-policy the sampling log-probs are the current policy's; with a lag, recompute
            student_logp = (old_logp if old_logp is not None else rollout.sample_logp) if behaviour is None else None
            out = credit(step, policy, items, rollout, advantages, completions, student_logp=student_logp)
            advantages, credit_row = out.advantages, out.metrics

        # ---- 4. update: epochs x mini-batches (whole groups), micro-batches accumulate ----
        update = _update(policy, optimizer, scheduler, rollout, advantages, old_logp, ref_logp, cfg)
        t_update = time.time() - t2
        step += 1
        if behaviour is not None:
            snapshots.append(_cpu_state(policy))

        # ---- 5. log ----------------------------------------------------------------------
        row = _step_metrics(rollout, rewards, update, reward_errors)
        row.update(credit_row)
        row.update(episodes.metrics() if episodes is not None else {})
        n_tokens = int(rollout.response_mask.sum()) + int(rollout.prompt_mask.sum())
        step_time = time.time() - t0
        row.update({
            "lr": scheduler.get_last_lr()[0], "time/step": step_time, "time/rollout": t_rollout,
            "time/reward": t_reward, "time/update": t_update,
            "tokens_per_s": n_tokens / max(step_time, 1e-9),
        })
        if step % cfg.trainer.eval_every == 0 or step == cfg.trainer.steps:
            ev = _evaluate(policy, tokenizer, eval_items, cfg)
            row.update({"eval/accuracy": ev.accuracy, "eval/mean_reward": ev.mean_reward,
                        "eval/mean_length": ev.mean_length})
            history["eval"].append({"step": step, "accuracy": ev.accuracy, "mean_reward": ev.mean_reward})
        metrics_log.log(step, row)
        progress.update(1)
        progress.set_postfix(reward=f"{row['reward/mean']:.2f}", acc=f"{row['accuracy']:.2f}",
                             eval=f"{history['eval'][-1]['accuracy']:.2f}", s=f"{step_time:.1f}")

        # ---- 6. checkpoint ----------------------------------------------------------------
        if step % cfg.trainer.save_every == 0 or step == cfg.trainer.steps:
            save_checkpoint(run_dir, step, policy, tokenizer, {
                "step": step, "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "snapshots": list(snapshots), "data_rng": data_rng.getstate(), "history": history,
                "rng": rng_state(gen), "reference": reference.state_dict() if reference is not None else None,
                "credit": credit.state_dict() if credit is not None else None,
            }, keep=cfg.trainer.keep_checkpoints)
    progress.close()
    metrics_log.close()

    from grpolab.models import save_model

    save_model(policy, tokenizer, run_dir / "final")
    evals = history["eval"]
    result = TrainResult(
        run_dir=run_dir, steps=step, start_accuracy=evals[0]["accuracy"],
        final_accuracy=evals[-1]["accuracy"], best_accuracy=max(e["accuracy"] for e in evals),
        seconds=time.time() - t_start,
    )
    write_report(run_dir, cfg, result, plots=cfg.log.plots)
    log(f"done: held-out greedy accuracy {result.start_accuracy:.3f} -> {result.final_accuracy:.3f} "
        f"(best {result.best_accuracy:.3f}) in {result.seconds:.0f}s; report: {run_dir / 'summary.md'}")
    return result


# ---------------------------------------------------------------------------------------------
# The pieces the loop calls.


SUMMED = ("loss", "pg_loss", "kl")  # per-mini-batch sums; everything else is a token mean


def _update(policy, optimizer, scheduler, rollout: Rollout, advantages, old_logp, ref_logp,
            cfg: Config) -> dict[str, float]:
    """All optimizer steps for one rollout batch; returns token-weighted mean metrics."""
    o, tr = cfg.objective, cfg.trainer
    policy.train()
    n_groups = cfg.rollout.prompts_per_step
    G = cfg.rollout.group_size
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    losses: dict[str, list[float]] = {}
    mb_losses: dict[str, float] = {}
    grad_norms = []
    skipped = total_rows = 0
    lengths = rollout.attention_mask.sum(-1).long().cpu()  # tokens each row's forward sees (observations too)
    for _ in range(tr.epochs):
        group_order = torch.randperm(n_groups).tolist()
        for mb_groups in np.array_split(group_order, tr.mini_batches):
            rows = torch.tensor([g * G + j for g in mb_groups for j in range(G)], dtype=torch.long)
            mask = rollout.response_mask[rows]
            adv = advantages[rows]
            gids = rollout.group_ids[rows]
            # normalisers over the whole mini-batch, sliced per micro-batch below
            W = obj.aggregation_weights(mask, o.aggregation, advantages=adv, group_ids=gids,
                                        max_len=_max_response_len(cfg))
            # Rows whose advantage is 0 on every token (groups with all-equal rewards) have a
            # per-token loss of exactly 0, so without a KL term they add nothing to the gradient:
            # skip their forward/backward. W still comes from the whole mini-batch, so the
            # gradient is unchanged; only the logged entropy/ratio statistics cover fewer rows.
            keep = torch.arange(len(rows))
            if o.kl_coef == 0 and tr.skip_zero_advantage:
                keep = _nonzero_rows(adv, mask)
            skipped += len(rows) - len(keep)
            total_rows += len(rows)
            optimizer.zero_grad(set_to_none=False)  # zeros, not None: AdamW steps every parameter
            for idx in _micro_batches(keep, lengths[rows], tr.micro_batch_size, tr.micro_batch_tokens):
                sub = rows[idx]
                part = rollout.select(sub)
                lp = response_logprobs(policy, part, temperature=cfg.rollout.temperature,
                                       return_entropy=True)
                loss, m = obj.policy_loss(
                    lp.logp, lp.logp.detach() if old_logp is None else old_logp[sub],
                    advantages[sub], part.response_mask, group_ids=part.group_ids, ratio=o.ratio,
                    clip_low=o.clip_low, clip_high=o.clip_high, dual_clip=o.dual_clip,
                    clip_power=o.clip_power, max_len=_max_response_len(cfg),
                    ref_logp=None if ref_logp is None else ref_logp[sub], kl_coef=o.kl_coef,
                    kl_estimator=o.kl_estimator, weights=W[idx],
                )
                loss.backward()
                n_tok = float(part.response_mask.sum())
                valid = part.response_mask.bool()
                m["entropy"] = lp.entropy.detach()[valid].sum() / max(n_tok, 1.0)
                for k, v in m.items():
                    if k in SUMMED:  # micro-batch parts of one mini-batch loss add up
                        mb_losses[k] = mb_losses.get(k, 0.0) + v.item()
                    elif v.dim() == 0:  # token means: weight by tokens
                        sums[k] = sums.get(k, 0.0) + v.item() * n_tok
                        counts[k] = counts.get(k, 0.0) + n_tok
                for b, (c, t) in enumerate(zip(m["clip_frac_by_pos"].tolist(), m["tokens_by_pos"].tolist())):
                    sums[f"clip_by_pos/{b}"] = sums.get(f"clip_by_pos/{b}", 0.0) + c * t
                    counts[f"clip_by_pos/{b}"] = counts.get(f"clip_by_pos/{b}", 0.0) + t
            for p in policy.parameters():  # a mini-batch with nothing to learn still steps AdamW
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
            gn = torch.nn.utils.clip_grad_norm_(
                policy.parameters(), cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
            )
            grad_norms.append(float(gn))
            optimizer.step()
            scheduler.step()
            for k in SUMMED:
                losses.setdefault(k, []).append(mb_losses.pop(k, 0.0))
    policy.eval()
    out = {k: sums[k] / max(counts[k], 1e-9) for k in sums if not k.startswith("clip_by_pos/")}
    out.update({k: float(np.mean(v)) for k, v in losses.items()})  # mean over optimizer steps
    labels = obj.position_bucket_labels()
    for k in sums:
        if k.startswith("clip_by_pos/") and counts[k] > 0:
            out[f"clip_frac_by_pos/{labels[int(k.split('/')[1])]}"] = sums[k] / counts[k]
    out["skipped_rows_frac"] = skipped / max(total_rows, 1)
    out["grad_norm"] = float(np.mean(grad_norms))
    return out


def _micro_batches(keep: torch.Tensor, lengths: torch.Tensor, rows_per_micro: int,
                   token_budget: int) -> list[torch.Tensor]:
    """Split the row indices ``keep`` into micro-batches for gradient accumulation.

    Rows are sorted by length, so each micro-batch is padded only to its own longest row (the
    forward trims all-padding columns); that removes most padding FLOPs when lengths vary. With
    ``rows_per_micro > 0`` micro-batches have that many rows; otherwise they are filled greedily
    up to ``token_budget`` padded tokens (at least one row each). The aggregation weights are
    computed once per mini-batch, so the partition changes neither the loss nor the gradient.
    """
    if len(keep) == 0:
        return []
    order = keep[torch.argsort(lengths[keep], descending=True, stable=True)]
    if rows_per_micro > 0:
        return [order[i : i + rows_per_micro] for i in range(0, len(order), rows_per_micro)]
    out, start = [], 0
    for i in range(1, len(order) + 1):
        longest = int(lengths[order[start]])  # sorted descending: the first row is the longest
        if i == len(order) or (i + 1 - start) * longest > token_budget:
            out.append(order[start:i])
            start = i
    return out


def _nonzero_rows(adv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Indices of rows with a non-zero advantage on some valid token: ``[B] or [B,T] -> [K]``."""
    adv_BT = adv.unsqueeze(-1).expand_as(mask) if adv.dim() == 1 else adv
    return ((adv_BT != 0) & mask.bool()).any(-1).nonzero().squeeze(-1).cpu()


def _step_metrics(rollout: Rollout, rewards: torch.Tensor, update: dict[str, float],
                  reward_errors: int) -> dict[str, float]:
    lengths = rollout.response_mask.sum(-1).float().cpu()
    solved = rewards >= SOLVED
    row: dict[str, float] = {
        "reward/mean": float(rewards.mean()),
        "reward/std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "accuracy": float(solved.float().mean()),
        "length/mean": float(lengths.mean()),
        "length/std": float(lengths.std()) if len(lengths) > 1 else 0.0,
        "length/truncated_frac": float((~rollout.finished.cpu()).float().mean()),
        "reward/errors": float(reward_errors),
    }
    # aggregation diagnostics: length of right vs wrong answers, and the sign-length gap
    if solved.any():
        row["length/correct"] = float(lengths[solved].mean())
    if (~solved).any():
        row["length/incorrect"] = float(lengths[~solved].mean())
    if solved.any() and (~solved).any():
        row["length/gap_incorrect_minus_correct"] = row["length/incorrect"] - row["length/correct"]
    # fraction of groups whose rewards are all equal (they carry no GRPO signal)
    _, idx = torch.unique(rollout.group_ids.cpu(), return_inverse=True)
    n = int(idx.max()) + 1
    hi = torch.full((n,), -float("inf")).scatter_reduce(0, idx, rewards, "amax")
    lo = torch.full((n,), float("inf")).scatter_reduce(0, idx, rewards, "amin")
    row["groups/all_equal_frac"] = float((hi - lo <= 1e-12).float().mean())
    row.update({f"update/{k}": v for k, v in update.items()})
    return row


def _max_response_len(cfg: Config) -> int:
    """The longest possible response: the constant aggregation's normaliser (``max_len``).

    Multi-turn episodes hold model and observation tokens in the response, up to
    ``env.max_total_tokens``; single-turn responses are at most ``rollout.max_new_tokens``.
    """
    return cfg.env.max_total_tokens if cfg.env.name else cfg.rollout.max_new_tokens


def _logprobs(model, rollout: Rollout, cfg: Config) -> torch.Tensor:
    micro = cfg.trainer.micro_batch_size or None
    return response_logprobs(model, rollout, temperature=cfg.rollout.temperature,
                             micro_batch_size=micro).logp


def _evaluate(model, tokenizer, items, cfg: Config):
    return evaluate(model, tokenizer, items, greedy=True, max_new_tokens=cfg.rollout.max_new_tokens, env=cfg.env)


def _frozen_copy(model):
    m = copy.deepcopy(model)
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    return m


def _cpu_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def _load_weights(model_dir: Path, like) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted(Path(model_dir).glob("*.safetensors"))
    state: dict[str, torch.Tensor] = {}
    for f in files:
        state.update(load_file(str(f)))
    missing = set(like.state_dict()) - set(state)
    if missing and not all("lm_head" in k for k in missing):
        raise RuntimeError(f"checkpoint {model_dir} lacks parameters: {sorted(missing)[:5]} ...")
    for k in missing:  # tied head: saved once as the embedding
        state[k] = like.state_dict()[k]
    return state


def _progress(cfg: Config, initial: int):
    if cfg.log.progress:
        from tqdm.auto import tqdm

        return tqdm(total=cfg.trainer.steps, initial=initial, desc="grpo", dynamic_ncols=True)

    class _Null:
        def update(self, *_):
            pass

        def set_postfix(self, **_):
            pass

        def close(self):
            pass

    return _Null()


def load_run_config(run_dir: str | Path) -> Config:
    """The config a run was started with (``RUN_DIR/config.yaml``)."""
    data = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    return config_from_dict(data)


__all__ = ["TrainResult", "train", "load_run_config", "seed_everything"]
