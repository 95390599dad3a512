"""A grpolab training config run through TRL's ``GRPOTrainer``: the same model, task, prompts,
verifier and settings, so a run of ``grpolab train CONFIG`` and its TRL twin differ only in the
trainer (examples/trl_smollm2_sums.py, benchmarks/speed/real_model_vs_trl.py).

:func:`build_trl_trainer` reads a grpolab config (e.g. examples/smollm2_sums.yaml) and returns
:class:`grpolab.integrations.trl.trainer.GrpolabGRPOTrainer` (grpolab's objective inside TRL) or, with
``adapter=False``, TRL's own ``GRPOTrainer`` with the same reward. What maps to what
(:func:`trl_settings`):

==============================  ===============================================================
grpolab config                  TRL (``GRPOConfig`` / ``GrpolabGRPOConfig``)
==============================  ===============================================================
model.path, dtype, device       the model loaded by grpolab (:func:`grpolab.train.setup.build_policy`), ``use_cpu``
model.lora                      ``peft_config`` (:meth:`grpolab.models.lora.LoraSettings.to_peft`)
model.gradient_checkpointing    ``gradient_checkpointing`` (TRL's default is on; grpolab's off)
task (training split)           a dataset of the task's training items; the conversation grpolab
                                renders (:meth:`grpolab.tasks.PromptFormat.messages`), or its text
item's verifier                 a reward function scoring each completion with its item's reward
                                (:func:`task_reward`: ``final_line`` for the SmolLM2 example)
rollout.prompts_per_step x      ``per_device_train_batch_size`` (one generation batch = one
group_size                      optimizer step), ``num_generations``
rollout.max_new_tokens,         ``max_completion_length``, ``temperature``, ``top_p``, ``top_k``,
temperature, top_p, top_k,      ``min_p``, ``repetition_penalty``
min_p, repetition_penalty
optim.lr, beta1, beta2,         ``learning_rate``, ``adam_beta1/2``, ``weight_decay``,
weight_decay, grad_clip         ``max_grad_norm``
optim.warmup_steps, schedule    ``warmup_steps``, ``lr_scheduler_type`` (constant ->
                                ``constant_with_warmup``, linear, cosine)
objective.clip_low / clip_high  ``epsilon`` / ``epsilon_high``
objective.kl_coef               ``beta``
objective.advantage             ``scale_rewards``: ``grpo`` -> ``group``, ``drgrpo`` -> ``none``
objective.aggregation, ratio,   adapter: ``grpolab_aggregation``, ``grpolab_ratio``,
dual_clip, clip_power           ``grpolab_dual_clip``, ``grpolab_clip_power``; plain TRL: the
                                token-level ``dapo`` loss (``aggregation=token, ratio=token``
                                only; no dual clip)
trainer.steps, seed             ``max_steps``, ``seed``
==============================  ===============================================================

Settings with no TRL counterpart here (credit, dynamic sampling, a policy lag, several epochs or
mini-batches per batch, environments) are refused with the key to change, before the model loads.
Not carried over: ``rollout.max_prompt_tokens`` (TRL 1.16 has no prompt-length limit; the recipe's
prompts are checked against it by grpolab's setup all the same).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

import grpolab.utils.offline  # noqa: F401  (before transformers/trl: no Hub lookups or telemetry)
from grpolab import step_row as K
from grpolab.config import Config, ConfigError

__all__ = ["StepClock", "build_trl_trainer", "heldout_accuracy", "save_trl_policy", "task_dataset", "task_reward",
           "trl_policy", "trl_settings", "trl_peft_config"]

_SCHEDULES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}
_SCALE_REWARDS = {"grpo": "group", "drgrpo": "none"}


def _unsupported(cfg: Config) -> list[str]:
    """The config's settings this recipe cannot carry into TRL (``key=value`` strings)."""
    bad = []
    if cfg.env.name:
        bad.append(f"env.name={cfg.env.name!r}")
    if cfg.credit.name not in ("grpo", "", None):
        bad.append(f"credit.name={cfg.credit.name!r}")
    if cfg.objective.advantage not in _SCALE_REWARDS:
        bad.append(f"objective.advantage={cfg.objective.advantage!r}")
    if cfg.optim.schedule not in _SCHEDULES:
        bad.append(f"optim.schedule={cfg.optim.schedule!r}")
    defaults = Config()
    for section, key in (("rollout", "dynamic_sampling"), ("trainer", "policy_lag"), ("trainer", "epochs"),
                         ("trainer", "mini_batches")):
        value = getattr(getattr(cfg, section), key)
        if value != getattr(getattr(defaults, section), key):
            bad.append(f"{section}.{key}={value!r}")
    return bad


def _checkpointing_key() -> str:
    """TRL's name for activation (gradient) checkpointing: transformers 5 renamed it."""
    from trl import GRPOConfig

    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def trl_settings(cfg: Config, *, adapter: bool = True) -> dict[str, Any]:
    """Keyword arguments of ``GrpolabGRPOConfig`` (``adapter=True``) or ``GRPOConfig`` for ``cfg``.

    Raises:
        ConfigError: a setting TRL cannot run the same way (named, with what to change).
    """
    bad = _unsupported(cfg)
    o = cfg.objective
    if not adapter and (o.aggregation != "token" or o.ratio != "token"):
        bad.append(f"objective.aggregation={o.aggregation!r} / ratio={o.ratio!r} (plain TRL runs the token-level "
                   "'dapo' loss; use the adapter)")
    if bad:
        raise ConfigError("the TRL recipe cannot run " + ", ".join(bad) + "; change them or use `grpolab train`")
    r, opt = cfg.rollout, cfg.optim
    out = dict(
        per_device_train_batch_size=r.prompts_per_step * r.group_size, gradient_accumulation_steps=1,
        num_generations=r.group_size, max_completion_length=r.max_new_tokens, temperature=r.temperature,
        top_p=r.top_p, top_k=r.top_k, min_p=r.min_p or None, repetition_penalty=r.repetition_penalty,
        learning_rate=opt.lr, adam_beta1=opt.beta1, adam_beta2=opt.beta2,
        weight_decay=opt.weight_decay, max_grad_norm=opt.grad_clip, warmup_steps=opt.warmup_steps,
        lr_scheduler_type=_SCHEDULES[opt.schedule], epsilon=o.clip_low, epsilon_high=o.clip_high, beta=o.kl_coef,
        scale_rewards=_SCALE_REWARDS[o.advantage], loss_type="dapo", mask_truncated_completions=o.mask_truncated,
        max_steps=cfg.trainer.steps, seed=cfg.trainer.seed, use_cpu=cfg.model.device == "cpu",
        bf16=cfg.model.dtype == "bfloat16", fp16=cfg.model.dtype == "float16",
    )
    out[_checkpointing_key()] = bool(cfg.model.gradient_checkpointing)
    if adapter:
        out.update(grpolab_aggregation=o.aggregation, grpolab_ratio=o.ratio, grpolab_dual_clip=o.dual_clip,
                   grpolab_clip_power=o.clip_power)
    return out


def trl_peft_config(cfg: Config):
    """``peft.LoraConfig`` of ``model.lora`` (None: full fine-tuning)."""
    if not cfg.model.lora:
        return None
    from grpolab.models.lora import LoraSettings

    return LoraSettings.from_dict(cfg.model.lora).to_peft()


def task_dataset(items: Sequence, prompt_format, tokenizer):
    """A ``datasets.Dataset`` of ``items`` in TRL's format: ``prompt`` (the conversation grpolab's
    ``prompt_format`` builds when it uses the chat template -- TRL renders it with the same
    tokenizer's template -- else the prompt text grpolab renders) and ``item`` (the index into
    ``items``, read by :func:`task_reward`)."""
    from datasets import Dataset

    if prompt_format.use_chat:
        prompts = [prompt_format.messages(it) for it in items]
    else:
        prompts = [prompt_format.render(it, tokenizer) for it in items]
    return Dataset.from_dict({"prompt": prompts, "item": list(range(len(items)))})


def task_reward(items: Sequence) -> Callable[..., list[float]]:
    """A TRL reward function: each completion scored by its item's own verifier
    (:meth:`grpolab.tasks.TaskItem.score`, the call grpolab's collector makes), its row found by
    the dataset column ``item``. Named after the items' reward (TRL logs ``rewards/<name>``)."""
    def reward(prompts, completions, item, **kwargs) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [float(items[i].score(t).score) for i, t in zip(item, texts)]

    names = sorted({it.reward for it in items})
    reward.__name__ = names[0] if len(names) == 1 else "task_reward"
    return reward


def build_trl_trainer(cfg: Config, *, output_dir: str, adapter: bool = True, callbacks: Sequence = (),
                      log: Callable[[str], None] = print, **overrides):
    """``(trainer, train_items, eval_items, prompt_format)`` for ``cfg`` through TRL.

    ``adapter``: :class:`~grpolab.integrations.trl.trainer.GrpolabGRPOTrainer` with grpolab's objective;
    False: TRL's ``GRPOTrainer`` (its ``dapo`` loss). ``overrides``: more ``GRPOConfig`` arguments
    (e.g. ``logging_steps``), applied last. The training and held-out items are grpolab's
    (:func:`grpolab.train.setup.build_task_splits` with the config's seed). Like ``grpolab train``,
    it bounds the process's C heap first (:func:`grpolab.utils.heap.bound_heap`: with one torch
    thread, freed tensor memory goes back to the system at once).
    """
    from grpolab.train.setup import build_policy, build_task_splits, resolve_device, resolve_prompt_format

    from grpolab.utils.heap import bound_heap

    settings = trl_settings(cfg, adapter=adapter)  # refuse before anything loads
    bound_heap()  # as `grpolab train` does: freed tensors leave the process (grpolab.utils.heap)
    train_items, eval_items = build_task_splits(cfg.task, seed=cfg.trainer.seed, log=log)
    model_cfg = dataclasses.replace(cfg.model, gradient_checkpointing=False)  # TRL turns it on or off itself
    model, tok, _ = build_policy(model_cfg, seed=cfg.trainer.seed, device=resolve_device(cfg.model.device))
    fmt = resolve_prompt_format(cfg, tok, list(train_items) + list(eval_items), log=log)
    base = dict(output_dir=output_dir, report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True,
                dataloader_num_workers=0)
    if adapter:
        from grpolab.integrations.trl.trainer import GrpolabGRPOConfig as Args, GrpolabGRPOTrainer as Trainer
    else:
        from trl import GRPOConfig as Args, GRPOTrainer as Trainer
    args = Args(**{**base, **settings, **overrides})
    trainer = Trainer(model=model, processing_class=tok, reward_funcs=task_reward(train_items), args=args,
                      train_dataset=task_dataset(train_items, fmt, tok), peft_config=trl_peft_config(cfg),
                      callbacks=list(callbacks))
    return trainer, train_items, eval_items, fmt


def trl_policy(trainer):
    """The trainer's policy as a plain HF model (a ``peft.PeftModel`` unwrapped to its model with
    the adapter layers injected): what grpolab's sampler and evaluator take."""
    policy = trainer.accelerator.unwrap_model(trainer.model)
    return policy.get_base_model() if hasattr(policy, "get_base_model") else policy


def save_trl_policy(trainer, path):
    """Write the trained policy to ``path`` as a plain HF model, LoRA adapters folded in
    (:func:`grpolab.models.lora.merged_copy`), with its tokenizer; atomically
    (:func:`grpolab.models.save_model`). ``grpolab eval PATH --config CONFIG`` reads it."""
    from grpolab.models import save_model
    from grpolab.models.lora import merged_copy

    return save_model(merged_copy(trl_policy(trainer)).eval(), trainer.processing_class, path)


def _step_clock_base():
    from transformers import TrainerCallback

    return TrainerCallback


class StepClock(_step_clock_base()):
    """A ``TrainerCallback`` that times each optimizer step (``on_step_begin`` -> ``on_step_end``:
    generation, reward, advantages, loss, backward, optimizer) and records the process's peak
    resident memory after it (:func:`grpolab.train.watch.memory_metrics`).

    Attributes:
        step_s: seconds of each step, in order.
        cpu_s: CPU seconds of this process (user + system, all threads) in each step: unlike the
            wall time, not inflated by other processes on a shared machine.
        peak_rss_mb: peak RSS (MiB) after each step.
        after_step: optional ``callable(step, trainer_state)`` run after the step's clock stops
            (e.g. a held-out evaluation that must not count as training time).
    """

    def __init__(self, after_step: Callable[[int, Any], None] | None = None):
        self.step_s: list[float] = []
        self.cpu_s: list[float] = []
        self.peak_rss_mb: list[float] = []
        self.after_step = after_step
        self._t0: float | None = None
        self._c0: float | None = None

    def on_step_begin(self, args, state, control, **kwargs):
        import os
        import time

        self._t0, self._c0 = time.perf_counter(), sum(os.times()[:2])

    def on_step_end(self, args, state, control, **kwargs):
        import os
        import time

        from grpolab.train.watch import memory_metrics

        self.step_s.append(time.perf_counter() - self._t0)
        self.cpu_s.append(sum(os.times()[:2]) - self._c0)
        self.peak_rss_mb.append(memory_metrics()[K.MEMORY_PEAK_RSS_MB])
        if self.after_step is not None:
            self.after_step(state.global_step, state)


def heldout_accuracy(model, tokenizer, items, cfg: Config, prompt_format):
    """Greedy held-out evaluation of ``model`` exactly as ``grpolab train`` evaluates its policy
    (:func:`grpolab.measure.evaluate.evaluate` through the run's collector: same prompts, stop ids,
    ``rollout.max_new_tokens`` and verifier); returns the :class:`~grpolab.measure.evaluate.EvalResult`.
    The model is put in eval mode for the call and back in training mode after if it was."""
    import torch

    from grpolab.models import stop_token_ids
    from grpolab.rollout.collector import collector_for
    from grpolab.measure.evaluate import evaluate

    was_training = model.training
    model.eval()
    try:
        stop_ids = stop_token_ids(model, tokenizer)
        collector = collector_for(cfg, tokenizer, prompt_format=prompt_format, stop_ids=stop_ids)
        with torch.no_grad():
            return evaluate(model, tokenizer, items, greedy=True, max_new_tokens=cfg.rollout.max_new_tokens,
                            env=cfg.env, collector=collector)
    finally:
        model.train(was_training)
