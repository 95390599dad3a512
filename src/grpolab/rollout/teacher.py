"""The privileged self-teacher forward (RLSD / GEAR / OPSD; docs/methods.md, token-level credit).

The teacher is a model (a frozen copy of the policy, or the policy itself) shown a *privileged*
prompt -- the question plus a reference solution -- and asked to score exactly the tokens the
student sampled. One no-grad forward over ``[teacher_prompt ; response]`` gives, for each response
position, the teacher's log-probability of the sampled token, re-aligned to the response
positions ``[B, T]`` (the teacher prompts may be longer or shorter than the student's and are
left-padded to their own width). Optionally it also gives the full-vocabulary
``KL(student || teacher)`` per position, computed from the final hidden states in chunks of
``chunk_size`` valid positions, so at most ``chunk_size x V`` logits exist at once (never
``[B, T, V]``).

Usage (what the trainer and the TRL adapter do)::

    texts = build_teacher_prompts(items, template=DEFAULT_TEACHER_TEMPLATE)   # one per prompt
    t_ids, t_mask = encode_teacher_prompts(tokenizer, texts, group_size=G)     # [B, P'] left-padded
    res = teacher_logprobs(teacher, t_ids, t_mask, rollout, temperature=1.0)  # res.logp [B, T]
    res = teacher_logprobs(teacher, t_ids, t_mask, rollout, student=policy, return_kl=True)
    # res.kl [B, T], res.student_logp [B, T]
    # cheaper: one prompt per group, its KV cache shared by the group's G rows
    u_ids, u_mask = encode_teacher_prompts(tokenizer, texts)                  # [N, P']
    res = teacher_logprobs(teacher, u_ids, u_mask, rollout, prompt_index=torch.arange(B) // G)

Chat-template prompts: build the privileged prompt at the message level with
:func:`teacher_messages` and render it with the same template as the student's prompt
(:meth:`grpolab.tasks.PromptFormat.encode_messages`), then pass the ids here; the privileged text
lands inside the user turn (or a system note), never inside the assistant turn.

Temperature: both distributions are ``softmax(logits / temperature)``; pass the sampling
temperature so the teacher's log-probs compare like with like with the sampling log-probs.

Where the rest lives: the prompt text and the credit token masks (``check_template``,
``build_teacher_prompts``, ``teacher_messages``, ``TeacherPrompt``, ``CreditTokens``) in
:mod:`grpolab.teacher_text`, the credit step's metrics in :mod:`grpolab.objectives.credit_row`. The hidden states and the head rule (a plain bias-free
linear head that reproduces the model's logits, else the model's own logits) are the update
forward's (:func:`grpolab.rollout.logprobs.joint_hidden`, ``_head_reproduces``), and so is the
prefix forward of shared prompts (:func:`grpolab.rollout.logprobs.prefix_forward`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from .batch import Rollout
from .cache import ForwardSignature
from .logprobs import joint_forward, joint_hidden, prefix_forward, response_logprobs
from .prompts import encode_prompts
from .sampler import left_pad

__all__ = ["TeacherResult", "credit_logprobs", "encode_teacher_prompts", "teacher_logprobs"]


@dataclass
class TeacherResult:
    """Teacher scores of a response batch (all detached, float32, 0 where ``response_mask = 0``).

    Attributes:
        logp: ``[B, T]`` teacher log-probability of each sampled response token.
        kl: ``[B, T]`` full-vocabulary ``KL(student || teacher)`` at each response position, or
            None when not asked for.
        student_logp: ``[B, T]`` the student's log-probs of the same tokens (computed with the KL,
            from the same logits), or None.
    """

    logp: torch.Tensor
    kl: torch.Tensor | None = None
    student_logp: torch.Tensor | None = None


def encode_teacher_prompts(tokenizer, texts: Sequence[str], *, group_size: int = 1,
                           device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenise teacher prompts (BOS like the student's prompts), repeat each ``group_size`` times
    (rows ``n*G .. n*G+G-1`` = prompt ``n``, the sampler's row order), and left-pad.

    Returns:
        ``(teacher_prompt_ids [N*G, P'] long, teacher_prompt_mask [N*G, P'] long)``.
    """
    ids = encode_prompts(tokenizer, texts)
    rows = [p for p in ids for _ in range(group_size)]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return left_pad(rows, pad, device=device)


def _split(rollout):
    """``(prompt_ids, prompt_mask, response_ids, response_mask, response_attention)``."""
    if isinstance(rollout, Rollout):
        return (rollout.prompt_ids, rollout.prompt_mask, rollout.response_ids, rollout.response_mask,
                getattr(rollout, "response_attention", None))
    if len(rollout) == 2:  # (response_ids, response_mask) only: no student forward possible
        return None, None, rollout[0], rollout[1], None
    return (*rollout[:4], rollout[4] if len(rollout) > 4 else None)


@torch.no_grad()
def _response_hidden(model, prompt_ids, prompt_mask, response_ids, response_attn):
    """Final hidden states ``[B, T, H]`` at the positions whose logits predict the response tokens,
    plus the LM head; ``(None, None)`` when the head cannot score them (the update forward's one
    rule, :func:`grpolab.rollout.logprobs.joint_hidden`: a plain bias-free linear head that
    reproduces the model's logits; otherwise the caller takes the model's own logits)."""
    hidden = joint_hidden(model, ForwardSignature.of(model), prompt_ids, prompt_mask, response_ids, response_attn)
    return (None, None) if hidden is None else (hidden, model.get_output_embeddings())


def _full_logits(model, prompt_ids, prompt_mask, response_ids, response_attn):
    """Fallback: the model's own logits ``[B, T, V]`` at the response positions."""
    P, T = prompt_ids.shape[1], response_ids.shape[1]
    return joint_forward(model, prompt_ids, prompt_mask, response_ids, response_attn).logits[:, P - 1 : P + T - 1]


@torch.no_grad()
def teacher_logprobs(
    model: torch.nn.Module,
    teacher_prompt_ids: torch.Tensor,
    teacher_prompt_mask: torch.Tensor,
    rollout: Rollout | tuple,
    *,
    temperature: float = 1.0,
    return_kl: bool = False,
    student: torch.nn.Module | None = None,
    chunk_size: int = 1024,
    micro_batch_size: int | None = None,
    prompt_index: torch.Tensor | None = None,
) -> TeacherResult:
    """Score the rollout's response tokens under the teacher's privileged prompts (no gradient).

    Args:
        model: the teacher (a Hugging Face causal LM; a frozen copy of the policy or the policy).
        teacher_prompt_ids: ``[B, P']`` long, left-padded teacher prompts, one per response row;
            or, with ``prompt_index``, ``[N, P']``: one per distinct prompt.
        teacher_prompt_mask: the same shape, 1 on real tokens.
        rollout: a :class:`Rollout` (its prompts are the student's; multi-turn observation tokens
            in ``response_attention`` are attended to, as in the update forward), or a tuple
            ``(prompt_ids, prompt_mask, response_ids, response_mask[, response_attention])``, or
            ``(response_ids, response_mask)`` when no KL is asked for.
        temperature: logits are divided by it (both teacher and student).
        return_kl: also compute the full-vocabulary ``KL(student || teacher)`` per position; the
            student's forward uses the rollout's own prompts.
        student: the student model for the KL (default: ``model``, i.e. the same weights).
        chunk_size: at most this many positions' ``V``-wide logits are held at once.
        micro_batch_size: rows per forward (default: all).
        prompt_index: ``[B]`` long, row ``i`` uses teacher prompt ``prompt_index[i]``. Each
            distinct prompt is then run once and its KV cache shared by the rows that use it (a
            group of G samples shares one long privileged prompt). If the model's head does not
            reproduce its logits, this falls back to one full forward per row.

    Returns:
        :class:`TeacherResult`: ``logp [B, T]`` and, with ``return_kl``, ``kl [B, T]`` and
        ``student_logp [B, T]``.
    """
    prompt_ids, prompt_mask, response_ids, response_mask, response_attn = _split(rollout)
    B, T = response_ids.shape
    prompt_index = _checked_prompt_index(teacher_prompt_ids, teacher_prompt_mask, prompt_index, response_ids)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if return_kl and prompt_ids is None:
        raise ValueError("return_kl=True needs the student's prompts: pass the Rollout (or a 4-tuple)")
    device = response_ids.device
    teacher_prompt_ids = teacher_prompt_ids.to(device)
    teacher_prompt_mask = teacher_prompt_mask.to(device)
    student = model if student is None else student
    attn = response_mask if response_attn is None else response_attn
    if prompt_index is None and not return_kl:
        batch = (teacher_prompt_ids, teacher_prompt_mask, response_ids, response_mask)
        if response_attn is not None:
            batch = (*batch, response_attn)
        res = response_logprobs(model, batch, temperature=temperature, micro_batch_size=micro_batch_size)
        return TeacherResult(logp=res.logp.detach())
    mb = B if not micro_batch_size else int(micro_batch_size)
    out = [torch.zeros(B, T, dtype=torch.float32, device=device) for _ in range(3)]
    for s in range(0, B, mb):
        sl = slice(s, s + mb)
        s_rows = None if prompt_ids is None else (prompt_ids[sl], prompt_mask[sl])
        if prompt_index is None:
            t_rows, shared = (teacher_prompt_ids[sl], teacher_prompt_mask[sl]), None
        else:
            u, inv = torch.unique(prompt_index[sl], return_inverse=True)
            t_rows, shared = (teacher_prompt_ids[u], teacher_prompt_mask[u]), inv
        parts = _score_rows(model, student if return_kl else None, t_rows, shared, s_rows, response_ids[sl],
                            response_mask[sl], attn[sl], temperature, chunk_size)
        for o, p in zip(out, parts):
            o[sl] = p
    if not return_kl:
        return TeacherResult(logp=out[0])
    return TeacherResult(logp=out[0], kl=out[2], student_logp=out[1])


def _checked_prompt_index(teacher_prompt_ids, teacher_prompt_mask, prompt_index, response_ids):
    """``prompt_index`` as a ``[B]`` long tensor on the responses' device (or None), after checking
    the teacher prompts' shapes against the ``[B, T]`` responses; raises ValueError naming the fix."""
    if teacher_prompt_ids.shape != teacher_prompt_mask.shape or teacher_prompt_ids.dim() != 2:
        raise ValueError(
            f"teacher_prompt_ids and teacher_prompt_mask must share shape [B, P']; got "
            f"{tuple(teacher_prompt_ids.shape)} and {tuple(teacher_prompt_mask.shape)}"
        )
    B = response_ids.shape[0]
    if prompt_index is None:
        if teacher_prompt_ids.shape[0] != B:
            raise ValueError(
                f"{teacher_prompt_ids.shape[0]} teacher prompts for {B} responses; repeat each prompt "
                "group_size times (encode_teacher_prompts(..., group_size=G)) or pass prompt_index"
            )
        return None
    prompt_index = torch.as_tensor(prompt_index, dtype=torch.long, device=response_ids.device)
    if prompt_index.shape != (B,):
        raise ValueError(f"prompt_index must have shape [B]=({B},); got {tuple(prompt_index.shape)}")
    if B and (int(prompt_index.min()) < 0 or int(prompt_index.max()) >= teacher_prompt_ids.shape[0]):
        raise ValueError(f"prompt_index must lie in [0, {teacher_prompt_ids.shape[0]}) (one per teacher prompt)")
    return prompt_index


def _trim_left(ids, mask):
    keep = mask.bool().any(0)
    first = int(keep.long().argmax()) if bool(keep.any()) else ids.shape[1] - 1
    return ids[:, first:], mask[:, first:]


def _score_rows(teacher, student, t_rows, shared, s_rows, r_ids, r_mask, r_attn, temperature, chunk_size):
    """Teacher logp, student logp and KL for one micro-batch of rows: three ``[b, T]`` tensors
    (the last two zero when ``student`` is None). ``shared``: row -> prompt index into ``t_rows``
    (prefix-shared forward), or None (``t_rows`` has one prompt per row)."""
    b, T_full = r_ids.shape
    valid = r_mask.bool()
    out = [torch.zeros(b, T_full, dtype=torch.float32, device=r_ids.device) for _ in range(3)]
    if T_full == 0 or not bool(valid.any()):
        return tuple(out)
    # trim response columns that are padding in every row; prompts are trimmed on the left below.
    # Positions come from the mask cumsum, so nothing else changes.
    T = int(r_attn.bool().any(0).nonzero().max()) + 1
    r_ids, r_mask, r_attn, valid = r_ids[:, :T], r_mask[:, :T], r_attn[:, :T], valid[:, :T]
    t_ids, t_mask = t_rows
    ok = False
    if shared is not None:  # each distinct prompt once into the KV cache, the responses on top
        h_t = prefix_forward(teacher, ForwardSignature.of(teacher), *_trim_left(t_ids, t_mask), r_ids, r_attn,
                             prompt_of_row=shared, hidden=True, forward_last=True)
        ok, head_t = h_t is not None, teacher.get_output_embeddings()
        if not ok:  # fall back to one full forward per row
            t_ids, t_mask = t_ids[shared], t_mask[shared]
    if not ok:
        t_ids, t_mask = _trim_left(t_ids, t_mask)
        h_t, head_t = _response_hidden(teacher, t_ids, t_mask, r_ids, r_attn)
        ok = h_t is not None
    h_s = head_s = None
    if student is not None:
        s_ids, s_mask = _trim_left(*s_rows)
        h_s, head_s = _response_hidden(student, s_ids, s_mask, r_ids, r_attn)
        if h_s is None:
            h_s, head_s = _full_logits(student, s_ids, s_mask, r_ids, r_attn), torch.nn.Identity()
    if not ok:  # the head does not reproduce the logits: use the model's own logits
        if shared is not None:
            t_ids, t_mask = _trim_left(t_ids, t_mask)
        h_t, head_t = _full_logits(teacher, t_ids, t_mask, r_ids, r_attn), torch.nn.Identity()
    idx = valid.nonzero(as_tuple=False)                      # [N, 2] valid (row, position) pairs
    tokens = r_ids[idx[:, 0], idx[:, 1]]
    for c in range(0, idx.shape[0], chunk_size):
        rows, cols = idx[c : c + chunk_size, 0], idx[c : c + chunk_size, 1]
        tok = tokens[c : c + chunk_size].unsqueeze(-1)
        lt = torch.log_softmax(head_t(h_t[rows, cols]).float() / temperature, dim=-1)   # [n, V]
        out[0][rows, cols] = lt.gather(-1, tok).squeeze(-1)
        if h_s is None:
            continue
        ls = torch.log_softmax(head_s(h_s[rows, cols]).float() / temperature, dim=-1)
        out[1][rows, cols] = ls.gather(-1, tok).squeeze(-1)
        # KL(s || t) = sum_v p_s (log p_s - log p_t); clamp tiny negative float error to 0
        p_s = ls.exp()
        term = torch.where(p_s > 0, p_s * (ls - lt), torch.zeros_like(p_s))  # 0 log 0 = 0
        out[2][rows, cols] = term.sum(-1).clamp_min(0.0)
    return tuple(out)


def credit_logprobs(
    teacher: torch.nn.Module,
    student: torch.nn.Module,
    teacher_prompt_ids: torch.Tensor,
    teacher_prompt_mask: torch.Tensor,
    rollout: Rollout | tuple,
    *,
    temperature: float = 1.0,
    return_kl: bool = False,
    student_logp: torch.Tensor | None = None,
    chunk_size: int = 1024,
    micro_batch_size: int | None = None,
    prompt_index: torch.Tensor | None = None,
) -> TeacherResult:
    """What a credit method needs, in one call: teacher log-probs, student log-probs (and the KL).

    The glue shared by the trainer's credit step and the TRL adapter: the teacher forward of
    :func:`teacher_logprobs` (arguments as there), with the student in eval mode (restored after),
    and the student's log-probs of the sampled tokens from that forward's KL pass, else from
    ``student_logp`` (``[B,T]``, e.g. the on-policy sampling log-probs), else from a no-grad
    student forward. Returns a :class:`TeacherResult` whose ``student_logp`` is always set
    (``[B,T]`` float32, detached).
    """
    was_training = student.training
    student.eval()
    try:
        res = teacher_logprobs(teacher, teacher_prompt_ids, teacher_prompt_mask, rollout, temperature=temperature,
                               return_kl=return_kl, student=student, chunk_size=chunk_size,
                               micro_batch_size=micro_batch_size, prompt_index=prompt_index)
        if res.student_logp is not None:
            s_lp = res.student_logp
        elif student_logp is not None:
            s_lp = student_logp.float()
        else:
            with torch.no_grad():
                s_lp = response_logprobs(student, rollout, temperature=temperature,
                                         micro_batch_size=micro_batch_size).logp.float()
    finally:
        student.train(was_training)
    return TeacherResult(logp=res.logp, kl=res.kl, student_logp=s_lp.detach())
