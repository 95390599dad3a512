"""Before a run: which method can help here? Pure statistics and verdicts (docs/when-grpo-helps.md).

The measuring part (:mod:`grpolab.measure.preflight`) samples the starting model through the run's
collector and hands this module per-item, per-response outcomes; nothing here calls a model. From
them, with the sample size and a 95% interval on every number:

* **headroom**: greedy success, the mean sample, pass@k, and the *reachable* share -- the items
  greedy fails that a sample solves (``sample_solves``) or whose reference answer already appears in
  a failed response (``answer_in_failure``: cut at the cap, or right but in the wrong form). pass@k
  at a fixed k misses the second kind: on SmolLM2 sums (docs/results/real_model.md) pass@8 was 7
  points over greedy, yet 74% of responses ran past the 12-token cap with the sum already written,
  and GRPO gained 47-61 points by teaching the model to stop;
* **why responses fail**: cut at the cap (no stop token), no parseable answer (the verifier's
  ``info`` found no answer in the expected form), wrong answer, verifier error (``info["error"]``);
* **signal at the run's group size**: the share of prompt groups whose rewards are all equal
  (zero advantage: nothing to learn from) and the share with mixed rewards;
* **sign-length coupling**: within-group fail/success length ratio (the training metric
  ``length/mixed_ratio``) and the mean response length;
* **teacher readability** (tasks with privileged text): first-wrong-token AUC and response AUC
  (:mod:`grpolab.diagnostics.readability`), with a Hanley-McNeil interval.

:func:`method_table` turns these into one verdict per method -- ``indicated``, ``not indicated`` or
``can't tell`` -- each with the number it rests on, the threshold and where the threshold comes from
(a page under docs/results/), what was measured where the precondition held, and the ``--set``
lines to use. A verdict is "not indicated" only when the interval excludes the threshold: a handful
of items gives "can't tell", never "no headroom".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from grpolab.diagnostics.readability import READABLE_AUC
from grpolab.diagnostics.inference import mean_interval
from grpolab.diagnostics.stats import CI, bootstrap_ci, pass_at_k, wilson_interval

__all__ = [
    "FAILURE_REASONS", "INDICATED", "MIN_ITEMS", "NOT_INDICATED", "CANT_TELL", "MethodVerdict", "PreflightResult",
    "THRESHOLDS", "all_equal_share", "answer_in_text", "auc_interval", "failure_reason", "length_coupling",
    "method_table", "preflight_from_outcomes", "preflight_markdown", "verdicts_from_counts", "wilson",
    "PILOT_MIN_GAIN", "apply_pilot", "change_verdict", "pilot_from_outcomes", "pilot_record", "pilot_verdict",
]

INDICATED, NOT_INDICATED, CANT_TELL = "indicated", "not indicated", "can't tell"
CUT, UNPARSED, WRONG, ERROR = "cut at the cap", "no parseable answer", "wrong answer", "verifier error"
FAILURE_REASONS = (CUT, UNPARSED, WRONG, ERROR)
SOLVED = 1.0 - 1e-9

#: Every threshold the verdicts use, with the page it comes from.
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

#: What was measured where each method's precondition held (docs/results/): shown next to the verdict.
EVIDENCE: dict[str, str] = {
    "GRPO": "SmolLM2 sums: +47 to +61 points in 10 steps (docs/results/real_model.md); tiny arith with "
            "pass@k headroom +5.8, without none (docs/results/headroom.md)",
    "dynamic sampling": "arith: trained groups with signal 61-64% -> 97-98%, accuracy +3.7/+5.7 points at "
                        "equal steps, 1.5-1.6x the generation (docs/results/dynamic_sampling.md)",
    "overlong shaping / truncation masking": "no grpolab study yet; plain GRPO removed SmolLM2's truncation "
                                             "(0.74 -> 0.005, docs/results/real_model.md)",
    "RLSD / GEAR": "where the teacher read (AUC 0.957): RLSD -0.1, GEAR +0.2 points vs GRPO (null, "
                   "docs/results/credit_teacher.md); SmolLM2 (AUC 0.771): RLSD +2.0 [-0.9, +6.4], GEAR -14.5 "
                   "(docs/results/real_credit.md)",
    "Balanced Aggregation": "where the ratio was 1.354: balanced -7.0 [-12.6, -1.3] points vs token "
                            "(docs/results/aggregation_coupled.md)",
    "CTPO / GSPO": "where responses drifted: GSPO +2.8 [+1.1, +4.5], CTPO -0.3 points vs the token ratio "
                   "(docs/results/ratio_long.md)",
}


def wilson(k: int, n: int) -> CI:
    """``k / n`` with its 95% Wilson score interval (:func:`grpolab.diagnostics.stats.wilson_interval`);
    NaN value and ``[0, 1]`` when ``n = 0``."""
    lo, hi = wilson_interval(int(k), int(n))
    return CI(k / n if n else float("nan"), lo, hi, int(n))


def auc_interval(auc: float | None, n_pos: int, n_neg: int) -> CI | None:
    """A 95% interval for an AUC from ``n_pos`` positive and ``n_neg`` negative units (Hanley & McNeil
    1982, normal approximation, clipped to [0, 1]); None when the AUC is undefined."""
    if auc is None or n_pos < 1 or n_neg < 1 or not math.isfinite(auc):
        return None
    q1, q2 = auc / (2 - auc), 2 * auc * auc / (1 + auc)
    var = (auc * (1 - auc) + (n_pos - 1) * (q1 - auc * auc) + (n_neg - 1) * (q2 - auc * auc)) / (n_pos * n_neg)
    half = 1.96 * math.sqrt(max(var, 0.0))
    return CI(auc, max(0.0, auc - half), min(1.0, auc + half), n_neg)


_NO_ANSWER_FORMS = {"empty", "other", "none", "no answer"}


def failure_reason(score: float, info: dict | None, finished: bool) -> str | None:
    """Why one response failed, from the verifier's ``info`` and whether it ended with a stop token:
    None when it solved the item (``score >= 1``), else one of :data:`FAILURE_REASONS`.

    A verifier error wins; then a response cut at the length cap; then "no parseable answer" when the
    verifier says it found none (``extracted`` None, ``form`` empty/other, ``valid`` False or a
    ``method`` of None) and "wrong answer" otherwise.
    """
    if score >= SOLVED:
        return None
    info = info or {}
    if "error" in info:
        return ERROR
    if not finished:
        return CUT
    no_answer = (("extracted" in info and info["extracted"] in (None, ""))
                 or str(info.get("form", "")).lower() in _NO_ANSWER_FORMS or info.get("valid") is False
                 or ("method" in info and info["method"] in (None, "none")))
    if no_answer:
        return UNPARSED
    return WRONG


def answer_in_text(text: str, reference: Any) -> bool:
    """Whether the reference answer appears in ``text`` as a whole token (``18`` in ``"= 18."``, not in
    ``"118"`` or ``"18.5"``); False for a missing, empty or long (> 64 characters) reference."""
    if reference is None or not isinstance(text, str):
        return False
    ref = str(reference).strip()
    if not ref or len(ref) > 64:
        return False
    return re.search(r"(?<![\w.])" + re.escape(ref) + r"(?![\w]|\.\d)", text) is not None


def all_equal_share(rewards: Sequence[Sequence[float]], group_size: int) -> np.ndarray:
    """``[N]`` each item's probability that a group of ``group_size`` of its sampled rewards is all equal.

    With ``k = group_size`` samples it is 0/1 (were they all equal); with more it is the exact share of
    the ``C(k, G)`` subsets for 0/1 rewards (``(C(c, G) + C(k - c, G)) / C(k, G)``, c solved) and 0/1 on
    the first G samples for graded rewards; with fewer samples than G, ``p^G + (1 - p)^G`` at the
    item's solve rate (an estimate, biased upward)."""
    out = []
    G = int(group_size)
    for r in rewards:
        r = [float(x) for x in r]
        k = len(r)
        if k == 0:
            raise ValueError("all_equal_share needs at least one sample per item")
        binary = all(x in (0.0, 1.0) for x in r)
        c = sum(x >= SOLVED for x in r)
        if k >= G and binary:
            out.append((math.comb(c, G) + math.comb(k - c, G)) / math.comb(k, G))
        elif k >= G:
            out.append(float(max(r[:G]) == min(r[:G])))
        else:
            p = c / k
            out.append(p**G + (1 - p) ** G)
    return np.asarray(out, dtype=float)


def _ratio_of_means(x: np.ndarray) -> float:
    """``[G, 2]`` (failure mean, success mean) per group -> mean of column 0 over mean of column 1."""
    return float(x[:, 0].mean() / x[:, 1].mean()) if x[:, 1].mean() > 0 else float("nan")


def length_coupling(lengths: Sequence[Sequence[float]], solved: Sequence[Sequence[bool]], *, seed: int = 0,
                    ci: bool = True) -> dict:
    """Sign-length coupling: lengths of failed and solved responses *within* prompt groups.

    Over the groups with both (mixed groups): ``fail_success_length_ratio`` is the mean of the
    failures' mean lengths over the mean of the successes' (the training metric ``length/mixed_ratio``,
    :func:`grpolab.train.step_metrics.within_group_lengths`; the precondition of Balanced Aggregation,
    docs/results/aggregation_coupled.md), with a bootstrap interval over mixed groups (``ratio_ci``,
    when ``ci``); ``mean_group_ratio`` the mean of the per-group ratios; ``fail_longer_frac`` /
    ``fail_shorter_frac`` the shares of the mixed groups' failures longer / shorter than their group's
    mean success; ``pooled_fail_success_ratio`` the same ratio over all responses (not within groups:
    it mixes easy and hard prompts). A field with nothing to average is None.

    Args:
        lengths / solved: ``[G][k_g]`` per group (prompt), its responses' lengths and outcomes.
    """
    inc, cor, ratios, longer, shorter, n_fail = [], [], [], 0, 0, 0
    all_f, all_s = [], []
    for L, S in zip(lengths, solved):
        f = [float(x) for x, s in zip(L, S) if not s]
        s_ = [float(x) for x, s in zip(L, S) if s]
        all_f += f
        all_s += s_
        if f and s_:
            mf, ms = sum(f) / len(f), sum(s_) / len(s_)
            inc.append(mf)
            cor.append(ms)
            ratios.append(mf / max(ms, 1e-9))
            longer += sum(x > ms for x in f)
            shorter += sum(x < ms for x in f)
            n_fail += len(f)
    total = len(all_f) + len(all_s)
    mean = lambda v: sum(v) / len(v) if v else None  # noqa: E731
    out: dict[str, Any] = {
        "responses": total, "correct_frac": len(all_s) / max(total, 1), "mixed_groups": len(inc),
        "fail_success_length_ratio": None, "mean_group_ratio": mean(ratios),
        "mean_fail_tokens_mixed": mean(inc), "mean_success_tokens_mixed": mean(cor),
        "pooled_fail_success_ratio": (mean(all_f) / mean(all_s)) if all_f and all_s and sum(all_s) > 0 else None,
        "mean_response_tokens": (sum(all_f) + sum(all_s)) / total if total else None,
        "fail_longer_frac": longer / n_fail if n_fail else None,
        "fail_shorter_frac": shorter / n_fail if n_fail else None,
    }
    if inc and sum(cor) > 0:
        out["fail_success_length_ratio"] = sum(inc) / sum(cor)
        if ci:
            pairs = np.stack([np.asarray(inc), np.asarray(cor)], axis=1)
            c = bootstrap_ci(pairs, _ratio_of_means, seed=seed, n_boot=1000)
            out["ratio_ci"] = [c.low, c.high]
    return out


@dataclass
class MethodVerdict:
    """One row of the method table."""

    method: str
    verdict: str  # INDICATED / NOT_INDICATED / CANT_TELL
    rests_on: str  # the number and its interval, with the sample size
    threshold: str
    source: str  # the docs/results/ page the threshold comes from
    set_lines: list[str] = field(default_factory=list)
    note: str = ""
    evidence: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class PreflightResult:
    """Everything the preflight measured, and the verdicts (``to_dict`` is ``preflight.json``)."""

    stats: dict[str, Any]
    methods: list[MethodVerdict]
    families: dict[str, dict[str, Any]] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    #: per measured item: ``greedy_ok`` [N] bool, ``solved`` [N] samples that solved it (of ``k``)
    per_item: dict[str, Any] = field(default_factory=dict)
    #: :func:`pilot_from_outcomes` when a pilot ran (``grpolab preflight --pilot STEPS``)
    pilot: dict[str, Any] | None = None

    def verdict(self, method: str = "GRPO") -> str:
        return next(m.verdict for m in self.methods if m.method == method)

    @property
    def message(self) -> str:
        g = next(m for m in self.methods if m.method == "GRPO")
        return f"GRPO {g.verdict}: {g.rests_on}" + (f"; {g.note}" if g.note else "")

    def calibration(self) -> dict[str, Any]:
        """The compact record a calibration keeps per setting."""
        s = self.stats
        return {"grpo": self.verdict("GRPO"), "verdicts": {m.method: m.verdict for m in self.methods},
                "n_items": s["n_items"], "k": s["k"], "greedy": s["greedy"]["value"],
                "pass_at_k": s["pass_at_k"]["value"], "reachable": s["reachable"]["value"],
                "reachable_ci": [s["reachable"]["low"], s["reachable"]["high"]],
                "sample_solves": s["sample_solves"]["value"], "answer_in_failure": s["answer_in_failure"]["value"],
                "cut": s["responses"]["cut"]["value"], "all_equal": s["all_equal"]["value"],
                "gain_ceiling": s["gain_ceiling"],
                **({"grpo_start": self.pilot["start_verdict"], "pilot": pilot_record(self.pilot)}
                   if self.pilot else {})}

    def to_dict(self) -> dict[str, Any]:
        return {"settings": self.settings, "verdict": self.verdict("GRPO"), "message": self.message,
                "stats": self.stats, "methods": [m.to_dict() for m in self.methods],
                "families": self.families, "calibration": self.calibration(), "thresholds": THRESHOLDS,
                "pilot": self.pilot, "per_item": self.per_item}


def _ci_dict(c: CI) -> dict[str, float]:
    return c.to_dict()


def _item_share(values: Sequence[float]) -> CI:
    """The mean of per-item shares in [0, 1], with a Wilson interval at the number of *items* (responses
    of one item are not independent: one item's 8 cut responses are one observation, not eight)."""
    v = np.asarray(values, dtype=float)
    n = len(v)
    if n == 0:
        return CI(float("nan"), 0.0, 1.0, 0)
    lo, hi = wilson_interval(int(round(float(v.sum()))), n)
    m = float(v.mean())
    return CI(m, min(lo, m), max(hi, m), n)


def _pct(c: CI | dict) -> str:
    d = c if isinstance(c, dict) else c.to_dict()
    return f"{d['value'] * 100:.1f}% [{d['low'] * 100:.1f}, {d['high'] * 100:.1f}] (n={d['n']})"


def _headroom_stats(greedy_ok: np.ndarray, counts: np.ndarray, k: int, near: np.ndarray, seed: int) -> dict:
    n = len(greedy_ok)
    fail = ~greedy_ok
    solves = fail & (counts > 0)
    answer = fail & ~(counts > 0) & near
    return {
        "n_items": n, "k": k,
        "greedy": _ci_dict(wilson(int(greedy_ok.sum()), n)),
        "sampled": _ci_dict(mean_interval(counts / k)),
        "pass_at_k": _ci_dict(wilson(int((counts > 0).sum()), n)),
        "sample_solves": _ci_dict(wilson(int(solves.sum()), n)),
        "answer_in_failure": _ci_dict(wilson(int(answer.sum()), n)),
        "reachable": _ci_dict(wilson(int((solves | answer).sum()), n)),
    }


def _response_stats(sampled_reasons, sampled_answer_seen, total: int) -> dict[str, Any]:
    """Why sampled responses fail (what GRPO trains on), the share cut at the cap (an item-level
    interval) and how often the reference answer is in a failed / cut response."""
    flat = [x for r in (sampled_reasons or []) for x in r]
    resp: dict[str, Any] = {"responses": total}
    fails = [x for x in flat if x is not None]
    for reason in FAILURE_REASONS:
        resp[reason] = _ci_dict(wilson(sum(x == reason for x in fails), len(fails))) if fails else None
    resp["cut"] = _ci_dict(_item_share([sum(x == CUT for x in r) / len(r) for r in sampled_reasons])
                           if sampled_reasons else wilson(0, 0))
    pairs = [(a, x) for r, rr in zip(sampled_answer_seen or [], sampled_reasons or []) for a, x in zip(r, rr)]
    seen_fail = [a for a, x in pairs if x is not None]
    cut_seen = [a for a, x in pairs if x == CUT]
    resp["failures"] = len(fails)
    resp["answer_in_failed_response"] = _ci_dict(wilson(sum(seen_fail), len(seen_fail))) if seen_fail else None
    resp["answer_in_cut_response"] = _ci_dict(wilson(sum(cut_seen), len(cut_seen))) if cut_seen else None
    return resp


def _family_stats(families, n, greedy_ok, counts, k, near, eq, seed) -> dict[str, dict[str, Any]]:
    """Each family's headroom statistics and GRPO verdict (none when there is one family)."""
    fams: dict[str, dict[str, Any]] = {}
    if families is None:
        return fams
    if len(families) != n:
        raise ValueError("families must have one label per item")
    labels = sorted(set(families), key=lambda s: (len(s), s))
    if len(labels) < 2:
        return fams
    for lab in labels:
        idx = np.array([f == lab for f in families])
        fs = _headroom_stats(greedy_ok[idx], counts[idx], k, near[idx], seed)
        fs["all_equal"] = _ci_dict(_item_share(eq[idx]))
        fs["mixed_items"] = _ci_dict(wilson(int((eq[idx] < 1).sum()), int(idx.sum())))
        v = _grpo(fs)
        if fs["n_items"] < MIN_ITEMS:
            v.verdict = CANT_TELL
        fs["verdict"], fs["rests_on"] = v.verdict, v.rests_on
        fams[lab] = fs
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
        families: ``[N]`` family label per item (:func:`grpolab.diagnostics.headroom.family_of`).
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
    greedy_ok = g >= SOLVED
    counts = np.array([sum(x >= SOLVED for x in r) for r in S], dtype=float)
    g_seen = np.asarray(greedy_answer_seen if greedy_answer_seen is not None else [False] * n, dtype=bool)
    s_seen = np.array([any(r) for r in sampled_answer_seen] if sampled_answer_seen is not None else [False] * n,
                      dtype=bool)
    near = g_seen | s_seen
    stats = _headroom_stats(greedy_ok, counts, k, near, seed)
    stats["group_size"] = int(group_size)
    stats["max_new_tokens"] = int(max_new_tokens)
    stats["pass_at_k_unbiased"] = {str(j): float(np.mean([pass_at_k(k, int(c), j) for c in counts]))
                                   for j in sorted({j for j in (1, 2, 4, 8, 16, k) if j <= k})}
    eq = all_equal_share(S, group_size)
    stats["all_equal"] = _ci_dict(_item_share(eq))
    stats["mixed_items"] = _ci_dict(wilson(int((eq < 1).sum()), n))  # items where some group of G can disagree
    stats["responses"] = _response_stats(sampled_reasons, sampled_answer_seen, n * k)
    gfail = [x for x in (greedy_reasons or []) if x is not None]
    stats["greedy_failures"] = {reason: sum(x == reason for x in gfail) for reason in FAILURE_REASONS}
    if sampled_lengths is not None:
        L = [list(map(float, r)) for r in sampled_lengths]
        stats["response_tokens"] = _ci_dict(mean_interval([sum(r) / len(r) for r in L]))
        stats["length_coupling"] = length_coupling(L, [[x >= SOLVED for x in r] for r in S], seed=seed)
    else:
        stats["response_tokens"] = None
        stats["length_coupling"] = None
    stats["readability"] = readability
    stats["has_privileged"] = bool(has_privileged)
    stats["off_policy"] = bool(off_policy)
    r = stats["reachable"]
    stats["gain_ceiling"] = r["high"]  # compared with measured gains in the calibration; not a bound
    methods = method_table(stats)
    fams = _family_stats(families, n, greedy_ok, counts, k, near, eq, seed)
    return PreflightResult(stats=stats, methods=methods, families=fams, settings=dict(settings or {}),
                           per_item={"greedy_ok": greedy_ok.tolist(), "solved": counts.astype(int).tolist(), "k": k,
                                     **({"families": list(families)} if families is not None else {})})


def _grpo(s: dict) -> MethodVerdict:
    t, sat, sig = THRESHOLDS["reachable"]["value"], THRESHOLDS["saturated"]["value"], THRESHOLDS["signal"]["value"]
    r, gr, mixed = s["reachable"], s["greedy"], s["mixed_items"]
    n = s["n_items"]
    rests = (f"reachable {_pct(r)}: a sample solves {s['sample_solves']['value'] * 100:.1f}%, the answer is in a "
             f"failed response {s['answer_in_failure']['value'] * 100:.1f}%; greedy {gr['value']:.3f}, "
             f"pass@{s['k']} {s['pass_at_k']['value']:.3f}; groups with signal possible on "
             f"{mixed['value'] * 100:.0f}% of items")
    thr = (f"reachable >= {t * 100:.0f}% (interval above), some item with signal (not indicated when the "
           f"interval of items with signal is below {sig * 100:.0f}%); greedy < {sat:.2f}")
    src = THRESHOLDS["reachable"]["source"]
    sets = ["(none needed: GRPO is the default objective)"]
    if gr["low"] >= sat:
        return MethodVerdict("GRPO", NOT_INDICATED, rests, thr, src, [], f"saturated: greedy already solves "
                             f"{gr['value']:.1%}; RL can only keep it", EVIDENCE["GRPO"])
    if r["high"] < t:
        return MethodVerdict("GRPO", NOT_INDICATED, rests, thr, src, [],
                             f"no headroom on {n} items: at most {r['high'] * 100:.1f}% of items are within reach",
                             EVIDENCE["GRPO"])
    if mixed["high"] < sig:
        return MethodVerdict("GRPO", NOT_INDICATED, rests, thr, src, [],
                             f"no signal: at most {mixed['high'] * 100:.1f}% of items give a group with mixed "
                             f"rewards at this group size; fix the prompt/format, or raise rollout.group_size "
                             f"or rollout.temperature", EVIDENCE["GRPO"])
    if r["low"] >= t and mixed["value"] > 0:
        note = ""
        if mixed["value"] < sig:
            note = (f"sparse signal: only {mixed['value'] * 100:.1f}% of items can give a group with mixed rewards; "
                    f"it sufficed on SmolLM2 2-digit + 1-digit sums (2%, +27 points: one habit, running past the "
                    f"cap, fails many items at once; docs/results/preflight_calibration.md). ")
        if s["answer_in_failure"]["value"] > s["sample_solves"]["value"]:
            note += ("most of the reach is answers already written in failed responses (cut at the cap or in "
                    "the wrong form): pass@k underestimates it (docs/results/real_model.md)")
        return MethodVerdict("GRPO", INDICATED, rests, thr, src, sets, note, EVIDENCE["GRPO"])
    return MethodVerdict("GRPO", CANT_TELL, rests, thr, src, [],
                         f"can't tell yet on {n} items: the interval spans the threshold; measure more items "
                         f"(raise --budget or --n)", EVIDENCE["GRPO"])


#: Below this many items every verdict is "can't tell" (the intervals alone would let one item decide).
MIN_ITEMS = 8


def method_table(s: dict) -> list[MethodVerdict]:
    """One :class:`MethodVerdict` per method from :func:`preflight_from_outcomes`'s statistics; with
    fewer than :data:`MIN_ITEMS` items every verdict that rests on the items is "can't tell"."""
    rows = _method_rows(s)
    if s["n_items"] < MIN_ITEMS:
        for m in rows:
            if m.verdict != CANT_TELL and not m.rests_on.startswith("the task's items carry no"):
                m.note = (f"can't tell yet: {s['n_items']} item(s) measured, {MIN_ITEMS} needed at least "
                          f"(would be '{m.verdict}')")
                m.verdict, m.set_lines = CANT_TELL, []
    return rows


def _method_rows(s: dict) -> list[MethodVerdict]:
    rows = [_grpo(s)]
    rows += [_dynamic_sampling(s, rows[0].verdict), _overlong(s), _credit(s), _balanced(s), _ratio(s)]
    return rows


def _dynamic_sampling(s: dict, grpo: str) -> MethodVerdict:
    grpo_no = grpo == NOT_INDICATED
    oversample = 1.0
    a, mixed = s["all_equal"], s["mixed_items"]
    t, sig = THRESHOLDS["all_equal"]["value"], THRESHOLDS["signal"]["value"]
    rests = f"all-equal groups at G={s['group_size']}: {_pct(a)}"
    thr = f"all-equal >= {t * 100:.0f}% and items with signal >= {sig * 100:.0f}%"
    src = THRESHOLDS["all_equal"]["source"]
    cost = 1.0 / max(1.0 - a["value"], 1.0 / 16)  # groups sampled per group kept
    if cost >= 1.5:
        oversample = float(min(16.0, round(cost, 1)))
    ds_sets = ["rollout.dynamic_sampling=true", "rollout.dynamic_sampling_rounds=4"] + (
        [f"rollout.dynamic_sampling_oversample={oversample:g}"] if oversample > 1 else [])
    if grpo_no or a["high"] < t or mixed["high"] < sig:
        v, sets = NOT_INDICATED, []
        note = ("GRPO is not indicated" if grpo_no else "few groups to drop" if a["high"] < t
                else "nothing to fill the batch with")
    elif a["low"] >= t and grpo == INDICATED:
        v, note, sets = INDICATED, (f"{a['value'] * 100:.0f}% of groups would train on nothing; the filter samples "
                                    f"about {cost:.1f}x the groups per step" + (" or more" if cost >= 16 else "")),\
            ds_sets
    else:
        v, note, sets = CANT_TELL, ("the interval spans the threshold" if a["low"] < t
                                    else "GRPO's own verdict is not decided"), []
    return MethodVerdict("dynamic sampling", v, rests, thr, src, sets, note, EVIDENCE["dynamic sampling"])


def _overlong(s: dict) -> MethodVerdict:
    resp = s["responses"]
    cut = resp["cut"]
    t = THRESHOLDS["cut"]["value"]
    seen = resp.get("answer_in_cut_response")
    rests = f"responses cut at the {s['max_new_tokens']}-token cap: {_pct(cut)}" + (
        f"; the answer is already in {seen['value'] * 100:.0f}% of the cut ones" if seen else "")
    thr = f"cut >= {t * 100:.0f}%"
    src = THRESHOLDS["cut"]["source"]
    if cut["n"] == 0:
        v, note, sets = CANT_TELL, "no responses measured", []
    elif cut["high"] < t:
        v, note, sets = NOT_INDICATED, "few responses reach the cap", []
    elif cut["low"] >= t:
        buf = max(1, s["max_new_tokens"] // 4)
        v = INDICATED
        share = f"{seen['value'] * 100:.0f}%" if seen else "none"
        note = (f"responses run past the cap (the answer is in {share} of the cut ones): either a longer cap if they "
                f"are still working, or a graded overlong penalty; not truncation masking "
                f"(objective.mask_truncated=true), which hides exactly these failures from the loss -- on SmolLM2 "
                f"sums they were what GRPO learned from")
        sets = [f"rollout.max_new_tokens={s['max_new_tokens'] * 2}",
                f"objective.overlong_buffer={buf}"]
    else:
        v, note, sets = CANT_TELL, "the interval spans the threshold", []
    return (MethodVerdict("overlong shaping / truncation masking", v, rests, thr, src, sets, note,
                              EVIDENCE["overlong shaping / truncation masking"]))

def _credit(s: dict) -> MethodVerdict:
    t = THRESHOLDS["teacher_auc"]["value"]
    rd = s.get("readability")
    thr, src = f"first-wrong-token AUC >= {t}", THRESHOLDS["teacher_auc"]["source"]
    rl_sets = ["credit.name=rlsd", "credit.lam=0.5"]
    if not s.get("has_privileged"):
        return (MethodVerdict("RLSD / GEAR", NOT_INDICATED, "the task's items carry no privileged text", thr, src,
                                  [], "no reference for a self-teacher to read", EVIDENCE["RLSD / GEAR"]))
    elif not rd or rd.get("teacher_auc") is None:
        why = "not measured (within the budget)" if not rd else "undefined: no wrong response could be localised"
        return (MethodVerdict("RLSD / GEAR", CANT_TELL, f"teacher readability {why}", thr, src, [],
                                  "measured on the first chunk of >= 4 items: `grpolab preflight` without a "
                                  "tight --budget", EVIDENCE["RLSD / GEAR"]))
    else:
        ci = auc_interval(rd["teacher_auc"], int(rd.get("tokens_before") or 0),
                          int(rd.get("wrong_responses_localised") or 0))
        resp_auc = rd.get("response_auc")
        rests = (f"first-wrong-token AUC {rd['teacher_auc']:.3f}" + (f" [{ci.low:.3f}, {ci.high:.3f}]" if ci else "")
                 + f" ({rd.get('wrong_responses_localised')} localised wrong responses)"
                 + (f"; response AUC {resp_auc:.3f}" if resp_auc is not None else ""))
        if ci is None:
            v = CANT_TELL
        elif ci.low >= t:
            v = INDICATED
        elif ci.high < t:
            v = NOT_INDICATED
        else:
            v = CANT_TELL
        return (MethodVerdict("RLSD / GEAR", v, rests, thr, src, rl_sets if v == INDICATED else [],
                                  "precondition only: where it held, RLSD and GEAR did not beat GRPO"
                                  if v == INDICATED else "", EVIDENCE["RLSD / GEAR"]))

def _balanced(s: dict) -> MethodVerdict:
    t = THRESHOLDS["length_ratio"]["value"]
    lc = s.get("length_coupling")
    thr, src = f"within-group fail/success length ratio >= {t}", THRESHOLDS["length_ratio"]["source"]
    if not lc or lc.get("fail_success_length_ratio") is None:
        return (MethodVerdict("Balanced Aggregation", CANT_TELL, "no group holds both a success and a failure",
                                  thr, src, [], "", EVIDENCE["Balanced Aggregation"]))
    else:
        lo, hi = lc["ratio_ci"]
        rests = (f"ratio {lc['fail_success_length_ratio']:.3f} [{lo:.3f}, {hi:.3f}] over {lc['mixed_groups']} mixed "
                 f"groups ({lc['responses']} responses)")
        v = INDICATED if lo >= t else (NOT_INDICATED if hi < t else CANT_TELL)
        return (MethodVerdict("Balanced Aggregation", v, rests, thr, src,
                                  ["objective.aggregation=balanced"] if v == INDICATED else [],
                                  "precondition only: where it held, balanced lost to token aggregation"
                                  if v == INDICATED else "", EVIDENCE["Balanced Aggregation"]))

def _ratio(s: dict) -> MethodVerdict:
    t = THRESHOLDS["drift_length"]["value"]
    rt = s.get("response_tokens")
    thr = f"off-policy updates and mean response >= {t} tokens"
    src = THRESHOLDS["drift_length"]["source"]
    if rt is None:
        return (MethodVerdict("CTPO / GSPO", CANT_TELL, "response lengths not measured", thr, src, [], "",
                                  EVIDENCE["CTPO / GSPO"]))
    else:
        rests = f"mean response {rt['value']:.1f} tokens [{rt['low']:.1f}, {rt['high']:.1f}]; " + (
            "off-policy (several optimizer steps per batch or a policy lag)" if s.get("off_policy")
            else "on-policy (one optimizer step per batch: the ratio is 1)")
        if not s.get("off_policy") or rt["high"] < t / 2:
            v = NOT_INDICATED
        elif rt["low"] >= t:
            v = INDICATED
        else:
            v = CANT_TELL
        return (MethodVerdict("CTPO / GSPO", v, rests, thr, src, ["preset=gspo"] if v == INDICATED else [],
                                  "GSPO is the lead; CTPO was a null result" if v == INDICATED else "",
                                  EVIDENCE["CTPO / GSPO"]))

def verdicts_from_counts(n_items: int, greedy_solved: int, some_sample_solved: int, *, k: int,
                         group_size: int | None = None) -> dict[str, Any]:
    """The GRPO verdict from recorded aggregate counts (an earlier study that kept greedy and pass@k only).

    Assumes the items greedy solves are among those some sample solves (then the reachable share is
    ``pass@k - greedy``); without failure reasons, ``answer_in_failure`` is 0. ``group_size = k`` unless
    given: an item with mixed samples counts as one with signal."""
    if not 0 <= greedy_solved <= n_items or not 0 <= some_sample_solved <= n_items:
        raise ValueError("counts must lie in [0, n_items]")
    reach = max(0, some_sample_solved - greedy_solved)
    s = {"n_items": n_items, "k": k, "greedy": _ci_dict(wilson(greedy_solved, n_items)),
         "pass_at_k": _ci_dict(wilson(some_sample_solved, n_items)),
         "sample_solves": _ci_dict(wilson(reach, n_items)), "answer_in_failure": _ci_dict(wilson(0, n_items)),
         "reachable": _ci_dict(wilson(reach, n_items)),
         # items some sample solves but not all (a lower bound on the items with signal)
         "mixed_items": _ci_dict(wilson(max(reach, 1 if some_sample_solved < n_items and some_sample_solved else 0),
                                        n_items))}
    v = _grpo(s)
    if n_items < MIN_ITEMS:
        v.verdict = CANT_TELL
    return {"grpo": v.verdict, "rests_on": v.rests_on, "n_items": n_items, "k": k,
            "greedy": s["greedy"]["value"], "pass_at_k": s["pass_at_k"]["value"],
            "reachable": s["reachable"]["value"], "reachable_ci": [s["reachable"]["low"], s["reachable"]["high"]],
            "gain_ceiling": s["reachable"]["high"], "from": "recorded counts (greedy, pass@k): no failure reasons"}


#: The pilot's "not indicated": the 95% interval of the change in sampled success after the pilot lies
#: below this (the calibration counts a measured gain within +-2 points as none).
PILOT_MIN_GAIN = 0.02


def pilot_from_outcomes(before: PreflightResult, after: PreflightResult, *, steps: int, seed: int = 0,
                        run_dir: str | None = None) -> dict[str, Any]:
    """The change a pilot of ``steps`` GRPO steps made on the same held-out items, paired per item.

    ``before``/``after``: the preflight of the starting model and of the pilot's final model on the
    same items (in the same order, same ``k``; ``after`` may cover a prefix of ``before``'s items).
    Returns ``sampled`` (mean over items of the share of ``k`` samples that solve it) and ``greedy``
    before, after and their paired change with a 95% t interval over items, the pilot's GRPO
    verdict (:func:`pilot_verdict`) and the start's. Pure: no model.
    """
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
    out: dict[str, Any] = {"steps": int(steps), "n_items": n, "k": int(k), "run_dir": run_dir,
                           "start_verdict": before.verdict("GRPO")}
    out.update(_paired_changes(sb, sa, gb, ga, seed))
    out["verdict"] = pilot_verdict(out)
    fam = b.get("families")
    if fam is not None and len(set(fam[:n])) > 1:  # per task family, each with its own verdict
        labels = np.asarray(fam[:n])
        out["families"] = {}
        for lab in dict.fromkeys(fam[:n]):
            m = labels == lab
            row: dict[str, Any] = {"n_items": int(m.sum()), "start_verdict": (before.families.get(lab) or {}).get(
                "verdict", out["start_verdict"])}
            row.update(_paired_changes(sb[m], sa[m], gb[m], ga[m], seed))
            row["verdict"] = pilot_verdict(row) if row["n_items"] >= MIN_ITEMS else CANT_TELL
            out["families"][lab] = row
    return out


def _paired_changes(sb, sa, gb, ga, seed: int) -> dict[str, Any]:
    """``sampled``/``greedy``: before, after and the paired change (95% t interval over items)."""
    out = {}
    for key, x0, x1 in (("sampled", sb, sa), ("greedy", gb, ga)):
        c = mean_interval(x1 - x0)
        out[key] = {"before": float(x0.mean()), "after": float(x1.mean()), "change": c.to_dict()}
    return out


def pilot_verdict(p: dict[str, Any]) -> str:
    """GRPO after a pilot: ``indicated`` when the interval of the change in sampled success is above 0,
    ``not indicated`` when it is below +:data:`PILOT_MIN_GAIN` (the pilot learned nothing or lost),
    else ``can't tell``. A start that was "not indicated" stays so (no pilot is run there)."""
    if p.get("start_verdict") == NOT_INDICATED:
        return NOT_INDICATED
    return change_verdict(p["sampled"]["change"])


def change_verdict(c: dict[str, float]) -> str:
    """The pilot's rule on one paired change (``low``/``high``: its 95% interval): ``indicated`` above 0,
    ``not indicated`` below +:data:`PILOT_MIN_GAIN`, else ``can't tell``."""
    if c["low"] > 0:
        return INDICATED
    if c["high"] < PILOT_MIN_GAIN:
        return NOT_INDICATED
    return CANT_TELL


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
    gap, verdict = max((m, INDICATED), (PILOT_MIN_GAIN - m, NOT_INDICATED))
    return int(math.ceil(n * (half / gap) ** 2)), verdict


def _more_evidence(need: tuple[int, str], steps: int, available: int | None) -> str:
    """What a "can't tell" pilot advises: ``need`` (:func:`items_to_decide`) items where the task holds
    them, a longer pilot in any case (on the calibration, a pilot of half the run's steps decided 2 of 6
    such settings, both rightly: docs/results/preflight_calibration.md)."""
    longer = f"a longer pilot (e.g. --pilot {2 * steps})"
    if available is not None and need[0] > available:
        return (f"at this change and spread about {need[0]} items would decide ({need[1]}), more than the "
                f"{available} the task holds: {longer}")
    return f"at this change and spread about {need[0]} items (--n {need[0]}) would decide ({need[1]}), or {longer}"


def _pilot_line(p: dict[str, Any]) -> str:
    s, g = p["sampled"], p["greedy"]
    steps = f"{p['steps']} step{'s' * (p['steps'] != 1)}"
    return (f"pilot of {steps}: sampled success {s['before']:.3f} -> {s['after']:.3f} "
            f"({_signed_ci(s['change'])}), greedy {g['before']:.3f} -> {g['after']:.3f} ({_signed_ci(g['change'])}) "
            f"on the same {p['n_items']} items x {p['k']}")


def _signed_ci(c: dict) -> str:
    return f"{c['value'] * 100:+.1f} points [{c['low'] * 100:+.1f}, {c['high'] * 100:+.1f}]"


def pilot_record(p: dict[str, Any]) -> dict[str, Any]:
    """The calibration's record of a pilot (and of each family's part of it): verdicts, the changes
    with their intervals, and sampled/greedy success as ``[before, after]``."""
    out = {"verdict": p["verdict"], "start_verdict": p["start_verdict"], "steps": p.get("steps"),
           "n_items": p["n_items"], "sampled_change": p["sampled"]["change"], "greedy_change": p["greedy"]["change"],
           "sampled": [p["sampled"]["before"], p["sampled"]["after"]],
           "greedy": [p["greedy"]["before"], p["greedy"]["after"]]}
    if p.get("families"):
        out["families"] = {lab: pilot_record({**f, "steps": p["steps"]}) for lab, f in p["families"].items()}
    return out


def apply_pilot(res: PreflightResult, pilot: dict[str, Any]) -> PreflightResult:
    """Make ``pilot`` (:func:`pilot_from_outcomes`) decide ``res``'s GRPO row: its verdict, the number it
    rests on (the start's headroom moves to the note) and the threshold. Returns ``res``."""
    res.pilot = pilot
    g = next(m for m in res.methods if m.method == "GRPO")
    start = f"before the pilot: {pilot['start_verdict']} ({g.rests_on})"
    g.note = start + (f"; {g.note}" if g.note else "")
    g.rests_on = _pilot_line(pilot)
    g.threshold = (f"pilot: the change in sampled success is above 0 (indicated) or below "
                   f"+{PILOT_MIN_GAIN * 100:.0f} points (not indicated), 95% interval over items")
    g.source = "docs/results/preflight_calibration.md"
    g.verdict = pilot["verdict"]
    g.set_lines = ["(none needed: GRPO is the default objective)"] if g.verdict == INDICATED else []
    need = _items_needed(pilot)
    if need:
        g.note += f"; the pilot's change is too small for its {pilot['n_items']} items: " + _more_evidence(
            need, pilot["steps"], (res.settings or {}).get("items_available"))
    if g.verdict == NOT_INDICATED and pilot["start_verdict"] != NOT_INDICATED:
        g.note += ("; headroom is there but this recipe did not convert it in the pilot: lower optim.lr "
                   "(docs/when-grpo-helps.md), or check the reward on the pilot's completions")
    # the rows that read GRPO's verdict follow the pilot's (dynamic sampling only fills GRPO's batches)
    res.methods = [_dynamic_sampling(res.stats, g.verdict) if m.method == "dynamic sampling" else m
                   for m in res.methods]
    return res


#: preflight.md's names for settings whose key alone misleads (``seed`` seeds the measurement's sampling,
#: not training: a pilot trains with the config's trainer.seed, named in its section)
_SETTING_LABELS = {"seed": "sampling seed"}


def preflight_markdown(res: PreflightResult) -> str:
    """``preflight.md``: the verdict, the method table, what the responses do, the numbers."""
    s = res.stats
    st = res.settings
    lines = ["# Preflight: which method can help here?", ""]
    lines += [f"**GRPO: {res.verdict('GRPO')}** -- {res.message}", ""]
    if st:
        lines += ["- " + ", ".join(f"{_SETTING_LABELS.get(k, k)}: `{v}`" for k, v in st.items() if v not in (None, "")),
                  ""]
    lines += [f"Measured on {s['n_items']} held-out items: 1 greedy and {s['k']} sampled responses each "
              f"(the run's temperature; group size {s['group_size']}, {s['max_new_tokens']} new tokens). "
              f"Intervals: 95% Wilson for shares of items or responses, t over items for means, "
              f"Hanley-McNeil for the AUC.", ""]
    lines += ["| method | verdict | rests on | threshold (source) | use | where the precondition held |",
              "|---|---|---|---|---|---|"]
    for m in res.methods:
        use = "<br>".join(f"`--set {x}`" if "=" in x else x for x in m.set_lines) or "-"
        verdict = f"**{m.verdict}**" + (f": {m.note}" if m.note else "")
        lines.append(f"| {m.method} | {verdict} | {m.rests_on} | {m.threshold} ([{m.source}]"
                     f"({_rel(m.source)})) | {use} | {m.evidence} |")
    if res.pilot:
        p = res.pilot
        seed = f", trainer.seed {p['trainer_seed']}" if p.get("trainer_seed") is not None else ""
        lines += ["", f"## Pilot ({p['steps']} GRPO steps of this config{seed}, `{p.get('run_dir') or '-'}`)", "",
                  f"The same {p['n_items']} held-out items measured again after the pilot (paired; t "
                  f"95% interval over items). Before the pilot GRPO was **{p['start_verdict']}**; after it "
                  f"**{p['verdict']}**.", "", "| measure | before | after | change [95% CI] |", "|---|---|---|---|"]
        for key, label in (("sampled", f"sampled success ({p['k']} per item)"), ("greedy", "greedy success")):
            x = p[key]
            lines.append(f"| {label} | {x['before']:.3f} | {x['after']:.3f} | {_signed_ci(x['change'])} |")
        if p.get("families"):
            lines += ["", "| family | items | verdict before | sampled success: before -> after, change | "
                      "greedy: before -> after, change | verdict after |", "|---|---|---|---|---|---|"]
            for lab, f in p["families"].items():
                lines.append(f"| {lab} | {f['n_items']} | {f['start_verdict']} | {f['sampled']['before']:.3f} -> "
                             f"{f['sampled']['after']:.3f}, {_signed_ci(f['sampled']['change'])} | "
                             f"{f['greedy']['before']:.3f} -> {f['greedy']['after']:.3f}, "
                             f"{_signed_ci(f['greedy']['change'])} | {f['verdict']}{_need(f)} |")
    lines += ["", "## Headroom", "", "| measure | value [95% CI] |", "|---|---|"]
    for key, label in (("greedy", "greedy success"), ("sampled", f"mean sample ({s['k']} per item)"),
                       ("pass_at_k", f"pass@{s['k']} (items some sample solves)"),
                       ("sample_solves", "greedy fails, a sample solves"),
                       ("answer_in_failure", "greedy fails, no sample solves, the answer is in a failed response"),
                       ("reachable", "reachable (the two rows above)"),
                       ("all_equal", f"all-equal groups at G={s['group_size']}"),
                       ("mixed_items", "items where a group can have mixed rewards")):
        lines.append(f"| {label} | {_pct(s[key])} |")
    r = s["responses"]
    lines += ["", f"## Why sampled responses fail ({r['failures']} of {r['responses']} failed)", "",
              "| reason | share of failures [95% CI] |", "|---|---|"]
    for reason in FAILURE_REASONS:
        if r.get(reason):
            lines.append(f"| {reason} | {_pct(r[reason])} |")
    if r.get("answer_in_failed_response"):
        lines.append(f"| (the reference answer appears in the failed response) | "
                     f"{_pct(r['answer_in_failed_response'])} |")
    lines.append("")
    lines.append("Greedy failures: " + ", ".join(f"{k} {v}" for k, v in s["greedy_failures"].items()) + ".")
    lc = s.get("length_coupling")
    if s.get("response_tokens"):
        lines += ["", f"Mean response length {s['response_tokens']['value']:.1f} tokens."]
    if lc and lc.get("fail_success_length_ratio") is not None:
        lines.append(f"Within-group fail/success length ratio {lc['fail_success_length_ratio']:.3f} "
                     f"[{lc['ratio_ci'][0]:.3f}, {lc['ratio_ci'][1]:.3f}] over {lc['mixed_groups']} mixed groups.")
    if res.families:
        lines += ["", "## Per family (GRPO)", "", "| family | items | greedy | pass@k | reachable | verdict |",
                  "|---|---|---|---|---|---|"]
        for lab, f in res.families.items():
            lines.append(f"| {lab} | {f['n_items']} | {f['greedy']['value']:.3f} | {f['pass_at_k']['value']:.3f} | "
                         f"{_pct(f['reachable'])} | {f['verdict']} |")
    return "\n".join(lines) + "\n"


def _items_needed(p: dict[str, Any]) -> tuple[int, str] | None:
    """A "can't tell" pilot's (or family's) planning figure (:func:`items_to_decide`); None otherwise."""
    return items_to_decide(p["sampled"]["change"], p["n_items"]) if p["verdict"] == CANT_TELL else None


def _need(f: dict[str, Any]) -> str:
    need = _items_needed(f)
    return f" (about {need[0]} items of this family would decide: {need[1]})" if need else ""


def _rel(source: str) -> str:
    """A docs/ path as a link from wherever preflight.md lands: left as the repository path."""
    return source
