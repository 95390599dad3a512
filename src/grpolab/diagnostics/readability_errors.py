"""Teacher readability that can fail: does ``delta`` drop at *errors*, or anywhere the text departs?

:func:`grpolab.diagnostics.readability.localisation` labels a wrong response's "first wrong token"
as the first token where it stops being a prefix of the reference text. A teacher that merely
copies the reference scores AUC near 1 on that label by construction: every token after a
departure is off the reference, wrong or not. This module labels the first *error* instead, by
re-deriving the response (:mod:`grpolab.diagnostics.rederive`), and puts correct responses that
depart from the reference in words (right steps, right answer) on the other side:

* **positives** -- the first-error token of each erroneous response (one per response);
* **negatives** -- the *departed* tokens (from the first departure from every accepted target to
  the end) of correct-but-reworded responses: the tokens a copier would mark, though nothing is
  wrong there. The secondary negatives are all tokens of all correct responses.

``auc_error_vs_reworded`` = P(a reworded-correct departed token has a higher ``delta`` than a
first-error token), ties half, with ``delta[B,T] = teacher_logp - student_logp``. A copier (delta
low everywhere after the departure) sits near 0.5 here while its first-departure AUC (the old
measure, reported beside it on the same batch as ``auc_first_departure``) is near 1; a teacher
that reads the arithmetic (delta low exactly at errors) scores high on both. Intervals are a
stratified percentile bootstrap over *responses* (the tokens of one response are not independent),
NaN bounds below :data:`~grpolab.diagnostics.inference.MIN_BOOTSTRAP_UNITS` responses or
:data:`MIN_STRATUM` responses of a class.

:func:`gear_departed_mask` gives the tokens GEAR's default rule would put in departed segments, so
the result also says how much of the *correct* responses GEAR would treat as departures.
Pure: tensors, token ids, a tokenizer's ``decode``; the teacher forward is
:func:`grpolab.measure.readability.measure_error_readability`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from grpolab.diagnostics.inference import MIN_BOOTSTRAP_UNITS
from grpolab.diagnostics.readability import READABLE_AUC, accepted_targets, first_wrong_token
from grpolab.diagnostics.rederive import Rederivation, rederive
from grpolab.diagnostics.stats import CI

__all__ = ["CATEGORIES", "ErrorReadability", "ResponseLabel", "char_to_token", "clustered_auc",
           "error_readability", "gear_departed_mask", "label_responses", "MIN_STRATUM"]

#: What a sampled response counts as: ``error`` (re-deriving found a wrong number), ``reworded``
#: (re-derived correct -- right steps and a stated, right final answer -- and its text departs from
#: every accepted target), ``verbatim`` (re-derived correct and exactly an accepted target),
#: ``unlabelled`` (neither: cut short, no stated answer, a line after the answer). "Correct" is the
#: re-deriver's, not the verifier's: "The answer is 55." is right here though ``final_line`` wants
#: "Answer: 55"; the reward's verdict is kept in :attr:`ResponseLabel.correct` for the old measure.
CATEGORIES = ("error", "reworded", "verbatim", "unlabelled")

#: The fewest responses of a class (those holding a positive, the others) a bootstrap interval rests on.
MIN_STRATUM = 10


@dataclass(frozen=True)
class ResponseLabel:
    """One response's labels (token indices into its row of ``response_ids``).

    Attributes:
        category: one of :data:`CATEGORIES`.
        error_token: the token holding the first wrong character (``category == "error"``), else None.
        departure_token: the first token departing from the item's accepted targets
            (:func:`~grpolab.diagnostics.readability.first_wrong_token`), None when it never departs.
        correct: the reward's verdict (the old measure's "wrong responses" are those it calls wrong).
        length: valid tokens in the row.
        rederivation: what :func:`~grpolab.diagnostics.rederive.rederive` found (None in synthetic labels).
    """

    category: str
    error_token: int | None
    departure_token: int | None
    correct: bool
    length: int
    rederivation: Rederivation | None = None


def char_to_token(tokenizer, ids: Sequence[int], char: int) -> int | None:
    """The index of the token of ``ids`` whose decoded text holds character ``char`` of
    ``decode(ids, skip_special_tokens=True)`` (decoding prefixes); None past the end."""
    for k in range(len(ids)):
        if len(tokenizer.decode(list(ids[: k + 1]), skip_special_tokens=True)) > char:
            return k
    return None


def label_responses(tokenizer, response_ids, response_mask, items: Sequence, group_size: int, correct,
                    finished, task: str) -> list[ResponseLabel]:
    """Label each sampled response (:class:`ResponseLabel`).

    Args:
        tokenizer: decodes the responses.
        response_ids, response_mask: ``[B,T]``.
        items: the ``N`` prompts' task items; row ``i`` answers ``items[i // group_size]``.
        correct: ``[B]`` bool, the reward's verdict (kept for the old measure; the categories use the
            re-deriver's verdict).
        finished: ``[B]`` bool, the row ended with a stop token (False: cut at the length cap).
        task: the re-deriver's key (:data:`grpolab.diagnostics.rederive.REDERIVERS`).
    """
    out = []
    for i in range(response_ids.shape[0]):
        m = int(response_mask[i].sum())
        ids = response_ids[i, :m].tolist()
        item = items[i // group_size]
        text = tokenizer.decode(ids, skip_special_tokens=True)
        rd = rederive(task, item.prompt, text, finished=bool(finished[i]))
        dep = first_wrong_token(tokenizer, ids, accepted_targets(item))
        ok = bool(correct[i])
        err = char_to_token(tokenizer, ids, rd.error_char) if rd.has_error else None
        if err is not None:
            cat = "error"
        elif rd.correct:  # right steps and a stated, right final answer, whatever the verifier's format rules
            cat = "verbatim" if dep is None else "reworded"
        else:
            cat = "unlabelled"
        out.append(ResponseLabel(cat, err, dep, ok, m, rd))
    return out


def _pairwise(neg_units: Sequence[np.ndarray], pos: np.ndarray) -> np.ndarray:
    """``G[j, i]`` = #(neg tokens of unit j > pos[i]) + half the ties."""
    G = np.zeros((len(neg_units), len(pos)))
    for j, neg in enumerate(neg_units):
        s = np.sort(neg)
        lo, hi = np.searchsorted(s, pos, "left"), np.searchsorted(s, pos, "right")
        G[j] = (len(s) - hi) + 0.5 * (hi - lo)
    return G


def clustered_auc(units: Sequence[tuple[Sequence[float], Sequence[float]]], *, n_boot: int = 1000,
                  seed: int = 0) -> CI | None:
    """P(a negative score > a positive score), ties half, pooled over ``units`` = ``[(pos, neg)]``
    (one unit per response), with a stratified percentile bootstrap over units (units holding a
    positive and the others resampled separately). None without both a positive and a negative;
    NaN bounds with fewer than :data:`~grpolab.diagnostics.inference.MIN_BOOTSTRAP_UNITS` units or
    fewer than :data:`MIN_STRATUM` in a stratum (one reworded response cannot show the spread
    between reworded responses)."""
    units = [(np.asarray(p, float), np.asarray(n, float)) for p, n in units if len(p) or len(n)]
    pos = np.concatenate([p for p, _ in units]) if units else np.zeros(0)
    n_neg = np.array([len(n) for _, n in units], float)
    if len(pos) == 0 or n_neg.sum() == 0:
        return None
    owner = np.concatenate([np.full(len(p), u) for u, (p, _) in enumerate(units)])
    G = _pairwise([n for _, n in units], pos)  # [U, P]
    # fold positives into their units: Gu[j, u] = sum over u's positives
    Gu = np.zeros((len(units), len(units)))
    np.add.at(Gu.T, owner, G.T)
    n_pos = np.bincount(owner, minlength=len(units)).astype(float)

    def value(w: np.ndarray) -> float:
        den = (w @ n_neg) * (w @ n_pos)
        return float(w @ Gu @ w / den) if den > 0 else float("nan")

    point = value(np.ones(len(units)))
    strata = [s for s in (np.flatnonzero(n_pos > 0), np.flatnonzero(n_pos == 0)) if len(s)]
    if len(units) < MIN_BOOTSTRAP_UNITS or min(len(s) for s in strata) < MIN_STRATUM:
        return CI(point, float("nan"), float("nan"), len(units))
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        w = np.zeros(len(units))
        for s in strata:
            np.add.at(w, rng.choice(s, size=len(s)), 1.0)
        boots.append(value(w))
    lo, hi = np.nanpercentile(boots, [2.5, 97.5])
    return CI(point, float(lo), float(hi), len(units))


def gear_departed_mask(delta, response_mask, *, divergence=None, boundary_mask=None, min_drop: float | None = None,
                       k: float = 3.0):
    """``[B,T]`` bool: the tokens GEAR's default rule puts in a segment (anchor = a spike,
    ``D > median + k MAD``, where ``delta < -min_drop``; :func:`grpolab.objectives.gear_segments`).

    Args:
        delta: ``[B,T]`` teacher - student log-prob of the sampled tokens.
        response_mask: ``[B,T]``.
        divergence: ``[B,T]`` GEAR's divergence (the full-vocabulary KL of ``credit.divergence=kl``);
            None: ``|delta|`` (``credit.divergence=logratio``).
        boundary_mask: ``[B,T]`` tokens that end a segment (``credit.gear_boundaries``), or None.
        min_drop: the departure margin (default ln 2, ``credit.gear_min_drop``).
    """
    from grpolab.objectives.credit import LN2, gear_segments

    drop = LN2 if min_drop is None else min_drop
    D = delta.abs() if divergence is None else divergence
    seg, _, _, _ = gear_segments(D.float(), response_mask, threshold="mad", k=k, boundary_mask=boundary_mask,
                                 eligible=delta < -drop)
    return (seg > 0) & response_mask.bool()


@dataclass
class ErrorReadability:
    """Error readability of one sampled batch (module docstring).

    Attributes:
        auc_error_vs_reworded: error tokens vs departed tokens of correct-but-reworded responses
            (value and 95% interval over responses); None without both.
        auc_error_vs_correct: error tokens vs every token of every correct response.
        auc_first_departure: the old measure on the same batch: over wrong responses (the reward's
            verdict), first-departure tokens vs the tokens before them.
        responses: rows measured; ``counts``: responses per :data:`CATEGORIES` entry.
        error_right_answer: erroneous responses the reward calls correct (a right answer after a wrong step).
        error_kinds: erroneous responses per :attr:`Rederivation.error_kind`.
        error_tokens, reworded_departed_tokens, correct_tokens: the samples the AUCs rest on.
        mean_delta_error, mean_delta_reworded_departed, mean_delta_correct: mean ``delta`` of each.
        gear_departed_share_correct: share of correct responses' tokens GEAR would put in departed
            segments (None without a mask or without correct responses).
        needs: the bound (:data:`~grpolab.diagnostics.readability.READABLE_AUC`).
    """

    auc_error_vs_reworded: CI | None
    auc_error_vs_correct: CI | None
    auc_first_departure: CI | None
    responses: int
    counts: dict[str, int]
    error_right_answer: int
    error_kinds: dict[str, int]
    error_tokens: int
    reworded_departed_tokens: int
    correct_tokens: int
    mean_delta_error: float | None
    mean_delta_reworded_departed: float | None
    mean_delta_correct: float | None
    gear_departed_share_correct: float | None
    needs: float = READABLE_AUC
    notes: list[str] = field(default_factory=list)

    @property
    def met(self) -> bool | None:
        """The precondition by the new measure: the interval's low end reaches :attr:`needs`
        (None: undefined or no interval; see docs/credit.md for the verdict)."""
        ci = self.auc_error_vs_reworded
        if ci is None or not np.isfinite(ci.low):
            return None
        return bool(ci.low >= self.needs)

    def to_dict(self) -> dict:
        """A JSON-ready dict (CIs as ``{value, low, high, n}``)."""
        def ci(c):
            return None if c is None else {"value": c.value, "low": c.low, "high": c.high, "n": c.n}
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("auc_error_vs_reworded", "auc_error_vs_correct", "auc_first_departure"):
            out[k] = ci(out[k])
        out["met"] = self.met
        return out


def _mean(v: list[float]) -> float | None:
    return float(np.mean(v)) if v else None


def error_readability(delta, labels: Sequence[ResponseLabel], *, gear_mask=None, n_boot: int = 1000,
                      seed: int = 0) -> ErrorReadability:
    """The new and the old AUC of one batch from its per-response labels.

    Args:
        delta: ``[B,T]`` teacher - student log-prob (read up to each label's ``length``).
        labels: ``B`` :class:`ResponseLabel` (:func:`label_responses`).
        gear_mask: ``[B,T]`` bool, GEAR's segments (:func:`gear_departed_mask`), or None.
        n_boot, seed: the bootstrap over responses.
    """
    if len(labels) != delta.shape[0]:
        raise ValueError(f"error_readability: {len(labels)} labels for {delta.shape[0]} rows of delta")
    rows = [[float(x) for x in delta[i, : lab.length].tolist()] for i, lab in enumerate(labels)]
    err_units, rew_units, cor_units, old_units = [], [], [], []
    for d, lab in zip(rows, labels):
        if lab.category == "error":
            err_units.append(([d[lab.error_token]], []))
        if lab.category == "reworded":
            rew_units.append(([], d[lab.departure_token:]))
        if lab.category in ("reworded", "verbatim"):
            cor_units.append(([], d))
        if not lab.correct and lab.departure_token is not None and lab.departure_token < lab.length:
            old_units.append(([d[lab.departure_token]], d[: lab.departure_token]))
    correct_rows = [i for i, lab in enumerate(labels) if lab.category in ("reworded", "verbatim")]
    share = None
    if gear_mask is not None and correct_rows:
        tot = sum(labels[i].length for i in correct_rows)
        share = sum(int(gear_mask[i, : labels[i].length].sum()) for i in correct_rows) / tot if tot else None
    counts = Counter(lab.category for lab in labels)
    errs = [lab for lab in labels if lab.category == "error"]
    return ErrorReadability(
        auc_error_vs_reworded=clustered_auc(err_units + rew_units, n_boot=n_boot, seed=seed),
        auc_error_vs_correct=clustered_auc(err_units + cor_units, n_boot=n_boot, seed=seed),
        auc_first_departure=clustered_auc(old_units, n_boot=n_boot, seed=seed),
        responses=len(labels), counts={c: counts.get(c, 0) for c in CATEGORIES},
        error_right_answer=sum(1 for lab in errs if lab.correct),
        error_kinds=dict(Counter(lab.rederivation.error_kind for lab in errs if lab.rederivation is not None)),
        error_tokens=len(err_units), reworded_departed_tokens=sum(len(n) for _, n in rew_units),
        correct_tokens=sum(len(n) for _, n in cor_units),
        mean_delta_error=_mean([p[0] for p, _ in err_units]),
        mean_delta_reworded_departed=_mean([x for _, n in rew_units for x in n]),
        mean_delta_correct=_mean([x for _, n in cor_units for x in n]),
        gear_departed_share_correct=share)
