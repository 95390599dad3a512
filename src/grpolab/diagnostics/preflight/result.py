"""The preflight's result: :class:`PreflightResult` and :func:`preflight_from_outcomes`. Pure."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from grpolab.diagnostics.preflight.records import FamilyRow, Pilot
from grpolab.diagnostics.preflight.stats import (
    SOLVED,
    HeadroomStats,
    PreflightStats,
    _item_share,
    all_equal_share,
    headroom_stats,
    preflight_stats,
    wilson,
)
from grpolab.diagnostics.preflight.verdicts import (
    CANT_TELL,
    MIN_ITEMS,
    THRESHOLDS,
    MethodVerdict,
    Verdict,
    grpo_verdict,
    method_table,
    stats_from_dict,
)

__all__ = ["PreflightResult", "preflight_from_outcomes"]


@dataclass
class PreflightResult:
    """Everything the preflight measured, and the verdicts (``to_dict`` is ``preflight.json``).

    ``families``: per family label, its :class:`FamilyRow` (headroom, all-equal share, items with signal
    and GRPO verdict; empty with one family); ``per_item``: ``greedy_ok`` [N] bool, ``solved`` [N] samples
    that solved it (of ``k``), ``answers`` [N] the greedy answer where recorded, ``families`` [N];
    ``pilot``: the :class:`Pilot` (:func:`grpolab.diagnostics.preflight.pilot.pilot_from_outcomes`) when
    one ran. :meth:`from_dict` reads a stored ``preflight.json`` back."""

    stats: PreflightStats
    methods: list[MethodVerdict]
    families: dict[str, FamilyRow] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    per_item: dict[str, Any] = field(default_factory=dict)
    pilot: Pilot | None = None

    def method(self, method_id: str = "grpo") -> MethodVerdict:
        """The row of the rule registered as ``method_id`` (``grpo``, ``dynamic_sampling``, ...)."""
        for m in self.methods:
            if m.id == method_id:
                return m
        raise KeyError(f"no method {method_id!r} in the preflight; ids: {', '.join(m.id for m in self.methods)}")

    def verdict(self, method_id: str = "grpo") -> Verdict:
        return self.method(method_id).verdict

    @property
    def message(self) -> str:
        g = self.method("grpo")
        return f"GRPO {g.verdict}: {g.rests_on}" + (f"; {g.note}" if g.note else "")

    def calibration(self) -> dict[str, Any]:
        """The compact record a calibration keeps per setting."""
        s = self.stats
        return {"grpo": self.verdict().value, "verdicts": {m.method: m.verdict.value for m in self.methods},
                "n_items": s.n_items, "k": s.k, "greedy": s.greedy.value,
                "pass_at_k": s.pass_at_k.value, "reachable": s.reachable.value,
                "reachable_ci": [s.reachable.low, s.reachable.high],
                "sample_solves": s.sample_solves.value, "answer_in_failure": s.answer_in_failure.value,
                "cut": s.responses.cut.value if s.responses else None, "all_equal": s.all_equal.value,
                "gain_ceiling": s.gain_ceiling, "modal_answer": s.modal_answer.value if s.modal_answer else None,
                **({"grpo_start": self.pilot.start_verdict.value, "pilot": self.pilot.record()}
                   if self.pilot else {})}

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "verdict": self.verdict().value, "message": self.message,
                "stats": self.stats.to_dict(), "methods": [m.to_dict() for m in self.methods],
                "families": {lab: f.to_dict() for lab, f in self.families.items()},
                "calibration": self.calibration(), "thresholds": THRESHOLDS,
                "pilot": self.pilot.to_dict() if self.pilot is not None else None, "per_item": self.per_item}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PreflightResult:
        """A result from its :meth:`to_dict` (a stored ``preflight.json``); ``verdict``, ``message``,
        ``calibration`` and ``thresholds`` are derived, not read."""
        return cls(stats=stats_from_dict(d["stats"]), methods=[MethodVerdict.from_dict(m) for m in d["methods"]],
                   families={lab: FamilyRow.from_dict(f) for lab, f in (d.get("families") or {}).items()},
                   settings=dict(d.get("settings") or {}), per_item=dict(d.get("per_item") or {}),
                   pilot=Pilot.from_dict(d["pilot"]) if d.get("pilot") is not None else None)


def _family_stats(families, greedy_ok, counts, k, near, eq) -> dict[str, FamilyRow]:
    """Each family's headroom statistics and GRPO verdict (none when there is one family)."""
    fams: dict[str, FamilyRow] = {}
    if families is None:
        return fams
    if len(families) != len(greedy_ok):
        raise ValueError("families must have one label per item")
    labels = sorted(set(families), key=lambda s: (len(s), s))
    if len(labels) < 2:
        return fams
    for lab in labels:
        idx = np.array([f == lab for f in families])
        fs = PreflightStats(**headroom_stats(greedy_ok[idx], counts[idx], k, near[idx]),
                            all_equal=_item_share(eq[idx]), mixed_items=wilson(int((eq[idx] < 1).sum()), int(idx.sum())))
        v = grpo_verdict(fs)
        if fs.n_items < MIN_ITEMS:
            v.verdict = CANT_TELL
        headroom = HeadroomStats(**{f.name: getattr(fs, f.name) for f in dataclasses.fields(HeadroomStats)})
        fams[lab] = FamilyRow(headroom, v.verdict, v.rests_on)
    return fams


def preflight_from_outcomes(
    greedy_rewards: Sequence[float],
    sampled_rewards: Sequence[Sequence[float]],
    *,
    group_size: int,
    max_new_tokens: int,
    greedy_reasons: Sequence[str | None] | None = None,
    sampled_reasons: Sequence[Sequence[str | None]] | None = None,
    greedy_answer_seen: Sequence[bool] | None = None,
    sampled_answer_seen: Sequence[Sequence[bool]] | None = None,
    sampled_lengths: Sequence[Sequence[float]] | None = None,
    greedy_answers: Sequence[str | None] | None = None,
    families: Sequence[str] | None = None,
    readability: dict | None = None,
    has_privileged: bool = False,
    off_policy: bool = False,
    settings: dict | None = None,
    seed: int = 0,
) -> PreflightResult:
    """The preflight's statistics and method table from per-item outcomes.

    Args:
        greedy_rewards: ``[N]`` the greedy response's reward per item.
        sampled_rewards: ``[N][k]`` the k sampled responses' rewards (k >= 1, equal for every item).
        group_size: the run's ``rollout.group_size`` (the all-equal share is computed at it).
        max_new_tokens: the run's length cap (reported).
        greedy_reasons / sampled_reasons: :func:`failure_reason` of each response (None = solved).
        greedy_answer_seen / sampled_answer_seen: :func:`answer_in_text` of each response.
        sampled_lengths: ``[N][k]`` response lengths in tokens.
        greedy_answers: ``[N]`` the greedy response's answer (the verifier's extracted answer, else its
            last line; None: none), for the most-common-answer share.
        families: ``[N]`` family label per item (:func:`grpolab.diagnostics.preflight.stats.family_of`).
        readability: :func:`grpolab.measure.readability.measure_readability`'s row (None: not measured).
        has_privileged: the task's items carry privileged text (RLSD/GEAR can apply).
        off_policy: the run takes more than one optimizer step per batch or samples with a lag.
    """
    g = np.asarray(greedy_rewards, dtype=float)
    S = [list(map(float, r)) for r in sampled_rewards]
    n = len(g)
    if n == 0 or len(S) != n:
        raise ValueError(f"need one greedy reward and one row of sampled rewards per item; got {n} and {len(S)}")
    k = len(S[0])
    if k < 1 or any(len(r) != k for r in S):
        raise ValueError("every item needs the same number (>= 1) of sampled rewards")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if greedy_answers is not None and len(greedy_answers) != n:
        raise ValueError(f"greedy_answers has {len(greedy_answers)} entries for {n} items")
    g_seen = np.asarray(greedy_answer_seen if greedy_answer_seen is not None else [False] * n, dtype=bool)
    s_seen = np.array([any(r) for r in sampled_answer_seen] if sampled_answer_seen is not None else [False] * n,
                      dtype=bool)
    near = g_seen | s_seen
    stats = preflight_stats(g, S, group_size=group_size, max_new_tokens=max_new_tokens, greedy_reasons=greedy_reasons,
                            sampled_reasons=sampled_reasons, near=near, sampled_answer_seen=sampled_answer_seen,
                            sampled_lengths=sampled_lengths, readability=readability, has_privileged=has_privileged,
                            off_policy=off_policy, greedy_answers=greedy_answers, seed=seed)
    greedy_ok = g >= SOLVED
    counts = np.array([sum(x >= SOLVED for x in r) for r in S], dtype=float)
    fams = _family_stats(families, greedy_ok, counts, k, near, all_equal_share(S, group_size))
    per_item = {"greedy_ok": greedy_ok.tolist(), "solved": counts.astype(int).tolist(), "k": k,
                **({"answers": list(greedy_answers)} if greedy_answers is not None else {}),
                **({"families": list(families)} if families is not None else {})}
    return PreflightResult(stats=stats, methods=method_table(stats), families=fams, settings=dict(settings or {}),
                           per_item=per_item)
