"""Runs that cannot learn say so while they run, and memory is visible.

:class:`TrainingWatch` reads each step's metrics row and returns warning lines when

- ``log.warn_no_signal_steps`` consecutive steps had no prompt group with reward variance
  (``groups/with_signal == 0``: every advantage is 0, the update learns nothing; TRL's most
  reported silent failure);
- the reward failed on some responses of a step (``reward/errors > 0``: a user reward that raises,
  returns NaN, a string or None, or an answer format the verifier cannot read): the first such
  step warns with the exception text and one failing completion;
- more than ``log.warn_truncated_frac`` of a step's responses hit the length cap
  (``length/truncated_frac``) after the first steps. Early truncation is normal: a model that runs
  past the cap learns to stop within a few steps (SmolLM2 on sums: 60-97% of responses cut in steps
  1-5, under 10% by step 10, +25 to +70 points; docs/results/preflight_calibration.md), so in the first
  ``log.warn_no_signal_steps`` steps (5 when that is 0) a truncated step gives one ``note:`` line, and
  the warning comes only when truncation persists after them.

A warning of each kind repeats at most once every :data:`REPEAT_EVERY` steps while it lasts.
:func:`run_health` counts the same conditions over a whole ``metrics.jsonl`` for the report
(``summary.md`` headline, ``summary.json``), so a resumed run counts every step once. Steps without
signal are normal at the start of a run that learns (every sample of a hard task fails until the
first successes): the report warns only when they persist after the first
``log.warn_no_signal_steps`` steps (that many in a row later on) or are most of the run, and
otherwise notes them as early steps. Truncated steps follow the same early-vs-persistent rule: a
warning when that many in a row come after the first steps or the run's last step is still
truncated, otherwise a note ("most of the run" is no warning here: runs that learned to stop were
truncated on half their steps).
:func:`memory_metrics` gives the process's peak resident memory (and the CUDA allocator's peak
where a GPU is in use) for every metrics row.
"""

from __future__ import annotations

import math
import resource
import sys
from dataclasses import dataclass, field
from typing import Any

from grpolab import step_row as K

__all__ = ["REPEAT_EVERY", "RunHealth", "TrainingWatch", "memory_metrics", "run_health"]

REPEAT_EVERY = 25  # steps between two warnings of the same kind while the condition lasts


def _num(row: dict[str, Any], key: str) -> float | None:
    v = row.get(key)
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return float(v)


def no_signal(row: dict[str, Any]) -> bool:
    """The step had no prompt group with reward variance (nothing for the update to learn)."""
    return _num(row, K.GROUPS_WITH_SIGNAL) == 0


def all_errors(row: dict[str, Any]) -> bool:
    """Every verifier call of the step failed."""
    errors, scored = _num(row, K.REWARD_ERRORS), _num(row, K.REWARD_SCORED)
    return errors is not None and scored is not None and scored > 0 and errors >= scored


#: what to do about persistent truncation; the preflight's overlong row gives the same advice
#: (grpolab.diagnostics.preflight: not truncation masking, which hides these failures from the loss)
TRUNCATION_ADVICE = ("raise rollout.max_new_tokens if the responses are still working toward an answer, or ask for "
                     "shorter answers / shape the overlong ones (objective.overlong_buffer); objective.mask_truncated "
                     "hides these failures from the loss, and they are what a model that must learn to stop learns "
                     "from (docs/when-grpo-helps.md)")


def _early(no_signal_steps: int) -> int:
    """The first steps in which steps without signal or truncated steps are normal."""
    return no_signal_steps if no_signal_steps > 0 else 5


def truncated_over(row: dict[str, Any], frac: float) -> bool:
    """More than ``frac`` of the step's responses hit the length cap."""
    t = _num(row, K.LENGTH_TRUNCATED_FRAC)
    return t is not None and t > frac


@dataclass
class TrainingWatch:
    """Warning lines for a run that cannot learn (see the module docstring).

    Args:
        no_signal_steps: consecutive steps without signal before warning (0 = never).
        truncated_frac: the truncation share above which a step is truncated (>= 1 = never): a note
            in the first ``no_signal_steps`` steps (5 when that is 0), a warning after them.
        max_new_tokens: the length cap, named in the truncation lines.
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
        the step's first failing row (:attr:`grpolab.rollout.experience.Experience.reward_error_example`),
        whose exception text and completion the reward warning shows. The warning names
        ``run_dir/completions.jsonl``: the trainer writes the step's completions there when it warns
        (:meth:`warned`)."""
        out = []
        self.streak = self.streak + 1 if no_signal(row) else 0
        if self.no_signal_steps and self.streak >= self.no_signal_steps and self._due("no_signal", step):
            out.append(
                f"warning: step {step}: no prompt group had reward variance in the last {self.streak} steps, so "
                "every advantage was 0 and the model learned nothing; the task is too hard (or too easy) for the "
                "model as sampled: check `grpolab preflight`, raise rollout.group_size or rollout.temperature, or "
                "set rollout.dynamic_sampling=true")
        if (_num(row, K.REWARD_ERRORS) or 0) > 0 and self._due("errors", step):
            out.append(self._reward_warning(step, row, reward_error))
        if self.truncated_frac < 1 and truncated_over(row, self.truncated_frac):
            out += self._truncation_lines(step, row)
        return out

    def _truncation_lines(self, step: int, row: dict[str, Any]) -> list[str]:
        cap = f"rollout.max_new_tokens={self.max_new_tokens}" if self.max_new_tokens else "the length cap"
        early = _early(self.no_signal_steps)
        share = f"{row[K.LENGTH_TRUNCATED_FRAC]:.0%} of responses hit {cap}"
        if step <= early:  # normal while the model learns to stop: said once
            if "truncated_early" in self.last_warned:
                return []
            self.last_warned["truncated_early"] = step
            return [f"note: step {step}: {share} (more than log.warn_truncated_frac={self.truncated_frac}); normal in "
                    f"the first {_steps(early)} while the model learns to stop, a warning if it persists after them"]
        if not self._due("truncated", step):
            return []
        return [f"warning: step {step}: {share} (more than log.warn_truncated_frac={self.truncated_frac}) after the "
                f"first {_steps(early)}, so the model is not learning to stop and a truncated answer rarely scores: "
                + TRUNCATION_ADVICE]

    def warned(self, kind: str, step: int) -> bool:
        """Whether warning ``kind`` (``errors``, ``no_signal``, ``truncated``) was given at ``step``."""
        return self.last_warned.get(kind) == step

    def _reward_warning(self, step: int, row: dict[str, Any], ex: dict[str, Any] | None) -> str:
        errors, scored = int(row[K.REWARD_ERRORS]), int(row.get(K.REWARD_SCORED) or 0)
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
    otherwise :meth:`note` mentions them. Truncated steps likewise (:attr:`truncation_persists`):
    a warning when ``late_truncated_streak`` reaches ``early_steps`` or the last step (after the
    first ones) is still truncated, otherwise a note (early truncation: the model learns to stop)."""

    steps: int
    no_signal_steps: int
    all_error_steps: int
    truncated_steps: int
    peak_rss_mb: float | None
    cuda_peak_mb: float | None
    early_steps: int = 5
    late_no_signal_streak: int = 0
    late_truncated_streak: int = 0
    last_step_truncated: bool = False

    @property
    def not_learning(self) -> bool:
        """Steps without signal persisted after the first ``early_steps`` or are most of the run."""
        return bool(self.no_signal_steps) and (self.late_no_signal_streak >= max(1, self.early_steps)
                                               or 2 * self.no_signal_steps > self.steps)

    @property
    def truncation_persists(self) -> bool:
        """Truncated steps persisted after the first ``early_steps``: that many in a row later on, or
        the run still truncated at its last step (after the first ones)."""
        return bool(self.truncated_steps) and (self.late_truncated_streak >= max(1, self.early_steps)
                                               or self.last_step_truncated)

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
        if self.truncation_persists:
            parts.append(f"{_steps(self.truncated_steps)} had most responses truncated ("
                         + (f"{self.late_truncated_streak} in a row after the first {_steps(self.early_steps)}"
                            if self.late_truncated_streak >= max(1, self.early_steps) else "still at the last step")
                         + "): " + TRUNCATION_ADVICE)
        return ("**Warning: " + "; ".join(parts) + ".**") if parts else None

    def note(self) -> str | None:
        """Plain lines for steps without signal and truncated steps that are no warning (early in a run
        that learns), one paragraph each; None when there are none."""
        notes = [x for x in (self._no_signal_note(), self._truncation_note()) if x]
        return "\n\n".join(notes) if notes else None

    def _where(self, late_streak: int) -> str:
        """Where a note's steps fell: all early, or at most ``late_streak`` in a row after."""
        if late_streak == 0:
            return f"all within the first {_steps(self.early_steps)}"
        return f"at most {late_streak} in a row after the first {_steps(self.early_steps)}"

    def _truncation_note(self) -> str | None:
        if not self.truncated_steps or self.truncation_persists:
            return None
        where = self._where(self.late_truncated_streak)
        # a run no longer than the first steps ends inside them: its last step may be truncated, and that is no warning
        end = ("the run ended within them" if self.steps <= self.early_steps and not self.late_truncated_streak
               else "not at the last step")
        return (f"Note: {self.truncated_steps} of {self.steps} steps had most responses truncated ({where}; {end}). "
                "That is normal while a model learns to stop; it is a warning when it persists "
                f"({self.early_steps} in a row after the first {self.early_steps}, or at a last step after them).")

    def _no_signal_note(self) -> str | None:
        if not self.no_signal_steps or self.not_learning:
            return None
        where = self._where(self.late_no_signal_streak)
        return (f"Note: {self.no_signal_steps} of {self.steps} steps updated nothing ({where}; no prompt group had "
                "reward variance). That is normal while a run starts; it is a warning when such steps persist "
                f"({self.early_steps} in a row after the first {self.early_steps}) or are most of the run.")

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "steps_without_signal": self.no_signal_steps,
                "late_no_signal_streak": self.late_no_signal_streak, "not_learning": self.not_learning,
                "steps_all_verifier_errors": self.all_error_steps, "steps_truncated_over": self.truncated_steps,
                "late_truncated_streak": self.late_truncated_streak, "truncation_persists": self.truncation_persists,
                "peak_rss_mb": self.peak_rss_mb, "cuda_peak_mb": self.cuda_peak_mb}


def run_health(rows: list[dict[str, Any]], *, truncated_frac: float = 0.5, early_steps: int = 5) -> RunHealth:
    """:class:`RunHealth` of the step rows of ``metrics.jsonl`` (``early_steps``: see there;
    ``log.warn_no_signal_steps``, 5 when that is 0)."""
    rss = [v for v in (_num(r, K.MEMORY_PEAK_RSS_MB) for r in rows) if v is not None]
    cuda = [v for v in (_num(r, K.MEMORY_CUDA_PEAK_MB) for r in rows) if v is not None]
    early = _early(early_steps)
    trunc = [truncated_frac < 1 and truncated_over(r, truncated_frac) for r in rows]
    streak = longest = t_streak = t_longest = 0
    last_late = False
    for i, r in enumerate(rows):
        step = int(r.get("step", i + 1))
        streak = streak + 1 if step > early and no_signal(r) else 0
        longest = max(longest, streak)
        t_streak = t_streak + 1 if step > early and trunc[i] else 0
        t_longest = max(t_longest, t_streak)
        last_late = step > early and trunc[i]
    return RunHealth(steps=len(rows), no_signal_steps=sum(no_signal(r) for r in rows),
                     all_error_steps=sum(all_errors(r) for r in rows), truncated_steps=sum(trunc),
                     peak_rss_mb=max(rss) if rss else None, cuda_peak_mb=max(cuda) if cuda else None,
                     early_steps=early, late_no_signal_streak=longest, late_truncated_streak=t_longest,
                     last_step_truncated=last_late)


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
    out = {K.MEMORY_PEAK_RSS_MB: float(mb)}
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out[K.MEMORY_CUDA_PEAK_MB] = torch.cuda.max_memory_allocated() / 2**20
    return out
