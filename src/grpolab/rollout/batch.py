"""The :class:`Rollout` batch: what the sampler emits and what the trainer consumes.

Layout (``B`` = number of sampled sequences = prompts x group size, ``P`` = longest prompt,
``T`` = longest generated response)::

    prompt_ids    [B, P]  LEFT-padded with pad_id      prompt_mask   [B, P]  1 real, 0 pad
    response_ids  [B, T]  RIGHT-padded with pad_id     response_mask [B, T]  1 generated (incl. EOS)
    sample_logp   [B, T]  log pi_sample(token)          (0 where response_mask == 0)
    group_ids     [B]     prompt group of each row      finished      [B]     ended with EOS
    response_attention [B, T] or None  (multi-turn episodes only: 1 on every real token)

Left-padding the prompts and right-padding the responses puts every response directly after its
prompt in ``input_ids = cat(prompt_ids, response_ids)``, so a single teacher-forced forward over
``[B, P + T]`` scores all responses (see :func:`grpolab.rollout.response_logprobs`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Union

import torch

Index = Union[torch.Tensor, slice, list, int]


def _opt(t, fn):
    return None if t is None else fn(t)


@dataclass
class Rollout:
    """A batch of sampled responses with the prompts they continue.

    Attributes:
        prompt_ids: ``LongTensor [B, P]`` prompts, left-padded with the pad id.
        prompt_mask: ``LongTensor [B, P]``, 1 on real prompt tokens, 0 on padding.
        response_ids: ``LongTensor [B, T]`` sampled tokens, right-padded with the pad id.
        response_mask: ``FloatTensor [B, T]``, 1 on tokens the policy generated (including the
            EOS that ended a response), 0 after it.
        sample_logp: ``FloatTensor [B, T]`` log-probability of each sampled token under the
            sampling distribution ``softmax(logits / temperature)`` over the full vocabulary
            (before any top-p truncation); 0 where ``response_mask`` is 0.
        group_ids: ``LongTensor [B]``; rows sharing a prompt share a group id (contiguous).
        finished: ``BoolTensor [B]``; True if the row ended with EOS, False if truncated.
        response_attention: ``LongTensor [B, T]`` or ``None``. Multi-turn episodes
            (:mod:`grpolab.rollout.episodes`) put environment observation tokens inside the
            response: they must be attended to (and counted in positions) but never trained on,
            so they have ``response_attention == 1`` and ``response_mask == 0``. ``None`` means
            "same as ``response_mask``" (single-turn sampling).
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    sample_logp: torch.Tensor
    group_ids: torch.Tensor
    finished: torch.Tensor
    response_attention: torch.Tensor | None = None

    def __post_init__(self) -> None:
        B = self.prompt_ids.shape[0]
        for f in fields(self):
            t = getattr(self, f.name)
            if t is None:
                continue
            if t.shape[0] != B:
                raise ValueError(f"Rollout.{f.name} has {t.shape[0]} rows, expected {B} (prompt_ids)")
        if self.prompt_mask.shape != self.prompt_ids.shape:
            raise ValueError(
                f"prompt_mask shape {tuple(self.prompt_mask.shape)} != prompt_ids shape {tuple(self.prompt_ids.shape)}"
            )
        for name in ("response_mask", "sample_logp", "response_attention"):
            if getattr(self, name) is not None and getattr(self, name).shape != self.response_ids.shape:
                raise ValueError(
                    f"{name} shape {tuple(getattr(self, name).shape)} != response_ids shape "
                    f"{tuple(self.response_ids.shape)}"
                )

    # ------------------------------------------------------------------ derived views
    @property
    def batch_size(self) -> int:
        """Number of rows ``B``."""
        return self.prompt_ids.shape[0]

    @property
    def input_ids(self) -> torch.Tensor:
        """``LongTensor [B, P + T]``: prompt followed by response."""
        return torch.cat([self.prompt_ids, self.response_ids], dim=1)

    @property
    def attention_mask(self) -> torch.Tensor:
        """``LongTensor [B, P + T]``: prompt mask followed by the response's attention mask."""
        resp = self.response_mask if self.response_attention is None else self.response_attention
        return torch.cat([self.prompt_mask.long(), resp.long()], dim=1)

    @property
    def response_lengths(self) -> torch.Tensor:
        """``LongTensor [B]``: number of generated tokens per row (including EOS)."""
        return self.response_mask.sum(dim=1).long()

    # ------------------------------------------------------------------ transforms
    def to(self, device: torch.device | str) -> "Rollout":
        """A copy with every tensor on ``device``."""
        return Rollout(**{f.name: _opt(getattr(self, f.name), lambda t: t.to(device)) for f in fields(self)})

    def select(self, index: Index) -> "Rollout":
        """A subset of rows (``LongTensor`` of indices, ``BoolTensor [B]`` mask, slice or list).

        Row order follows ``index``; ``group_ids`` keep their original values. Useful for
        micro-batching (``rollout.select(slice(i, i + mb))``).
        """
        if isinstance(index, int):
            index = [index]
        if isinstance(index, list):
            index = torch.as_tensor(index, dtype=torch.long, device=self.prompt_ids.device)
        return Rollout(**{f.name: _opt(getattr(self, f.name), lambda t: t[index]) for f in fields(self)})

    def __len__(self) -> int:
        return self.batch_size


def _pad(t: torch.Tensor, width: int, value, *, left: bool) -> torch.Tensor:
    extra = width - t.shape[1]
    if extra == 0:
        return t
    fill = t.new_full((t.shape[0], extra), value)
    return torch.cat([fill, t] if left else [t, fill], dim=1)


def concat_rollouts(rollouts: list[Rollout], *, pad_id: int) -> Rollout:
    """Rows of several rollouts in one batch: prompts left-padded to the widest (``pad_id``,
    mask 0), responses right-padded (mask 0); ``group_ids`` are kept as they are."""
    P = max(r.prompt_ids.shape[1] for r in rollouts)
    T = max(r.response_ids.shape[1] for r in rollouts)
    any_attn = any(r.response_attention is not None for r in rollouts)

    def cat(get, width, value, left):
        return torch.cat([_pad(get(r), width, value, left=left) for r in rollouts], dim=0)

    return Rollout(
        prompt_ids=cat(lambda r: r.prompt_ids, P, pad_id, True),
        prompt_mask=cat(lambda r: r.prompt_mask, P, 0, True),
        response_ids=cat(lambda r: r.response_ids, T, pad_id, False),
        response_mask=cat(lambda r: r.response_mask, T, 0, False),
        sample_logp=cat(lambda r: r.sample_logp, T, 0, False),
        group_ids=torch.cat([r.group_ids for r in rollouts]),
        finished=torch.cat([r.finished for r in rollouts]),
        response_attention=cat(lambda r: r.response_attention if r.response_attention is not None
                               else r.response_mask.to(torch.long), T, 0, False) if any_attn else None,
    )
