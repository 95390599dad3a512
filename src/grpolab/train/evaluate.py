"""Evaluation: greedy accuracy, sampled accuracy and pass@k on a list of task items."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from grpolab.diagnostics.stats import pass_at_k  # the one implementation; re-exported here
from grpolab.rollout import sample
from grpolab.train.text import decode_responses, encode_prompts

SOLVED = 1.0 - 1e-9  # a score at least this high counts as a solved item


@dataclass
class EvalResult:
    accuracy: float  # fraction of (item, sample) pairs solved
    mean_reward: float
    mean_length: float
    n_items: int
    samples: int
    pass_at_k: dict[int, float] = field(default_factory=dict)
    completions: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)


def evaluate(
    model,
    tokenizer,
    items,
    *,
    greedy: bool = True,
    samples: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 64,
    batch_size: int = 256,
    generator: torch.Generator | None = None,
    env=None,
) -> EvalResult:
    """Generate for every item (``samples`` times unless greedy), score, and aggregate.

    With ``env`` (a :class:`grpolab.config.EnvConfig` whose ``name`` is set) every item is played
    as a multi-turn episode (:func:`grpolab.rollout.run_episodes`): the score is the episode's
    return, the completion its transcript, the length its model tokens.
    """
    if greedy:
        samples = 1
    completions: list[str] = []
    lengths: list[float] = []
    episode_scores: list[float] = []
    per_batch = max(1, batch_size // samples)
    for start in range(0, len(items), per_batch):
        chunk = items[start : start + per_batch]
        if env is not None and env.name:
            episodes = run_env_episodes(model, tokenizer, chunk, env, group_size=samples, temperature=temperature,
                                        top_p=top_p, greedy=greedy, generator=generator)
            completions += episodes.transcripts
            lengths += episodes.rollout.response_mask.sum(-1).tolist()
            episode_scores += episodes.rewards.tolist()
            continue
        rollout = sample(
            model, encode_prompts(tokenizer, [it.prompt for it in chunk]), group_size=samples,
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, greedy=greedy,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
            generator=generator,
        )
        completions += decode_responses(tokenizer, rollout.response_ids, rollout.response_mask)
        lengths += rollout.response_mask.sum(-1).tolist()
    if env is not None and env.name:
        scores = episode_scores
    else:
        scores = [items[i // samples].score(c).score for i, c in enumerate(completions)]
    solved = [s >= SOLVED for s in scores]
    result = EvalResult(
        accuracy=sum(solved) / max(1, len(solved)),
        mean_reward=sum(scores) / max(1, len(scores)),
        mean_length=sum(lengths) / max(1, len(lengths)),
        n_items=len(items), samples=samples, completions=completions, scores=scores,
    )
    if samples > 1:
        per_item = [sum(solved[i * samples : (i + 1) * samples]) for i in range(len(items))]
        ks = sorted({k for k in (1, 2, 4, 8, 16, 32, samples) if k <= samples})
        result.pass_at_k = {k: sum(pass_at_k(samples, c, k) for c in per_item) / len(items) for k in ks}
    return result


def run_env_episodes(model, tokenizer, items, env, *, group_size: int, temperature: float = 1.0,
                     top_p: float = 1.0, greedy: bool = False, generator: torch.Generator | None = None):
    """Play ``items`` in the environment described by ``env`` (an :class:`EnvConfig`)."""
    from grpolab.envs import make_env
    from grpolab.rollout import run_episodes

    return run_episodes(
        model, tokenizer, items, lambda: make_env(env.name, **env.options), group_size=group_size,
        max_turns=env.max_turns, max_total_tokens=env.max_total_tokens, max_turn_tokens=env.max_turn_tokens,
        temperature=temperature, top_p=top_p, greedy=greedy, generator=generator,
    )
