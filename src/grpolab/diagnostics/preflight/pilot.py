"""The pilot's rules: did a few GRPO steps of the run's recipe convert the headroom? Pure.

``grpolab preflight --pilot STEPS`` trains STEPS GRPO steps of the config and measures the same held-out
items again (:mod:`grpolab.commands.preflight`); this module turns the two measurements and the pilot's
training record into its verdict:

* the pilot never updated (no step had a group with signal: every group's rewards were all equal, so
  every advantage was 0 and the model is the starting model): **can't tell**, whatever the change
  reads (it is 0 by construction), with what to change;
* else the paired change in sampled success over items (t interval): **indicated** above 0, **not
  indicated** below +:data:`PILOT_MIN_GAIN`, else **can't tell** (:func:`change_verdict`);
* a start that was "not indicated" stays so (no pilot runs there).

:func:`pilot_rule` is the same rule on any paired per-item change, e.g. a run's own held-out evaluation
after its first N steps (issue 59 item 4: a run can decide by itself whether to go on).
A gain that comes with one constant answer spreading is flagged (:func:`degenerate_gain`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from grpolab.diagnostics.inference import mean_interval
from grpolab.diagnostics.preflight.records import DegenerateGain, PairedChange, Pilot, PilotFamily, PilotTraining
from grpolab.diagnostics.preflight.result import PreflightResult
from grpolab.diagnostics.preflight.verdicts import (
    CANT_TELL,
    INDICATED,
    MIN_ITEMS,
    NOT_INDICATED,
    Verdict,
    rerun,
)
from grpolab.diagnostics.stats import CI

__all__ = ["PILOT_MIN_GAIN", "apply_pilot", "change_verdict", "degenerate_gain", "items_to_decide", "pilot_from_outcomes",
           "pilot_line", "pilot_rule", "pilot_training", "pilot_verdict", "signed_ci"]

#: The pilot's "not indicated": the 95% interval of the change in sampled success after the pilot lies
#: below this (the calibration counts a measured gain within +-2 points as none).
PILOT_MIN_GAIN = 0.02

#: A gain is flagged as a constant answer when at least this share of the newly solved items are
#: answered with the most common answer after the pilot, and that answer's share of items rose.
DEGENERATE_SHARE = 0.5


def pilot_training(rows: Sequence[dict[str, Any]]) -> PilotTraining:
    """:class:`PilotTraining` from a run's ``metrics.jsonl`` rows (``groups/with_signal`` per step)."""
    steps = [r for r in rows if "groups/with_signal" in r]
    sig = [int(r.get("groups/with_signal") or 0) for r in steps]
    return PilotTraining(steps=len(steps), updates=sum(x > 0 for x in sig), groups_with_signal=sum(sig))


def change_verdict(c: dict[str, float]) -> Verdict:
    """The pilot's rule on one paired change (``low``/``high``: its 95% interval): ``indicated`` above 0,
    ``not indicated`` below +:data:`PILOT_MIN_GAIN`, else ``can't tell``."""
    if c["low"] > 0:
        return INDICATED
    if c["high"] < PILOT_MIN_GAIN:
        return NOT_INDICATED
    return CANT_TELL


def pilot_rule(before: Sequence[float], after: Sequence[float], *, updates: int | None = None) -> Verdict:
    """The pilot's rule on per-item success ``[N]`` before and ``[N]`` after some GRPO steps (the same
    items, paired): :func:`change_verdict` on the t interval of the change; ``can't tell`` with fewer
    than :data:`MIN_ITEMS` items or when no step updated (``updates == 0``). The preflight's pilot and a
    run's own first steps (held-out success at step 0 and at step N) are read by this one rule."""
    b, a = np.asarray(before, float), np.asarray(after, float)
    if b.shape != a.shape:
        raise ValueError(f"before and after must be the same items: {b.shape} vs {a.shape}")
    if len(b) < MIN_ITEMS or updates == 0:
        return CANT_TELL
    return change_verdict(mean_interval(a - b).to_dict())


def pilot_verdict(p: Pilot | PilotFamily) -> Verdict:
    """GRPO after a pilot (:func:`pilot_from_outcomes`'s record, or a family's part of it): ``not
    indicated`` where the start was; ``can't tell`` where the pilot never updated; else
    :func:`change_verdict` of the sampled change."""
    if p.start_verdict == NOT_INDICATED:
        return NOT_INDICATED
    if p.training is not None and p.training.updates == 0:
        return CANT_TELL
    return change_verdict(p.sampled.change.to_dict())


def _paired_change(x0: np.ndarray, x1: np.ndarray) -> PairedChange:
    """``[N]`` per-item shares before and after: their means and the paired change (95% t interval over items)."""
    return PairedChange(float(x0.mean()), float(x1.mean()), mean_interval(x1 - x0))


def degenerate_gain(greedy_before: Sequence[bool], greedy_after: Sequence[bool],
                    answers_before: Sequence[str | None], answers_after: Sequence[str | None]) -> DegenerateGain:
    """The most common greedy answer before and after, its share of items, and whether the gain comes from
    it: ``flag`` when at least :data:`DEGENERATE_SHARE` of the newly solved items are answered with the
    most common answer after the pilot and that answer's share rose (a constant answer that is right only
    where it happens to be the reference)."""
    def modal(ans):
        given = [str(a).strip() for a in ans if a is not None and str(a).strip()]
        if not given:
            return None, 0.0
        top = max(sorted(set(given)), key=given.count)
        return top, given.count(top) / len(ans)
    top_b, share_b = modal(answers_before)
    top_a, share_a = modal(answers_after)
    new = [i for i, (b, a) in enumerate(zip(greedy_before, greedy_after)) if a and not b]
    from_top = sum(1 for i in new if top_a is not None and str(answers_after[i] or "").strip() == top_a)
    flag = bool(new) and from_top / len(new) >= DEGENERATE_SHARE and share_a > share_b
    return DegenerateGain(answer_before=top_b, share_before=share_b, answer_after=top_a, share_after=share_a,
                          newly_solved=len(new), newly_solved_with_it=from_top, flag=flag)


def pilot_from_outcomes(before: PreflightResult, after: PreflightResult, *, steps: int, run_dir: str | None = None,
                        training: PilotTraining | None = None) -> Pilot:
    """The change a pilot of ``steps`` GRPO steps made on the same held-out items, paired per item.

    ``before``/``after``: the preflight of the starting model and of the pilot's final model on the
    same items (in the same order, same ``k``; ``after`` may cover a prefix of ``before``'s items);
    ``training``: what the pilot's training did (None: not recorded). Returns the :class:`Pilot`:
    ``sampled`` (mean over items of the share of ``k`` samples that solve it) and ``greedy`` before,
    after and their paired change with a 95% t interval over items, ``training``, ``answers``
    (:func:`degenerate_gain`, where both recorded answers), the pilot's GRPO verdict
    (:func:`pilot_verdict`), the start's, and each family's part where the items hold several."""
    b, a = before.per_item, after.per_item
    if not b or not a:
        raise ValueError("the pilot needs per-item outcomes of both preflights (PreflightResult.per_item)")
    if a["k"] != b["k"]:
        raise ValueError(f"the pilot's preflight sampled k={a['k']} per item, the start's k={b['k']}: use one k")
    n = min(len(a["solved"]), len(b["solved"]))
    if n < MIN_ITEMS:
        raise ValueError(f"the pilot compares {n} item(s); it needs at least {MIN_ITEMS}")
    k = float(b["k"])
    sb, sa = np.asarray(b["solved"][:n], float) / k, np.asarray(a["solved"][:n], float) / k
    gb, ga = np.asarray(b["greedy_ok"][:n], float), np.asarray(a["greedy_ok"][:n], float)
    answers = (degenerate_gain(gb.astype(bool), ga.astype(bool), b["answers"][:n], a["answers"][:n])
               if "answers" in b and "answers" in a else None)
    out = Pilot(steps=int(steps), n_items=n, k=int(k), run_dir=run_dir, start_verdict=before.verdict(),
                training=training, sampled=_paired_change(sb, sa), greedy=_paired_change(gb, ga),
                verdict=CANT_TELL, answers=answers)
    out.verdict = pilot_verdict(out)
    fam = b.get("families")
    if fam is not None and len(set(fam[:n])) > 1:  # per task family, each with its own verdict
        labels = np.asarray(fam[:n])
        out.families = {}
        for lab in dict.fromkeys(fam[:n]):
            m = labels == lab
            start = before.families[lab].verdict if lab in before.families else out.start_verdict
            row = PilotFamily(n_items=int(m.sum()), start_verdict=start, training=training,
                              sampled=_paired_change(sb[m], sa[m]), greedy=_paired_change(gb[m], ga[m]),
                              verdict=CANT_TELL)
            row.verdict = pilot_verdict(row) if row.n_items >= MIN_ITEMS else CANT_TELL
            out.families[lab] = row
    return out


def items_to_decide(change: dict[str, float], n: int) -> tuple[int, str] | None:
    """``(items, verdict)``: about how many items a pilot whose change in sampled success came out
    "can't tell" would need for :func:`pilot_verdict` to decide, were the mean change and its spread the
    same, and the verdict it would then give. The interval's half-width falls as 1/sqrt(items); it must
    shrink below the distance from the mean to 0 (indicated) or to +:data:`PILOT_MIN_GAIN` (not
    indicated), whichever is farther (that one is reached first). None where the interval has no width.
    A planning figure, not a promise: the mean moves as items are added."""
    half = (change["high"] - change["low"]) / 2
    if half <= 0 or n <= 0:
        return None
    m = change["value"]
    gap, verdict = max((m, INDICATED.value), (PILOT_MIN_GAIN - m, NOT_INDICATED.value))
    return int(math.ceil(n * (half / gap) ** 2)), verdict


def _more_evidence(need: tuple[int, str], steps: int, available: int | None) -> str:
    """What an undecided pilot advises: ``need`` (:func:`items_to_decide`) items where the task holds
    them, a longer pilot in any case (on the calibration, a pilot of half the run's steps decided 2 of 6
    such settings, both rightly: docs/results/preflight_calibration.md)."""
    longer = f"a longer pilot (e.g. --pilot {2 * steps})"
    if available is not None and need[0] > available:
        return (f"at this change and spread about {need[0]} items would decide ({need[1]}), more than the "
                f"{available} the task holds: {longer}")
    return f"at this change and spread about {need[0]} items (--n {need[0]}) would decide ({need[1]}), or {longer}"


def signed_ci(c: CI) -> str:
    """``+1.2 points [-0.4, +2.8]``: a change in shares, in points."""
    return f"{c.value * 100:+.1f} points [{c.low * 100:+.1f}, {c.high * 100:+.1f}]"


def pilot_line(p: Pilot) -> str:
    """The number a pilot's verdict rests on, in one line."""
    s, g, t = p.sampled, p.greedy, p.training
    steps = f"{p.steps} step{'s' * (p.steps != 1)}"
    upd = f" ({t.updates} of {t.steps} steps updated, {t.groups_with_signal} groups with signal)" if t else ""
    return (f"pilot of {steps}{upd}: sampled success {s.before:.3f} -> {s.after:.3f} "
            f"({signed_ci(s.change)}), greedy {g.before:.3f} -> {g.after:.3f} ({signed_ci(g.change)}) "
            f"on the same {p.n_items} items x {p.k}")


def _no_update_advice(res: PreflightResult, pilot: Pilot) -> str:
    st = res.stats
    return (f"can't tell: the pilot never updated (none of its {pilot.training.steps} steps had a group with signal: "
            f"every group's rewards were all equal, so the pilot's model is the starting model and its change is 0 "
            f"by construction); to make it learn: more prompts per step (rollout.prompts_per_step), dynamic "
            f"sampling (rollout.dynamic_sampling=true), a longer cap (rollout.max_new_tokens="
            f"{2 * st.max_new_tokens}) or a larger group (rollout.group_size)")


def apply_pilot(res: PreflightResult, pilot: Pilot) -> PreflightResult:
    """Make ``pilot`` (:func:`pilot_from_outcomes`) decide ``res``'s GRPO row: its verdict, the number it
    rests on (the start's moves to the note) and the threshold; the rules that depend on GRPO's verdict
    run again. A pilot that never updated decides nothing. Returns ``res``."""
    res.pilot = pilot
    start = res.method("grpo")
    verdict = pilot.verdict
    start_word = "undecided" if start.verdict == CANT_TELL else str(start.verdict)
    notes = [f"before the pilot: {start_word} ({start.rests_on})"]
    never = pilot.training is not None and pilot.training.updates == 0
    if never:
        notes.append(_no_update_advice(res, pilot))
    need = (items_to_decide(pilot.sampled.change.to_dict(), pilot.n_items) if verdict == CANT_TELL and not never
            else None)
    if need:
        notes.append(f"the pilot's change is too small for its {pilot.n_items} items: " + _more_evidence(
            need, pilot.steps, (res.settings or {}).get("items_available")))
    if verdict == NOT_INDICATED and start.verdict != NOT_INDICATED:
        reach = res.stats.reachable
        if round(reach.value * reach.n) > 0:
            notes.append("items were within reach but this recipe did not convert them in the pilot: check the "
                         "reward on the pilot's completions, or lower optim.lr (docs/when-grpo-helps.md)")
        else:
            notes.append("no item was within reach before the pilot either")
    a = pilot.answers
    if a is not None and a.flag:
        notes.append(f"degenerate: {a.newly_solved_with_it} of the {a.newly_solved} newly solved items are "
                     f"answered {a.answer_after!r}, now the answer to {a.share_after * 100:.0f}% of items "
                     f"(before: {a.share_before * 100:.0f}%): a constant answer, not learning")
    g = dataclasses.replace(start, verdict=verdict, rests_on=pilot_line(pilot), note="; ".join(notes),
                              cause="pilot_no_update" if never else "",
                              threshold=(f"pilot: the change in sampled success is above 0 (indicated) or below "
                                         f"+{PILOT_MIN_GAIN * 100:.0f} points (not indicated), 95% interval over "
                                         f"items; can't tell where the pilot never updated"),
                              source="docs/results/preflight_calibration.md",
                              set_lines=["(none needed: GRPO is the default objective)"] if verdict == INDICATED else [])
    res.methods = rerun(res.methods, res.stats, g)
    return res

