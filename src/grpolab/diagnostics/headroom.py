"""Headroom: does the sampled policy beat the greedy one? (docs/when-grpo-helps.md)

GRPO learns from groups whose samples disagree. The 2026 study of GRPO on web agents found that it
only added success where the *sampled* policy (at the training temperature) beat the *greedy* one;
where greedy already won, no configuration helped and larger learning rates hurt. This module turns
per-item outcomes into that comparison:

* greedy success: fraction of items the greedy completion solves;
* sampled success: mean over items of ``c_i / k`` (``k`` samples per item at the rollout
  temperature, ``c_i`` of them correct);
* pass@k with the unbiased estimator (:func:`grpolab.diagnostics.pass_at_k`);
* the gap ``sampled - greedy`` paired by item, with a t interval over items;
* all of it overall and per task family (``item.meta["family"]`` or ``["difficulty"]``), each
  family with its own verdict by the same rule (on its own, wider, intervals).

The verdict, on the overall 95% intervals (t intervals over items, paired by item):

* ``saturated``: greedy success is already at least ``saturated`` (0.95);
* ``headroom``: the mean sample beats greedy (the study's criterion);
* ``pass@k headroom``: the mean sample does not beat greedy, but pass@k beats greedy by at least
  ``min_pass_gap`` (5 points) with the interval above zero. grpolab deviates from the study
  here: on its arith task greedy beats the mean sample at temperature 1, yet GRPO raises greedy
  success, because some samples solve items greedy misses (docs/when-grpo-helps.md);
* ``no headroom``: neither: the mean sample does not beat greedy and pass@k's interval over greedy
  stays below ``min_pass_gap``;
* ``unclear``: the intervals are too wide to tell (use more items or samples).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from grpolab.diagnostics.inference import mean_interval
from grpolab.diagnostics.stats import CI, pass_at_k

__all__ = ["HeadroomResult", "HeadroomStats", "family_of", "headroom_from_outcomes", "headroom_markdown"]

FAMILY_KEYS = ("family", "difficulty")


def family_of(meta: dict[str, Any] | None) -> str:
    """The family label of an item from its meta: ``family``, else ``difficulty``, else ``all``."""
    meta = meta or {}
    for k in FAMILY_KEYS:
        if k in meta:
            return f"{k}={meta[k]}"
    return "all"


@dataclass
class HeadroomStats:
    n_items: int
    k: int
    greedy: CI
    sampled: CI
    pass_at_k: dict[int, CI]
    gap: CI  # sampled - greedy, paired by item
    pass_gap: CI  # pass@k - greedy, paired by item (items some sample solves that greedy misses)

    def to_dict(self) -> dict[str, Any]:
        return {"n_items": self.n_items, "k": self.k, "greedy": self.greedy.to_dict(),
                "sampled": self.sampled.to_dict(), "gap_sampled_minus_greedy": self.gap.to_dict(),
                "gap_pass_at_k_minus_greedy": self.pass_gap.to_dict(),
                "pass_at_k": {str(k): v.to_dict() for k, v in self.pass_at_k.items()}}


@dataclass
class HeadroomResult:
    overall: HeadroomStats
    families: dict[str, HeadroomStats] = field(default_factory=dict)
    verdict: str = ""  # "headroom", "pass@k headroom", "no headroom", "unclear", "saturated"
    message: str = ""
    family_verdicts: dict[str, str] = field(default_factory=dict)  # the same rule on each family
    temperature: float | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "temperature": self.temperature, "verdict": self.verdict,
                "message": self.message, "overall": self.overall.to_dict(),
                "families": {f: {**s.to_dict(), **({"verdict": self.family_verdicts[f]}
                                                     if f in self.family_verdicts else {})}
                             for f, s in self.families.items()}}


def _stats(greedy: np.ndarray, correct: np.ndarray, k: int, seed: int) -> HeadroomStats:
    sampled = correct / k
    ks = sorted({j for j in (1, 2, 4, 8, 16, 32, k) if j <= k})
    pk = {j: mean_interval([pass_at_k(k, int(c), j) for c in correct]) for j in ks}
    pk_items = [pass_at_k(k, int(c), k) for c in correct]
    return HeadroomStats(
        n_items=len(greedy), k=k, greedy=mean_interval(greedy), sampled=mean_interval(sampled),
        pass_at_k=pk, gap=mean_interval(np.subtract(sampled, greedy)),
        pass_gap=mean_interval(np.subtract(pk_items, greedy)),
    )


def headroom_from_outcomes(
    greedy_solved: Sequence[bool | float],
    sampled_correct: Sequence[int],
    k: int,
    families: Sequence[str] | None = None,
    *,
    saturated: float = 0.95,
    min_pass_gap: float = 0.05,
    seed: int = 0,
) -> HeadroomResult:
    """Headroom statistics and verdict from per-item outcomes.

    Args:
        greedy_solved: ``[N]`` whether the greedy completion of item i is correct.
        sampled_correct: ``[N]`` how many of item i's ``k`` samples are correct.
        k: samples per item (>= 1).
        families: ``[N]`` family label per item (optional).
    """
    g = np.asarray(greedy_solved, dtype=float)
    c = np.asarray(sampled_correct, dtype=float)
    if len(g) == 0 or len(g) != len(c):
        raise ValueError(f"need one greedy outcome and one sampled count per item; got {len(g)} and {len(c)}")
    if k < 1 or (c < 0).any() or (c > k).any():
        raise ValueError(f"sampled_correct must lie in [0, k={k}]")
    overall = _stats(g, c, k, seed)
    fams: dict[str, HeadroomStats] = {}
    if families is not None:
        if len(families) != len(g):
            raise ValueError("families must have one label per item")
        labels = sorted(set(families), key=lambda s: (len(s), s))
        if len(labels) > 1:
            for lab in labels:
                idx = np.array([f == lab for f in families])
                fams[lab] = _stats(g[idx], c[idx], k, seed)
    verdict, message = _verdict(overall, saturated, min_pass_gap)
    fam_verdicts = {lab: _verdict(st, saturated, min_pass_gap)[0] for lab, st in fams.items()}
    return HeadroomResult(overall=overall, families=fams, verdict=verdict, message=message,
                          family_verdicts=fam_verdicts)


def _verdict(s: HeadroomStats, saturated: float, min_pass_gap: float) -> tuple[str, str]:
    gap, pg = s.gap, s.pass_gap
    ci = lambda c: f"95% CI {c.low * 100:+.1f} to {c.high * 100:+.1f}"  # noqa: E731
    reach = f"pass@{s.k} {s.pass_at_k[s.k].value:.3f} vs greedy {s.greedy.value:.3f}"
    if s.greedy.value >= saturated:
        return "saturated", (f"saturated: greedy already solves {s.greedy.value:.1%}; RL has little to "
                             f"add and a large learning rate can only hurt ({reach})")
    if gap.low > 0:
        return "headroom", (f"headroom: sampling beats greedy by {gap.value * 100:+.1f} points ({ci(gap)}); "
                            f"GRPO has signal to reinforce ({reach})")
    if pg.low > 0 and pg.value >= min_pass_gap:
        if gap.high < 0:
            return "pass@k headroom", (
                f"pass@k headroom only: greedy beats the mean sample by {-gap.value * 100:.1f} points "
                f"({ci(gap)}), the study's sign of no headroom, but pass@{s.k} exceeds greedy by "
                f"{pg.value * 100:+.1f} points ({ci(pg)}): samples solve items greedy misses, which GRPO can "
                f"sharpen towards (it did on grpolab's arith task; see docs/when-grpo-helps.md)")
        return "pass@k headroom", (
            f"pass@k headroom: sampling vs greedy {gap.value * 100:+.1f} points ({ci(gap)}), pass@{s.k} "
            f"exceeds greedy by {pg.value * 100:+.1f} points ({ci(pg)})")
    if pg.high < min_pass_gap:
        return "no headroom", (f"no headroom: sampling vs greedy {gap.value * 100:+.1f} points ({ci(gap)}) "
                               f"and pass@{s.k} adds at most {pg.high * 100:.1f} points over greedy ({ci(pg)}); "
                               f"GRPO is unlikely to help and a large learning rate will hurt")
    return "unclear", (f"unclear: sampling vs greedy {gap.value * 100:+.1f} points ({ci(gap)}), pass@{s.k} vs "
                       f"greedy {pg.value * 100:+.1f} points ({ci(pg)}); too few items or samples to tell "
                       f"(raise the item count or k)")


def headroom_markdown(res: HeadroomResult) -> str:
    """A short markdown report: verdict line, then one table row per family and overall."""
    ks = list(res.overall.pass_at_k)
    head = ["family", "items", "greedy", f"sampled (mean of {res.overall.k})", "sampled - greedy",
            f"pass@{res.overall.k} - greedy"] + [f"pass@{k}" for k in ks] + ["verdict"]
    lines = ["# Headroom", "", f"**verdict: {res.verdict}** -- {res.message}", ""]
    if res.source:
        lines += [f"- model: `{res.source}`"]
    if res.temperature is not None:
        lines += [f"- sampling temperature: {res.temperature:g}; intervals: 95% t over items"]
    lines += ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = list(res.families.items()) + [("overall", res.overall)]
    for name, s in rows:
        verdict = res.verdict if name == "overall" else res.family_verdicts.get(name, "")
        cells = [name, str(s.n_items), s.greedy.fmt(), s.sampled.fmt(), s.gap.fmt(), s.pass_gap.fmt()] + \
            [s.pass_at_k[k].fmt() if k in s.pass_at_k else "" for k in ks] + [verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
