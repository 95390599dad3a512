"""Evaluation: greedy accuracy, sampled accuracy and pass@k on a list of task items."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from grpolab.rollout import sample
from grpolab.train.text import decode_responses, encode_prompts

SOLVED = 1.0 - 1e-9  # a score at least this high counts as a solved item


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimator ``1 - C(n-c, k) / C(n, k)`` (Chen et al. 2021)."""
    if not 0 <= c <= n or k <= 0:
        raise ValueError(f"need 0 <= c <= n and k > 0; got n={n}, c={c}, k={k}")
    if k > n:
        raise ValueError(f"pass@{k} needs at least k samples per item; got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


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
) -> EvalResult:
    """Generate for every item (``samples`` times unless greedy), score, and aggregate."""
    if greedy:
        samples = 1
    completions: list[str] = []
    lengths: list[float] = []
    per_batch = max(1, batch_size // samples)
    for start in range(0, len(items), per_batch):
        chunk = items[start : start + per_batch]
        rollout = sample(
            model, encode_prompts(tokenizer, [it.prompt for it in chunk]), group_size=samples,
            max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, greedy=greedy,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
            generator=generator,
        )
        completions += decode_responses(tokenizer, rollout.response_ids, rollout.response_mask)
        lengths += rollout.response_mask.sum(-1).tolist()
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
