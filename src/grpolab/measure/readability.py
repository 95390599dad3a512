"""Measure the privileged teacher's readability on a model's own samples (docs/credit.md).

The model calls around the pure measures of :mod:`grpolab.diagnostics.readability`: sample ``G``
responses to each of ``N`` prompts with the run's collector, score them under the teacher prompt
the trainer's credit step builds (:meth:`grpolab.train.credit.CreditStep.teacher_prompts`, the
run's prompt format and credit settings), and return the first-wrong-token AUC (the token-level
precondition of RLSD and GEAR, >= :data:`~grpolab.diagnostics.readability.READABLE_AUC`) and the
response AUC, with the sample sizes they rest on.

    exp = sample_responses(opened.collector, opened.model, items, group_size=8, temperature=0.7, seed=0)
    row = measure_readability(opened.model, opened.tokenizer, opened.prompt_format, cfg.credit, exp,
                              temperature=0.7)
    row["teacher_auc"], row["wrong_responses_localised"], row["tokens_before"]

The teacher is the model itself shown the privileged context (``teacher=None``), which is what the
trainer's frozen teacher is at step 0 (with LoRA: the base model, adapters off).

The first-wrong-token AUC above labels the first *departure from the reference text*, which a
teacher that copies the reference passes by construction. :func:`measure_error_readability` is
the measure that can fail (:mod:`grpolab.diagnostics.readability_errors`): first *errors* found by
re-deriving each response, against the departed tokens of correct-but-reworded responses::

    res = measure_error_readability(opened.model, opened.tokenizer, opened.prompt_format, cfg.credit, exp,
                                    temperature=0.7, task="short_arith")
    res.auc_error_vs_reworded, res.auc_first_departure, res.counts, res.gear_departed_share_correct
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from grpolab.diagnostics.readability import READABLE_AUC, readability

__all__ = ["error_readability_row", "measure_error_readability", "measure_readability", "measure_run_readability",
           "readability_row", "sample_responses", "teacher_delta"]


def sample_responses(collector, model, items: Sequence, *, group_size: int, temperature: float, seed: int = 0):
    """``group_size`` sampled responses to each of ``items`` (an :class:`~grpolab.rollout.experience.Experience`,
    ``B = len(items) * group_size`` group-contiguous rows, rewards scored)."""
    return collector.collect(model, list(items), group_size=group_size, temperature=temperature,
                             generator=torch.Generator().manual_seed(seed))


def teacher_delta(model, tokenizer, prompt_format, credit, exp, *, temperature: float, teacher=None,
                  items: Sequence | None = None, return_kl: bool = True) -> dict[str, Any]:
    """The teacher forward over a sampled batch.

    Args:
        model: the student (the policy that sampled ``exp``).
        tokenizer, prompt_format: the run's (:class:`grpolab.runs.OpenedRun`).
        credit: a :class:`grpolab.config.CreditConfig` (template, placement).
        exp: the sampled :class:`~grpolab.rollout.experience.Experience`.
        temperature: the sampling temperature (log-probs of the sampling distribution).
        teacher: the teacher model; None = ``model`` shown the privileged prompt.
        items: the items whose privileged context the teacher reads (default ``exp.items``; the
            same prompts with another privileged text, e.g. the answer only).

    Returns:
        ``{"delta": [B,T] teacher - student log-prob (0 off the mask), "teacher_logp", "student_logp",
        "kl": [B,T] or None, "template_text": the first teacher prompt decoded, "placement"}``.
    """
    from grpolab.rollout import credit_logprobs, left_pad

    r = exp.rollout
    shown = list(items) if items is not None else list(exp.items)
    # the prompts CreditStep.teacher_prompts builds, without the step's frozen copy of the model
    rows = credit.teacher_prompt().encode(shown, tokenizer, prompt_format)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    t_ids, t_mask = left_pad(rows, pad, device=r.response_ids.device)
    chat = prompt_format is not None and prompt_format.chat_template == "on"
    res = credit_logprobs(teacher if teacher is not None else model, model, t_ids, t_mask, r,
                          temperature=temperature, return_kl=return_kl, prompt_index=r.group_ids)
    mask = r.response_mask.bool()
    delta = torch.where(mask, res.logp - res.student_logp, torch.zeros_like(res.logp))
    return {"delta": delta, "teacher_logp": res.logp, "student_logp": res.student_logp, "kl": res.kl,
            "template_text": tokenizer.decode(t_ids[0][t_mask[0].bool()].tolist()),
            "placement": credit.privileged_placement if chat else "plain"}


def measure_readability(model, tokenizer, prompt_format, credit, exp, *, temperature: float, teacher=None,
                        items: Sequence | None = None) -> dict[str, Any]:
    """Teacher readability of one sampled batch (:func:`grpolab.diagnostics.readability.readability`).

    Arguments as :func:`teacher_delta`. Returns its keys (``teacher_auc`` = first-wrong-token AUC,
    ``response_auc``, ``wrong_responses_localised``, ``tokens_before``, ``responses``,
    ``correct_frac``, the mean delta before / at / after the first wrong token,
    ``mean_response_tokens``) plus ``mean_kl``, ``template_text``, ``placement``, ``needs``
    (the bound) and ``met`` (None when the AUC is undefined: no localised wrong response).
    """
    d = teacher_delta(model, tokenizer, prompt_format, credit, exp, temperature=temperature, teacher=teacher,
                      items=items)
    return readability_row(tokenizer, exp, d)


def readability_row(tokenizer, exp, d: dict[str, Any]) -> dict[str, Any]:
    """:func:`measure_readability`'s row from a batch ``exp`` and its :func:`teacher_delta` ``d``."""
    r = exp.rollout
    G = r.response_ids.shape[0] // max(len(exp.items), 1)
    correct = exp.rewards >= 1.0
    row = readability(tokenizer, r.response_ids, r.response_mask, d["delta"], exp.items, G, correct)
    mask = r.response_mask.bool()
    row["mean_kl"] = float(d["kl"][mask].mean()) if d["kl"] is not None and mask.any() else None
    row["template_text"] = d["template_text"]
    row["placement"] = d["placement"]
    row["needs"] = READABLE_AUC
    row["met"] = None if row["teacher_auc"] is None else bool(row["teacher_auc"] >= READABLE_AUC)
    return row


def measure_run_readability(opened, *, prompts: int = 32, seed: int = 0, credit=None,
                            items: Sequence | None = None) -> dict[str, Any]:
    """:func:`measure_readability` of an opened run (:func:`grpolab.runs.open_run`) on its own
    sampling settings (``rollout.group_size``, ``rollout.temperature``): ``prompts`` items of its
    training split (else its held-out items, or ``items``), the run's ``credit`` section unless
    ``credit`` is given. Adds ``prompts``, ``group_size``, ``seed``."""
    cfg = opened.config
    pool = list(items) if items is not None else (opened.train_items or opened.eval_items)
    pool = pool[:prompts]
    if not pool:
        raise ValueError("measure_run_readability: no items to sample (the task gave none)")
    if not any(getattr(it, "privileged", None) for it in pool):
        raise ValueError("measure_run_readability: the task's items carry no privileged text for the teacher "
                         "(choose a task with a reference solution, e.g. short_arith or arith)")
    G, T = cfg.rollout.group_size, cfg.rollout.temperature
    exp = sample_responses(opened.collector, opened.model, pool, group_size=G, temperature=T, seed=seed)
    row = measure_readability(opened.model, opened.tokenizer, opened.prompt_format, credit or cfg.credit, exp,
                              temperature=T)
    row.update({"prompts": len(pool), "group_size": G, "seed": seed})
    return row


def error_readability_row(tokenizer, exp, d: dict[str, Any], credit, *, task: str, n_boot: int = 1000,
                          seed: int = 0):
    """:func:`measure_error_readability`'s result from a batch ``exp`` and its :func:`teacher_delta` ``d``
    (so one teacher forward serves both measures)."""
    from grpolab.diagnostics.readability_errors import error_readability, gear_departed_mask, label_responses
    from grpolab.teacher_text import CreditTokens

    r = exp.rollout
    G = r.response_ids.shape[0] // max(len(exp.items), 1)
    labels = label_responses(tokenizer, r.response_ids, r.response_mask, exp.items, G, exp.rewards >= 1.0,
                             r.finished, task)
    boundary, _ = CreditTokens(tokenizer, boundaries=credit.gear_boundaries).masks(r.response_ids, r.response_mask)
    div = d["kl"] if credit.divergence == "kl" else None
    if credit.divergence == "kl" and div is None:
        raise ValueError("error_readability_row: credit.divergence=kl needs the teacher forward's KL "
                         "(teacher_delta(..., return_kl=True))")
    gear = gear_departed_mask(d["delta"], r.response_mask, divergence=div, boundary_mask=boundary,
                              min_drop=credit.gear_min_drop, k=credit.gear_k)
    return error_readability(d["delta"], labels, gear_mask=gear, n_boot=n_boot, seed=seed)


def measure_error_readability(model, tokenizer, prompt_format, credit, exp, *, temperature: float, task: str,
                              teacher=None, items: Sequence | None = None, n_boot: int = 1000, seed: int = 0):
    """Error readability of one sampled batch: the AUC of ``delta`` at re-derived first errors against
    the departed tokens of correct-but-reworded responses, beside the old first-departure AUC
    (:class:`grpolab.diagnostics.readability_errors.ErrorReadability`).

    Args:
        model, tokenizer, prompt_format, credit, exp, temperature, teacher, items: as :func:`teacher_delta`.
        task: the worked-answer format's re-deriver (``"short_arith"``, ``"arith"``:
            :data:`grpolab.diagnostics.rederive.REDERIVERS`).
        n_boot, seed: the bootstrap over responses behind the intervals.

    Raises:
        ValueError: no re-deriver for ``task``.
    """
    from grpolab.diagnostics.rederive import REDERIVERS

    if task not in REDERIVERS:
        raise ValueError(f"measure_error_readability: no re-deriver for task {task!r}; tasks with one: "
                         f"{', '.join(sorted(REDERIVERS))}")
    d = teacher_delta(model, tokenizer, prompt_format, credit, exp, temperature=temperature, teacher=teacher,
                      items=items, return_kl=credit.divergence == "kl")
    return error_readability_row(tokenizer, exp, d, credit, task=task, n_boot=n_boot, seed=seed)
