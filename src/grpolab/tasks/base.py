"""Task items, the Task protocol, the task registry, and the two ways of splitting train/eval.

A task turns ``(split, n)`` into a list of :class:`TaskItem`. Every task here is seeded and
deterministic (the same call returns the same items, in any process) and keeps ``train`` and
``eval`` disjoint *by prompt*:

* procedural tasks (:class:`ProceduralTask`: "arith", "reverse") partition the whole prompt
  space by a keyed hash: a prompt is an eval prompt iff ``blake2b(prompt) < eval_fraction``.
  Train samples only train prompts and eval only eval prompts, so the splits are disjoint for
  any ``n`` and any seed (train with seed 1 never sees an eval prompt of seed 2). Within a
  split, items are unique by prompt, and ``items(split, n)`` is a prefix of
  ``items(split, n + k)``.
* finite datasets (:class:`StaticTask`: files, reasoning-gym) shuffle their unique prompts with
  the seed and put the first ``eval_fraction`` of them in eval; rows that share a prompt always
  land in the same split.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from grpolab.rewards import RewardResult, safe_score

__all__ = [
    "PROCEDURAL_DEFAULT_N",
    "SPLITS",
    "ProceduralTask",
    "RewardOverride",
    "StaticTask",
    "Task",
    "TooFewItems",
    "TaskItem",
    "check_split",
    "get_task",
    "list_tasks",
    "prompt_in_eval",
    "register_task",
    "split_by_prompt",
]

SPLITS: tuple[str, str] = ("train", "eval")
#: ``items(split, None)`` of a procedural task (an unbounded prompt space): this many items.
PROCEDURAL_DEFAULT_N: dict[str, int] = {"train": 4096, "eval": 256}


@dataclass
class TaskItem:
    """One problem.

    Attributes:
        prompt: the text the policy continues.
        reference: the final answer the reward compares against.
        privileged: context for a self-teacher (RLSD-style teacher forward): by default the
            worked solution, or the reference answer when there is none.
        reward: name of the reward in :mod:`grpolab.rewards`' registry.
        demonstration: a full correct completion for supervised warm start (the trainer appends
            EOS); "" when the dataset has none.
        meta: free-form details (difficulty, n_steps, source row, ...).
        reward_options: keyword options passed to the reward (e.g. the reasoning-gym entry);
            usually empty.
        messages: the conversation of a conversational dataset row (TRL's format: a list of
            ``{"role", "content"}`` ending with the user turn to answer), or None. ``prompt`` is
            then the content of its last user turn (the question: it keys the train/eval split
            and fills ``{prompt}`` in teacher templates). How either reaches the model is the
            run's :class:`grpolab.tasks.PromptFormat`.
    """

    prompt: str
    reference: str
    privileged: str = ""
    reward: str = "math"
    demonstration: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    reward_options: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] | None = None

    def __post_init__(self) -> None:
        for name in ("prompt", "reference", "privileged", "reward", "demonstration"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise TypeError(
                    f"TaskItem.{name} must be a str, got {type(value).__name__} ({value!r:.80})"
                )
        if not self.reward:
            raise ValueError("TaskItem.reward must name a reward, e.g. 'math' or 'exact'")
        if not isinstance(self.meta, dict) or not isinstance(self.reward_options, dict):
            raise TypeError("TaskItem.meta and TaskItem.reward_options must be dicts")
        if self.messages is not None:
            from grpolab.tasks.prompt import check_messages

            self.messages = check_messages(self.messages, "TaskItem.messages")

    def score(self, completion: str) -> RewardResult:
        """Score ``completion`` with this item's reward; never raises (see ``safe_score``)."""
        return safe_score(self.reward, completion, self.reference, **self.reward_options)


@runtime_checkable
class Task(Protocol):
    """Anything with a ``name`` and a seeded, deterministic ``items(split, n)``."""

    name: str

    def items(self, split: str, n: int | None = None) -> list[TaskItem]:
        """``n`` items of ``split`` ("train" or "eval"; None: all rows of a finite task, or
        :data:`PROCEDURAL_DEFAULT_N` of a generated one); train and eval are disjoint."""
        ...


def check_split(split: str, n: int) -> None:
    """Raise a clear error for a bad ``split`` name or item count."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")


def _check_fraction(eval_fraction: float) -> None:
    if isinstance(eval_fraction, bool) or not isinstance(eval_fraction, (int, float)):
        raise TypeError(f"eval_fraction must be a number in [0, 1), got {eval_fraction!r}")
    if not 0.0 <= eval_fraction < 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1), got {eval_fraction!r}")


# ----------------------------------------------------------------------------- registry

_TASKS: dict[str, Callable[..., Task]] = {}


def register_task(name: str, *, overwrite: bool = False) -> Callable[[Callable], Callable]:
    """Decorator: register a Task class (or factory) under ``name`` for :func:`get_task`."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"task name must be a non-empty string, got {name!r}")

    def decorator(factory: Callable) -> Callable:
        if name in _TASKS and not overwrite and _TASKS[name] is not factory:
            raise ValueError(
                f"task {name!r} is already registered; pick another name or pass overwrite=True"
            )
        _TASKS[name] = factory
        return factory

    return decorator


def list_tasks() -> list[str]:
    """Names of all registered tasks, sorted."""
    return sorted(_TASKS)


def task_options(name: str) -> list[str] | None:
    """The option names the task ``name`` takes (``reward`` included, which every task takes),
    or None when its factory accepts any keyword (``**options``) or cannot be inspected.

    Raises:
        ValueError: unknown name (the message lists the registered tasks).
    """
    if name not in _TASKS:
        raise ValueError(f"unknown task {name!r}; registered tasks: {', '.join(list_tasks())}")
    try:
        params = inspect.signature(_TASKS[name]).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    names = [k for k, p in params.items() if p.kind in (inspect.Parameter.KEYWORD_ONLY,
                                                           inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return sorted(set(names) | {"reward"})


def get_task(name: str, /, **options: Any) -> Task:
    """Build the task registered under ``name`` with ``options`` (e.g. ``seed=1``).

    Every task takes the option ``reward``: a reward spec for
    :func:`grpolab.rewards.resolve_reward` (a registered name, ``"package.module:function"``, an
    entry point, or a list of ``{name, weight, options}``). A task whose factory has a ``reward``
    parameter (``dataset``) gets the resolved name; any other task's items are scored by that
    reward instead of their own (:class:`RewardOverride`), with their reward options kept.

    Raises:
        ValueError: unknown name (the message lists the registered tasks); a reward spec that
            cannot be used (:class:`grpolab.rewards.RewardSpecError`).
    """
    try:
        factory = _TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown task {name!r}; registered tasks: {list_tasks()} "
            "(register new ones with grpolab.tasks.register_task)"
        ) from None
    if "reward" not in options:
        return factory(**options)
    from grpolab.rewards import resolve_reward

    reward = resolve_reward(options.pop("reward"))
    if _takes(factory, "reward"):
        return factory(reward=reward, **options)
    return RewardOverride(factory(**options), reward)


def _takes(factory: Callable, param: str) -> bool:
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return param in params and params[param].kind in (inspect.Parameter.KEYWORD_ONLY,
                                                      inspect.Parameter.POSITIONAL_OR_KEYWORD)


class RewardOverride:
    """A task whose items are scored by the reward ``reward`` instead of their own.

    ``items()`` returns the inner task's items with ``reward`` replaced (reward options kept);
    every other attribute (``name``, ``available``, ...) is the inner task's.
    """

    def __init__(self, task: Task, reward: str) -> None:
        self.task = task
        self.reward = reward

    def items(self, split: str, n: int | None = None) -> list[TaskItem]:
        return [dataclasses.replace(it, reward=self.reward) for it in self.task.items(split, n)]

    def __getattr__(self, attr: str) -> Any:
        if attr == "task":  # not set yet (e.g. while unpickling): no recursion
            raise AttributeError(attr)
        return getattr(self.task, attr)

    def __repr__(self) -> str:
        return f"RewardOverride({self.task!r}, reward={self.reward!r})"


# ----------------------------------------------------------------------------- procedural


def prompt_in_eval(prompt: str, eval_fraction: float) -> bool:
    """Whether ``prompt`` belongs to the eval part of a procedural task's prompt space.

    A keyed 64-bit blake2b hash of the prompt, read as a number in [0, 1), compared with
    ``eval_fraction``; independent of the seed, stable across processes and Python versions.
    """
    digest = hashlib.blake2b(prompt.encode("utf-8"), digest_size=8, key=b"grpolab-split").digest()
    return int.from_bytes(digest, "big") / 2**64 < eval_fraction


class ProceduralTask:
    """Base for generated tasks: subclasses implement ``generate(rng) -> TaskItem``.

    Args:
        seed: seeds the generator; train and eval draw from separate streams of it.
        eval_fraction: share of the prompt *space* reserved for eval (see module docstring).
    """

    name: str = "procedural"
    #: give up after this many draws per requested item (a tiny prompt space is exhausted).
    max_draws_per_item: int = 200

    def __init__(self, *, seed: int = 0, eval_fraction: float = 0.1) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise TypeError(f"seed must be an int, got {seed!r}")
        _check_fraction(eval_fraction)
        if eval_fraction == 0:
            raise ValueError(
                "eval_fraction must be > 0 for a procedural task (eval prompts come from the "
                "reserved part of the prompt space); use e.g. 0.1"
            )
        self.seed = seed
        self.eval_fraction = float(eval_fraction)

    def generate(self, rng: random.Random) -> TaskItem:  # pragma: no cover - abstract
        raise NotImplementedError

    def items(self, split: str, n: int | None = None) -> list[TaskItem]:
        """``n`` unique-by-prompt items of ``split``; deterministic, prefix-stable.

        ``n=None``: :data:`PROCEDURAL_DEFAULT_N` (4096 train, 256 eval)."""
        if n is None and split in SPLITS:
            n = PROCEDURAL_DEFAULT_N[split]
        check_split(split, n)
        rng = random.Random(f"grpolab:{self.name}:{split}:{self.seed}")
        want_eval = split == "eval"
        out: list[TaskItem] = []
        seen: set[str] = set()
        budget = self.max_draws_per_item * n + 1000
        while len(out) < n:
            if budget == 0:
                raise RuntimeError(
                    f"task {self.name!r} could only find {len(out)} unique {split} prompts of "
                    f"the {n} requested; its prompt space is too small for that: ask for fewer "
                    "items or widen the task's options (more terms / digits / length)"
                )
            budget -= 1
            item = self.generate(rng)
            if item.prompt in seen or prompt_in_eval(item.prompt, self.eval_fraction) != want_eval:
                continue
            seen.add(item.prompt)
            out.append(item)
        return out

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({opts})"


# ----------------------------------------------------------------------------- finite


def split_by_prompt(
    items: Sequence[TaskItem], eval_fraction: float, seed: int
) -> tuple[list[TaskItem], list[TaskItem]]:
    """Split a finite list of items into ``(train, eval)``, disjoint by prompt.

    The unique prompts are shuffled with ``seed``; the first ``round(eval_fraction * U)`` of them
    (at least 1 when ``eval_fraction > 0`` and there are two or more prompts; never all of them)
    are eval prompts. Both lists come back in one seeded shuffled order of the items.
    """
    _check_fraction(eval_fraction)
    rng = random.Random(f"grpolab-split:{seed}")
    prompts = list(dict.fromkeys(item.prompt for item in items))
    rng.shuffle(prompts)
    n_eval = round(eval_fraction * len(prompts))
    if eval_fraction > 0 and n_eval == 0 and len(prompts) >= 2:
        n_eval = 1
    if n_eval >= len(prompts) and len(prompts) > 0:
        n_eval = len(prompts) - 1
    eval_prompts = set(prompts[:n_eval])
    order = list(range(len(items)))
    rng.shuffle(order)
    train = [items[i] for i in order if items[i].prompt not in eval_prompts]
    evals = [items[i] for i in order if items[i].prompt in eval_prompts]
    return train, evals


class TooFewItems(ValueError):
    """A finite task's split holds fewer items than were asked for."""

    def __init__(self, task: str, split: str, available: int, requested: int) -> None:
        self.task, self.split, self.available, self.requested = task, split, available, requested
        super().__init__(
            f"task {task!r} has only {available} {split} items, {requested} were requested; ask for at "
            f"most {available}, or pass n=None for all of them"
        )


class StaticTask:
    """A task over fixed lists of train and eval items (datasets, reasoning-gym).

    ``items(split, n)`` returns the first ``n`` items of the split (already in a seeded
    shuffled order), or all of them for ``n=None``; asking for more than the split holds raises
    :class:`TooFewItems` (a ValueError) naming the count.
    """

    def __init__(self, name: str, train: Sequence[TaskItem], eval: Sequence[TaskItem]) -> None:
        self.name = name
        self._splits = {"train": list(train), "eval": list(eval)}

    def available(self, split: str) -> int:
        """How many items ``split`` holds."""
        check_split(split, 0)
        return len(self._splits[split])

    def items(self, split: str, n: int | None = None) -> list[TaskItem]:
        pool = self._splits[split] if split in SPLITS else None
        if n is None:
            check_split(split, 0)
            return list(pool)
        check_split(split, n)
        if n > len(pool):
            raise TooFewItems(self.name, split, len(pool), n)
        return pool[:n]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, train={len(self._splits['train'])}, "
            f"eval={len(self._splits['eval'])})"
        )
