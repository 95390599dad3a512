"""The preflight's method verdicts: a registry of rules keyed by method id. Pure.

Each rule is one function registered with :func:`register_verdict`; it reads :class:`PreflightStats`
(and the verdicts of the rules it ``depends`` on, by id) and returns a :class:`MethodVerdict` --
:class:`Verdict` ``indicated``, ``not indicated`` or ``can't tell`` -- with the number it rests on,
the threshold and where the threshold comes from (a page under docs/results/), and the ``--set``
lines to use. :func:`method_table` runs every registered rule in registration order. A verdict is
"not indicated" only when the interval excludes the threshold (or nothing at all was solved on
enough items: :data:`ZERO_SUCCESS_ITEMS`): a handful of items gives "can't tell", never "no headroom".

A new rule::

    @register_verdict("my_method", "My method", evidence="where its precondition held (docs/results/...)")
    def _my_method(s: PreflightStats, prior: dict[str, MethodVerdict]) -> MethodVerdict:
        ...
        return MethodVerdict(Verdict.CANT_TELL, rests_on="...", threshold="...", source="docs/results/...")
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

from grpolab.diagnostics.preflight.stats import (
    CUT,
    HeadroomStats,
    LengthCoupling,
    PreflightStats,
    ResponseStats,
    ci_from_dict,
    wilson,
)
from grpolab.diagnostics.readability import READABLE_AUC
from grpolab.diagnostics.stats import CI

__all__ = ["MIN_ITEMS", "THRESHOLDS", "VERDICTS", "ZERO_SUCCESS_ITEMS", "MethodVerdict", "Verdict", "VerdictRule",
           "grpo_verdict", "method_table", "pct", "register_verdict", "stats_from_dict", "verdicts_from_counts"]


class Verdict(str, Enum):
    """A method's verdict (a ``str`` whose value is what ``preflight.json`` stores)."""

    INDICATED = "indicated"
    NOT_INDICATED = "not indicated"
    CANT_TELL = "can't tell"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


INDICATED, NOT_INDICATED, CANT_TELL = Verdict.INDICATED, Verdict.NOT_INDICATED, Verdict.CANT_TELL

#: Below this many items every verdict is "can't tell" (the intervals alone would let one item decide).
MIN_ITEMS = 8

THRESHOLDS: dict[str, dict[str, Any]] = {
    "reachable": {"value": 0.05, "source": "docs/results/headroom.md",
                  "why": "with pass@8 - greedy +39 points GRPO gained +5.8 [+3.6, +7.7]; with +1.5 points "
                         "(pass@8 0.023) it gained nothing (-0.3); 5 points is the margin `grpolab headroom` "
                         "used between them"},
    "saturated": {"value": 0.95, "source": "docs/when-grpo-helps.md",
                  "why": "greedy success this high leaves RL nothing to add"},
    "signal": {"value": 0.05, "source": "docs/results/dynamic_sampling.md",
               "why": "GRPO learns only from groups with mixed rewards; below 5% of groups most steps "
                      "train on nothing (a step without signal was already seen at 30-40% all-equal "
                      "groups with 4 prompts per step)"},
    "all_equal": {"value": 0.30, "source": "docs/results/dynamic_sampling.md",
                  "why": "at 30-40% all-equal groups dynamic sampling raised the trained groups with "
                         "signal from 61-64% to 97-98% (accuracy higher in 4 of 5 pairs, at 1.5-1.6x "
                         "the generation: a lead, not a result)"},
    "cut": {"value": 0.10, "source": "docs/results/real_model.md",
            "why": "74% of SmolLM2's responses were cut at the 12-token cap; GRPO brought it to 0.5% and "
                   "the accuracy with it"},
    "teacher_auc": {"value": READABLE_AUC, "source": "docs/results/real_credit.md",
                    "why": "the first-wrong-token AUC RLSD/GEAR's token credit needs (0.771 on SmolLM2: "
                           "partly met; 0.957 in docs/results/credit_teacher.md: met)"},
    "length_ratio": {"value": 1.25, "source": "docs/results/aggregation_coupled.md",
                     "why": "Balanced Aggregation removes sign-length coupling; the study's precondition is "
                            "a within-group fail/success length ratio >= 1.25 (1.02 on arith: nothing to remove)"},
    "drift_length": {"value": 128, "source": "docs/results/ratio_long.md",
                     "why": "the sequence-level ratios matter where responses are long and off-policy: "
                            "157-token responses with 4 optimizer steps per batch drifted (log-ratio RMS "
                            "0.16 -> 0.62 by position); ~19-token responses (docs/results/ratio.md) did not"},
}

#: Zero successes decide "not indicated" without a pilot: when neither greedy nor any of the k samples
#: solved any of at least this many items, and no failed response holds the answer, the exact
#: (Clopper-Pearson) one-sided 95% upper bound on the reachable share, ``1 - 0.05 ** (1 / n)``, lies
#: below the ``reachable`` threshold of 5% (at n = 59: 4.95%; at 58: 5.03%). The Wilson two-sided upper
#: bound at 0/n (``3.84 / (n + 3.84)``) is the stricter one the other rules read; it falls below 5% only
#: from n = 73. With 0 of 64 the Wilson bound is 5.7% and the verdict was "can't tell", so a pilot ran on a
#: setting with nothing to learn (issue 59); the exact bound is the right one for a count of zero.
ZERO_SUCCESS_ITEMS = math.ceil(math.log(0.05) / math.log(1 - THRESHOLDS["reachable"]["value"]))


@dataclass
class MethodVerdict:
    """One row of the method table. ``id``, ``method`` (the display name) and ``evidence`` are filled from
    the rule's registration by :func:`method_table`; ``rests_on_items``: False where the verdict does not
    rest on the measured items (e.g. the task carries no privileged text), so a small sample leaves it."""

    verdict: Verdict
    rests_on: str  # the number and its interval, with the sample size
    threshold: str
    source: str  # the docs/results/ page the threshold comes from
    set_lines: list[str] = field(default_factory=list)
    note: str = ""
    id: str = ""
    method: str = ""
    evidence: str = ""
    rests_on_items: bool = True
    cause: str = ""  # why, as a code the rules read (e.g. "no_headroom"), never the note's text

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "method": self.method, "verdict": self.verdict.value, "rests_on": self.rests_on,
                "threshold": self.threshold, "source": self.source, "set_lines": list(self.set_lines),
                "note": self.note, "evidence": self.evidence, **({"cause": self.cause} if self.cause else {})}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MethodVerdict:
        """A row from its :meth:`to_dict` (``preflight.json``'s ``methods``; ``rests_on_items`` is not stored)."""
        return cls(Verdict(d["verdict"]), d["rests_on"], d["threshold"], d["source"], list(d["set_lines"]), d["note"],
                   d["id"], d["method"], d["evidence"], cause=d.get("cause", ""))


Rule = Callable[[PreflightStats, "dict[str, MethodVerdict]"], MethodVerdict]


@dataclass(frozen=True)
class VerdictRule:
    """A registered rule: ``id`` (the key), ``name`` (shown), ``evidence`` (what was measured where its
    precondition held), ``depends`` (ids of rules whose verdicts it reads), ``fn``."""

    id: str
    name: str
    evidence: str
    depends: tuple[str, ...]
    fn: Rule

    def __call__(self, s: PreflightStats, prior: dict[str, MethodVerdict]) -> MethodVerdict:
        v = self.fn(s, prior)
        return dataclasses.replace(v, id=self.id, method=self.name, evidence=self.evidence,
                                   verdict=Verdict(v.verdict))


#: The rules, by id, in the order the table shows them.
VERDICTS: dict[str, VerdictRule] = {}


def register_verdict(id: str, name: str, *, evidence: str = "", depends: tuple[str, ...] = ()):
    """Register ``fn(stats, prior) -> MethodVerdict`` as the rule of method ``id`` (``prior``: the verdicts of
    the rules registered before it, by id; those in ``depends`` must be among them)."""
    if id in VERDICTS:
        raise ValueError(f"a verdict rule with id {id!r} is already registered")
    missing = [d for d in depends if d not in VERDICTS]
    if missing:
        raise ValueError(f"verdict rule {id!r} depends on {missing}, which are not registered before it")

    def deco(fn: Rule) -> Rule:
        VERDICTS[id] = VerdictRule(id, name, evidence, tuple(depends), fn)
        return fn
    return deco


def stats_from_dict(d: dict[str, Any]) -> PreflightStats:
    """:class:`PreflightStats` from its ``to_dict`` (``preflight.json``'s ``stats``); keys it does not know
    (e.g. ``gain_ceiling``, derived) are skipped, missing ones keep their defaults."""
    ci = ci_from_dict
    known = {f.name: f for f in dataclasses.fields(PreflightStats)}
    kw: dict[str, Any] = {}
    for key, val in d.items():
        if key not in known:
            continue
        if key == "responses" and isinstance(val, dict):
            reasons = {r: ci(val.get(r)) for r in ("cut at the cap", "no parseable answer", "wrong answer",
                                                    "verifier error")}
            val = ResponseStats(val.get("responses", 0), val.get("failures", 0), reasons, ci(val["cut"]),
                                ci(val.get("answer_in_failed_response")), ci(val.get("answer_in_cut_response")))
        elif key == "length_coupling" and isinstance(val, dict):
            val = LengthCoupling.from_dict(val)
        elif isinstance(val, dict) and {"value", "low", "high"} <= set(val):
            val = ci(val)
        kw[key] = val
    return PreflightStats(**kw)


def method_table(s: PreflightStats | dict[str, Any]) -> list[MethodVerdict]:
    """One :class:`MethodVerdict` per registered rule (:data:`VERDICTS`) from the statistics (or a stored
    ``preflight.json``'s ``stats``); with fewer than :data:`MIN_ITEMS` items every verdict that rests on
    the items is "can't tell"."""
    if isinstance(s, dict):
        s = stats_from_dict(s)
    prior: dict[str, MethodVerdict] = {}
    for rule in VERDICTS.values():
        prior[rule.id] = rule(s, prior)
    rows = list(prior.values())
    if s.n_items < MIN_ITEMS:
        for m in rows:
            if m.verdict != CANT_TELL and m.rests_on_items:
                m.note = (f"can't tell yet: {s.n_items} item(s) measured, {MIN_ITEMS} needed at least "
                          f"(would be '{m.verdict}')")
                m.verdict, m.set_lines = CANT_TELL, []
    return rows


def rerun(rows: list[MethodVerdict], s: PreflightStats, changed: MethodVerdict) -> list[MethodVerdict]:
    """``rows`` with ``changed`` in its place and every rule that depends on it run again."""
    prior = {m.id: m for m in rows}
    prior[changed.id] = changed
    for rule in VERDICTS.values():
        if changed.id in rule.depends and rule.id in prior:
            prior[rule.id] = rule(s, prior)
    return [prior[m.id] for m in rows]


def pct(c: CI | dict | None) -> str:
    if c is None:
        return "-"
    d = c if isinstance(c, dict) else c.to_dict()
    return f"{d['value'] * 100:.1f}% [{d['low'] * 100:.1f}, {d['high'] * 100:.1f}] (n={d['n']})"


def _count(c: CI | None) -> int:
    """The count behind a Wilson share of items (its value x n, rounded)."""
    return 0 if c is None or not c.n else int(round(c.value * c.n))


def zero_reach_decides(s: HeadroomStats) -> bool:
    """No item within reach (no sample solves an item greedy fails, no answer in a failed response) on at
    least :data:`ZERO_SUCCESS_ITEMS` items: "not indicated" by the exact bound (see there)."""
    return _count(s.reachable) == 0 and s.n_items >= ZERO_SUCCESS_ITEMS


def grpo_verdict(s: HeadroomStats) -> MethodVerdict:
    """GRPO's rule on the headroom (also each family's, and the verdict from recorded counts). ``note``
    starts with the cause; ``cause`` is one of ``saturated``, ``no_headroom``, ``zero_reach``,
    ``no_signal``, ``undecided`` or empty (indicated)."""
    t, sat, sig = THRESHOLDS["reachable"]["value"], THRESHOLDS["saturated"]["value"], THRESHOLDS["signal"]["value"]
    r, gr, mixed, n = s.reachable, s.greedy, s.mixed_items, s.n_items
    rests = (f"reachable {pct(r)}: a sample solves {s.sample_solves.value * 100:.1f}%, the answer is in a "
             f"failed response {s.answer_in_failure.value * 100:.1f}%; greedy {gr.value:.3f}, "
             f"pass@{s.k} {s.pass_at_k.value:.3f}; groups with signal possible on "
             f"{(mixed.value if mixed else 0) * 100:.0f}% of items")
    thr = (f"reachable >= {t * 100:.0f}% (interval above; 0 of >= {ZERO_SUCCESS_ITEMS} items: exact bound below), "
           f"some item with signal (not indicated when the interval of items with signal is below "
           f"{sig * 100:.0f}%); greedy < {sat:.2f}")
    src = THRESHOLDS["reachable"]["source"]
    no = lambda cause, note: MethodVerdict(NOT_INDICATED, rests, thr, src, [], note, cause=cause)  # noqa: E731
    if gr.low >= sat:
        return no("saturated", f"saturated: greedy already solves {gr.value:.1%}; RL can only keep it")
    if r.high < t:
        return no("no_headroom", f"no headroom on {n} items: at most {r.high * 100:.1f}% of items are within reach")
    if zero_reach_decides(s):
        exact = 1 - 0.05 ** (1 / n)
        what = "nothing solved: no item" if s.solves_nothing else "no item"
        return no("zero_reach", f"no headroom: {what} of {n} is within reach of a sample or a failed response; "
                                f"the exact one-sided 95% bound is {exact * 100:.2f}% < {t * 100:.0f}% (no pilot needed)")
    if mixed is not None and mixed.high < sig:
        return no("no_signal", f"no signal: at most {mixed.high * 100:.1f}% of items give a group with mixed "
                               f"rewards at this group size; fix the prompt/format, or raise rollout.group_size or "
                               f"rollout.temperature, or use dynamic sampling")
    if r.low >= t and (mixed is None or mixed.value > 0):
        note = ""
        if mixed is not None and mixed.value < sig:
            note = (f"sparse signal: only {mixed.value * 100:.1f}% of items can give a group with mixed rewards; "
                    f"it sufficed on SmolLM2 2-digit + 1-digit sums (2%, +27 points: one habit, running past the "
                    f"cap, fails many items at once; docs/results/preflight_calibration.md). ")
        if s.answer_in_failure.value > s.sample_solves.value:
            note += ("most of the reach is answers already written in failed responses (cut at the cap or in "
                     "the wrong form): pass@k underestimates it (docs/results/real_model.md)")
        return MethodVerdict(INDICATED, rests, thr, src, ["(none needed: GRPO is the default objective)"], note)
    return MethodVerdict(CANT_TELL, rests, thr, src, [], f"undecided on {n} items: the interval spans the "
                         f"threshold; measure more items (raise --budget or --n)", cause="undecided")


@register_verdict("grpo", "GRPO", evidence="SmolLM2 sums: +47 to +61 points in 10 steps (docs/results/real_model.md); "
                  "tiny arith with pass@k headroom +5.8, without none (docs/results/headroom.md)")
def _grpo(s: PreflightStats, prior: dict[str, MethodVerdict]) -> MethodVerdict:
    return grpo_verdict(s)


#: GRPO's causes that leave nothing for a method built on its advantages to work with.
_NOTHING_TO_LEARN = ("saturated", "no_headroom", "zero_reach")


def _within_grpo(v: MethodVerdict, grpo: MethodVerdict, why: str) -> MethodVerdict:
    """A method that changes how GRPO learns is indicated only where GRPO is: its "indicated" becomes
    "not indicated" where GRPO is not, and "can't tell" where GRPO's own verdict is not decided."""
    if v.verdict != INDICATED or grpo.verdict == INDICATED:
        return v
    if grpo.verdict == NOT_INDICATED:
        return dataclasses.replace(v, verdict=NOT_INDICATED, set_lines=[], note=f"its precondition holds, but GRPO "
                                   f"is not indicated: {why}")
    return dataclasses.replace(v, verdict=CANT_TELL, set_lines=[], note=f"its precondition holds, but GRPO's own "
                               f"verdict is not decided: {why}")


@register_verdict("dynamic_sampling", "dynamic sampling", depends=("grpo",),
                  evidence="arith: trained groups with signal 61-64% -> 97-98%, accuracy +3.7/+5.7 points at "
                           "equal steps, 1.5-1.6x the generation (docs/results/dynamic_sampling.md)")
def _dynamic_sampling(s: PreflightStats, prior: dict[str, MethodVerdict]) -> MethodVerdict:
    """Indicated where many groups are all equal and GRPO is indicated, and in the sparse-signal case it
    exists for (few items give a mixed group, some do); not indicated where GRPO has nothing to learn, no
    item can give a mixed group, or few groups would be dropped."""
    grpo = prior["grpo"]
    a, mixed = s.all_equal, s.mixed_items
    t, sig = THRESHOLDS["all_equal"]["value"], THRESHOLDS["signal"]["value"]
    rests = f"all-equal groups at G={s.group_size}: {pct(a)}"
    thr = f"all-equal >= {t * 100:.0f}%, and some item with signal"
    src = THRESHOLDS["all_equal"]["source"]
    cost = 1.0 / max(1.0 - a.value, 1.0 / 16)  # groups sampled per group kept
    oversample = float(min(16.0, round(cost, 1))) if cost >= 1.5 else 1.0
    sets = ["rollout.dynamic_sampling=true", "rollout.dynamic_sampling_rounds=4"] + (
        [f"rollout.dynamic_sampling_oversample={oversample:g}"] if oversample > 1 else [])
    filled = (f"{a.value * 100:.0f}% of groups would train on nothing; the filter samples about {cost:.1f}x the "
              f"groups per step" + (" or more" if cost >= 16 else ""))
    sparse = mixed.value < sig
    if grpo.verdict == NOT_INDICATED and grpo.cause in _NOTHING_TO_LEARN:
        return MethodVerdict(NOT_INDICATED, rests, thr, src, [], "GRPO has nothing to learn here")
    if _count(mixed) == 0:
        return MethodVerdict(NOT_INDICATED, rests, thr, src, [], "no item can give a group with mixed rewards: "
                             "nothing to fill the batch with")
    if sparse and a.low >= t:
        if grpo.verdict == NOT_INDICATED:  # no signal: what dynamic sampling exists for, GRPO undecided with it
            return MethodVerdict(CANT_TELL, rests, thr, src, [], "sparse signal, the case it exists for: GRPO "
                                 "alone gets too few groups with signal; try " + ", ".join(sets) + f" ({filled})")
        return MethodVerdict(INDICATED, rests, thr, src, sets, "sparse signal, the case it exists for: " + filled)
    if grpo.verdict == NOT_INDICATED:
        return MethodVerdict(NOT_INDICATED, rests, thr, src, [], "GRPO is not indicated")
    if a.high < t:
        return MethodVerdict(NOT_INDICATED, rests, thr, src, [], "few groups to drop")
    if a.low >= t and grpo.verdict == INDICATED:
        return MethodVerdict(INDICATED, rests, thr, src, sets, filled)
    return MethodVerdict(CANT_TELL, rests, thr, src, [], "the interval spans the threshold" if a.low < t
                         else "GRPO's own verdict is not decided")


@register_verdict("overlong", "overlong shaping / truncation masking", depends=("grpo",),
                  evidence="no grpolab study yet; plain GRPO removed SmolLM2's truncation (0.74 -> 0.005, "
                           "docs/results/real_model.md)")
def _overlong(s: PreflightStats, prior: dict[str, MethodVerdict]) -> MethodVerdict:
    cut = s.responses.cut
    t = THRESHOLDS["cut"]["value"]
    seen = s.responses.answer_in_cut_response
    rests = f"responses cut at the {s.max_new_tokens}-token cap: {pct(cut)}" + (
        f"; the answer is already in {seen.value * 100:.0f}% of the cut ones" if seen else "")
    thr, src = f"cut >= {t * 100:.0f}%", THRESHOLDS["cut"]["source"]
    if cut.n == 0:
        return MethodVerdict(CANT_TELL, rests, thr, src, [], "no responses measured")
    if cut.high < t:
        return MethodVerdict(NOT_INDICATED, rests, thr, src, [], "few responses reach the cap")
    if cut.low < t:
        return MethodVerdict(CANT_TELL, rests, thr, src, [], "the interval spans the threshold")
    longer = f"rollout.max_new_tokens={s.max_new_tokens * 2}"
    if s.solves_nothing:  # a shaping of failures only: nothing it could reward yet
        return MethodVerdict(CANT_TELL, rests, thr, src, [], f"responses run past the cap and nothing is solved: "
                             f"measure again with a longer cap (--set {longer}) before any shaping")
    share = f"{seen.value * 100:.0f}%" if seen else "none"
    note = (f"responses run past the cap (the answer is in {share} of the cut ones): either a longer cap if they "
            f"are still working, or a graded overlong penalty; not truncation masking "
            f"(objective.mask_truncated=true), which hides exactly these failures from the loss -- on SmolLM2 "
            f"sums they were what GRPO learned from")
    v = MethodVerdict(INDICATED, rests, thr, src, [longer, f"objective.overlong_buffer={max(1, s.max_new_tokens // 4)}"],
                      note)
    return _within_grpo(v, prior["grpo"], "a longer cap or overlong shaping only changes what GRPO learns from")


@register_verdict("credit", "RLSD / GEAR", depends=("grpo",),
                  evidence="where the teacher read (AUC 0.957): RLSD -0.1, GEAR +0.2 points vs GRPO (null, "
                           "docs/results/credit_teacher.md); SmolLM2 (AUC 0.771): RLSD +2.0 [-7.7, +11.6], "
                           "GEAR -14.4 [-43.4, +14.5], 3 seeds, neither significant (t intervals of "
                           "docs/results/real_credit.md's per-seed finals)")
def _credit(s: PreflightStats, prior: dict[str, MethodVerdict]) -> MethodVerdict:
    """The teacher's readability decides, within GRPO's verdict: token credit reweights GRPO's advantages,
    so where GRPO has nothing to learn it has nothing to reweight."""
    t = THRESHOLDS["teacher_auc"]["value"]
    rd = s.readability
    thr, src = (f"error AUC >= {t} (re-derived first errors vs correct-but-reworded tokens)",
                THRESHOLDS["teacher_auc"]["source"])
    if not s.has_privileged:
        return MethodVerdict(NOT_INDICATED, "the task's items carry no privileged text", thr, src, [],
                             "no reference for a self-teacher to read", rests_on_items=False)
    if not rd or "not_measured" in rd:
        why = (rd or {}).get("not_measured", "the budget stopped before a first chunk of >= 4 items")
        fix = ("`grpolab preflight` without --no-readability" if "--no-readability" in why else
               "`grpolab preflight` without a tight --budget" if "budget" in why else "a config with credit settings")
        return MethodVerdict(CANT_TELL, f"teacher readability not measured: {why}", thr, src, [],
                             f"measured on the first chunk of >= 4 items: {fix}")
    if rd.get("teacher_auc") is None and not rd.get("rederivable"):
        return MethodVerdict(CANT_TELL, "teacher readability undefined: no wrong response could be localised", thr,
                             src, [], "measured on the first chunk of >= 4 items: more items (--n) or a longer cap")
    v, rests, note = _error_readability(rd, t)
    grpo = prior["grpo"]
    if grpo.verdict == NOT_INDICATED:
        return MethodVerdict(NOT_INDICATED, rests, thr, src, [], "GRPO is not indicated: token credit only "
                             "reweights its advantages, and there are none to reweight here")
    if v == INDICATED and grpo.verdict == CANT_TELL:
        return MethodVerdict(CANT_TELL, rests, thr, src, [], "the teacher reads, but GRPO's own verdict is not "
                             "decided: token credit only reweights its advantages")
    return MethodVerdict(v, rests, thr, src, ["credit.name=rlsd", "credit.lam=0.5"] if v == INDICATED else [],
                         "precondition only: where it held, RLSD and GEAR did not beat GRPO" if v == INDICATED else note)


def _against(low: float, high: float, t: float) -> Verdict:
    """An interval against a threshold: indicated when it lies at or above ``t``, not indicated when below it,
    can't tell when it spans it."""
    return INDICATED if low >= t else NOT_INDICATED if high < t else CANT_TELL


def _error_readability(rd: dict, t: float) -> tuple[Verdict, str, str]:
    """The RLSD/GEAR precondition from a readability row: ``(verdict, rests_on, note)``.

    It rests on the error AUC (docs/credit.md, "Readability that can fail"), never on the first-departure AUC,
    which a teacher that copies the reference passes by construction; that one is shown beside it. Decided only
    on the error AUC's interval over responses: indicated when its low end reaches ``t``, not indicated when its
    high end is below ``t``; can't tell when it straddles ``t``, has no interval (too few erroneous or
    reworded-correct responses) or the task's worked answers cannot be re-derived."""
    old = rd.get("teacher_auc")
    beside = f"first-departure AUC {old:.3f} (tests copying, not errors)" if old is not None else ""
    if not rd.get("rederivable"):
        return (CANT_TELL, beside or "first-departure AUC undefined",
                "no re-deriver for this task's answers (grpolab.diagnostics.rederive): the first-departure AUC "
                "cannot tell an error from a correct rewording")
    counts = rd.get("error_counts") or {}
    auc, ci = rd.get("error_auc"), rd.get("error_auc_interval")
    n = f"{counts.get('error', 0)} erroneous, {counts.get('reworded', 0)} reworded-correct responses"
    if auc is None or ci is None:
        rests = (f"error AUC {'undefined' if auc is None else f'{auc:.3f} without an interval'} ({n})"
                 + (f"; {beside}" if beside else ""))
        return CANT_TELL, rests, "too few erroneous or reworded-correct responses to decide: measure more items"
    rests = f"error AUC {auc:.3f} [{ci[0]:.3f}, {ci[1]:.3f}] ({n})" + (f"; {beside}" if beside else "")
    v = _against(ci[0], ci[1], t)
    return v, rests, "" if v != CANT_TELL else "the interval spans the threshold: measure more items"


@register_verdict("balanced", "Balanced Aggregation", depends=("grpo",),
                  evidence="where the ratio was 1.354: balanced -7.0 [-16.0, +2.1] points vs token, 5 seeds, not "
                           "significant (t interval; docs/results/reanalysis.json)")
def _balanced(s: PreflightStats, prior: dict[str, MethodVerdict]) -> MethodVerdict:
    t = THRESHOLDS["length_ratio"]["value"]
    lc = s.length_coupling
    thr, src = f"within-group fail/success length ratio >= {t}", THRESHOLDS["length_ratio"]["source"]
    if lc is None or lc.fail_success_length_ratio is None:
        return MethodVerdict(CANT_TELL, "no group holds both a success and a failure", thr, src, [], "")
    lo, hi = lc.ratio_ci
    rests = (f"ratio {lc.fail_success_length_ratio:.3f} [{lo:.3f}, {hi:.3f}] over {lc.mixed_groups} mixed "
             f"groups ({lc.responses} responses)")
    v = _against(lo, hi, t)
    row = MethodVerdict(v, rests, thr, src, ["objective.aggregation=balanced"] if v == INDICATED else [],
                        "precondition only: where it held, balanced did not beat token aggregation" if v == INDICATED
                        else "")
    return _within_grpo(row, prior["grpo"], "the aggregation only weighs GRPO's per-token losses")


@register_verdict("ratio", "CTPO / GSPO", depends=("grpo",),
                  evidence="where responses drifted: GSPO +2.8 [-0.0, +5.6], CTPO -0.3 [-5.2, +4.6] points vs the token "
                           "ratio, 5 seeds, neither significant (t intervals; docs/results/reanalysis.json)")
def _ratio(s: PreflightStats, prior: dict[str, MethodVerdict]) -> MethodVerdict:
    t = THRESHOLDS["drift_length"]["value"]
    rt = s.response_tokens
    thr, src = f"off-policy updates and mean response >= {t} tokens", THRESHOLDS["drift_length"]["source"]
    if rt is None:
        return MethodVerdict(CANT_TELL, "response lengths not measured", thr, src, [], "")
    rests = f"mean response {rt.value:.1f} tokens [{rt.low:.1f}, {rt.high:.1f}]; " + (
        "off-policy (several optimizer steps per batch or a policy lag)" if s.off_policy
        else "on-policy (one optimizer step per batch: the ratio is 1)")
    v = NOT_INDICATED if (not s.off_policy or rt.high < t / 2) else INDICATED if rt.low >= t else CANT_TELL
    row = MethodVerdict(v, rests, thr, src, ["preset=gspo"] if v == INDICATED else [],
                        "GSPO is the lead; CTPO was a null result" if v == INDICATED else "")
    return _within_grpo(row, prior["grpo"], "the sequence-level ratio only changes GRPO's update")


def verdicts_from_counts(n_items: int, greedy_solved: int, some_sample_solved: int, *, k: int,
                         group_size: int | None = None) -> dict[str, Any]:
    """The GRPO verdict from recorded aggregate counts (an earlier study that kept greedy and pass@k only).

    Assumes the items greedy solves are among those some sample solves (then the reachable share is
    ``pass@k - greedy``); without failure reasons, ``answer_in_failure`` is 0. An item with mixed samples
    counts as one with signal (``group_size`` is accepted for the record; the counts cannot resolve it)."""
    if not 0 <= greedy_solved <= n_items or not 0 <= some_sample_solved <= n_items:
        raise ValueError("counts must lie in [0, n_items]")
    reach = max(0, some_sample_solved - greedy_solved)
    mixed = max(reach, 1 if some_sample_solved < n_items and some_sample_solved else 0)
    s = HeadroomStats(n_items=n_items, k=k, greedy=wilson(greedy_solved, n_items), sampled=None,
                      pass_at_k=wilson(some_sample_solved, n_items), sample_solves=wilson(reach, n_items),
                      answer_in_failure=wilson(0, n_items), reachable=wilson(reach, n_items),
                      mixed_items=wilson(mixed, n_items))  # items some sample solves but not all: a lower bound
    v = grpo_verdict(s)
    if n_items < MIN_ITEMS:
        v.verdict = CANT_TELL
    return {"grpo": v.verdict.value, "rests_on": v.rests_on, "n_items": n_items, "k": k,
            "greedy": s.greedy.value, "pass_at_k": s.pass_at_k.value, "reachable": s.reachable.value,
            "reachable_ci": [s.reachable.low, s.reachable.high], "gain_ceiling": s.gain_ceiling,
            "from": "recorded counts (greedy, pass@k): no failure reasons"}
