"""The trainer's credit step: teacher forward + token-level reweighting (RLSD, GEAR, OPSD).

Called by :func:`grpolab.train.train` between "advantages" and "update" when
``credit.enabled`` (``credit.name != "grpo"``). It builds the privileged teacher prompts of the step's items, scores
the sampled responses under the teacher (a frozen copy of the policy re-synced every
``credit.teacher_sync_every`` steps, or the live policy), turns the sequence advantages ``A[B]``
into per-token advantages ``A_t[B,T]`` with the configured method, and returns the step's
metrics. The math itself lives in :mod:`grpolab.objectives.credit` (pure functions); this module
only does the model calls, the bookkeeping and the logging.

Teacher prompts follow the run's :class:`grpolab.tasks.PromptFormat`: with a chat template the
privileged context goes into the conversation (``credit.privileged_placement``: the last user
turn through ``credit.chat_template``, or a system note through ``credit.system_template``) and is
rendered by the same template as the student's prompt, so both end with the same assistant header
and the response tokens align; plain-text prompts use ``credit.template`` around the prompt as the
student saw it. With LoRA the frozen teacher is the base model (adapters off, no weight copy;
never re-synced: a deviation from docs/methods.md, "Token-level credit").

Only rows whose advantage is non-zero go through the teacher for ``rlsd`` and ``gear`` (a zero
advantage stays zero whatever the weight), so groups whose rewards are all equal cost nothing.
``opsd`` uses every row (it ignores the reward).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import torch

from grpolab import objectives as obj
from grpolab import step_row as K
from grpolab.config import Config, CreditConfig
from grpolab.train.frozen import frozen_copy
from grpolab.objectives.credit_row import credit_step_metrics
from grpolab.rollout import credit_logprobs, left_pad
from grpolab.teacher_text import CreditTokens

if TYPE_CHECKING:
    from grpolab.rollout.experience import Experience


@dataclass
class CreditOutput:
    """One credit step.

    Attributes:
        advantages: ``[B,T]`` per-token advantages for the update.
        multiplier: ``[B,T]`` ``A_t / A`` (1 on rows that were not reweighted, 0 on padding).
        segment_ids: ``[B,T]`` GEAR segments (0 elsewhere) or None.
        student_logp, teacher_logp: ``[B,T]`` (0 on rows not scored).
        divergence: ``[B,T]`` full-vocabulary KL when computed, else None.
        metrics: plain floats, keys ``credit/...``.
    """

    advantages: torch.Tensor
    multiplier: torch.Tensor
    segment_ids: torch.Tensor | None
    student_logp: torch.Tensor
    teacher_logp: torch.Tensor
    divergence: torch.Tensor | None
    metrics: dict[str, float]


def leakage(completions: Sequence[str], items: Sequence, template: str) -> dict[str, float]:
    """Fractions of responses that mention the reference or copy the privileged context.

    ``mention``: the response contains "reference" (any case) or a line of the teacher template's
    fixed text (at least 8 characters). ``copy``: it contains the item's privileged context
    verbatim (contexts of 8+ characters). Where the privileged context *is* the worked solution
    (the built-in tasks), a correct response copies it by construction: read ``copy`` next to
    accuracy there; ``mention`` is the signal of a leak.
    """
    import string

    literals = []
    for lit, _, _, _ in string.Formatter().parse(template):
        literals += [s.strip().lower() for s in lit.splitlines() if len(s.strip()) >= 8]
    mention = copy_ = 0
    for text, it in zip(completions, items):
        low = text.lower()
        if "reference" in low or any(lit in low for lit in literals):
            mention += 1
        priv = it.privileged or it.reference
        if len(priv) >= 8 and priv in text:
            copy_ += 1
    n = max(len(completions), 1)
    return {K.CREDIT_LEAK_MENTION_FRAC: mention / n, K.CREDIT_LEAK_COPY_FRAC: copy_ / n}


class CreditStep:
    """Holds the teacher and turns ``A[B]`` into ``A_t[B,T]`` once per training step."""

    def __init__(self, credit: CreditConfig, policy, tokenizer, prompt_format=None, *, temperature: float = 1.0,
                 micro_batch_size: int | None = None) -> None:
        """``credit``: the ``credit`` settings; ``temperature``: the sampling temperature (the
        log-probs are those of the sampling distribution); ``micro_batch_size``: rows per teacher
        forward when ``credit.micro_batch_size`` is unset (None/0: all at once)."""
        from grpolab.models.lora import AdaptersOff, has_lora

        self.c = credit
        self.temperature = temperature
        self.micro_batch_size = micro_batch_size
        self.tokenizer = tokenizer
        self.prompt_format = prompt_format
        self.base_teacher = self.c.teacher == "frozen" and has_lora(policy)
        if self.base_teacher:
            self.teacher = AdaptersOff(policy)
        else:
            self.teacher = frozen_copy(policy) if self.c.teacher == "frozen" else None
        self.tokens = CreditTokens(tokenizer, boundaries=self.c.segment_boundaries, span_end=self.c.span_end)
        self.prompt = self.c.teacher_prompt()
        self.synced_at = 0

    @classmethod
    def from_config(cls, cfg: Config, policy, tokenizer, prompt_format=None) -> "CreditStep":
        """The credit step of a run config: its ``credit`` section, rollout temperature and micro-batch."""
        return cls(cfg.credit, policy, tokenizer, prompt_format, temperature=cfg.rollout.temperature,
                   micro_batch_size=cfg.trainer.micro_batch_size)

    # ---------------------------------------------------------------- teacher weights
    def maybe_sync(self, step: int, policy) -> None:
        """Re-sync the frozen teacher to the policy at 0-based ``step`` when it is due."""
        if self.base_teacher:  # LoRA: the teacher is the base model, frozen by construction
            return
        every = self.c.teacher_sync_every  # 0: never (the initial policy stays the teacher)
        if self.teacher is not None and every and step > 0 and step % every == 0:
            self.teacher.load_state_dict(policy.state_dict())
            self.synced_at = step

    def state_dict(self) -> dict[str, Any] | None:
        if self.teacher is None or self.base_teacher:
            return None
        return {"teacher": {k: v.detach().cpu().clone() for k, v in self.teacher.state_dict().items()},
                "synced_at": self.synced_at}

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.teacher is not None and not self.base_teacher and state is not None:
            self.teacher.load_state_dict(state["teacher"])
            self.synced_at = int(state["synced_at"])

    # ---------------------------------------------------------------- the step
    def lam(self, step: int) -> float:
        return self.c.lam_at(step)

    def __call__(self, step: int, policy, exp: "Experience", student_logp: torch.Tensor | None = None,
                 lam: float | None = None) -> CreditOutput:
        """Per-token advantages for one step's experience.

        Args:
            step: 0-based training step (drives the ``lam`` schedule and the teacher sync).
            policy: the current policy (the live teacher, and the student of the KL).
            exp: the step's :class:`grpolab.rollout.experience.Experience`; reads its items, the
                row -> item index, the rollout, the texts (for the leakage counter) and the
                ``[B]`` sequence advantages ``exp.advantages``.
            student_logp: ``[B,T]`` the current policy's log-probs of the sampled tokens, if known
                (on-policy: the sampling log-probs); None computes them (no grad).
            lam: override the schedule (the ``grpolab credit`` page uses it).
        """
        t0 = time.time()
        c = self.c
        rollout, advantages = exp.rollout, exp.advantages
        self.maybe_sync(step, policy)
        teacher = self.teacher if self.teacher is not None else policy
        lam = self.lam(step) if lam is None else lam
        mask = rollout.response_mask
        B, T = mask.shape
        device = mask.device
        if c.scores_all_rows:  # opsd ignores the reward
            rows = torch.arange(B, device=device)
        else:
            rows = (advantages != 0).nonzero().squeeze(-1)
        full_student = torch.zeros(B, T, dtype=torch.float32, device=device)
        full_teacher = torch.zeros_like(full_student)
        full_div = torch.zeros_like(full_student) if self._needs_kl() else None
        if len(rows) > 0:
            part = rollout.select(rows)
            # one teacher prompt per prompt group; its KV cache is shared by the group's rows
            groups, prompt_index = torch.unique(exp.prompt_index[rows.cpu()], return_inverse=True)
            prompt_index = prompt_index.to(device)
            t_ids, t_mask = self.teacher_prompts([exp.items[int(g)] for g in groups.tolist()], device)
            micro = c.micro_batch_size or self.micro_batch_size or None
            res = credit_logprobs(teacher, policy, t_ids, t_mask, part, temperature=self.temperature,
                                  return_kl=self._needs_kl(), chunk_size=c.chunk_size, micro_batch_size=micro,
                                  prompt_index=prompt_index,
                                  student_logp=None if student_logp is None else student_logp[rows])
            s_lp = res.student_logp
            full_student[rows] = s_lp.detach()
            full_teacher[rows] = res.logp
            if full_div is not None:
                full_div[rows] = res.kl
        boundary, span = self.tokens.masks(rollout.response_ids, mask)
        scored = torch.zeros(B, dtype=torch.bool, device=device)
        scored[rows] = True
        out = obj.credit_advantages(c.name, advantages, full_student, full_teacher, mask, lam=lam,
                                    span_mask=span, divergence=full_div, boundary_mask=boundary,
                                    **c.method_kwargs())
        metrics = credit_step_metrics(out, lam, full_student, full_teacher, mask, scored, divergence=full_div)
        metrics.update(leakage(exp.texts, exp.row_items, self.leak_template()))
        metrics[K.TIME_TEACHER] = time.time() - t0
        return CreditOutput(advantages=out.advantages, multiplier=out.multiplier, segment_ids=out.segment_ids,
                            student_logp=full_student, teacher_logp=full_teacher, divergence=full_div,
                            metrics=metrics)

    def uses_chat(self) -> bool:
        return self.prompt_format is not None and self.prompt_format.chat_template == "on"

    def leak_template(self) -> str:
        """The teacher text whose fixed lines count as a leak when a response repeats them."""
        return self.prompt.text(self.prompt_format)

    def teacher_prompts(self, items: Sequence, device) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded privileged prompts ``([N, P'], [N, P'])`` of ``items`` (see the module docstring)."""
        tok = self.tokenizer
        rows = self.prompt.encode(items, tok, self.prompt_format)
        return left_pad(rows, tok.pad_token_id if tok.pad_token_id is not None else 0, device=device)

    def _needs_kl(self) -> bool:
        return self.c.needs_kl()


__all__ = ["CreditOutput", "CreditStep", "leakage"]
