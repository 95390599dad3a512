"""Tasks from `reasoning-gym <https://github.com/open-thought/reasoning-gym>`_ datasets.

``ReasoningGymTask("basic_arithmetic", size=500, seed=0)`` calls
``reasoning_gym.create_dataset(name, size=size, seed=seed, **config)`` (the package is imported
lazily; ``pip install reasoning-gym``), reads its entries ``{"question", "answer",
"metadata"}``, and splits them train/eval by question with the seed (rows with the same question
stay together). Items are scored by the "reasoning_gym" reward
(:mod:`grpolab.rewards.reasoning_gym`), which calls the dataset's own
``score_answer(answer=..., entry=...)``; each item's ``reward_options`` carries the dataset
name, the ``create_dataset`` arguments and the entry, and ``meta`` carries the entry's
``metadata`` and index.

Prompt: ``prompt_template.format(question=...)``; the default asks for the answer after ``#``,
grpolab's convention, and ``demonstration`` is ``"#" + answer``. The reward also accepts
reasoning-gym's own ``<answer>...</answer>`` tags.
"""

from __future__ import annotations

from typing import Any

from grpolab.rewards.reasoning_gym import import_reasoning_gym
from grpolab.tasks.base import StaticTask, TaskItem, _check_fraction, register_task, split_by_prompt

__all__ = ["DEFAULT_RG_TEMPLATE", "ReasoningGymTask"]

DEFAULT_RG_TEMPLATE = "{question}\nEnd your reply with # followed by the final answer.\n"


@register_task("reasoning_gym")
class ReasoningGymTask(StaticTask):
    """A reasoning-gym dataset as a grpolab task.

    Args:
        name: reasoning-gym dataset name (e.g. "basic_arithmetic", "chain_sum").
        size: number of entries generated (train + eval).
        seed: seed for ``create_dataset`` and for the train/eval split.
        eval_fraction: share of unique questions held out for eval.
        config: extra keyword arguments for ``create_dataset`` (dataset-specific difficulty).
        prompt_template: format string with ``{question}``.
        answer_marker: marker the reward looks for when there is no ``<answer>`` tag (None:
            compare the whole completion).

    Raises:
        ImportError: reasoning_gym is not installed (the message says ``pip install
            reasoning-gym``).
    """

    def __init__(
        self,
        name: str,
        size: int = 1000,
        seed: int = 0,
        *,
        eval_fraction: float = 0.1,
        config: dict[str, Any] | None = None,
        prompt_template: str = DEFAULT_RG_TEMPLATE,
        answer_marker: str | None = "#",
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"ReasoningGymTask size must be a positive int, got {size!r}")
        _check_fraction(eval_fraction)
        if "{question}" not in prompt_template:
            raise ValueError(
                f"prompt_template must contain '{{question}}', got {prompt_template!r}"
            )
        config = dict(config or {})
        clash = {"size", "seed"} & set(config)
        if clash:
            raise ValueError(
                f"pass {sorted(clash)} as ReasoningGymTask arguments, not inside config"
            )
        rg = import_reasoning_gym()
        dataset_config = {"size": size, "seed": seed, **config}
        dataset = rg.create_dataset(name, **dataset_config)
        items = []
        for index in range(len(dataset)):
            entry = dataset[index]
            try:
                question, answer = entry["question"], entry["answer"]
            except (KeyError, TypeError):
                raise ValueError(
                    f"reasoning_gym dataset {name!r} entry {index} is not a dict with 'question' "
                    f"and 'answer' (got {type(entry).__name__}); is reasoning_gym up to date?"
                ) from None
            reference = "" if answer is None else str(answer)
            items.append(
                TaskItem(
                    prompt=prompt_template.format(question=question),
                    reference=reference,
                    privileged=reference,
                    reward="reasoning_gym",
                    demonstration=f"#{reference}" if reference and answer_marker == "#" else "",
                    meta={
                        "dataset": name,
                        "index": index,
                        "metadata": entry.get("metadata", {}),
                    },
                    reward_options={
                        "dataset": name,
                        "dataset_config": dataset_config,
                        "entry": entry,
                        "answer_marker": answer_marker,
                    },
                )
            )
        train, evals = split_by_prompt(items, eval_fraction, seed)
        super().__init__(f"reasoning_gym:{name}", train, evals)
        self.dataset_name = name
        self.size = size
        self.seed = seed
        self.dataset_config = dataset_config
