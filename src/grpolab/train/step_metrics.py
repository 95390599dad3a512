"""A training step's metrics row: rewards, accuracy, lengths (pooled and within groups), advantages,
groups without signal, and the update's ``update/...`` statistics; :func:`metric_schema` lists the
keys every row carries. Pure functions over an :class:`~grpolab.rollout.experience.Experience`
(benchmarks and studies compute the same quantities with them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grpolab import objectives as obj
from grpolab.config import Config
from grpolab.measure.evaluate import SOLVED
from grpolab.rollout.experience import Experience
from grpolab import step_row as K
from grpolab.step_row import with_verl_names

__all__ = ["GroupLengths", "group_lengths", "metric_schema", "step_metrics", "within_group_lengths"]


def step_metrics(exp: Experience, update_stats: dict[str, float]) -> dict[str, float]:
    """The step's row: rewards, accuracy, lengths, advantages, all-equal groups, and ``update/...``.

    Keys that a step cannot compute (``length/correct`` without a correct answer) are NaN, so
    every row has the same keys (see :func:`metric_schema`)."""
    rollout, rewards = exp.rollout, exp.rewards
    lengths = rollout.response_mask.sum(-1).float().cpu()
    solved = rewards >= SOLVED
    nan = float("nan")
    row: dict[str, float] = {
        K.REWARD_MEAN: float(rewards.mean()),
        K.REWARD_STD: float(rewards.std()) if len(rewards) > 1 else 0.0,
        K.REWARD_MAX: float(rewards.max()),
        K.REWARD_MIN: float(rewards.min()),
        K.ACCURACY: float(solved.float().mean()),
        K.LENGTH_MEAN: float(lengths.mean()),
        K.LENGTH_STD: float(lengths.std()) if len(lengths) > 1 else 0.0,
        K.LENGTH_MAX: float(lengths.max()),
        K.LENGTH_MIN: float(lengths.min()),
        K.LENGTH_TRUNCATED_FRAC: float((~rollout.finished.cpu()).float().mean()),
        K.PROMPT_LENGTH_MEAN: float(rollout.prompt_mask.sum(-1).float().mean()),
        K.REWARD_ERRORS: float(exp.reward_errors),
    }
    if exp.advantages is not None:  # sequence advantages, or the token mean of per-token ones
        adv = exp.advantages.detach().float().cpu()
        if adv.dim() == 2:  # in float64: a row of equal advantages then averages to exactly that value
            m = rollout.response_mask.cpu().double()
            adv = (adv.double() * m).sum(-1) / m.sum(-1).clamp_min(1)
        row.update({K.ADVANTAGES_MEAN: float(adv.mean()), K.ADVANTAGES_MAX: float(adv.max()),
                    K.ADVANTAGES_MIN: float(adv.min())})
    # aggregation diagnostics: length of right vs wrong answers, and the sign-length gap
    row[K.LENGTH_CORRECT] = float(lengths[solved].mean()) if solved.any() else nan
    row[K.LENGTH_INCORRECT] = float(lengths[~solved].mean()) if (~solved).any() else nan
    row[K.LENGTH_GAP] = row[K.LENGTH_INCORRECT] - row[K.LENGTH_CORRECT]
    idx = exp.prompt_index
    n = len(exp.items)
    row.update(within_group_lengths(lengths, solved, idx.cpu(), n))
    # fraction of groups whose rewards are all equal (they carry no GRPO signal)
    hi = torch.full((n,), -float("inf")).scatter_reduce(0, idx, rewards, "amax")
    lo = torch.full((n,), float("inf")).scatter_reduce(0, idx, rewards, "amin")
    row[K.GROUPS_ALL_EQUAL_FRAC] = float((hi - lo <= 1e-12).float().mean())
    # groups whose advantage is not 0 everywhere (rewards as the advantage sees them, shaping included):
    # 0 means the step had nothing to learn from (see grpolab.train.watch)
    signal = obj.group_has_signal(exp.learning_rewards, idx)
    row[K.GROUPS_WITH_SIGNAL] = float(torch.unique(idx[signal]).numel())
    row[K.REWARD_SCORED] = float(exp.reward_scored if exp.reward_scored is not None else len(rewards))
    row.update({K.row_key(K.UPDATE, k): v for k, v in update_stats.items()})
    return row


@dataclass
class GroupLengths:
    """Mean length of each group's solved and unsolved responses (see :func:`group_lengths`)."""

    correct_G: torch.Tensor    # mean length of the group's solved responses, [G]; NaN where none
    incorrect_G: torch.Tensor  # the same for the unsolved ones, [G]; NaN where none
    mixed_G: torch.Tensor      # bool [G]: the group holds both a solved and an unsolved response


def group_lengths(lengths_B: torch.Tensor, solved_B: torch.Tensor, group_B: torch.Tensor,
                  n_groups: int) -> GroupLengths:
    """Per group, the mean length of its solved and of its unsolved responses.

    Args:
        lengths_B: response lengths, float ``[B]`` (the sums keep its dtype).
        solved_B: bool ``[B]``.
        group_B: group (prompt) index of each row in ``0..n_groups-1``, long ``[B]``.
    """
    zeros = torch.zeros(n_groups, dtype=lengths_B.dtype)
    ok = solved_B.to(lengths_B.dtype)
    n_ok = zeros.scatter_add(0, group_B, ok)
    n_bad = zeros.scatter_add(0, group_B, 1.0 - ok)
    sum_ok = zeros.scatter_add(0, group_B, lengths_B * ok)
    sum_bad = zeros.scatter_add(0, group_B, lengths_B * (1.0 - ok))
    return GroupLengths(correct_G=sum_ok / n_ok, incorrect_G=sum_bad / n_bad, mixed_G=(n_ok > 0) & (n_bad > 0))


def within_group_lengths(lengths_B: torch.Tensor, solved_B: torch.Tensor, group_B: torch.Tensor,
                         n_groups: int) -> dict[str, float]:
    """Lengths of right and wrong responses *within* groups, where the advantage is computed.

    Over the groups that hold both a solved and an unsolved response ("mixed" groups):
    ``length/mixed_correct`` and ``length/mixed_incorrect`` are the means over those groups of the
    solved and of the unsolved responses' mean length, ``length/mixed_ratio`` is their ratio
    (incorrect / correct: > 1 when failures run longer than successes of the same prompt, the
    sign-length coupling Balanced Aggregation removes; the precondition of
    docs/results/aggregation_coupled.md), and ``groups/mixed_frac`` the share of groups that are
    mixed. NaN when no group is mixed. ``length/correct`` / ``length/incorrect`` pool all rows and
    so mix easy and hard prompts.

    Args:
        lengths_B: response lengths, float ``[B]``.
        solved_B: bool ``[B]``.
        group_B: group (prompt) index of each row in ``0..n_groups-1``, long ``[B]``.
    """
    g = group_lengths(lengths_B, solved_B, group_B, n_groups)
    mixed = g.mixed_G
    nan = float("nan")
    if not mixed.any():
        return {K.LENGTH_MIXED_CORRECT: nan, K.LENGTH_MIXED_INCORRECT: nan, K.LENGTH_MIXED_RATIO: nan,
                K.GROUPS_MIXED_FRAC: 0.0}
    correct = float(g.correct_G[mixed].mean())
    incorrect = float(g.incorrect_G[mixed].mean())
    return {K.LENGTH_MIXED_CORRECT: correct, K.LENGTH_MIXED_INCORRECT: incorrect,
            K.LENGTH_MIXED_RATIO: incorrect / correct if correct > 0 else nan,
            K.GROUPS_MIXED_FRAC: float(mixed.float().mean())}


def metric_schema(cfg: Config) -> list[str]:
    """Keys every step row carries (null in metrics.jsonl when a step does not compute them): the
    update's loss metrics (absent when every row was skipped), the clip rate and the drift of the
    cumulative log ratio of every position bucket, and the evaluation keys (computed every
    ``trainer.eval_every`` steps): the groups ``update`` and ``eval`` of :mod:`grpolab.step_row`."""
    keys = K.group_keys("update") + K.group_keys("eval")  # in grpolab.step_row's order
    if cfg.log.metric_names == "both":
        keys = list(with_verl_names(dict.fromkeys(keys, float("nan"))))
    return keys
