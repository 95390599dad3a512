"""The preflight's statistics: per-item, per-response outcomes in, :class:`PreflightStats` out. Pure.

From per-item outcomes of the starting model (one greedy and ``k`` sampled responses per item), with the
sample size and a 95% interval on every number:

* **headroom** (:class:`HeadroomStats`): greedy success (Wilson), the mean sample (t over items), the
  paired difference sampled - greedy (t over items: the old ``grpolab headroom``'s criterion, computed
  here once), pass@k, and the *reachable* share -- the items greedy fails that a sample solves
  (``sample_solves``) or whose reference answer already appears in a failed response
  (``answer_in_failure``: cut at the cap, or right but in the wrong form). pass@k at a fixed k misses
  the second kind: on SmolLM2 sums (docs/results/real_model.md) pass@8 was 7 points over greedy, yet
  74% of responses ran past the 12-token cap with the sum already written, and GRPO gained 47-61
  points by teaching the model to stop;
* **why responses fail** (:class:`ResponseStats`): cut at the cap (no stop token), no parseable
  answer, wrong answer, verifier error;
* **signal at the run's group size**: the share of prompt groups whose rewards are all equal and the
  share of items where a group can have mixed rewards;
* **sign-length coupling** (:func:`length_coupling`) and the mean response length;
* **the most common answer**: the share of items whose greedy answer is the single most common one
  (a constant answer; :func:`modal_answer_share`);
* **teacher readability**: the row of :func:`grpolab.measure.readability.measure_readability`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field, fields
from typing import Any, Sequence

import numpy as np

from grpolab.diagnostics.inference import mean_interval
from grpolab.diagnostics.stats import CI, bootstrap_ci, pass_at_k, wilson_interval

__all__ = ["CUT", "ERROR", "FAILURE_REASONS", "FAMILY_KEYS", "HeadroomStats", "LengthCoupling", "PreflightStats",
           "ResponseStats", "SOLVED", "UNPARSED", "WRONG", "all_equal_share", "answer_in_text", "auc_interval",
           "ci_from_dict", "failure_reason", "family_of", "headroom_stats", "length_coupling", "modal_answer_share",
           "preflight_stats", "wilson"]

CUT, UNPARSED, WRONG, ERROR = "cut at the cap", "no parseable answer", "wrong answer", "verifier error"
FAILURE_REASONS = (CUT, UNPARSED, WRONG, ERROR)
SOLVED = 1.0 - 1e-9
FAMILY_KEYS = ("family", "difficulty")


def family_of(meta: dict[str, Any] | None) -> str:
    """The family label of an item from its meta: ``family``, else ``difficulty``, else ``all``."""
    meta = meta or {}
    for k in FAMILY_KEYS:
        if k in meta:
            return f"{k}={meta[k]}"
    return "all"


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


@dataclass
class LengthCoupling:
    """Sign-length coupling of the sampled responses (:func:`length_coupling`): lengths of failed and solved
    responses *within* prompt groups.

    Over the groups with both (``mixed_groups``): ``fail_success_length_ratio`` is the mean of the
    failures' mean lengths over the mean of the successes' (the training metric ``length/mixed_ratio``,
    :func:`grpolab.train.step_metrics.within_group_lengths`; the precondition of Balanced Aggregation,
    docs/results/aggregation_coupled.md), with a bootstrap interval over mixed groups (``ratio_ci``,
    ``(low, high)``; None where not computed); ``mean_group_ratio`` the mean of the per-group ratios;
    ``mean_fail_tokens_mixed`` / ``mean_success_tokens_mixed`` the two means; ``fail_longer_frac`` /
    ``fail_shorter_frac`` the shares of the mixed groups' failures longer / shorter than their group's mean
    success; ``pooled_fail_success_ratio`` the same ratio over all responses (not within groups: it mixes
    easy and hard prompts); ``responses``, ``correct_frac`` and ``mean_response_tokens`` over all of them.
    A field with nothing to average is None."""

    responses: int
    correct_frac: float
    mixed_groups: int
    fail_success_length_ratio: float | None = None
    mean_group_ratio: float | None = None
    mean_fail_tokens_mixed: float | None = None
    mean_success_tokens_mixed: float | None = None
    pooled_fail_success_ratio: float | None = None
    mean_response_tokens: float | None = None
    fail_longer_frac: float | None = None
    fail_shorter_frac: float | None = None
    ratio_ci: tuple[float, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        """``preflight.json``'s ``stats.length_coupling`` (``ratio_ci`` only where computed)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "ratio_ci"}
        if self.ratio_ci is not None:
            out["ratio_ci"] = list(self.ratio_ci)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LengthCoupling:
        """The inverse of :meth:`to_dict`."""
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        if kw.get("ratio_ci") is not None:
            kw["ratio_ci"] = tuple(kw["ratio_ci"])
        return cls(**kw)


def length_coupling(lengths: Sequence[Sequence[float]], solved: Sequence[Sequence[bool]], *, seed: int = 0,
                    ci: bool = True) -> LengthCoupling:
    """:class:`LengthCoupling` of ``[G][k_g]`` per group (prompt) its responses' lengths and outcomes; the
    ratio's bootstrap interval over mixed groups when ``ci``."""
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
    out = LengthCoupling(
        responses=total, correct_frac=len(all_s) / max(total, 1), mixed_groups=len(inc),
        mean_group_ratio=mean(ratios), mean_fail_tokens_mixed=mean(inc), mean_success_tokens_mixed=mean(cor),
        pooled_fail_success_ratio=(mean(all_f) / mean(all_s)) if all_f and all_s and sum(all_s) > 0 else None,
        mean_response_tokens=(sum(all_f) + sum(all_s)) / total if total else None,
        fail_longer_frac=longer / n_fail if n_fail else None,
        fail_shorter_frac=shorter / n_fail if n_fail else None,
    )
    if inc and sum(cor) > 0:
        out.fail_success_length_ratio = sum(inc) / sum(cor)
        if ci:
            pairs = np.stack([np.asarray(inc), np.asarray(cor)], axis=1)
            c = bootstrap_ci(pairs, _ratio_of_means, seed=seed, n_boot=1000)
            out.ratio_ci = (c.low, c.high)
    return out


def ci_from_dict(x: dict[str, Any] | CI | None) -> CI | None:
    """A :class:`CI` from its ``to_dict`` (None and a CI pass through)."""
    return CI(x["value"], x["low"], x["high"], x["n"], x.get("level", 0.95)) if isinstance(x, dict) else x


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


def _to_json(x: Any) -> Any:
    if isinstance(x, CI):
        return x.to_dict()
    if hasattr(x, "to_dict"):
        return x.to_dict()
    return x


@dataclass
class HeadroomStats:
    """Headroom of the starting model on ``n_items`` items x ``k`` samples (each CI at 95%).

    ``greedy``, ``pass_at_k``, ``sample_solves``, ``answer_in_failure``, ``reachable``: shares of items
    (Wilson); ``sampled``: the mean over items of the share of samples that solve it (t over items);
    ``sampled_minus_greedy``: the paired difference per item (t over items); ``all_equal``: the mean
    probability that a group of the run's size is all equal (Wilson at the number of items);
    ``mixed_items``: items where some group can have mixed rewards (None where not known, e.g. from
    recorded counts)."""

    n_items: int
    k: int
    greedy: CI
    sampled: CI | None
    pass_at_k: CI
    sample_solves: CI
    answer_in_failure: CI
    reachable: CI
    sampled_minus_greedy: CI | None = None
    all_equal: CI | None = None
    mixed_items: CI | None = None

    @property
    def gain_ceiling(self) -> float:
        """The reachable share's upper bound (compared with measured gains in the calibration; not a bound)."""
        return self.reachable.high

    @property
    def solves_nothing(self) -> bool:
        """Neither greedy nor any sample solved any item."""
        return round(self.pass_at_k.value * self.n_items) == 0 and round(self.greedy.value * self.n_items) == 0

    def to_dict(self) -> dict[str, Any]:
        out = {f: _to_json(getattr(self, f)) for f in self.__dataclass_fields__}
        out["gain_ceiling"] = self.gain_ceiling
        return out


@dataclass
class ResponseStats:
    """Why the sampled responses failed: per reason the share of failures (Wilson over failed responses;
    None where nothing failed), ``cut`` the mean per-item share cut at the cap (Wilson at the number of
    items), and how often the reference answer is in a failed / a cut response."""

    responses: int
    failures: int
    reasons: dict[str, CI | None]
    cut: CI
    answer_in_failed_response: CI | None = None
    answer_in_cut_response: CI | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"responses": self.responses}
        out.update({r: _to_json(c) for r, c in self.reasons.items()})
        out.update({"cut": self.cut.to_dict(), "failures": self.failures,
                    "answer_in_failed_response": _to_json(self.answer_in_failed_response),
                    "answer_in_cut_response": _to_json(self.answer_in_cut_response)})
        return out


@dataclass
class PreflightStats(HeadroomStats):
    """Everything the verdicts read (``to_dict`` is ``preflight.json``'s ``stats``): the headroom, and the
    run's ``group_size`` and ``max_new_tokens``; ``pass_at_k_unbiased`` ``{j: pass@j}``; ``responses``;
    ``greedy_failures`` ``{reason: count}``; ``response_tokens`` (t over items, None: not measured);
    ``length_coupling`` (:class:`LengthCoupling`); ``readability`` (the measured row, None: not
    measured); ``has_privileged``; ``off_policy``; ``modal_answer``: the share of items whose greedy
    answer is the most common one (:func:`modal_answer_share`; None: answers not recorded)."""

    group_size: int = 1
    max_new_tokens: int = 0
    pass_at_k_unbiased: dict[str, float] = field(default_factory=dict)
    responses: ResponseStats | None = None
    greedy_failures: dict[str, int] = field(default_factory=dict)
    response_tokens: CI | None = None
    length_coupling: LengthCoupling | None = None
    readability: dict[str, Any] | None = None
    has_privileged: bool = False
    off_policy: bool = False
    modal_answer: CI | None = None
    modal_answer_text: str | None = None


def headroom_stats(greedy_ok: np.ndarray, counts: np.ndarray, k: int, near: np.ndarray) -> dict[str, Any]:
    """The :class:`HeadroomStats` fields of ``[N]`` greedy outcomes, ``[N]`` solving samples (of ``k``) and
    ``[N]`` whether the answer is in a failed response."""
    n = len(greedy_ok)
    fail = ~greedy_ok
    solves = fail & (counts > 0)
    answer = fail & ~(counts > 0) & near
    return dict(n_items=n, k=k, greedy=wilson(int(greedy_ok.sum()), n), sampled=mean_interval(counts / k),
                pass_at_k=wilson(int((counts > 0).sum()), n), sample_solves=wilson(int(solves.sum()), n),
                answer_in_failure=wilson(int(answer.sum()), n), reachable=wilson(int((solves | answer).sum()), n),
                sampled_minus_greedy=mean_interval(counts / k - greedy_ok.astype(float)))


def _response_stats(sampled_reasons, sampled_answer_seen, total: int) -> ResponseStats:
    flat = [x for r in (sampled_reasons or []) for x in r]
    fails = [x for x in flat if x is not None]
    reasons = {reason: (wilson(sum(x == reason for x in fails), len(fails)) if fails else None)
               for reason in FAILURE_REASONS}
    cut = (_item_share([sum(x == CUT for x in r) / len(r) for r in sampled_reasons]) if sampled_reasons
           else wilson(0, 0))
    pairs = [(a, x) for r, rr in zip(sampled_answer_seen or [], sampled_reasons or []) for a, x in zip(r, rr)]
    seen_fail = [a for a, x in pairs if x is not None]
    cut_seen = [a for a, x in pairs if x == CUT]
    return ResponseStats(total, len(fails), reasons, cut,
                         wilson(sum(seen_fail), len(seen_fail)) if seen_fail else None,
                         wilson(sum(cut_seen), len(cut_seen)) if cut_seen else None)


def modal_answer_share(answers: Sequence[str | None]) -> tuple[CI, str] | None:
    """``(share, answer)``: the share of items answered with the single most common answer, with its
    Wilson interval over items; None (no answer recorded) or an empty answer counts as no answer. None
    when no item has an answer. A model that answers most items with one constant is not solving them:
    a gain that comes with this share rising is a degenerate answer, not learning."""
    given = [str(a).strip() for a in answers if a is not None and str(a).strip()]
    if not given:
        return None
    top, count = Counter(given).most_common(1)[0]
    return wilson(count, len(answers)), top


def preflight_stats(g: np.ndarray, S: list[list[float]], *, group_size: int, max_new_tokens: int,
                    greedy_reasons=None, sampled_reasons=None, near: np.ndarray, sampled_answer_seen=None,
                    sampled_lengths=None, readability=None, has_privileged=False, off_policy=False,
                    greedy_answers=None, seed: int = 0) -> PreflightStats:
    """:class:`PreflightStats` of ``[N]`` greedy rewards and ``[N][k]`` sampled rewards (the arguments of
    :func:`grpolab.diagnostics.preflight.preflight_from_outcomes`; ``near`` ``[N]``: the answer is in a
    failed response)."""
    n, k = len(g), len(S[0])
    greedy_ok = g >= SOLVED
    counts = np.array([sum(x >= SOLVED for x in r) for r in S], dtype=float)
    eq = all_equal_share(S, group_size)
    gfail = [x for x in (greedy_reasons or []) if x is not None]
    st = PreflightStats(**headroom_stats(greedy_ok, counts, k, near), all_equal=_item_share(eq),
                        mixed_items=wilson(int((eq < 1).sum()), n), group_size=int(group_size),
                        max_new_tokens=int(max_new_tokens),
                        pass_at_k_unbiased={str(j): float(np.mean([pass_at_k(k, int(c), j) for c in counts]))
                                            for j in sorted({j for j in (1, 2, 4, 8, 16, k) if j <= k})},
                        responses=_response_stats(sampled_reasons, sampled_answer_seen, n * k),
                        greedy_failures={reason: sum(x == reason for x in gfail) for reason in FAILURE_REASONS},
                        readability=readability, has_privileged=bool(has_privileged), off_policy=bool(off_policy))
    if sampled_lengths is not None:
        L = [list(map(float, r)) for r in sampled_lengths]
        st.response_tokens = mean_interval([sum(r) / len(r) for r in L])
        st.length_coupling = length_coupling(L, [[x >= SOLVED for x in r] for r in S], seed=seed)
    if greedy_answers is not None:
        modal = modal_answer_share(greedy_answers)
        if modal is not None:
            st.modal_answer, st.modal_answer_text = modal
    return st
