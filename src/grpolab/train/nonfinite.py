"""The non-finite guard: a NaN or infinity in the loss, the gradient or the weights stops training.

A diverged run must not go on "training" a model of NaNs, blame the reward for "no variance" and
save the NaNs to ``final/`` with exit code 0 (what a float16 run did). :func:`update
<grpolab.train.policy_update.update>` checks each micro-batch's loss before its backward, the
gradient norm before the optimizer step (so the weights never take a non-finite step) and the
trainable weights after it; :func:`require_finite_model` is the last check before a model is
written (checkpoints, ``final/``). Each raises :class:`NonFiniteError`, which the loop re-raises
with the step (:func:`at_step`) and the CLI prints as one ``error:`` line. The checkpoints already
written stay as they were: every one of them holds finite weights.
"""

from __future__ import annotations

import math

import torch

from grpolab.errors import ConfigError

__all__ = ["FIX", "NonFiniteError", "at_step", "check_finite_loss", "check_finite_norm", "require_finite_model"]

#: what to try when a run diverges (in every message)
FIX = ("lower optim.lr (or raise optim.warmup_steps), keep optim.grad_clip > 0, and train in float32 or "
       "bfloat16 (model.dtype)")


class NonFiniteError(ConfigError):
    """Training produced a NaN or infinity; the message names which quantity and the fix."""


def _kind(value: float) -> str:
    return "NaN" if value != value else ("+inf" if value > 0 else "-inf")


def check_finite_loss(loss: torch.Tensor) -> None:
    """Raise before the backward when a micro-batch's loss (a scalar) is NaN or infinite."""
    v = float(loss.detach())
    if not math.isfinite(v):
        raise NonFiniteError(f"the loss is {_kind(v)} (before its backward; the weights are untouched)")


def check_finite_norm(norm: float) -> None:
    """Raise before the optimizer step when the gradient norm is NaN or infinite."""
    if not math.isfinite(norm):
        raise NonFiniteError(f"the gradient norm is {_kind(norm)} (before the optimizer step; the weights are "
                             "untouched)")


def first_nonfinite(model: torch.nn.Module, *, trainable_only: bool = False) -> str | None:
    """The name of the first parameter holding a NaN or infinity (None: all finite)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if (p.requires_grad or not trainable_only) and p.is_floating_point() and not torch.isfinite(p).all():
                return name
    return None


def require_finite_model(model: torch.nn.Module, what: str = "weights", *, trainable_only: bool = False) -> None:
    """Raise :class:`NonFiniteError` when any (trainable) weight is NaN or infinite."""
    bad = first_nonfinite(model, trainable_only=trainable_only)
    if bad is not None:
        raise NonFiniteError(f"the {what} hold NaN or infinity (first: {bad})")


def at_step(err: NonFiniteError, step: int, last_checkpoint: str | None) -> NonFiniteError:
    """``err`` as the one line the user reads: which step, what, nothing saved, where to resume, the fix."""
    kept = (f"the last checkpoint ({last_checkpoint}) holds finite weights" if last_checkpoint
            else "no checkpoint was written")
    return NonFiniteError(f"training stopped at step {step}: {err}. Nothing of this step was saved; {kept}. "
                          f"To fix: {FIX}")
