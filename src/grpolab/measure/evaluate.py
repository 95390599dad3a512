"""Evaluation: greedy accuracy, sampled accuracy and pass@k on a list of task items."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from grpolab.diagnostics.stats import pass_at_k  # the one implementation; re-exported here

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
    #: each item's sample scores, in item order (grouped by the collector's row -> item index)
    item_scores: list[list[float]] = field(default_factory=list)

    def solved_per_item(self) -> list[int]:
        """How many of each item's samples solved it (score >= :data:`SOLVED`), in item order."""
        return [sum(s >= SOLVED for s in group) for group in self.item_scores]


def per_family(items, scores) -> dict[str, dict[str, float]]:
    """``{family: {"accuracy", "solved", "n", "kind"}}`` of per-item scores, by ``item.meta["family"]``
    (else ``["difficulty"]``, which ``kind`` names; :func:`grpolab.diagnostics.family_of`). Empty when the
    items carry no family label. ``scores``: one per item (greedy evaluation)."""
    from grpolab.diagnostics.preflight.stats import family_of

    if len(items) != len(scores):
        raise ValueError(f"per_family needs one score per item; got {len(items)} items and {len(scores)} scores")
    out: dict[str, dict[str, float]] = {}
    for it, s in zip(items, scores):
        fam = family_of(getattr(it, "meta", None))
        if fam == "all":
            return {}
        kind, name = fam.split("=", 1)
        d = out.setdefault(name, {"solved": 0, "n": 0, "kind": kind})  # kind: family / difficulty
        d["solved"] += int(s >= SOLVED)
        d["n"] += 1
    for d in out.values():
        d["accuracy"] = d["solved"] / d["n"]
    return out


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
    collector=None,
    progress=None,
) -> EvalResult:
    """Generate for every item (``samples`` times unless greedy), score, and aggregate.

    Collects through ``collector`` (default: :func:`grpolab.rollout.collector.make_collector` with
    ``max_new_tokens`` and ``env``), ``batch_size // samples`` items at a time. With ``env`` (an
    :class:`grpolab.config.EnvConfig` whose ``name`` is set) every item is played as a multi-turn
    episode: the score is the episode's return, the completion its transcript, the length its
    model tokens. ``progress``: called with the number of items done after each batch (e.g.
    :meth:`grpolab.utils.progress.LineProgress.update`).
    """
    from grpolab.rollout.collector import make_collector

    if greedy:
        samples = 1
    if collector is None:
        collector = make_collector(tokenizer, max_new_tokens=max_new_tokens, env=env)
    completions: list[str] = []
    lengths: list[float] = []
    scores: list[float] = []
    item_scores: list[list[float]] = []
    per_batch = max(1, batch_size // samples)
    for start in range(0, len(items), per_batch):
        exp = collector.collect(model, items[start : start + per_batch], group_size=samples, greedy=greedy,
                                temperature=temperature, top_p=top_p, generator=generator)
        completions += exp.texts
        lengths += exp.rollout.response_mask.sum(-1).tolist()
        scores += exp.rewards.tolist()
        item_scores += [exp.rewards[rows].tolist() for rows in exp.group_rows()]
        if progress is not None:
            progress(len(items[start : start + per_batch]))
    solved = [s >= SOLVED for s in scores]
    result = EvalResult(
        accuracy=sum(solved) / max(1, len(solved)),
        mean_reward=sum(scores) / max(1, len(scores)),
        mean_length=sum(lengths) / max(1, len(lengths)),
        n_items=len(items), samples=samples, completions=completions, scores=scores, item_scores=item_scores,
    )
    if samples > 1:
        per_item = result.solved_per_item()
        ks = sorted({k for k in (1, 2, 4, 8, 16, 32, samples) if k <= samples})
        result.pass_at_k = {k: sum(pass_at_k(samples, c, k) for c in per_item) / len(items) for k in ks}
    return result

