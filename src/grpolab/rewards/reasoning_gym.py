"""The "reasoning_gym" reward: score with a reasoning-gym dataset's own ``score_answer``.

`reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ (``pip install reasoning-gym``)
ships procedural datasets whose entries are ``{"question", "answer", "metadata"}`` and whose
dataset object verifies an answer with ``score_answer(answer=..., entry=...) -> float`` (partial
credit in [0, 1] for some datasets). :class:`grpolab.tasks.ReasoningGymTask` puts everything this
reward needs into each item's ``reward_options``: the dataset name, the ``create_dataset``
arguments, and the entry.

Answer extraction: the last ``<answer>...</answer>`` (reasoning-gym's own convention), else the
text after the last ``answer_marker`` (default ``#``, grpolab's convention; pass None to skip --
useful when answers themselves contain ``#``, e.g. grid puzzles), else the whole stripped
completion. The package is imported lazily; when it is missing the error says how to install it.
"""

from __future__ import annotations

import importlib
import json
import re
from typing import Any

from grpolab.rewards.base import RewardResult, register_reward

__all__ = ["extract_rg_answer", "get_rg_dataset", "import_reasoning_gym", "reasoning_gym_reward"]

_ANSWER_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_DATASET_CACHE: dict[tuple[str, str], tuple[Any, Any]] = {}


def import_reasoning_gym():
    """Import and return the ``reasoning_gym`` module, or raise an ImportError naming the fix."""
    try:
        return importlib.import_module("reasoning_gym")
    except ImportError as exc:
        raise ImportError(
            "reasoning-gym tasks and rewards need the reasoning_gym package: "
            "pip install reasoning-gym"
        ) from exc


def get_rg_dataset(name: str, config: dict[str, Any] | None = None):
    """``reasoning_gym.create_dataset(name, **config)``, cached per (module, name, config)."""
    rg = import_reasoning_gym()
    config = dict(config or {})
    key = (name, json.dumps(config, sort_keys=True, default=repr))
    cached = _DATASET_CACHE.get(key)
    if cached is None or cached[0] is not rg:  # re-create if the module itself was replaced
        cached = (rg, rg.create_dataset(name, **config))
        _DATASET_CACHE[key] = cached
    return cached[1]


def extract_rg_answer(completion: str, answer_marker: str | None = "#") -> tuple[str | None, str]:
    """``(answer, method)``: ``<answer>`` tag, else text after the last marker, else whole text.

    ``method`` is "tag", "marker", "whole" or "none" (empty completion -> answer None).
    """
    tags = _ANSWER_TAG_RE.findall(completion)
    if tags:
        return tags[-1].strip(), "tag"
    if answer_marker:
        pos = completion.rfind(answer_marker)
        if pos != -1:
            return completion[pos + len(answer_marker) :].strip(), "marker"
    stripped = completion.strip()
    return (stripped, "whole") if stripped else (None, "none")


@register_reward("reasoning_gym")
def reasoning_gym_reward(
    completion: str,
    reference: str,
    *,
    dataset: str,
    entry: dict[str, Any],
    dataset_config: dict[str, Any] | None = None,
    answer_marker: str | None = "#",
) -> RewardResult:
    """Score with ``create_dataset(dataset, **dataset_config).score_answer(answer, entry)``.

    ``reference`` is informational (the entry carries the oracle answer). ``info``:
    ``extracted``, ``method``, ``dataset``.
    """
    answer, method = extract_rg_answer(completion, answer_marker)
    ds = get_rg_dataset(dataset, dataset_config)
    value = ds.score_answer(answer=answer, entry=entry)
    return RewardResult(float(value), {"extracted": answer, "method": method, "dataset": dataset})
