"""A training step's batch with DAPO's pieces: dynamic sampling, overlong shaping, truncation masking.

- :func:`collect_step` collects one step's :class:`Experience`. With ``rollout.dynamic_sampling``
  (DAPO section 3.2; verl ``algorithm.filter_groups``) it samples prompts, drops every group whose
  verifier rewards are all equal (:func:`grpolab.objectives.dapo.group_has_signal`), and samples
  more prompts until ``rollout.prompts_per_step`` groups with signal are kept or
  ``rollout.dynamic_sampling_rounds`` rounds were sampled. Each round samples
  ``ceil(missing * rollout.dynamic_sampling_oversample)`` prompts; groups beyond
  ``prompts_per_step`` are dropped (as verl does). A step that kept no group after its last
  round trains on that round's batch unfiltered (every advantage is 0: nothing to learn, and the
  training warnings say so). The step row logs ``dynamic_sampling/rounds``, ``.../sampled_groups``,
  ``.../kept_groups`` and ``.../signal_frac`` (share of the sampled groups that had signal).
- With ``objective.overlong_buffer`` the experience carries DAPO's soft overlong punishment
  (:func:`grpolab.objectives.dapo.overlong_penalty`) in ``reward_shaping``: the advantage is
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

from grpolab.config import Config
from grpolab.objectives.dapo import group_has_signal, overlong_penalty, truncation_mask
from grpolab.rollout import Rollout
from grpolab.train.experience import Experience

__all__ = ["collect_step", "concat_experiences", "overlong_buffer_tokens", "select_groups", "without_truncated"]


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
        collector: the run's :class:`grpolab.train.collector.Collector`.
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
        metrics["reward/overlong_penalty"] = float(shaping.mean())
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
    return out, {"dynamic_sampling/rounds": float(rounds), "dynamic_sampling/sampled_groups": float(sampled),
                 "dynamic_sampling/kept_groups": float(n_kept),
                 "dynamic_sampling/signal_frac": with_signal / max(sampled, 1)}


def _pad_id(collector) -> int:
    tok = getattr(collector, "tokenizer", None)
    pad = getattr(tok, "pad_token_id", None)
    return int(pad) if pad is not None else 0


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
                      episode_metrics=exp.episode_metrics, seconds=dict(exp.seconds))


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
                      seconds=seconds)


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
