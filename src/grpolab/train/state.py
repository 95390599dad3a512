"""Everything a checkpoint must hold, in one object: :class:`TrainState`.

Policy, optimizer, scheduler, every random stream (python, numpy, torch, the sampling
generator), the data order, the policy-lag snapshots, the KL reference, the credit teacher, the
evaluation history and the step. :meth:`TrainState.state_dict` and
:meth:`TrainState.load_state_dict` are the only code that lists them, so saving and resuming
cannot drift apart. The policy's weights are saved separately, in Hugging Face format (see
:mod:`grpolab.train.checkpoint`), so a checkpoint's model loads in transformers unchanged.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch

from grpolab.config import Config
from grpolab.train.checkpoint import rng_state, set_rng_state
from grpolab.train.credit import CreditStep
from grpolab.train.frozen import frozen_copy, reference_model
from grpolab.train.optim import build_optimizer, build_scheduler

__all__ = ["TrainState", "frozen_copy", "reference_model"]


def _cpu_state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


@dataclass
class TrainState:
    """The trainer's state between two steps.

    Attributes:
        policy, tokenizer: the model being trained.
        optimizer, scheduler: AdamW and its learning-rate schedule.
        generator: the sampling generator (``torch.Generator``); the global python, numpy and
            torch streams are saved with it.
        data_rng: draws each step's prompts.
        reference: frozen KL reference (``objective.kl_coef > 0``), else None.
        behaviour: the model rollouts are sampled from with ``trainer.policy_lag > 0``, else None.
        snapshots: the last ``policy_lag + 1`` policy weights (CPU), oldest first.
        credit: the credit step holding the teacher (:class:`grpolab.train.credit.CreditStep`), or None.
        history: ``{"eval": [{"step", "accuracy", "mean_reward"[, "families"]}, ...]}``.
        step: optimizer-step batches done so far (0 before the first).
        seconds: wall time the run's earlier processes spent, up to the checkpoint this one resumed
            from (0 for a fresh run); the summary's wall time adds this process's time to it.
        prompt_format, stop_ids: how prompts are encoded (the run's resolved
            :class:`grpolab.tasks.PromptFormat`) and the ids that end a response; derived from the
            config and the tokenizer, so not saved.
    """

    policy: Any
    tokenizer: Any
    optimizer: torch.optim.Optimizer
    scheduler: Any
    generator: torch.Generator
    data_rng: random.Random
    reference: Any = None
    behaviour: Any = None
    snapshots: deque = field(default_factory=deque)
    credit: Any = None
    history: dict[str, Any] = field(default_factory=lambda: {"eval": []})
    step: int = 0
    seconds: float = 0.0
    prompt_format: Any = None
    stop_ids: Any = None

    @classmethod
    def create(cls, cfg: Config, policy, tokenizer, generator: torch.Generator, prompt_format=None) -> "TrainState":
        """The state at step 0 for ``policy`` (already warm-started and on its device).

        ``prompt_format``: the run's resolved :class:`grpolab.tasks.PromptFormat` (the credit
        step builds the teacher's privileged prompts with it)."""
        from grpolab.models import stop_token_ids

        tr = cfg.trainer
        optimizer = build_optimizer(policy, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay,
                                    betas=(cfg.optim.beta1, cfg.optim.beta2))
        scheduler = build_scheduler(optimizer, warmup_steps=cfg.optim.warmup_steps,
                                    total_steps=tr.steps * tr.epochs * tr.mini_batches, schedule=cfg.optim.schedule)
        state = cls(
            policy=policy, tokenizer=tokenizer, optimizer=optimizer, scheduler=scheduler, generator=generator,
            data_rng=random.Random(tr.seed),
            reference=reference_model(policy) if cfg.objective.kl_coef > 0 else None,
            behaviour=frozen_copy(policy) if tr.policy_lag > 0 else None,
            snapshots=deque(maxlen=tr.policy_lag + 1),
            credit=CreditStep.from_config(cfg, policy, tokenizer, prompt_format) if cfg.credit.enabled else None,
            prompt_format=prompt_format, stop_ids=stop_token_ids(policy, tokenizer),
        )
        state.snapshots.append(_cpu_state(policy) if state.behaviour is not None else None)
        return state

    # ------------------------------------------------------------------ the loop's questions
    def next_prompts(self, train_items: list, n: int) -> list:
        """The next step's ``n`` prompts (items), drawn without replacement from ``train_items``."""
        return self.data_rng.sample(train_items, n)

    def sampler(self):
        """The model rollouts come from: the policy, or ``policy_lag`` updates ago."""
        if self.behaviour is None:
            return self.policy
        self.behaviour.load_state_dict(self.snapshots[0])
        return self.behaviour

    def finish_step(self) -> None:
        """Count the step; remember the new weights for the policy lag."""
        self.step += 1
        if self.behaviour is not None:
            self.snapshots.append(_cpu_state(self.policy))

    def record_eval(self, step: int, accuracy: float, mean_reward: float,
                    families: dict[str, dict[str, float]] | None = None) -> None:
        """One held-out evaluation; ``families``: per task family ``{"accuracy", "solved", "n"}``."""
        entry: dict[str, Any] = {"step": step, "accuracy": accuracy, "mean_reward": mean_reward}
        if families:
            entry["families"] = families
        self.history["eval"].append(entry)

    # ------------------------------------------------------------------ save / restore
    def sampling_marks(self) -> dict[str, Any]:
        """What sampling a step changes in the state (the random streams and the data order; the
        weights and the optimizer only change in the update). Taken before a step's sampling, it
        lets :meth:`state_dict` describe the last completed step when that sampling is abandoned."""
        return {"data_rng": self.data_rng.getstate(), "rng": rng_state(self.generator)}

    def state_dict(self, before_sampling: dict[str, Any] | None = None) -> dict[str, Any]:
        """Everything but the policy weights (saved in HF format next to it); with
        ``before_sampling`` (:meth:`sampling_marks`), as it was before the sampling that followed."""
        return {**self._state_dict(), **(before_sampling or {})}

    def _state_dict(self) -> dict[str, Any]:
        return {
            "step": self.step, "seconds": self.seconds, "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
            "snapshots": list(self.snapshots), "data_rng": self.data_rng.getstate(), "history": self.history,
            "rng": rng_state(self.generator),
            "reference": self.reference.state_dict() if self.reference is not None else None,
            "credit": self.credit.state_dict() if self.credit is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (the policy weights are loaded by the caller)."""
        if self.reference is not None and state.get("reference") is not None:
            self.reference.load_state_dict(state["reference"])
        if self.credit is not None:
            self.credit.load_state_dict(state.get("credit"))
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.snapshots.clear()
        self.snapshots.extend(state["snapshots"])
        self.data_rng.setstate(state["data_rng"])
        self.history = state["history"]
        set_rng_state(state["rng"], self.generator)
        self.step = int(state["step"])
        self.seconds = float(state.get("seconds", 0.0))  # absent in older checkpoints
