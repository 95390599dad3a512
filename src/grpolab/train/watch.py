"""Runs that cannot learn say so while they run, and memory is visible.

:class:`TrainingWatch` reads each step's metrics row and returns warning lines when

- ``log.warn_no_signal_steps`` consecutive steps had no prompt group with reward variance
  (``groups/with_signal == 0``: every advantage is 0, the update learns nothing; TRL's most
  reported silent failure);
- every verifier call of a step failed (``reward/errors == reward/scored``: a misspelled reward,
  an answer format the verifier cannot read);
- more than ``log.warn_truncated_frac`` of a step's responses hit the length cap
  (``length/truncated_frac``).

A warning of each kind repeats at most once every :data:`REPEAT_EVERY` steps while it lasts.
:func:`run_health` counts the same conditions over a whole ``metrics.jsonl`` for the report
(``summary.md`` headline, ``summary.json``), so a resumed run counts every step once.
:func:`memory_metrics` gives the process's peak resident memory (and the CUDA allocator's peak
where a GPU is in use) for every metrics row.
"""

from __future__ import annotations

import math
import resource
import sys
from dataclasses import dataclass, field
from typing import Any

__all__ = ["REPEAT_EVERY", "RunHealth", "TrainingWatch", "memory_metrics", "run_health"]

REPEAT_EVERY = 25  # steps between two warnings of the same kind while the condition lasts


def _num(row: dict[str, Any], key: str) -> float | None:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def no_signal(row: dict[str, Any]) -> bool:
    """The step had no prompt group with reward variance (nothing for the update to learn)."""
    return _num(row, "groups/with_signal") == 0


def all_errors(row: dict[str, Any]) -> bool:
    """Every verifier call of the step failed."""
    errors, scored = _num(row, "reward/errors"), _num(row, "reward/scored")
    return errors is not None and scored is not None and scored > 0 and errors >= scored


def truncated_over(row: dict[str, Any], frac: float) -> bool:
    """More than ``frac`` of the step's responses hit the length cap."""
    t = _num(row, "length/truncated_frac")
    return t is not None and t > frac


@dataclass
class TrainingWatch:
    """Warning lines for a run that cannot learn (see the module docstring).

    Args:
        no_signal_steps: consecutive steps without signal before warning (0 = never).
        truncated_frac: the truncation share above which a step warns (>= 1 = never).
        max_new_tokens: the length cap, named in the truncation warning.
    """

    no_signal_steps: int = 5
    truncated_frac: float = 0.5
    max_new_tokens: int | None = None
    streak: int = 0
    last_warned: dict[str, int] = field(default_factory=dict)

    def _due(self, kind: str, step: int) -> bool:
        last = self.last_warned.get(kind)
        if last is not None and step - last < REPEAT_EVERY:
            return False
        self.last_warned[kind] = step
        return True

    def observe(self, step: int, row: dict[str, Any]) -> list[str]:
        """The warning lines of step ``step`` (its metrics ``row``); usually none."""
        out = []
        self.streak = self.streak + 1 if no_signal(row) else 0
        if self.no_signal_steps and self.streak >= self.no_signal_steps and self._due("no_signal", step):
            out.append(
                f"warning: step {step}: no prompt group had reward variance in the last {self.streak} steps, so "
                "every advantage was 0 and the model learned nothing; the task is too hard (or too easy) for the "
                "model as sampled: check `grpolab headroom`, raise rollout.group_size or rollout.temperature, or "
                "set rollout.dynamic_sampling=true")
        if all_errors(row) and self._due("errors", step):
            out.append(
                f"warning: step {step}: every verifier call failed ({int(row['reward/errors'])} of "
                f"{int(row['reward/scored'])} errored, each scored 0); check task.options.reward and the answer "
                "format the model writes (RUN_DIR/completions.jsonl)")
        if self.truncated_frac < 1 and truncated_over(row, self.truncated_frac) and self._due("truncated", step):
            cap = f"rollout.max_new_tokens={self.max_new_tokens}" if self.max_new_tokens else "the length cap"
            out.append(
                f"warning: step {step}: {row['length/truncated_frac']:.0%} of responses hit {cap} (more than "
                f"log.warn_truncated_frac={self.truncated_frac}); a truncated answer rarely scores: raise the cap, "
                "ask for shorter answers, or set objective.mask_truncated / objective.overlong_buffer")
        return out


@dataclass
class RunHealth:
    """Counts over a run's step rows: steps that updated nothing and the other warning conditions."""

    steps: int
    no_signal_steps: int
    all_error_steps: int
    truncated_steps: int
    peak_rss_mb: float | None
    cuda_peak_mb: float | None

    def headline(self) -> str | None:
        """One line for the top of ``summary.md`` when something went wrong, else None."""
        parts = []
        if self.no_signal_steps:
            parts.append(f"{self.no_signal_steps} of {self.steps} steps updated nothing (no prompt group had "
                         "reward variance)")
        if self.all_error_steps:
            parts.append(f"{self.all_error_steps} steps had every verifier call fail")
        if self.truncated_steps:
            parts.append(f"{self.truncated_steps} steps had most responses truncated")
        return ("**Warning: " + "; ".join(parts) + ".**") if parts else None

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "steps_without_signal": self.no_signal_steps,
                "steps_all_verifier_errors": self.all_error_steps, "steps_truncated_over": self.truncated_steps,
                "peak_rss_mb": self.peak_rss_mb, "cuda_peak_mb": self.cuda_peak_mb}


def run_health(rows: list[dict[str, Any]], *, truncated_frac: float = 0.5) -> RunHealth:
    """:class:`RunHealth` of the step rows of ``metrics.jsonl``."""
    rss = [v for v in (_num(r, "memory/peak_rss_mb") for r in rows) if v is not None]
    cuda = [v for v in (_num(r, "memory/cuda_peak_mb") for r in rows) if v is not None]
    return RunHealth(steps=len(rows), no_signal_steps=sum(no_signal(r) for r in rows),
                     all_error_steps=sum(all_errors(r) for r in rows),
                     truncated_steps=sum(truncated_frac < 1 and truncated_over(r, truncated_frac) for r in rows),
                     peak_rss_mb=max(rss) if rss else None, cuda_peak_mb=max(cuda) if cuda else None)


def memory_metrics() -> dict[str, float]:
    """``memory/peak_rss_mb``: this process's peak resident set size so far (MiB); with a CUDA
    device in use, ``memory/cuda_peak_mb``: the peak memory the torch allocator held on it."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    mb = peak / 2**20 if sys.platform == "darwin" else peak / 1024
    # Linux: ru_maxrss also counts the image this process had before exec (for a child started by
    # a large Python process: the parent's RSS at fork time); VmHWM is this program's own peak
    try:
        with open("/proc/self/status") as f:
            mb = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    out = {"memory/peak_rss_mb": float(mb)}
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["memory/cuda_peak_mb"] = torch.cuda.max_memory_allocated() / 2**20
    return out
