"""Token-level credit from a privileged self-teacher: RLSD, GEAR, and the OPSD baseline.

docs/methods.md, token-level credit. The reward decides the *direction* of every token's update (the sign
of the sequence advantage ``A``); a teacher -- the same model shown the reference solution --
decides the *magnitude*. Inputs are the detached log-probs of the sampled tokens under the
student (``student_logp[B,T]``) and the teacher (``teacher_logp[B,T]``).

RLSD (arXiv 2604.03128), exactly as in docs/methods.md (RLSD)::

    delta_t = sg(teacher_logp_t - student_logp_t)
    w_t     = exp(sign(A) * delta_t)
    A_t     = A * ((1 - lam) + lam * clip(w_t, 1 - eps_w, 1 + eps_w))

Options from the authors' code: ``negative_only`` (reweight only samples with ``A < 0``) and a
``span_mask`` (reweight only inside a reasoning span; multiplier 1 elsewhere). Because the
multiplier lies in ``[1 - lam * eps_w, 1 + lam * eps_w]`` and ``eps_w < 1``, ``sign(A_t) = sign(A)``.
grpolab computes ``exp`` on ``sign(A) * delta`` clamped to ``[-60, 60]`` (finite in float32); the
clip to ``[1 - eps_w, 1 + eps_w]`` makes that invisible.

GEAR (arXiv 2605.11853). Only the mechanism is public; **these details are grpolab's own reading**:

- *Divergence* ``D[B,T] >= 0``: the full-vocabulary KL(student || teacher) per position when
  ``divergence`` is given (see :func:`grpolab.rollout.teacher_logprobs`), else the sampled-token
  gap ``|delta_t|``.
- *Threshold rule* (per sequence, over its valid tokens): ``threshold="mad"`` (default):
  ``tau = median(D) + k * MAD(D)``, ``MAD = median(|D - median(D)|)``, both the *lower* median
  (element ``(n - 1) // 2`` of the sorted values, like ``torch.median``); ``threshold="quantile"``:
  ``tau`` = the lower ``q``-quantile (sorted element ``floor(q * (n - 1))``). Then
  ``tau = max(tau, min_divergence)``. An *anchor* is a valid token with ``D_t > tau`` (strictly: a
  flat sequence has no anchor) that *departs* from the teacher (``anchor="departure"``, the
  default): the teacher, shown the solution, gives the sampled token at most ``exp(-min_drop)``
  of the student's probability (``delta_t < -min_drop``, default ``min_drop = ln 2``: half). A
  divergence spike where the teacher is *more* sure of the sampled token than the student (a
  right digit the teacher read off the solution) is agreement, not departure: under the spike
  alone (``anchor="spike"``, the rule before issue 44) SmolLM2's correct 12-token answers had
  96-97% of their tokens in segments (docs/results/real_credit.md), because any spike opens a
  segment that runs to the end of a line. docs/credit.md, "GEAR's anchors".
- *Segments*: an anchor opens a segment that runs over the following valid tokens and ends at
  the next anchor (which opens its own segment), just after a *boundary* token (``boundary_mask``
  = 1, e.g. end of line, ``;`` or end of turn; the boundary token belongs to the segment), or just
  before a masked position (tool/environment output; it never belongs to a segment). Tokens
  outside every segment are *aligned*. ``segment_ids``: 0 for aligned tokens and padding, ``k``
  for the ``k``-th anchor's segment of that row (1-based).
- *Weights*: an aligned token keeps its own RLSD log-weight ``s_t = sign(A) * delta_t``. Every
  token of a segment gets the anchor's log-weight ``s = -sign(A) * D_anchor``: a spike in
  divergence means "the response left the teacher's path here", so the whole continuation gets
  more blame when ``A < 0`` (``w > 1``) and less credit when ``A > 0`` (``w < 1``). Then, as in
  RLSD, ``w = clip(exp(s), 1 - eps_w, 1 + eps_w)``, ``A_t = A * ((1 - lam) + lam * w)``, with the
  same ``negative_only`` / ``span_mask`` options: the sign of ``A`` never flips.
- Not implemented: extending a segment by student entropy (docs/methods.md mentions it as optional).

OPSD (on-policy self-distillation, the baseline RLSD argues against): minimise the per-token
KL(student || teacher) on the student's own samples, no reward. Its policy gradient, with only
each token's own term (the usual per-token form), is ``sum_t (logp_t - teacher_t) grad logp_t``,
i.e. the clipped surrogate with the per-token advantage ``A_t = sg(teacher_t - student_t)``:
:func:`opsd_advantages` feeds :func:`grpolab.objectives.policy_loss`, and :func:`opsd_loss` is the
same objective written directly (value: the k1 estimate of the KL; gradient: the one above).

Everything here is pure: tensors in, tensors out, no ``.item()``. ``advantages`` may be ``[B]`` or
already ``[B,T]`` (then each token's sign is used). Positions with ``mask = 0`` are never read:
their output is 0 whatever they hold (NaN and inf included).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from grpolab.objectives._groups import check_advantages_shape
from grpolab.utils.registry import Registry

LOG_WEIGHT_CAP = 60.0
CREDIT_METHODS: Registry[Callable[..., "CreditResult"]] = Registry("credit method")
THRESHOLDS = ("mad", "quantile")
DIVERGENCES = ("kl", "logratio")
ANCHORS = ("departure", "spike")
LN2 = math.log(2.0)


@dataclass
class CreditResult:
    """Per-token advantages and what produced them.

    Attributes:
        advantages: ``[B,T]`` per-token advantages (0 where ``mask = 0``).
        multiplier: ``[B,T]`` ``A_t / A`` (1 where nothing was reweighted, 0 where masked).
        segment_ids: ``[B,T]`` long, GEAR segments (0 = aligned/padding); None for other methods.
        metrics: dict of detached scalar tensors (see :func:`credit_metrics`).
    """

    advantages: torch.Tensor
    multiplier: torch.Tensor
    segment_ids: torch.Tensor | None = None
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class GearResult:
    """What :func:`gear_advantages` returns.

    Attributes:
        advantages: ``[B,T]`` per-token advantages.
        segment_ids: ``[B,T]`` long: 0 aligned or masked, ``k`` = the ``k``-th segment of the row.
        multiplier: ``[B,T]`` ``A_t / A``.
        anchors: ``[B,T]`` bool, the tokens whose divergence spiked.
        divergence: ``[B,T]`` the divergence used (0 where masked).
        threshold: ``[B]`` the per-sequence spike threshold ``tau``.
        clipped: ``[B,T]`` bool, tokens whose weight hit ``1 +- eps_w`` (reweighted tokens only).
    """

    advantages: torch.Tensor
    segment_ids: torch.Tensor
    multiplier: torch.Tensor
    anchors: torch.Tensor
    divergence: torch.Tensor
    threshold: torch.Tensor
    clipped: torch.Tensor


# ---------------------------------------------------------------------------------------------
# shared pieces


def _check(advantages, student_logp, teacher_logp, mask, lam, eps_w, span_mask=None) -> None:
    if mask.dim() != 2:
        raise ValueError(f"mask must have shape [B,T]; got {tuple(mask.shape)}")
    for name, t in (("student_logp", student_logp), ("teacher_logp", teacher_logp)):
        if t.shape != mask.shape:
            raise ValueError(f"{name} must have the shape of mask {tuple(mask.shape)}; got {tuple(t.shape)}")
    check_advantages_shape(advantages, mask.shape)
    if span_mask is not None and span_mask.shape != mask.shape:
        raise ValueError(f"span_mask must have the shape of mask {tuple(mask.shape)}; got {tuple(span_mask.shape)}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1] (0 = plain GRPO, 1 = full reweighting); got {lam}")
    if not 0.0 <= eps_w < 1.0:
        raise ValueError(f"eps_w must be in [0, 1) so that a weight stays positive (sign of A kept); got {eps_w}")


def _broadcast(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    adv = advantages.detach()
    return adv.unsqueeze(-1).expand(mask.shape) if adv.dim() == 1 else adv


def _mix(adv_BT, log_w_BT, reweight_BT, valid, lam: float, eps_w: float):
    """``A_t = A ((1 - lam) + lam clip(exp(s), 1 - eps_w, 1 + eps_w))`` where ``reweight``, else ``A``.

    Returns ``(advantages [B,T], multiplier [B,T], clipped [B,T] bool)``; 0 / 1 / False off ``valid``.
    """
    zero = adv_BT.new_zeros(())
    s = torch.where(reweight_BT, log_w_BT, zero).clamp(-LOG_WEIGHT_CAP, LOG_WEIGHT_CAP)
    w = torch.exp(s)
    lo, hi = 1.0 - eps_w, 1.0 + eps_w
    clipped = reweight_BT & ((w < lo) | (w > hi))
    mult = (1.0 - lam) + lam * w.clamp(lo, hi)
    mult = torch.where(reweight_BT, mult, torch.ones_like(mult))
    mult = torch.where(valid, mult, zero)
    return adv_BT * mult, mult, clipped


def _reweight_mask(adv_BT, valid, negative_only: bool, span_mask) -> torch.Tensor:
    rw = valid & (adv_BT != 0)
    if negative_only:
        rw = rw & (adv_BT < 0)
    if span_mask is not None:
        rw = rw & span_mask.bool()
    return rw


def _delta(student_logp, teacher_logp, valid, dtype) -> torch.Tensor:
    zero = torch.zeros((), dtype=dtype, device=valid.device)
    return torch.where(valid, teacher_logp.detach().to(dtype) - student_logp.detach().to(dtype), zero)


def _adv_dtype(advantages: torch.Tensor) -> torch.dtype:
    return advantages.dtype if advantages.is_floating_point() else torch.float32


# ---------------------------------------------------------------------------------------------
# RLSD


def rlsd_advantages(
    advantages: torch.Tensor,
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    lam: float = 0.5,
    eps_w: float = 0.2,
    negative_only: bool = False,
    span_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """RLSD per-token advantages (docs/methods.md, RLSD).

    Args:
        advantages: ``[B]`` sequence advantages (or ``[B,T]``; each token's own sign is used).
        student_logp: ``[B,T]`` log-probs of the sampled tokens under the current policy.
        teacher_logp: ``[B,T]`` the same tokens under the privileged teacher.
        mask: ``[B,T]`` 1 on policy tokens.
        lam: mixing weight; 0 reproduces the input advantages exactly.
        eps_w: the weight is clipped to ``[1 - eps_w, 1 + eps_w]``; must be in ``[0, 1)``.
        negative_only: reweight only samples with ``A < 0`` (multiplier 1 for the others).
        span_mask: ``[B,T]``; reweight only where it is 1.

    Returns:
        ``A_t [B,T]`` (detached), 0 where ``mask = 0``.
    """
    return _rlsd(advantages, student_logp, teacher_logp, mask, lam=lam, eps_w=eps_w,
                 negative_only=negative_only, span_mask=span_mask)[0]


def _rlsd(advantages, student_logp, teacher_logp, mask, *, lam, eps_w, negative_only, span_mask):
    _check(advantages, student_logp, teacher_logp, mask, lam, eps_w, span_mask)
    valid = mask.bool()
    dtype = _adv_dtype(advantages)
    adv_BT = torch.where(valid, _broadcast(advantages, mask).to(dtype), torch.zeros((), dtype=dtype, device=mask.device))
    delta = _delta(student_logp, teacher_logp, valid, dtype)
    rw = _reweight_mask(adv_BT, valid, negative_only, span_mask)
    adv_t, mult, clipped = _mix(adv_BT, torch.sign(adv_BT) * delta, rw, valid, lam, eps_w)
    return adv_t, mult, clipped, rw, delta


# ---------------------------------------------------------------------------------------------
# GEAR


def _check_anchor(anchor: str, min_drop: float) -> None:
    if anchor not in ANCHORS:
        raise ValueError(f"unknown GEAR anchor rule {anchor!r}; choose one of: {', '.join(ANCHORS)}")
    if not (min_drop >= 0 and math.isfinite(min_drop)):
        raise ValueError(f"min_drop must be a finite number >= 0 (e.g. 0.693 = ln 2); got {min_drop}")


def _lower_quantile(x_BT: torch.Tensor, valid: torch.Tensor, q: float) -> torch.Tensor:
    """Per-row sorted element ``floor(q * (n - 1))`` over valid entries: ``[B,T] -> [B]`` (0 if n = 0)."""
    n_B = valid.sum(-1)
    filled = torch.where(valid, x_BT, torch.full_like(x_BT, float("inf")))
    sorted_BT = filled.sort(dim=-1).values
    k_B = torch.floor(q * (n_B - 1).clamp_min(0).to(x_BT.dtype)).long()
    out = sorted_BT.gather(-1, k_B.unsqueeze(-1)).squeeze(-1)
    return torch.where(n_B > 0, out, torch.zeros_like(out))


def gear_segments(
    divergence: torch.Tensor,
    mask: torch.Tensor,
    *,
    threshold: str = "mad",
    k: float = 3.0,
    quantile: float = 0.9,
    min_divergence: float = 0.0,
    boundary_mask: torch.Tensor | None = None,
    eligible: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """GEAR anchors and segments from a divergence sequence (grpolab's rule, module docstring).

    Args:
        divergence: ``[B,T]`` non-negative per-token divergence.
        mask: ``[B,T]`` 1 on policy tokens.
        threshold: ``"mad"`` (median + k MAD) or ``"quantile"``.
        k, quantile, min_divergence: parameters of the threshold rule.
        boundary_mask: ``[B,T]``, 1 on tokens after which a segment ends (end of line, of turn).
        eligible: ``[B,T]`` bool, the tokens that may be anchors (:func:`gear_advantages` passes
            the departures, ``delta_t < -min_drop``); None: every valid token. The threshold is
            computed over all valid tokens either way.

    Returns:
        ``(segment_ids [B,T] long, anchors [B,T] bool, anchor_pos [B,T] long, threshold [B])``:
        ``anchor_pos`` is the position of the anchor of each segment token (-1 off segments).
    """
    if divergence.shape != mask.shape or mask.dim() != 2:
        raise ValueError(f"divergence and mask must share shape [B,T]; got {tuple(divergence.shape)}, {tuple(mask.shape)}")
    if boundary_mask is not None and boundary_mask.shape != mask.shape:
        raise ValueError(f"boundary_mask must have shape {tuple(mask.shape)}; got {tuple(boundary_mask.shape)}")
    if eligible is not None and eligible.shape != mask.shape:
        raise ValueError(f"eligible must have shape {tuple(mask.shape)}; got {tuple(eligible.shape)}")
    if threshold not in THRESHOLDS:
        raise ValueError(f"unknown GEAR threshold {threshold!r}; choose one of: {', '.join(THRESHOLDS)}")
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1]; got {quantile}")
    if k < 0:
        raise ValueError(f"k must be >= 0; got {k}")
    valid = mask.bool()
    B, T = mask.shape
    D = torch.where(valid, divergence.detach(), divergence.new_zeros(()))
    if threshold == "mad":
        med_B = _lower_quantile(D, valid, 0.5)
        mad_B = _lower_quantile((D - med_B.unsqueeze(-1)).abs(), valid, 0.5)
        tau_B = med_B + k * mad_B
    else:
        tau_B = _lower_quantile(D, valid, quantile)
    tau_B = tau_B.clamp_min(min_divergence)
    anchors = valid & (D > tau_B.unsqueeze(-1))
    if eligible is not None:
        anchors = anchors & eligible.bool()

    pos = torch.arange(T, device=mask.device).expand(B, T)
    minus1 = torch.full_like(pos, -1)
    last_anchor = torch.where(anchors, pos, minus1).cummax(-1).values
    # a segment is closed at position u when u is masked or the token before u was a boundary
    ends = ~valid
    if boundary_mask is not None:
        after_boundary = torch.zeros_like(valid)
        after_boundary[:, 1:] = boundary_mask[:, :-1].bool()
        ends = ends | after_boundary
    last_end = torch.where(ends, pos, minus1).cummax(-1).values
    # an anchor at u re-opens a segment even if u is just after a boundary (anchor wins ties)
    in_seg = valid & (last_anchor >= 0) & (last_anchor >= last_end)
    seg_ids = torch.where(in_seg, anchors.long().cumsum(-1), torch.zeros_like(pos))
    anchor_pos = torch.where(in_seg, last_anchor, minus1)
    return seg_ids, anchors, anchor_pos, tau_B


def gear_advantages(
    advantages: torch.Tensor,
    student_logp: torch.Tensor,
    teacher_logp: torch.Tensor,
    mask: torch.Tensor,
    *,
    divergence: torch.Tensor | None = None,
    lam: float = 0.5,
    eps_w: float = 0.2,
    threshold: str = "mad",
    k: float = 3.0,
    quantile: float = 0.9,
    min_divergence: float = 0.0,
    boundary_mask: torch.Tensor | None = None,
    negative_only: bool = False,
    span_mask: torch.Tensor | None = None,
    anchor: str = "departure",
    min_drop: float = LN2,
) -> GearResult:
    """GEAR per-token advantages with adaptive segments (docs/methods.md, GEAR; module docstring).

    Args:
        advantages: ``[B]`` sequence advantages (or ``[B,T]``).
        student_logp, teacher_logp: ``[B,T]`` sampled-token log-probs (student, privileged teacher).
        mask: ``[B,T]`` 1 on policy tokens.
        divergence: ``[B,T]`` per-token full-vocabulary KL(student || teacher); None uses
            ``|teacher_logp - student_logp|``.
        lam, eps_w, negative_only, span_mask: as in :func:`rlsd_advantages`.
        threshold, k, quantile, min_divergence, boundary_mask: see :func:`gear_segments`.
        anchor: ``"departure"`` (default): an anchor is a spike where the teacher gives the sampled
            token less than ``exp(-min_drop)`` of the student's probability (``delta_t < -min_drop``);
            ``"spike"``: any spike (the rule before issue 44). See the module docstring.
        min_drop: ``>= 0``, the log-ratio a departure must fall below zero by (default ``ln 2``).

    Returns:
        :class:`GearResult`. Vectorised: no Python loop over positions or rows.
    """
    _check(advantages, student_logp, teacher_logp, mask, lam, eps_w, span_mask)
    _check_anchor(anchor, min_drop)
    if divergence is not None and divergence.shape != mask.shape:
        raise ValueError(f"divergence must have the shape of mask {tuple(mask.shape)}; got {tuple(divergence.shape)}")
    valid = mask.bool()
    dtype = _adv_dtype(advantages)
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    adv_BT = torch.where(valid, _broadcast(advantages, mask).to(dtype), zero)
    delta = _delta(student_logp, teacher_logp, valid, dtype)
    D = delta.abs() if divergence is None else torch.where(valid, divergence.detach().to(dtype), zero)
    eligible = (delta < -min_drop) if anchor == "departure" else None
    seg_ids, anchors, anchor_pos, tau_B = gear_segments(
        D, mask, threshold=threshold, k=k, quantile=quantile, min_divergence=min_divergence,
        boundary_mask=boundary_mask, eligible=eligible,
    )
    sign = torch.sign(adv_BT)
    in_seg = seg_ids > 0
    D_anchor = D.gather(-1, anchor_pos.clamp_min(0))
    log_w = torch.where(in_seg, -sign * D_anchor, sign * delta)
    rw = _reweight_mask(adv_BT, valid, negative_only, span_mask)
    adv_t, mult, clipped = _mix(adv_BT, log_w, rw, valid, lam, eps_w)
    return GearResult(advantages=adv_t, segment_ids=seg_ids, multiplier=mult, anchors=anchors,
                      divergence=D, threshold=tau_B, clipped=clipped)


# ---------------------------------------------------------------------------------------------
# OPSD


def opsd_advantages(student_logp: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """OPSD per-token advantages ``A_t = sg(teacher_logp_t - student_logp_t)``: ``[B,T] -> [B,T]``.

    Fed to :func:`grpolab.objectives.policy_loss` (no reward), the gradient on-policy is
    ``sum_t W_t (student_t - teacher_t) grad logp_t``: the per-token policy gradient of
    KL(student || teacher) on the student's own samples. 0 where ``mask = 0``.
    """
    if student_logp.shape != mask.shape or teacher_logp.shape != mask.shape or mask.dim() != 2:
        raise ValueError(
            f"student_logp, teacher_logp and mask must share shape [B,T]; got {tuple(student_logp.shape)}, "
            f"{tuple(teacher_logp.shape)}, {tuple(mask.shape)}"
        )
    return _delta(student_logp, teacher_logp, mask.bool(), _adv_dtype(student_logp))


def opsd_loss(
    logp: torch.Tensor, teacher_logp: torch.Tensor, mask: torch.Tensor, *, weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The OPSD objective directly: per-token KL(student || teacher) on the student's samples.

    Value: ``sum W_t (logp_t - teacher_t)`` (the k1 estimate of the KL); gradient:
    ``sum W_t sg(logp_t - teacher_t) grad logp_t`` (the policy gradient of that KL, each token's
    own term). ``W`` defaults to the token mean ``mask / sum(mask)``.

    Args:
        logp: ``[B,T]`` current-policy log-probs of the sampled tokens (with gradient).
        teacher_logp: ``[B,T]`` privileged-teacher log-probs (detached inside).
        mask: ``[B,T]``.
        weights: ``[B,T]`` aggregation weights.

    Returns:
        ``(loss, {"kl": ..., "loss": ...})``.
    """
    if logp.shape != mask.shape or teacher_logp.shape != mask.shape or mask.dim() != 2:
        raise ValueError("logp, teacher_logp and mask must share shape [B,T]")
    valid = mask.bool()
    zero = logp.new_zeros(())
    if weights is None:
        mf = valid.to(logp.dtype)
        weights = mf / mf.sum().clamp_min(1)
    W = torch.where(valid, weights.detach().to(logp.dtype), zero)
    lp = torch.where(valid, logp, zero)
    d = torch.where(valid, lp.detach() - teacher_logp.detach().to(logp.dtype), zero)
    # value sum W d, gradient sum W d grad(logp): d * (logp - sg(logp)) is 0 in value
    loss = (W * (d + d * (lp - lp.detach()))).sum()
    return loss, {"loss": loss.detach(), "kl": (W * d).sum().detach()}


# ---------------------------------------------------------------------------------------------
# schedule, metrics, registry


def lam_schedule(step: int, *, start: float = 0.5, end: float = 0.0, steps: int = 50,
                 kind: str = "linear") -> float:
    """``lam`` at 0-based training ``step``: ``linear`` from ``start`` to ``end`` over ``steps``
    steps (then ``end``), or ``constant`` (always ``start``). Defaults: RLSD's 0.5 -> 0 over 50."""
    if kind not in ("linear", "constant"):
        raise ValueError(f"unknown lam schedule {kind!r}; choose one of: linear, constant")
    if kind == "constant":
        return float(start)
    if steps <= 0:
        return float(end)
    frac = min(max(step, 0) / steps, 1.0)
    return float(start + (end - start) * frac)


def credit_metrics(
    delta: torch.Tensor, clipped: torch.Tensor, reweighted: torch.Tensor, mask: torch.Tensor,
    segment_ids: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Detached scalar metrics of one reweighting.

    ``clip_frac`` (clipped weights / reweighted tokens), ``delta_mean`` and ``delta_std`` (over
    valid tokens), ``reweighted_frac``; with ``segment_ids``: ``segments_per_seq`` (mean over
    non-empty sequences), ``segment_len`` (mean tokens per segment), ``segment_token_frac``.
    """
    valid = mask.bool()
    n = valid.sum().clamp_min(1).to(delta.dtype)
    zero = delta.new_zeros(())
    d = torch.where(valid, delta, zero)
    mean = d.sum() / n
    var = torch.where(valid, (delta - mean) ** 2, zero).sum() / n
    n_rw = reweighted.sum().clamp_min(1).to(delta.dtype)
    out = {
        "clip_frac": (clipped & reweighted).sum().to(delta.dtype) / n_rw,
        "delta_mean": mean.detach(),
        "delta_std": var.sqrt().detach(),
        "reweighted_frac": reweighted.sum().to(delta.dtype) / n,
    }
    if segment_ids is not None:
        n_seq = valid.any(-1).sum().clamp_min(1).to(delta.dtype)
        n_seg = segment_ids.amax(-1).clamp_min(0).sum().to(delta.dtype)
        seg_tok = (segment_ids > 0).sum().to(delta.dtype)
        out["segments_per_seq"] = n_seg / n_seq
        out["segment_len"] = seg_tok / n_seg.clamp_min(1)
        out["segment_token_frac"] = seg_tok / n
    return out


@CREDIT_METHODS.register("grpo")
def _credit_grpo(advantages, student_logp, teacher_logp, mask, **_: object) -> CreditResult:
    valid = mask.bool()
    dtype = _adv_dtype(advantages)
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    adv_BT = torch.where(valid, _broadcast(advantages, mask).to(dtype), zero)
    return CreditResult(advantages=adv_BT, multiplier=valid.to(dtype))


@CREDIT_METHODS.register("rlsd")
def _credit_rlsd(advantages, student_logp, teacher_logp, mask, *, lam=0.5, eps_w=0.2,
                 negative_only=False, span_mask=None, **_: object) -> CreditResult:
    adv_t, mult, clipped, rw, delta = _rlsd(advantages, student_logp, teacher_logp, mask, lam=lam,
                                            eps_w=eps_w, negative_only=negative_only, span_mask=span_mask)
    return CreditResult(advantages=adv_t, multiplier=mult,
                        metrics=credit_metrics(delta, clipped, rw, mask))


@CREDIT_METHODS.register("gear")
def _credit_gear(advantages, student_logp, teacher_logp, mask, *, lam=0.5, eps_w=0.2,
                 negative_only=False, span_mask=None, divergence=None, **gear_kw: object) -> CreditResult:
    keys = ("threshold", "k", "quantile", "min_divergence", "boundary_mask", "anchor", "min_drop")
    res = gear_advantages(advantages, student_logp, teacher_logp, mask, divergence=divergence, lam=lam,
                          eps_w=eps_w, negative_only=negative_only, span_mask=span_mask,
                          **{k: v for k, v in gear_kw.items() if k in keys})
    valid = mask.bool()
    adv_BT = _broadcast(advantages, mask)
    rw = _reweight_mask(torch.where(valid, adv_BT, adv_BT.new_zeros(())), valid, negative_only, span_mask)
    delta = _delta(student_logp, teacher_logp, valid, res.advantages.dtype)
    return CreditResult(advantages=res.advantages, multiplier=res.multiplier, segment_ids=res.segment_ids,
                        metrics=credit_metrics(delta, res.clipped, rw, mask, res.segment_ids))


@CREDIT_METHODS.register("opsd")
def _credit_opsd(advantages, student_logp, teacher_logp, mask, **_: object) -> CreditResult:
    adv_t = opsd_advantages(student_logp, teacher_logp, mask)
    valid = mask.bool()
    none = torch.zeros_like(valid)
    m = credit_metrics(adv_t, none, none, mask)
    return CreditResult(advantages=adv_t, multiplier=valid.to(adv_t.dtype), metrics=m)


def credit_advantages(name: str, advantages, student_logp, teacher_logp, mask, *, lam: float = 0.5,
                      eps_w: float = 0.2, negative_only: bool = False, span_mask: torch.Tensor | None = None,
                      divergence: torch.Tensor | None = None, threshold: str = "mad", k: float = 3.0,
                      quantile: float = 0.9, min_divergence: float = 0.0,
                      boundary_mask: torch.Tensor | None = None, anchor: str = "departure",
                      min_drop: float = LN2) -> CreditResult:
    """Dispatch to the credit method registered under ``name`` (``grpo | rlsd | gear | opsd``).

    ``grpo`` returns ``A`` broadcast to ``[B,T]``; ``opsd`` ignores ``advantages`` (no reward) and
    returns ``sg(teacher - student)``. The keywords are those of :func:`rlsd_advantages` and
    :func:`gear_advantages` (``divergence``, ``threshold``, ``k``, ``quantile``, ``min_divergence``,
    ``boundary_mask``, ``anchor``, ``min_drop`` are GEAR's); a method ignores the ones it does not use,
    and a misspelled keyword is a ``TypeError``, not silently dropped.
    """
    return CREDIT_METHODS.get(name)(
        advantages, student_logp, teacher_logp, mask, lam=lam, eps_w=eps_w, negative_only=negative_only,
        span_mask=span_mask, divergence=divergence, threshold=threshold, k=k, quantile=quantile,
        min_divergence=min_divergence, boundary_mask=boundary_mask, anchor=anchor, min_drop=min_drop)


def check_credit(*, name: str, lam: float, eps_w: float, threshold: str = "mad", k: float = 3.0,
                 quantile: float = 0.9, divergence: str = "kl") -> None:
    """Validate credit settings; raise ``ValueError`` naming the fix."""
    CREDIT_METHODS.get(name)
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam={lam} must be in [0, 1]")
    if not 0.0 <= eps_w < 1.0:
        raise ValueError(f"eps_w={eps_w} must be in [0, 1) (a weight 1 - eps_w must stay > 0)")
    if threshold not in THRESHOLDS:
        raise ValueError(f"threshold={threshold!r}; choose one of: {', '.join(THRESHOLDS)}")
    if divergence not in DIVERGENCES:
        raise ValueError(f"divergence={divergence!r}; choose one of: {', '.join(DIVERGENCES)}")
    if k < 0 or not math.isfinite(k):
        raise ValueError(f"k={k} must be a finite number >= 0")
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile={quantile} must be in [0, 1]")


__all__ = [
    "ANCHORS",
    "CREDIT_METHODS",
    "CreditResult",
    "GearResult",
    "check_credit",
    "credit_advantages",
    "credit_metrics",
    "gear_advantages",
    "gear_segments",
    "lam_schedule",
    "opsd_advantages",
    "opsd_loss",
    "rlsd_advantages",
]
