"""The training step's batch: collect it, filter its groups, shape its rewards, mask truncations.

Every step of every run takes its batch from :func:`collect_step` (DAPO or not); the three
optional pieces are DAPO's (arXiv 2503.14476): dynamic sampling, overlong shaping and truncation
masking, whose pure math is :mod:`grpolab.objectives.shaping`.

- :func:`collect_step` collects one step's :class:`Experience`. With ``rollout.dynamic_sampling``
  (DAPO section 3.2; verl ``algorithm.filter_groups``) it samples prompts, drops every group whose
  verifier rewards are all equal (:func:`grpolab.objectives.shaping.group_has_signal`), and samples
  more prompts until ``rollout.prompts_per_step`` groups with signal are kept or
  ``rollout.dynamic_sampling_rounds`` rounds were sampled. Each round samples
  ``ceil(missing * rollout.dynamic_sampling_oversample)`` prompts; groups beyond
  ``prompts_per_step`` are dropped (as verl does). A step that kept no group after its last
  round trains on that round's batch unfiltered (every advantage is 0: nothing to learn, and the
  training warnings say so). The step row logs ``dynamic_sampling/rounds``, ``.../sampled_groups``,
  ``.../kept_groups`` and ``.../signal_frac`` (share of the sampled groups that had signal).
- With ``objective.overlong_buffer`` the experience carries DAPO's soft overlong punishment
  (:func:`grpolab.objectives.shaping.overlong_penalty`) in ``reward_shaping``: the advantage is
  computed from ``rewards + reward_shaping`` while ``rewards`` (and accuracy) stay the verifier's.
- :func:`without_truncated` gives the update a rollout whose loss mask excludes the responses
  that hit the length cap (``objective.mask_truncated``; TRL ``mask_truncated_completions``).

The filter looks at the verifier's rewards, as DAPO ("accuracy neither 0 nor 1") and verl's
recipe (``filter_groups.metric=acc``) do, not at the shaped ones.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from grpolab import step_row as K
from grpolab.config import Config
from grpolab.objectives.shaping import group_has_signal, overlong_penalty, truncation_mask
from grpolab.rollout import Rollout
from grpolab.rollout.experience import Experience, concat_experiences, select_groups

__all__ = ["collect_step", "overlong_buffer_tokens", "without_truncated"]


def overlong_buffer_tokens(cfg: Config) -> int:
    """``objective.overlong_buffer`` in tokens: a value >= 1 is a token count; one in (0, 1) is
    a share of the longest response (DAPO: 4096 of 20480 tokens = 0.2); 0 = off."""
    from grpolab.train.policy_update import max_response_len

    b = cfg.objective.overlong_buffer
    if b <= 0:
        return 0
    if b >= 1:
        return int(b)
    return max(1, round(b * max_response_len(cfg)))


def collect_step(collector, model, next_prompts: Callable[[int], list], cfg: Config, *, n_train: int,
                 generator: torch.Generator | None = None) -> tuple[Experience, dict[str, float]]:
    """One step's scored experience and the ``dynamic_sampling/...`` metrics (empty when off).

    Args:
        collector: the run's :class:`grpolab.rollout.collector.Collector`.
        model: the model rollouts come from.
        next_prompts: ``n -> n`` task items (the run's data stream).
        cfg: the run config (``rollout.*`` sampling and dynamic-sampling settings,
            ``objective.overlong_*``).
        n_train: the number of training items (a round never asks for more).
        generator: the sampling RNG.
    """
    r = cfg.rollout

    truncation = {k: v for k, v in (("top_k", r.top_k), ("min_p", r.min_p)) if v}  # only when set
    if r.repetition_penalty != 1.0:
        truncation["repetition_penalty"] = r.repetition_penalty

    def collect(n: int) -> Experience:
        return collector.collect(model, next_prompts(n), group_size=r.group_size, temperature=r.temperature,
                                 top_p=r.top_p, generator=generator, **truncation)

    metrics: dict[str, float] = {}
    if not r.dynamic_sampling:
        exp = collect(r.prompts_per_step)
        exp = exp.replace(reward_scored=exp.batch_size)
    else:
        exp, metrics = _dynamic_sampling(collect, prompts_per_step=r.prompts_per_step,
                                         max_rounds=r.dynamic_sampling_rounds,
                                         oversample=r.dynamic_sampling_oversample, n_train=n_train,
                                         pad_id=_pad_id(collector))
    buffer = overlong_buffer_tokens(cfg)
    if buffer:
        from grpolab.train.policy_update import max_response_len

        shaping = overlong_penalty(exp.rollout.response_mask.float().cpu(), max_len=max_response_len(cfg),
                                   buffer=buffer, penalty=cfg.objective.overlong_penalty)
        exp = exp.replace(reward_shaping=shaping)
        metrics[K.REWARD_OVERLONG_PENALTY] = float(shaping.mean())
    return exp, metrics


def _dynamic_sampling(collect: Callable[[int], Experience], *, prompts_per_step: int, max_rounds: int,
                      oversample: float, n_train: int, pad_id: int) -> tuple[Experience, dict[str, float]]:
    kept: list[Experience] = []
    n_kept = sampled = with_signal = scored = errors = rounds = 0
    seconds: dict[str, float] = {}
    last = None
    while rounds < max_rounds and n_kept < prompts_per_step:
        n = min(n_train, max(1, math.ceil((prompts_per_step - n_kept) * oversample)))
        exp = collect(n)
        rounds += 1
        sampled += len(exp.items)
        scored += exp.batch_size
        errors += exp.reward_errors
        for k, v in exp.seconds.items():
            seconds[k] = seconds.get(k, 0.0) + v
        signal_B = group_has_signal(exp.rewards, exp.prompt_index)
        groups = torch.unique(exp.prompt_index[signal_B]).tolist()  # item indices, ascending
        with_signal += len(groups)
        take = groups[: prompts_per_step - n_kept]
        if take:
            kept.append(select_groups(exp, take))
            n_kept += len(take)
        last = exp
    assert last is not None
    out = concat_experiences(kept, pad_id=pad_id) if kept else last
    out = out.replace(reward_errors=errors, reward_scored=scored, seconds=seconds)
    return out, {K.DS_ROUNDS: float(rounds), K.DS_SAMPLED_GROUPS: float(sampled), K.DS_KEPT_GROUPS: float(n_kept),
                 K.DS_SIGNAL_FRAC: with_signal / max(sampled, 1)}


def _pad_id(collector) -> int:
    tok = getattr(collector, "tokenizer", None)
    pad = getattr(tok, "pad_token_id", None)
    return int(pad) if pad is not None else 0


def without_truncated(exp: Experience) -> Experience:
    """``exp`` with the loss mask of every truncated response zeroed (``objective.mask_truncated``).

    The forward still attends to those tokens (``response_attention`` keeps the original mask),
    so nothing but the loss changes: the rows drop out of the loss and of its normaliser."""
    ro = exp.rollout
    attn = ro.response_attention if ro.response_attention is not None else ro.response_mask.to(torch.long)
    masked = Rollout(prompt_ids=ro.prompt_ids, prompt_mask=ro.prompt_mask, response_ids=ro.response_ids,
                     response_mask=truncation_mask(ro.response_mask, ro.finished), sample_logp=ro.sample_logp,
                     group_ids=ro.group_ids, finished=ro.finished, response_attention=attn)
    return exp.replace(rollout=masked)
