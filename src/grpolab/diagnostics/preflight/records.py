"""The preflight's records beside its statistics: a task family's row and the pilot's record. Pure.

Each is a dataclass whose ``to_dict`` is its part of ``preflight.json`` and whose ``from_dict`` reads
that part back (a stored ``preflight.json`` round-trips):

* :class:`FamilyRow` -- one task family's headroom and GRPO verdict (``families``);
* :class:`Pilot` -- what a pilot of a few GRPO steps changed on the same items (``pilot``): its
  :class:`PilotTraining`, the sampled and greedy :class:`PairedChange`, the most common answer
  (:class:`DegenerateGain`), the verdicts before and after, and one :class:`PilotFamily` per family.
  :meth:`Pilot.record` is the compact record a calibration keeps.

The rules that fill them live in :mod:`~grpolab.diagnostics.preflight.result` (families) and
:mod:`~grpolab.diagnostics.preflight.pilot` (the pilot).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from grpolab.diagnostics.preflight.stats import HeadroomStats, ci_from_dict
from grpolab.diagnostics.preflight.verdicts import Verdict
from grpolab.diagnostics.stats import CI

__all__ = ["FAMILY_FIELDS", "DegenerateGain", "FamilyRow", "PairedChange", "Pilot", "PilotFamily", "PilotTraining"]

#: The headroom fields a family's row keeps (in ``preflight.json``'s order).
FAMILY_FIELDS = ("n_items", "k", "greedy", "sampled", "pass_at_k", "sample_solves", "answer_in_failure",
                 "reachable", "sampled_minus_greedy", "all_equal", "mixed_items")


@dataclass
class FamilyRow:
    """One task family's ``headroom`` (its items only) and GRPO ``verdict`` with the number it ``rests_on``."""

    headroom: HeadroomStats
    verdict: Verdict
    rests_on: str

    def to_dict(self) -> dict[str, Any]:
        h = self.headroom.to_dict()
        return {**{key: h[key] for key in FAMILY_FIELDS}, "verdict": self.verdict.value, "rests_on": self.rests_on}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FamilyRow:
        h = {key: (d[key] if key in ("n_items", "k") else ci_from_dict(d[key])) for key in FAMILY_FIELDS}
        return cls(HeadroomStats(**h), Verdict(d["verdict"]), d["rests_on"])


@dataclass
class PilotTraining:
    """What the pilot's training did: ``steps`` run, ``updates`` (steps with at least one group with
    signal, i.e. a non-zero advantage) and ``groups_with_signal`` summed over steps."""

    steps: int
    updates: int
    groups_with_signal: int

    def to_dict(self) -> dict[str, int]:
        return {"steps": self.steps, "updates": self.updates, "groups_with_signal": self.groups_with_signal}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> PilotTraining | None:
        return None if d is None else cls(d["steps"], d["updates"], d["groups_with_signal"])


@dataclass
class PairedChange:
    """A share over the same items ``before`` and ``after`` the pilot, and the paired ``change`` (the 95%
    t interval over items of each item's after - before)."""

    before: float
    after: float
    change: CI

    def to_dict(self) -> dict[str, Any]:
        return {"before": self.before, "after": self.after, "change": self.change.to_dict()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PairedChange:
        return cls(d["before"], d["after"], ci_from_dict(d["change"]))


@dataclass
class DegenerateGain:
    """The most common greedy answer before and after the pilot and its share of items; how many items
    the pilot newly solved and how many of them with that answer; ``flag``: the gain comes from one
    constant answer (:func:`grpolab.diagnostics.preflight.pilot.degenerate_gain`)."""

    answer_before: str | None
    share_before: float
    answer_after: str | None
    share_after: float
    newly_solved: int
    newly_solved_with_it: int
    flag: bool

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> DegenerateGain | None:
        return None if d is None else cls(**{f.name: d[f.name] for f in fields(cls)})


@dataclass
class PilotFamily:
    """One task family's part of the pilot: its items, GRPO's verdict before (the family's own) and after,
    and its sampled and greedy changes."""

    n_items: int
    start_verdict: Verdict
    training: PilotTraining | None
    sampled: PairedChange
    greedy: PairedChange
    verdict: Verdict

    def to_dict(self) -> dict[str, Any]:
        return {"n_items": self.n_items, "start_verdict": self.start_verdict.value,
                "training": self.training.to_dict() if self.training is not None else None,
                "sampled": self.sampled.to_dict(), "greedy": self.greedy.to_dict(), "verdict": self.verdict.value}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PilotFamily:
        return cls(d["n_items"], Verdict(d["start_verdict"]), PilotTraining.from_dict(d.get("training")),
                   PairedChange.from_dict(d["sampled"]), PairedChange.from_dict(d["greedy"]), Verdict(d["verdict"]))


@dataclass
class Pilot:
    """What a pilot of ``steps`` GRPO steps changed on the same ``n_items`` held-out items x ``k`` samples
    (:func:`grpolab.diagnostics.preflight.pilot.pilot_from_outcomes`): GRPO's verdict before
    (``start_verdict``) and after (``verdict``), the pilot's ``training`` (None: not recorded), the
    ``sampled`` and ``greedy`` changes, the most common answer (``answers``; None where answers were not
    recorded), one :class:`PilotFamily` per family (None with one family), where it trained (``run_dir``)
    and with which ``trainer_seed`` (None: not recorded)."""

    steps: int
    n_items: int
    k: int
    run_dir: str | None
    start_verdict: Verdict
    training: PilotTraining | None
    sampled: PairedChange
    greedy: PairedChange
    verdict: Verdict
    answers: DegenerateGain | None = None
    families: dict[str, PilotFamily] | None = None
    trainer_seed: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """``preflight.json``'s ``pilot`` (``answers``, ``families`` and ``trainer_seed`` only where known)."""
        out: dict[str, Any] = {"steps": self.steps, "n_items": self.n_items, "k": self.k, "run_dir": self.run_dir,
                               "start_verdict": self.start_verdict.value,
                               "training": self.training.to_dict() if self.training is not None else None,
                               "sampled": self.sampled.to_dict(), "greedy": self.greedy.to_dict()}
        if self.answers is not None:
            out["answers"] = self.answers.to_dict()
        out["verdict"] = self.verdict.value
        if self.families is not None:
            out["families"] = {lab: f.to_dict() for lab, f in self.families.items()}
        if self.trainer_seed is not None:
            out["trainer_seed"] = self.trainer_seed
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pilot:
        fams = d.get("families")
        return cls(d["steps"], d["n_items"], d["k"], d.get("run_dir"), Verdict(d["start_verdict"]),
                   PilotTraining.from_dict(d.get("training")), PairedChange.from_dict(d["sampled"]),
                   PairedChange.from_dict(d["greedy"]), Verdict(d["verdict"]), DegenerateGain.from_dict(d.get("answers")),
                   None if fams is None else {lab: PilotFamily.from_dict(f) for lab, f in fams.items()},
                   d.get("trainer_seed"))

    def record(self) -> dict[str, Any]:
        """The calibration's record of the pilot (and of each family's part of it): verdicts, the changes
        with their intervals, and sampled/greedy success as ``[before, after]``."""
        out = _record(self, self.steps)
        if self.answers is not None:
            out["degenerate"] = self.answers.flag
        if self.families:
            out["families"] = {lab: _record(f, self.steps) for lab, f in self.families.items()}
        return out


def _record(p: Pilot | PilotFamily, steps: int) -> dict[str, Any]:
    out = {"verdict": p.verdict.value, "start_verdict": p.start_verdict.value, "steps": steps, "n_items": p.n_items,
           "sampled_change": p.sampled.change.to_dict(), "greedy_change": p.greedy.change.to_dict(),
           "sampled": [p.sampled.before, p.sampled.after], "greedy": [p.greedy.before, p.greedy.after]}
    if p.training is not None:
        out["training"] = p.training.to_dict()
    return out
