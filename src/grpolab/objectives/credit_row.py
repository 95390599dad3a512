"""The credit step's row of metrics (``credit/...``), beside the reweighting it describes.

:func:`credit_step_metrics` turns one step's :class:`grpolab.objectives.credit.CreditResult` and
the teacher's and student's log-probs into the ``credit/...`` floats that grpolab's trainer
(:mod:`grpolab.train.credit`) and the verl extension (:mod:`grpolab.integrations.verl.credit`)
log; the per-reweighting statistics come from :func:`grpolab.objectives.credit.credit_metrics`.
Unlike the rest of ``objectives/``, it returns plain floats: it is the step's log row, not part of
a loss (moved here from ``grpolab.rollout.teacher``, which re-exports it for one release).
"""

from __future__ import annotations

import torch

from grpolab import step_row as K
from grpolab.objectives.credit import credit_metrics

__all__ = ["credit_step_metrics"]


def credit_step_metrics(result, lam: float, student_logp: torch.Tensor, teacher_logp: torch.Tensor,
                        mask: torch.Tensor, scored: torch.Tensor,
                        divergence: torch.Tensor | None = None) -> dict[str, float]:
    """The ``credit/...`` metrics of one credit step, as grpolab's trainer and the verl extension log them.

    Args:
        result: the :class:`grpolab.objectives.credit.CreditResult` of the step (``multiplier``,
            ``segment_ids``, ``metrics``).
        lam: the mixing weight used.
        student_logp, teacher_logp: ``[B,T]`` log-probs of the sampled tokens (0 on rows not scored).
        mask: ``[B,T]`` response tokens; scored: ``[B]`` rows sent to the teacher.
        divergence: ``[B,T]`` full-vocabulary KL when it was computed, else None.

    ``kl_sampled`` is KL(student || teacher) on the student's own samples (the k1 estimate from
    the sampled tokens; ``kl``: the exact value when computed); ``delta_*`` and GEAR's segment
    statistics are over the scored rows only (unscored rows have delta 0). Every key and its
    meaning: :data:`grpolab.step_row.STEP_METRICS` (docs/metrics.md).
    """
    row: dict[str, float] = {K.CREDIT_LAM: float(lam),
                             K.CREDIT_SCORED_ROWS_FRAC: float(scored.float().mean()) if len(scored) else 0.0}
    valid = mask.bool() & scored.unsqueeze(-1)
    n = max(int(valid.sum()), 1)
    row[K.CREDIT_KL_SAMPLED] = float(torch.where(valid, student_logp - teacher_logp,
                                                 torch.zeros_like(student_logp)).sum()) / n
    if divergence is not None:
        row[K.CREDIT_KL] = float(torch.where(valid, divergence, torch.zeros_like(divergence)).sum()) / n
    if bool(valid.any()):
        seg = result.segment_ids
        if seg is not None:
            seg = torch.where(valid, seg, torch.zeros_like(seg))
        delta = torch.where(valid, teacher_logp - student_logp, torch.zeros_like(student_logp)).double()
        for k, v in credit_metrics(delta, torch.zeros_like(valid), valid, valid.double(), seg).items():
            if k not in ("clip_frac", "reweighted_frac"):  # the clip rate is the reweighting's own, below
                row[K.row_key(K.CREDIT, k)] = float(v)
    clip = K.stat_name(K.CREDIT, K.CREDIT_CLIP_FRAC)
    if clip in result.metrics:
        row[K.CREDIT_CLIP_FRAC] = float(result.metrics[clip])
    mult = result.multiplier[valid]
    if mult.numel():
        row[K.CREDIT_MULTIPLIER_MIN] = float(mult.min())
        row[K.CREDIT_MULTIPLIER_MAX] = float(mult.max())
    return row
