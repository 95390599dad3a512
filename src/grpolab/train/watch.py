"""Runs that cannot learn say so while they run, and memory is visible.

:class:`TrainingWatch` reads each step's metrics row and returns warning lines when

- ``log.warn_no_signal_steps`` consecutive steps had no prompt group with reward variance
  (``groups/with_signal == 0``: every advantage is 0, the update learns nothing; TRL's most
  reported silent failure);
- the reward failed on some responses of a step (``reward/errors > 0``: a user reward that raises,
  returns NaN, a string or None, or an answer format the verifier cannot read): the first such
  step warns with the exception text and one failing completion;
- more than ``log.warn_truncated_frac`` of a step's responses hit the length cap
  (``length/truncated_frac``).

A warning of each kind repeats at most once every :data:`REPEAT_EVERY` steps while it lasts.
:func:`run_health` counts the same conditions over a whole ``metrics.jsonl`` for the report
(``summary.md`` headline, ``summary.json``), so a resumed run counts every step once. Steps without
signal are normal at the start of a run that learns (every sample of a hard task fails until the
first successes): the report warns only when they persist after the first
``log.warn_no_signal_steps`` steps (that many in a row later on) or are most of the run, and
otherwise notes them as early steps.
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
    run_dir: str | None = None
    streak: int = 0
    last_warned: dict[str, int] = field(default_factory=dict)

    def _due(self, kind: str, step: int) -> bool:
        last = self.last_warned.get(kind)
        if last is not None and step - last < REPEAT_EVERY:
            return False
        self.last_warned[kind] = step
        return True

    def observe(self, step: int, row: dict[str, Any], reward_error: dict[str, Any] | None = None) -> list[str]:
        """The warning lines of step ``step`` (its metrics ``row``); usually none. ``reward_error``:
        the step's first failing row (:attr:`grpolab.train.experience.Experience.reward_error_example`),
        whose exception text and completion the reward warning shows. The warning names
        ``run_dir/completions.jsonl``: the trainer writes the step's completions there when it warns
        (:meth:`warned`)."""
        out = []
        self.streak = self.streak + 1 if no_signal(row) else 0
        if self.no_signal_steps and self.streak >= self.no_signal_steps and self._due("no_signal", step):
            out.append(
                f"warning: step {step}: no prompt group had reward variance in the last {self.streak} steps, so "
                "every advantage was 0 and the model learned nothing; the task is too hard (or too easy) for the "
                "model as sampled: check `grpolab headroom`, raise rollout.group_size or rollout.temperature, or "
                "set rollout.dynamic_sampling=true")
        if (_num(row, "reward/errors") or 0) > 0 and self._due("errors", step):
            out.append(self._reward_warning(step, row, reward_error))
        if self.truncated_frac < 1 and truncated_over(row, self.truncated_frac) and self._due("truncated", step):
            cap = f"rollout.max_new_tokens={self.max_new_tokens}" if self.max_new_tokens else "the length cap"
            out.append(
                f"warning: step {step}: {row['length/truncated_frac']:.0%} of responses hit {cap} (more than "
                f"log.warn_truncated_frac={self.truncated_frac}); a truncated answer rarely scores: raise the cap, "
                "ask for shorter answers, or set objective.mask_truncated / objective.overlong_buffer")
        return out


    def warned(self, kind: str, step: int) -> bool:
        """Whether warning ``kind`` (``errors``, ``no_signal``, ``truncated``) was given at ``step``."""
        return self.last_warned.get(kind) == step

    def _reward_warning(self, step: int, row: dict[str, Any], ex: dict[str, Any] | None) -> str:
        errors, scored = int(row["reward/errors"]), int(row.get("reward/scored") or 0)
        if scored and errors >= scored:
            what = f"every response ({errors})"
        elif scored:
            what = f"{errors} of {scored} responses"
        else:
            what = f"{errors} response{'s' if errors != 1 else ''}"
        line = f"warning: step {step}: the reward failed on {what}, each scored 0"
        if ex:
            name = f" (reward {ex['reward']!r})" if ex.get("reward") else ""
            line += (f": {_short(ex.get('error'), 300)}{name}; e.g. completion {_short(ex.get('completion'), 80)!r}"
                     f" with reference {_short(ex.get('reference'), 40)!r}")
        where = f"{self.run_dir}/completions.jsonl" if self.run_dir else "completions.jsonl in the run directory"
        return (line + f". Fix the reward (task.options.reward) or the answer format it reads; this step's "
                f"completions with their rewards are in {where}")


def _short(v: Any, n: int) -> str:
    s = " ".join(str(v).split())
    return s if len(s) <= n else s[: n - 3] + "..."


def _steps(n: int) -> str:
    return f"{n} step{'' if n == 1 else 's'}"


@dataclass
class RunHealth:
    """Counts over a run's step rows: steps that updated nothing and the other warning conditions.

    ``early_steps``: the first steps, in which steps without signal are normal (every sample of a
    hard prompt fails until the first successes); ``late_no_signal_streak``: the longest run of
    consecutive steps without signal after them. Steps without signal are a warning
    (:attr:`not_learning`) when that streak reaches ``early_steps`` or they are most of the run;
    otherwise :meth:`note` mentions them."""

    steps: int
    no_signal_steps: int
    all_error_steps: int
    truncated_steps: int
    peak_rss_mb: float | None
    cuda_peak_mb: float | None
    early_steps: int = 5
    late_no_signal_streak: int = 0

    @property
    def not_learning(self) -> bool:
        """Steps without signal persisted after the first ``early_steps`` or are most of the run."""
        return bool(self.no_signal_steps) and (self.late_no_signal_streak >= max(1, self.early_steps)
                                               or 2 * self.no_signal_steps > self.steps)

    def headline(self) -> str | None:
        """One bold line for ``summary.md`` when something went wrong, else None."""
        parts = []
        if self.not_learning:
            why = ("most of the run" if 2 * self.no_signal_steps > self.steps else
                   f"{self.late_no_signal_streak} in a row after the first {_steps(self.early_steps)}")
            parts.append(f"{self.no_signal_steps} of {self.steps} steps updated nothing ({why}: no prompt group had "
                         "reward variance, so this run is not learning)")
        if self.all_error_steps:
            parts.append(f"{_steps(self.all_error_steps)} had every verifier call fail")
        if self.truncated_steps:
            parts.append(f"{_steps(self.truncated_steps)} had most responses truncated")
        return ("**Warning: " + "; ".join(parts) + ".**") if parts else None

    def note(self) -> str | None:
        """A plain line for steps without signal that are no warning (early in a run that learns)."""
        if not self.no_signal_steps or self.not_learning:
            return None
        where = (f"all within the first {_steps(self.early_steps)}" if self.late_no_signal_streak == 0 else
                 f"at most {self.late_no_signal_streak} in a row after the first {_steps(self.early_steps)}")
        return (f"Note: {self.no_signal_steps} of {self.steps} steps updated nothing ({where}; no prompt group had "
                "reward variance). That is normal while a run starts; it is a warning when such steps persist "
                f"({self.early_steps} in a row after the first {self.early_steps}) or are most of the run.")

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "steps_without_signal": self.no_signal_steps,
                "late_no_signal_streak": self.late_no_signal_streak, "not_learning": self.not_learning,
                "steps_all_verifier_errors": self.all_error_steps, "steps_truncated_over": self.truncated_steps,
                "peak_rss_mb": self.peak_rss_mb, "cuda_peak_mb": self.cuda_peak_mb}


def run_health(rows: list[dict[str, Any]], *, truncated_frac: float = 0.5, early_steps: int = 5) -> RunHealth:
    """:class:`RunHealth` of the step rows of ``metrics.jsonl`` (``early_steps``: see there;
    ``log.warn_no_signal_steps``, 5 when that is 0)."""
    rss = [v for v in (_num(r, "memory/peak_rss_mb") for r in rows) if v is not None]
    cuda = [v for v in (_num(r, "memory/cuda_peak_mb") for r in rows) if v is not None]
    early = early_steps if early_steps > 0 else 5
    streak = longest = 0
    for i, r in enumerate(rows):
        step = int(r.get("step", i + 1))
        streak = streak + 1 if step > early and no_signal(r) else 0
        longest = max(longest, streak)
    return RunHealth(steps=len(rows), no_signal_steps=sum(no_signal(r) for r in rows),
                     all_error_steps=sum(all_errors(r) for r in rows),
                     truncated_steps=sum(truncated_frac < 1 and truncated_over(r, truncated_frac) for r in rows),
                     peak_rss_mb=max(rss) if rss else None, cuda_peak_mb=max(cuda) if cuda else None,
                     early_steps=early, late_no_signal_streak=longest)


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
