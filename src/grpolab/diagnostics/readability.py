"""Can the privileged teacher read? Pure measures of teacher readability (docs/credit.md).

RLSD and GEAR (docs/methods.md, token-level credit) rest on one precondition: the same model shown
the reference solution (the *teacher*) must tell, token by token, where a sampled response goes
wrong. With ``delta[B,T] = teacher_logp - student_logp`` of the sampled tokens:

* :func:`first_wrong_token` -- the index of the token at which a response departs from the
  answers the verifier accepts (:func:`accepted_targets`), by decoding prefixes;
* :func:`localisation` -- over the wrong responses, the mean ``delta`` before the first wrong
  token, at it and after it, and ``auc_first_wrong``: P(a token before the first wrong token has a
  higher ``delta`` than a first wrong token) -- the *teacher AUC* of issue 33 (needs >= 0.8; 0.5 =
  no signal);
* :func:`response_aucs` -- the response-level AUC of the summed and the per-token mean ``delta``
  for correct vs wrong responses;
* :func:`readability` -- all of it for one sampled batch, with the sample sizes it rests on.

Everything here is a function of tensors, token ids and a tokenizer's ``decode``: no model call
(the teacher forward that produces ``delta`` is :func:`grpolab.measure.readability.measure_readability`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Any, Sequence

__all__ = ["READABLE_AUC", "accepted_targets", "auc", "first_wrong_token", "localisation", "readability",
           "response_aucs"]

#: The first-wrong-token AUC a teacher must reach for RLSD/GEAR's token-level credit to rest on a
#: signal (issue 16 / 33; docs/credit.md).
READABLE_AUC = 0.8


def auc(pos: Sequence[float], neg: Sequence[float]) -> float | None:
    """Mann-Whitney AUC: P(a random ``pos`` score > a random ``neg`` score), ties count half.

    None when either side is empty. ``O((n + m) log m)``: each positive counts the negatives
    below it and tied with it in the sorted negatives.
    """
    if len(pos) == 0 or len(neg) == 0:
        return None
    s = sorted(float(x) for x in neg)
    wins = 0.0
    for p in pos:
        p = float(p)
        lo, hi = bisect_left(s, p), bisect_right(s, p)
        wins += lo + 0.5 * (hi - lo)
    return wins / (len(pos) * len(s))


def first_wrong_token(tokenizer, ids: Sequence[int], target: str | Sequence[str]) -> int | None:
    """Index of the first response token at which ``ids`` departs from the reference ``target``.

    Token ``k`` is wrong when the decoded prefix ``ids[:k+1]`` is no longer a prefix of ``target``
    (or, for EOS, when the response stops before it has written all of ``target``). None when the
    response is ``target`` exactly, or is cut before it departs. For arith the worked solution is
    the only correct scratchpad, so this is the first wrong character of the first wrong step.
    Several accepted targets (e.g. ``["18", "3 + 15 = 18", "Answer: 18"]``): the one the response
    follows longest is the reference (a response that writes ``3 + 15 = 18`` and goes on departs
    at the token after ``18``).
    """
    targets = [target] if isinstance(target, str) else list(target)
    eos = tokenizer.eos_token_id
    alive = list(targets)
    ids = list(ids)
    for k, t in enumerate(ids):
        prefix = tokenizer.decode(ids[: k + 1], skip_special_tokens=True)
        if t == eos:
            return None if prefix in alive else k
        alive = [g for g in alive if g.startswith(prefix)]
        if not alive:
            return k
    return None


def accepted_targets(item) -> list[str]:
    """The correct responses an item's verifier accepts, for :func:`first_wrong_token`: its
    demonstration, and for the ``final_line`` verifier also ``Answer: N`` and ``A + B = N``."""
    out = [item.demonstration or item.reference]
    if item.reward == "final_line":
        out.append(f"Answer: {item.reference}")
        expr = (item.reward_options or {}).get("expression")
        if expr:
            out.append(f"{expr} = {item.reference}")
    return list(dict.fromkeys(out))


def _mean(v: Sequence[float]) -> float | None:
    return sum(v) / len(v) if v else None


def localisation(tokenizer, response_ids, response_mask, delta, items: Sequence, group_size: int, wrong) -> dict:
    """Where does the teacher's ``delta`` drop on wrong responses?

    Args:
        tokenizer: decodes response prefixes (:func:`first_wrong_token`).
        response_ids, response_mask: ``[B,T]`` sampled responses and their mask.
        delta: ``[B,T]`` per-token ``teacher_logp - student_logp``.
        items: the prompts' task items; row ``i`` answers ``items[i // group_size]``.
        wrong: ``[B]`` bool, the responses the reward calls wrong.

    Returns:
        ``wrong_responses_localised`` (wrong responses whose departure from the item's accepted
        answers was found), ``tokens_before``, the mean ``delta`` before the first wrong token, at
        it and after it, ``auc_first_wrong`` (tokens before vs first wrong tokens, pooled over
        responses; Mann-Whitney, ties half; None without both) and ``frac_at_below_before_mean``.
    """
    before: list[float] = []
    at: list[float] = []
    after: list[float] = []
    n = 0
    for i in range(response_ids.shape[0]):
        if not bool(wrong[i]):
            continue
        m = int(response_mask[i].sum())
        ids = response_ids[i, :m].tolist()
        k = first_wrong_token(tokenizer, ids, accepted_targets(items[i // group_size]))
        if k is None:
            continue
        n += 1
        before += [float(x) for x in delta[i, :k].tolist()]
        at.append(float(delta[i, k]))
        after += [float(x) for x in delta[i, k + 1 : m].tolist()]
    mb = _mean(before)
    return {"wrong_responses_localised": n, "tokens_before": len(before), "delta_before_first_wrong": mb,
            "delta_at_first_wrong": _mean(at), "delta_after_first_wrong": _mean(after),
            "auc_first_wrong": auc(before, at),
            "frac_at_below_before_mean": (sum(a < mb for a in at) / len(at)) if at and before else None}


def response_aucs(delta, response_mask, correct) -> dict:
    """Response-level readability: does the teacher raise correct responses over wrong ones?

    Args:
        delta: ``[B,T]`` ``teacher_logp - student_logp`` (read only where ``response_mask`` is 1).
        response_mask: ``[B,T]``.
        correct: ``[B]`` bool.

    Returns:
        ``auc_sum_delta`` / ``auc_mean_delta``: AUC of the summed / per-token mean delta for
        correct vs wrong (None without both), ``mean_delta_correct`` / ``mean_delta_wrong``
        (per-token mean, averaged over responses), ``responses``, ``correct_frac``.
    """
    mask = response_mask.bool()
    d = delta.masked_fill(~mask, 0.0).double()
    sums = d.sum(-1)
    means = sums / mask.sum(-1).clamp_min(1)
    ok = [bool(c) for c in correct]
    s_ok = [float(x) for x, c in zip(sums, ok) if c]
    s_bad = [float(x) for x, c in zip(sums, ok) if not c]
    m_ok = [float(x) for x, c in zip(means, ok) if c]
    m_bad = [float(x) for x, c in zip(means, ok) if not c]
    return {"responses": len(ok), "correct_frac": (sum(ok) / len(ok)) if ok else None,
            "mean_delta_correct": _mean(m_ok), "mean_delta_wrong": _mean(m_bad),
            "auc_sum_delta": auc(s_ok, s_bad), "auc_mean_delta": auc(m_ok, m_bad)}


def readability(tokenizer, response_ids, response_mask, delta, items: Sequence, group_size: int,
                correct) -> dict[str, Any]:
    """Teacher readability of one sampled batch: :func:`response_aucs` and :func:`localisation`.

    ``teacher_auc`` is ``auc_first_wrong`` (the token-level precondition, >= :data:`READABLE_AUC`),
    ``response_auc`` is ``auc_sum_delta``; ``mean_response_tokens`` the mean response length.
    Shapes as in :func:`localisation`; ``correct`` ``[B]`` bool.
    """
    wrong = [not bool(c) for c in correct]
    out = response_aucs(delta, response_mask, correct)
    out.update(localisation(tokenizer, response_ids, response_mask, delta, items, group_size, wrong))
    out["mean_response_tokens"] = float(response_mask.sum()) / max(int(response_mask.shape[0]), 1)
    out["teacher_auc"] = out["auc_first_wrong"]
    out["response_auc"] = out["auc_sum_delta"]
    return out
