"""Collapse detection on a run's curves: success falling to ~0 and staying, entropy collapse/explosion.

Rules (all thresholds are keyword arguments):

* success collapse: the held-out success starts above ``floor`` and, from some evaluation on,
  every later evaluation is at or below ``floor`` = ``max(abs_floor, rel_floor * start)`` (by
  default 2 points or a fifth of the starting success, whichever is larger), for at least
  ``min_points`` evaluations (the run ends there: "falls and stays"). With few evaluations (e.g.
  only before and after a short run) the held-out curve cannot show "stays"; then the per-step
  *training* success stands in for it: the last evaluation is at or below ``floor`` and, over the
  last ``window`` steps, every step's training success is at or below ``max(abs_floor, rel_floor x``
  its mean over the first ``window`` steps``)``.
* entropy collapse: the mean policy entropy over the last ``window`` steps is below
  ``entropy_low`` times its mean over the first ``window`` steps (the policy became deterministic).
* entropy explosion: the late mean is above ``entropy_high`` times the early mean (the policy
  became close to uniform noise).
* no EOS: in the last ``window`` steps at least ``truncated_high`` of the sampled responses hit
  the length limit, against under half in the first ``window`` (the policy stopped ending its
  answers -- a degenerate mode seen at high learning rates).

Steps where a metric is missing (``None``, e.g. no entropy logged when every group had equal
rewards and no row was trained on) are skipped.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

__all__ = ["CollapseVerdict", "detect_collapse"]


@dataclass
class CollapseVerdict:
    collapsed: bool
    kinds: list[str] = field(default_factory=list)  # success, entropy_collapse, entropy_explosion, no_eos
    step: int | None = None  # first step of the collapse (success: first eval of the final run at ~0)
    reason: str = ""

    @property
    def label(self) -> str:
        return "+".join(self.kinds) if self.kinds else "-"

    def to_dict(self) -> dict:
        return {**asdict(self), "label": self.label}


def _trailing(flags) -> int:
    """Length of the longest suffix of ``flags`` that is all true."""
    k = 0
    while k < len(flags) and flags[len(flags) - 1 - k]:
        k += 1
    return k


def detect_collapse(
    eval_steps: Sequence[int],
    eval_success: Sequence[float],
    entropy_steps: Sequence[int] = (),
    entropy: Sequence[float | None] = (),
    truncated_steps: Sequence[int] = (),
    truncated: Sequence[float | None] = (),
    train_steps: Sequence[int] = (),
    train_success: Sequence[float | None] = (),
    *,
    abs_floor: float = 0.02,
    rel_floor: float = 0.2,
    min_points: int = 2,
    window: int = 10,
    entropy_low: float = 0.1,
    entropy_high: float = 3.0,
    truncated_high: float = 0.9,
) -> CollapseVerdict:
    """Label a run from its held-out success curve and its per-step entropy (see module docstring)."""
    if len(eval_steps) != len(eval_success) or len(entropy_steps) != len(entropy) or \
            len(truncated_steps) != len(truncated) or len(train_steps) != len(train_success):
        raise ValueError("steps and values must have equal lengths")
    kinds: list[str] = []
    reasons: list[str] = []
    first: int | None = None
    succ = np.asarray(eval_success, dtype=float)
    start = succ[0] if len(succ) else 0.0
    floor = max(abs_floor, rel_floor * start)
    if len(succ) > min_points and start > floor:
        k = _trailing(succ <= floor)
        if k >= min_points and k < len(succ):
            kinds.append("success")
            first = int(eval_steps[len(succ) - k])
            reasons.append(f"held-out success fell from {start:.3f} to <= {floor:.3f} at step {first} "
                           f"and stayed there ({k} evaluations)")
    trs = [(st, float(v)) for st, v in zip(train_steps, train_success) if v is not None]
    if not kinds and len(succ) >= 2 and start > floor and succ[-1] <= floor and len(trs) >= 2 * window:
        early = float(np.mean([v for _, v in trs[:window]]))
        t_floor = max(abs_floor, rel_floor * early)
        k = _trailing([v <= t_floor for _, v in trs])
        if early > t_floor and k >= window:
            kinds.append("success")
            first = int(trs[len(trs) - k][0])
            reasons.append(f"held-out success fell from {start:.3f} to {succ[-1]:.3f} (<= {floor:.3f}) at the last "
                           f"evaluation, and training success was <= {t_floor:.3f} from step {first} to the end "
                           f"({k} steps; mean of the first {window}: {early:.3f})")
    ent = np.asarray([e for e in entropy if e is not None], dtype=float)
    ent_steps = [s for s, e in zip(entropy_steps, entropy) if e is not None]
    if len(ent) >= 2 * window:
        early, late = float(ent[:window].mean()), float(ent[-window:].mean())
        if early > 0 and late < entropy_low * early:
            kinds.append("entropy_collapse")
            reasons.append(f"entropy fell from {early:.3f} to {late:.3f} (< {entropy_low:g}x)")
        elif early > 0 and late > entropy_high * early:
            kinds.append("entropy_explosion")
            reasons.append(f"entropy rose from {early:.3f} to {late:.3f} (> {entropy_high:g}x)")
        if kinds and kinds[-1].startswith("entropy") and first is None:
            thresh = entropy_low * early if kinds[-1] == "entropy_collapse" else entropy_high * early
            hit = [s for s, e in zip(ent_steps, ent)
                   if (e < thresh if kinds[-1] == "entropy_collapse" else e > thresh)]
            first = int(hit[0]) if hit else None
    tr = [(s, t) for s, t in zip(truncated_steps, truncated) if t is not None]
    if len(tr) >= 2 * window:
        early_t = float(np.mean([t for _, t in tr[:window]]))
        late_t = float(np.mean([t for _, t in tr[-window:]]))
        if early_t < 0.5 and late_t >= truncated_high:
            kinds.append("no_eos")
            reasons.append(f"responses stopped ending: {late_t:.0%} hit the length limit in the last "
                           f"{window} steps (first {window}: {early_t:.0%})")
            if first is None:
                first = int(next(s for s, t in tr if t >= truncated_high))
    return CollapseVerdict(collapsed=bool(kinds), kinds=kinds, step=first, reason="; ".join(reasons))
