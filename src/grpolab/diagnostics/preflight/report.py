"""``preflight.md``: the verdict, the method table, the pilot, the headroom, why responses fail. Pure."""

from __future__ import annotations

from grpolab.diagnostics.preflight.pilot import items_to_decide, signed_ci
from grpolab.diagnostics.preflight.records import Pilot, PilotFamily
from grpolab.diagnostics.preflight.result import PreflightResult
from grpolab.diagnostics.preflight.stats import FAILURE_REASONS
from grpolab.diagnostics.preflight.verdicts import CANT_TELL, pct

__all__ = ["preflight_markdown"]

#: preflight.md's names for settings whose key alone misleads (``seed`` seeds the measurement's sampling,
#: not training: a pilot trains with the config's trainer.seed, named in its section)
_SETTING_LABELS = {"seed": "sampling seed"}


def preflight_markdown(res: PreflightResult) -> str:
    """``preflight.md``: the verdict, the method table, what the responses do, the numbers."""
    s = res.stats
    lines = ["# Preflight: which method can help here?", "", f"**GRPO: {res.verdict()}** -- {res.message}", ""]
    if res.settings:
        lines += ["- " + ", ".join(f"{_SETTING_LABELS.get(k, k)}: `{v}`" for k, v in res.settings.items()
                                   if v not in (None, "")), ""]
    lines += [f"Measured on {s.n_items} held-out items: 1 greedy and {s.k} sampled responses each "
              f"(the run's temperature; group size {s.group_size}, {s.max_new_tokens} new tokens). "
              f"Intervals: 95% Wilson for shares of items or responses, t over items for means, "
              f"Hanley-McNeil for the AUC.", ""]
    lines += ["| method | verdict | rests on | threshold (source) | use | where the precondition held |",
              "|---|---|---|---|---|---|"]
    for m in res.methods:
        use = "<br>".join(f"`--set {x}`" if "=" in x else x for x in m.set_lines) or "-"
        verdict = f"**{m.verdict}**" + (f": {m.note}" if m.note else "")
        lines.append(f"| {m.method} | {verdict} | {m.rests_on} | {m.threshold} ([{m.source}]({m.source})) | {use} | "
                     f"{m.evidence} |")
    if res.pilot:
        lines += _pilot_section(res.pilot)
    lines += _headroom_section(res)
    lines += _failure_section(res)
    if res.families:
        lines += ["", "## Per family (GRPO)", "", "| family | items | greedy | pass@k | reachable | verdict |",
                  "|---|---|---|---|---|---|"]
        for lab, f in res.families.items():
            h = f.headroom
            lines.append(f"| {lab} | {h.n_items} | {h.greedy.value:.3f} | {h.pass_at_k.value:.3f} | "
                         f"{pct(h.reachable)} | {f.verdict} |")
    return "\n".join(lines) + "\n"


def _pilot_section(p: Pilot) -> list[str]:
    seed = f", trainer.seed {p.trainer_seed}" if p.trainer_seed is not None else ""
    t = p.training
    trained = (f" Its training: {t.updates} of {t.steps} steps updated, {t.groups_with_signal} groups "
               f"with signal in all." if t else "")
    lines = ["", f"## Pilot ({p.steps} GRPO steps of this config{seed}, `{p.run_dir or '-'}`)", "",
             f"The same {p.n_items} held-out items measured again after the pilot (paired; t "
             f"95% interval over items).{trained} Before the pilot GRPO was **{p.start_verdict}**; after it "
             f"**{p.verdict}**.", "", "| measure | before | after | change [95% CI] |", "|---|---|---|---|"]
    for x, label in ((p.sampled, f"sampled success ({p.k} per item)"), (p.greedy, "greedy success")):
        lines.append(f"| {label} | {x.before:.3f} | {x.after:.3f} | {signed_ci(x.change)} |")
    a = p.answers
    if a:
        lines.append(f"| most common greedy answer's share of items | {a.share_before * 100:.0f}% "
                     f"(`{a.answer_before}`) | {a.share_after * 100:.0f}% (`{a.answer_after}`) | "
                     + ("**flagged: the gain comes from a constant answer**" if a.flag else "-") + " |")
    if p.families:
        lines += ["", "| family | items | verdict before | sampled success: before -> after, change | "
                  "greedy: before -> after, change | verdict after |", "|---|---|---|---|---|---|"]
        for lab, f in p.families.items():
            lines.append(f"| {lab} | {f.n_items} | {f.start_verdict} | {f.sampled.before:.3f} -> "
                         f"{f.sampled.after:.3f}, {signed_ci(f.sampled.change)} | "
                         f"{f.greedy.before:.3f} -> {f.greedy.after:.3f}, "
                         f"{signed_ci(f.greedy.change)} | {f.verdict}{_need(f)} |")
    return lines


def _headroom_section(res: PreflightResult) -> list[str]:
    s = res.stats
    lines = ["", "## Headroom", "", "| measure | value [95% CI] |", "|---|---|"]
    for key, label in (("greedy", "greedy success"), ("sampled", f"mean sample ({s.k} per item)"),
                       ("sampled_minus_greedy", "mean sample - greedy (paired per item)"),
                       ("pass_at_k", f"pass@{s.k} (items some sample solves)"),
                       ("sample_solves", "greedy fails, a sample solves"),
                       ("answer_in_failure", "greedy fails, no sample solves, the answer is in a failed response"),
                       ("reachable", "reachable (the two rows above)"),
                       ("all_equal", f"all-equal groups at G={s.group_size}"),
                       ("mixed_items", "items where a group can have mixed rewards")):
        c = getattr(s, key)
        if key == "sampled_minus_greedy" and c is not None:
            lines.append(f"| {label} | {signed_ci(c)} |")
        elif c is not None:
            lines.append(f"| {label} | {pct(c)} |")
    if s.modal_answer is not None:
        lines.append(f"| items answered with the most common greedy answer (`{s.modal_answer_text}`) | "
                     f"{pct(s.modal_answer)} |")
    return lines


def _failure_section(res: PreflightResult) -> list[str]:
    s = res.stats
    r = s.responses
    lines = ["", f"## Why sampled responses fail ({r.failures} of {r.responses} failed)", "",
             "| reason | share of failures [95% CI] |", "|---|---|"]
    for reason in FAILURE_REASONS:
        if r.reasons.get(reason):
            lines.append(f"| {reason} | {pct(r.reasons[reason])} |")
    if r.answer_in_failed_response:
        lines.append(f"| (the reference answer appears in the failed response) | {pct(r.answer_in_failed_response)} |")
    lines += ["", "Greedy failures: " + ", ".join(f"{k} {v}" for k, v in s.greedy_failures.items()) + "."]
    lc = s.length_coupling
    if s.response_tokens:
        lines += ["", f"Mean response length {s.response_tokens.value:.1f} tokens."]
    if lc is not None and lc.fail_success_length_ratio is not None:
        lines.append(f"Within-group fail/success length ratio {lc.fail_success_length_ratio:.3f} "
                     f"[{lc.ratio_ci[0]:.3f}, {lc.ratio_ci[1]:.3f}] over {lc.mixed_groups} mixed groups.")
    return lines


def _need(f: PilotFamily) -> str:
    need = items_to_decide(f.sampled.change.to_dict(), f.n_items) if f.verdict == CANT_TELL else None
    return f" (about {need[0]} items of this family would decide: {need[1]})" if need else ""
