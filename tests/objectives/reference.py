"""Slow, obviously-correct loop twins of ``grpolab.objectives`` (float64, pure Python).

Written from the method descriptions alone (docs/methods.md: advantages, aggregation, importance
ratios), never from the implementation. Every function loops over sequences and positions with
Python floats; inputs may be torch tensors or nested lists. Positions with ``mask == 0`` are never read (``if not valid: continue``), so NaN or
huge values there cannot leak in. Nothing here imports grpolab.

Gradients are written out analytically (no autograd): with the stop-gradient structure of
docs/methods.md ("Importance ratios"), ``log_ratio_t = sg(value_t) + logp_t - sg(logp_t)``, so
``d log_ratio_t / d logp_s = [s == t] * mask_t`` for every ratio level, and

    dLoss/dlogp[i,t] = W[i,t] * ( dl/dlog_ratio (i,t) + kl_coef * dkl/dlogp (i,t) ).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

RATIO_LEVELS = ("token", "sequence", "gspo", "cumulative")
AGGREGATIONS = ("token", "sequence", "constant", "balanced")
KL_NAMES = ("k1", "k2", "k3")
LOG_RATIO_CLAMP = 20.0
CTPO_LOG_RATIO_MAX = 10.0


# ----------------------------------------------------------------------------- conversion
def _to_list(x):
    """Tensor / list -> nested Python lists of floats (float64)."""
    if x is None:
        return None
    if hasattr(x, "detach"):
        import torch

        return x.detach().to(torch.float64).cpu().tolist()
    return x


def _rows(x):
    x = _to_list(x)
    return [list(map(float, row)) for row in x]


def _vec(x):
    x = _to_list(x)
    return [float(v) for v in x]


def _ids(x):
    x = _to_list(x)
    return [int(v) for v in x]


def _exp(x: float) -> float:
    """math.exp without OverflowError (float64 semantics: overflow -> inf)."""
    if x > 709.0:
        return math.inf
    return math.exp(x)


def _valid(mask_row):
    return [m != 0.0 for m in mask_row]


# ----------------------------------------------------------------------------- advantages
def ref_group_advantages(rewards, group_ids, normalize_std=True, eps=1e-6):
    """GRPO: (R_i - mean_g) / (std_g + eps), std unbiased; Dr.GRPO: R_i - mean_g.
    Single-sample group -> 0."""
    R = _vec(rewards)
    g = _ids(group_ids)
    out = []
    for i in range(len(R)):
        members = [R[j] for j in range(len(R)) if g[j] == g[i]]
        n = len(members)
        if n == 1:
            out.append(0.0)
            continue
        mean = sum(members) / n
        if not normalize_std:
            out.append(R[i] - mean)
            continue
        var = sum((x - mean) ** 2 for x in members) / (n - 1)
        out.append((R[i] - mean) / (math.sqrt(var) + eps))
    return out


def ref_leave_one_out(rewards, group_ids):
    """RLOO: R_i - mean of the other G-1 rewards of the group (0 for a single-sample group)."""
    R = _vec(rewards)
    g = _ids(group_ids)
    out = []
    for i in range(len(R)):
        others = [R[j] for j in range(len(R)) if g[j] == g[i] and j != i]
        if not others:
            out.append(0.0)
            continue
        out.append(R[i] - sum(others) / len(others))
    return out


# ----------------------------------------------------------------------------- ratios
def ref_log_ratio_values(logp, old_logp, mask, level):
    """Value (forward) of the log importance ratio at every position; 0 where mask = 0."""
    if level not in RATIO_LEVELS:
        raise ValueError(level)
    lp, old, m = _rows(logp), _rows(old_logp), _rows(mask)
    out = []
    for i in range(len(m)):
        valid = _valid(m[i])
        T = len(valid)
        d = [0.0] * T
        for t in range(T):
            if valid[t]:
                d[t] = min(max(lp[i][t] - old[i][t], -LOG_RATIO_CLAMP), LOG_RATIO_CLAMP)
        n_valid = sum(valid)
        row = [0.0] * T
        running = 0.0
        for t in range(T):
            if not valid[t]:
                continue
            running += d[t]
            if level == "token":
                row[t] = d[t]
            elif level == "sequence":
                row[t] = sum(d)
            elif level == "gspo":
                row[t] = sum(d) / n_valid
            else:  # cumulative
                row[t] = running
        out.append(row)
    return out


def ref_positions(mask):
    """pos_t = cumsum(mask)_t (1-based count of policy tokens up to and including t)."""
    out = []
    for row in _rows(mask):
        c = 0
        prow = []
        for v in row:
            if v != 0.0:
                c += 1
            prow.append(c)
        out.append(prow)
    return out


# ----------------------------------------------------------------------------- aggregation
def _seq_signs(advantages, m):
    """Sign (+1/-1/0) of each sequence: A[i] for [B]; for [B,T] the sign on its valid tokens."""
    adv = _to_list(advantages)
    signs = []
    for i in range(len(m)):
        a_i = adv[i]
        if isinstance(a_i, list):
            vals = [float(a_i[t]) for t in range(len(m[i])) if m[i][t] != 0.0]
            a = vals[0] if vals else 0.0
        else:
            a = float(a_i)
        signs.append(1 if a > 0 else (-1 if a < 0 else 0))
    return signs


def ref_aggregation_weights(mask, mode, advantages=None, group_ids=None, max_len=None):
    """W[B][T] of docs/methods.md ("Aggregation"), by explicit counting."""
    m = _rows(mask)
    B = len(m)
    lens = [sum(1 for v in row if v != 0.0) for row in m]
    W = [[0.0] * len(row) for row in m]
    if mode == "token":
        total = sum(lens)
        for i in range(B):
            for t in range(len(m[i])):
                if m[i][t] != 0.0:
                    W[i][t] = 1.0 / total
        return W
    if mode == "sequence":
        n = sum(1 for L in lens if L > 0)
        for i in range(B):
            for t in range(len(m[i])):
                if m[i][t] != 0.0:
                    W[i][t] = 1.0 / (lens[i] * n)
        return W
    if mode == "constant":
        if max_len is None:
            raise ValueError("constant needs max_len")
        n = sum(1 for L in lens if L > 0)
        for i in range(B):
            for t in range(len(m[i])):
                if m[i][t] != 0.0:
                    W[i][t] = 1.0 / (n * max_len)
        return W
    if mode == "balanced":
        signs = _seq_signs(advantages, m)
        g = _ids(group_ids)
        groups = sorted(set(g))
        live_groups = [k for k in groups if any(lens[i] > 0 for i in range(B) if g[i] == k)]
        n_groups = len(live_groups)
        for k in live_groups:
            members = [i for i in range(B) if g[i] == k and lens[i] > 0]
            G = len(members)
            for sign in (1, -1):
                subset = [i for i in members if signs[i] == sign]
                if not subset:
                    continue
                n_tok = sum(lens[i] for i in subset)
                # J_g contribution: (|S|/G) * (1/n_tok) * sum l ; batch loss = mean_g J_g
                w = (len(subset) / G) / n_tok / n_groups
                for i in subset:
                    for t in range(len(m[i])):
                        if m[i][t] != 0.0:
                            W[i][t] = w
        return W
    raise ValueError(mode)


# ----------------------------------------------------------------------------- kl
def ref_kl(lp: float, ref: float, estimator: str):
    """(value, d value / d lp) of one token's KL estimate."""
    if estimator == "k1":
        return lp - ref, 1.0
    if estimator == "k2":
        return 0.5 * (lp - ref) ** 2, lp - ref
    if estimator == "k3":
        x = ref - lp
        return _exp(x) - x - 1.0, -_exp(x) + 1.0
    raise ValueError(estimator)


def ref_kl_penalty(logp, ref_logp, estimator):
    lp, rf = _rows(logp), _rows(ref_logp)
    return [[ref_kl(lp[i][t], rf[i][t], estimator)[0] for t in range(len(lp[i]))] for i in range(len(lp))]


# ----------------------------------------------------------------------------- token loss
def ref_token_loss(A: float, lr: float, *, level: str, pos: int, clip_low: float, clip_high: float,
                   dual_clip, clip_power: float):
    """(l_t, dl_t/dlog_ratio_t, which) for one valid token with log-ratio value ``lr``.

    ``which`` is one of "none", "low", "high", "dual" (which clip is active in the loss).
    """
    if A == 0.0:
        return 0.0, 0.0, "none"
    if level == "cumulative":
        dcap = 1.0
        if lr > CTPO_LOG_RATIO_MAX:
            lr, dcap = CTPO_LOG_RATIO_MAX, 0.0
        s = float(pos) ** clip_power
        lo, hi = -clip_low * s, clip_high * s
        r = _exp(lr)
        clipped = _exp(min(max(lr, lo), hi))
        l1, l2 = -A * r, -A * clipped
        if l1 >= l2:
            l, g, which = l1, -A * r * dcap, "none"
        else:
            l, g, which = l2, 0.0, ("high" if lr > hi else "low")
        cap = -A * _exp(clip_high * s)
        if A < 0 and l > cap:
            l, g, which = cap, 0.0, "dual"
        return l, g, which
    r = _exp(lr)
    clipped = min(max(r, 1.0 - clip_low), 1.0 + clip_high)
    l1, l2 = -A * r, -A * clipped
    if l1 >= l2:
        l, g, which = l1, -A * r, "none"
    else:
        l, g, which = l2, 0.0, ("high" if r > 1.0 + clip_high else "low")
    if A < 0 and dual_clip is not None and l > -A * dual_clip:
        l, g, which = -A * dual_clip, 0.0, "dual"
    return l, g, which


@dataclass
class RefLoss:
    loss: float
    grad: list          # dLoss/dlogp, [B][T]
    per_token: list     # l_t (incl. KL), 0 where mask = 0
    weights: list       # W, [B][T]
    log_ratio: list     # value of the log ratio, [B][T]
    which: list = field(default_factory=list)  # active clip per token ("" where masked)


def ref_policy_loss(logp, old_logp, advantages, mask, *, group_ids=None, ratio="token",
                    aggregation="token", clip_low=0.2, clip_high=0.28, dual_clip=3.0,
                    clip_power=0.5, max_len=None, ref_logp=None, kl_coef=0.0,
                    kl_estimator="k3", weights=None) -> RefLoss:
    lp, m = _rows(logp), _rows(mask)
    adv = _to_list(advantages)
    rf = _rows(ref_logp) if ref_logp is not None else None
    values = ref_log_ratio_values(logp, old_logp, mask, ratio)
    pos = ref_positions(mask)
    if weights is None:
        W = ref_aggregation_weights(mask, aggregation, advantages=advantages,
                                    group_ids=group_ids, max_len=max_len)
    else:
        W = _rows(weights)
    B = len(m)
    loss = 0.0
    grad = [[0.0] * len(row) for row in m]
    per_tok = [[0.0] * len(row) for row in m]
    which = [[""] * len(row) for row in m]
    for i in range(B):
        for t in range(len(m[i])):
            if m[i][t] == 0.0:
                continue
            A = float(adv[i][t]) if isinstance(adv[i], list) else float(adv[i])
            l, g, w = ref_token_loss(A, values[i][t], level=ratio, pos=pos[i][t],
                                     clip_low=clip_low, clip_high=clip_high,
                                     dual_clip=dual_clip, clip_power=clip_power)
            if rf is not None and kl_coef != 0.0:
                k, dk = ref_kl(lp[i][t], rf[i][t], kl_estimator)
                l += kl_coef * k
                g += kl_coef * dk
            per_tok[i][t] = l
            which[i][t] = w
            if W[i][t] != 0.0:
                loss += W[i][t] * l
                grad[i][t] = W[i][t] * g
    return RefLoss(loss=loss, grad=grad, per_token=per_tok, weights=W, log_ratio=values,
                   which=which)


# ----------------------------------------------------------------------------- credit (RLSD, GEAR)
# docs/methods.md ("Token-level credit from a privileged self-teacher") and the GEAR rules written in grpolab/objectives/credit.py's docstring
# (threshold: lower median + k * MAD, or the lower q-quantile; anchors strictly above it; a segment
# runs from an anchor to the next anchor, just after a boundary token, or just before a masked
# position; segment tokens take the anchor's log-weight -sign(A) * D_anchor).
def _sgn(a: float) -> float:
    return 1.0 if a > 0 else (-1.0 if a < 0 else 0.0)


def _adv_at(adv, i, t):
    a = adv[i]
    return float(a[t]) if isinstance(a, list) else float(a)


def _mix_one(A: float, s: float, lam: float, eps_w: float, reweight: bool):
    """(A_t, multiplier, clipped) for one valid token with log-weight s."""
    if not reweight:
        return A, 1.0, False
    w = _exp(s)
    lo, hi = 1.0 - eps_w, 1.0 + eps_w
    clipped = w < lo or w > hi
    mult = (1.0 - lam) + lam * min(max(w, lo), hi)
    return A * mult, mult, clipped


def ref_rlsd(advantages, student_logp, teacher_logp, mask, *, lam=0.5, eps_w=0.2,
             negative_only=False, span_mask=None):
    """[B][T] RLSD advantages by explicit loops (0 where mask = 0)."""
    adv = _to_list(advantages)
    s_lp, t_lp, m = _rows(student_logp), _rows(teacher_logp), _rows(mask)
    span = _rows(span_mask) if span_mask is not None else None
    out = []
    for i in range(len(m)):
        row = []
        for t in range(len(m[i])):
            if m[i][t] == 0.0:
                row.append(0.0)
                continue
            A = _adv_at(adv, i, t)
            delta = t_lp[i][t] - s_lp[i][t]
            rw = A != 0.0 and (not negative_only or A < 0) and (span is None or span[i][t] != 0.0)
            row.append(_mix_one(A, _sgn(A) * delta, lam, eps_w, rw)[0])
        out.append(row)
    return out


def _lower_q(vals, q):
    v = sorted(vals)
    return v[int(math.floor(q * (len(v) - 1)))]


def ref_gear(advantages, student_logp, teacher_logp, mask, *, divergence=None, lam=0.5, eps_w=0.2,
             threshold="mad", k=3.0, quantile=0.9, min_divergence=0.0, boundary_mask=None,
             negative_only=False, span_mask=None, anchor="departure", min_drop=math.log(2.0)):
    """dict(advantages, segment_ids, anchors, threshold) by explicit loops."""
    adv = _to_list(advantages)
    s_lp, t_lp, m = _rows(student_logp), _rows(teacher_logp), _rows(mask)
    div = _rows(divergence) if divergence is not None else None
    bnd = _rows(boundary_mask) if boundary_mask is not None else None
    span = _rows(span_mask) if span_mask is not None else None
    out_adv, out_seg, out_anchor, out_tau = [], [], [], []
    for i in range(len(m)):
        T = len(m[i])
        valid = [m[i][t] != 0.0 for t in range(T)]
        D = [0.0] * T
        delta = [0.0] * T
        for t in range(T):
            if valid[t]:
                delta[t] = t_lp[i][t] - s_lp[i][t]
                D[t] = div[i][t] if div is not None else abs(delta[t])
        vals = [D[t] for t in range(T) if valid[t]]
        if not vals:
            tau = 0.0
        elif threshold == "mad":
            med = _lower_q(vals, 0.5)
            mad = _lower_q([abs(v - med) for v in vals], 0.5)
            tau = med + k * mad
        else:
            tau = _lower_q(vals, quantile)
        tau = max(tau, min_divergence)
        out_tau.append(tau)
        seg_row, anchor_row, adv_row = [0] * T, [False] * T, [0.0] * T
        current = None          # (segment id, anchor divergence) while inside a segment
        n_anchor = 0
        for t in range(T):
            if not valid[t]:
                current = None  # tool output / padding closes a segment
                continue
            if t > 0 and bnd is not None and bnd[i][t - 1] != 0.0:
                current = None  # the previous token ended a line / turn
            departs = anchor == "spike" or delta[t] < -min_drop  # the teacher finds the token unlikely
            if D[t] > tau and departs:
                n_anchor += 1
                anchor_row[t] = True
                current = (n_anchor, D[t])
            A = _adv_at(adv, i, t)
            if current is not None:
                seg_row[t] = current[0]
                s = -_sgn(A) * current[1]
            else:
                s = _sgn(A) * delta[t]
            rw = A != 0.0 and (not negative_only or A < 0) and (span is None or span[i][t] != 0.0)
            adv_row[t] = _mix_one(A, s, lam, eps_w, rw)[0]
        out_adv.append(adv_row)
        out_seg.append(seg_row)
        out_anchor.append(anchor_row)
    return {"advantages": out_adv, "segment_ids": out_seg, "anchors": out_anchor, "threshold": out_tau}


def ref_full_kl(student_logits_row, teacher_logits_row):
    """KL(student || teacher) of two logit vectors (lists of floats), float64 log-softmax."""
    def log_softmax(z):
        mx = max(z)
        lse = mx + math.log(sum(math.exp(v - mx) for v in z))
        return [v - lse for v in z]
    ls, lt = log_softmax(student_logits_row), log_softmax(teacher_logits_row)
    return sum(math.exp(a) * (a - b) for a, b in zip(ls, lt))
