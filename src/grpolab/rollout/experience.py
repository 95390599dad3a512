"""One step's batch, born in one place (:mod:`grpolab.rollout.collector`): :class:`Experience`.

Every consumer -- the update, the credit step, the step metrics, the ``grpolab credit`` page,
evaluation -- reads rows and their task items from here; nobody joins rows back to items by
arithmetic on the group size.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from grpolab.rollout.batch import Rollout, concat_rollouts

__all__ = ["Experience", "concat_experiences", "select_groups"]


@dataclass
class Experience:
    """``N`` prompts x ``G`` responses (``B`` rows, group-contiguous) and what the step learns from them.

    Attributes:
        items: the ``N`` task items the prompts came from.
        rollout: the token batch (:class:`grpolab.rollout.Rollout`); ``rollout.group_ids [B]`` is
            each row's index into ``items`` (see :attr:`prompt_index`).
        texts: ``B`` decoded responses (multi-turn: the episode transcript after the prompt).
        rewards: ``FloatTensor [B]`` (on the CPU): verifier scores, or episode returns.
        reward_errors: rows whose verifier failed (they score 0).
        reward_error_example: the first failing row's ``{"error", "reward", "completion",
            "reference"}`` (the exception text the verifier raised), or None.
        reward_scored: rows the verifier scored for this step (with dynamic sampling, every
            round's rows: more than ``B``); None = ``B``.
        reward_shaping: ``FloatTensor [B]`` added to ``rewards`` for the advantage only (DAPO's
            soft overlong punishment, :mod:`grpolab.train.step_batch`), or None.
        episode_metrics: per-step statistics of multi-turn episodes (``episodes/...``), else empty.
        advantages: ``[B]`` sequence or ``[B,T]`` per-token advantages, once computed.
        old_logp: ``[B,T]`` behaviour-policy log-probs; None on-policy (ratio exactly 1).
        ref_logp: ``[B,T]`` reference-policy log-probs for the KL term, or None.
        teacher_logp: ``[B,T]`` privileged-teacher log-probs (credit methods), or None.
        credit_metrics: ``credit/...`` statistics of the credit step, else empty.
        seconds: wall time of the collector's phases (``rollout``, ``reward``).
    """

    items: list
    rollout: Rollout
    texts: list[str]
    rewards: torch.Tensor
    reward_errors: int = 0
    reward_error_example: dict | None = None
    reward_scored: int | None = None
    reward_shaping: torch.Tensor | None = None
    episode_metrics: dict[str, float] = field(default_factory=dict)
    advantages: torch.Tensor | None = None
    old_logp: torch.Tensor | None = None
    ref_logp: torch.Tensor | None = None
    teacher_logp: torch.Tensor | None = None
    credit_metrics: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        B = self.rollout.batch_size
        if len(self.texts) != B or self.rewards.shape != (B,):
            raise ValueError(f"Experience: {B} rollout rows but {len(self.texts)} texts and rewards of "
                             f"shape {tuple(self.rewards.shape)}")
        idx = self.prompt_index
        if B and (int(idx.min()) < 0 or int(idx.max()) >= len(self.items)):
            raise ValueError(f"Experience: rollout.group_ids must index the {len(self.items)} items")

    @property
    def batch_size(self) -> int:
        """``B``, the number of rows."""
        return self.rollout.batch_size

    @property
    def learning_rewards(self) -> torch.Tensor:
        """``[B]``: what the advantage is computed from: ``rewards`` plus any ``reward_shaping``."""
        return self.rewards if self.reward_shaping is None else self.rewards + self.reward_shaping.to(self.rewards)

    @property
    def prompt_index(self) -> torch.Tensor:
        """``LongTensor [B]`` (CPU): row ``i`` answers ``items[prompt_index[i]]``."""
        return self.rollout.group_ids.cpu()

    @property
    def row_items(self) -> list:
        """The task item of every row (``B`` entries)."""
        return [self.items[i] for i in self.prompt_index.tolist()]

    def group_rows(self) -> list[torch.Tensor]:
        """Row indices (``LongTensor``, CPU) of each prompt's group, in item order."""
        idx = self.prompt_index
        return [(idx == g).nonzero().squeeze(-1) for g in range(len(self.items))]

    @classmethod
    def from_rollout(cls, rollout: Rollout, advantages: torch.Tensor, *, rewards: torch.Tensor | None = None,
                     old_logp: torch.Tensor | None = None, ref_logp: torch.Tensor | None = None) -> "Experience":
        """An experience made from tokens alone (no task items, empty texts): for driving
        :func:`grpolab.train.policy_update.update` from a benchmark or a test without a collector."""
        B = rollout.batch_size
        n = int(rollout.group_ids.max()) + 1 if B else 0
        return cls(items=[None] * n, rollout=rollout, texts=[""] * B,
                   rewards=torch.zeros(B) if rewards is None else rewards.float().cpu(),
                   advantages=advantages, old_logp=old_logp, ref_logp=ref_logp)

    def replace(self, **changes: Any) -> "Experience":
        """A copy with some fields replaced (e.g. ``exp.replace(advantages=A)``)."""
        return dataclasses.replace(self, **changes)


def select_groups(exp: Experience, groups: list[int]) -> Experience:
    """The experience of the prompt groups ``groups`` (indices into ``exp.items``), renumbered
    ``0..len(groups)-1`` in that order; rows keep their order within a group."""
    idx = exp.prompt_index
    rows = torch.cat([(idx == g).nonzero().squeeze(-1) for g in groups])
    new_id = torch.full((len(exp.items),), -1, dtype=torch.long)
    new_id[torch.tensor(groups, dtype=torch.long)] = torch.arange(len(groups))
    ro = exp.rollout.select(rows.to(exp.rollout.group_ids.device))
    ro.group_ids = new_id[idx[rows]].to(ro.group_ids.device)
    return Experience(items=[exp.items[g] for g in groups], rollout=ro, texts=[exp.texts[i] for i in rows.tolist()],
                      rewards=exp.rewards[rows], reward_errors=exp.reward_errors,
                      reward_error_example=exp.reward_error_example, episode_metrics=exp.episode_metrics, seconds=dict(exp.seconds))


def concat_experiences(parts: list[Experience], *, pad_id: int = 0) -> Experience:
    """One experience from several (items appended, group ids offset); ``episode_metrics`` are
    the first part's, ``reward_errors`` and ``seconds`` add up."""
    if len(parts) == 1:
        return parts[0]
    offset, rollouts = 0, []
    for p in parts:
        ro = p.rollout.select(torch.arange(p.batch_size, device=p.rollout.group_ids.device))
        ro.group_ids = ro.group_ids + offset
        rollouts.append(ro)
        offset += len(p.items)
    seconds: dict[str, float] = {}
    for p in parts:
        for k, v in p.seconds.items():
            seconds[k] = seconds.get(k, 0.0) + v
    return Experience(items=[it for p in parts for it in p.items], rollout=concat_rollouts(rollouts, pad_id=pad_id),
                      texts=[t for p in parts for t in p.texts], rewards=torch.cat([p.rewards for p in parts]),
                      reward_errors=sum(p.reward_errors for p in parts), episode_metrics=parts[0].episode_metrics,
                      reward_error_example=next((p.reward_error_example for p in parts if p.reward_error_example),
                                                None),
                      seconds=seconds)
