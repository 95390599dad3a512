"""A procedural task over a finite, enumerated prompt space: the base of the verifier families.

The "short_code", "short_sql" and "short_json" tasks list every item they can ask (their
*catalog*: a fixed list per difficulty level, the same in every process and for every seed).
Train and held-out prompts are split by the keyed hash of the prompt, as in every procedural
task (:func:`grpolab.tasks.base.prompt_in_eval`), so the splits are disjoint for any seed and
any ``n``. The seed orders a split: each *family* (a question template) is shuffled with the
seed, and the items are then taken one family at a time in turn, so any prefix of a split
(``items(split, n)``) covers the families evenly; ``items(split, n)`` is a prefix of
``items(split, n + k)``.

Subclasses implement :meth:`CatalogTask.catalog` (the levels' specs, each a :class:`Spec`) and
:meth:`CatalogTask.make_item` (a spec to a :class:`~grpolab.tasks.base.TaskItem`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Sequence

from grpolab.tasks.base import (
    PROCEDURAL_DEFAULT_N,
    ProceduralTask,
    TaskItem,
    TooFewItems,
    check_split,
    prompt_in_eval,
)

__all__ = ["CatalogTask", "Spec", "check_levels"]

#: What the privileged context of an item holds (option ``privileged`` of the verifier families).
PRIVILEGED_CHOICES = ("solution", "documents", "both")


@dataclass(frozen=True)
class Spec:
    """One askable item: its prompt, and what :meth:`CatalogTask.make_item` needs to build it.

    Attributes:
        prompt: the item's prompt (it keys the train / held-out split).
        family: the question template it comes from (splits are ordered family by family).
        level: its difficulty level (1 = easiest).
        data: the template's parameters (free-form).
    """

    prompt: str
    family: str
    level: int
    data: dict[str, Any] = field(default_factory=dict, compare=False)


def check_levels(task: str, levels: Any, known: Sequence[int]) -> list[int]:
    """``levels`` (an int or a list of ints) as a sorted list of distinct known levels.

    Raises:
        ValueError: an empty list, or a level that is not one of ``known``.
    """
    if isinstance(levels, int) and not isinstance(levels, bool):
        levels = [levels]
    if (not isinstance(levels, (list, tuple)) or not levels
            or any(isinstance(v, bool) or v not in known for v in levels)):
        raise ValueError(f"{task}: levels must be a level or a non-empty list of levels from {list(known)} "
                         f"(e.g. [1] or [1, 2]), got {levels!r}")
    return sorted(set(levels))


def check_privileged(task: str, privileged: Any, choices: Sequence[str]) -> str:
    """``privileged`` if it is one of ``choices``, else a ValueError naming them."""
    if privileged not in choices:
        raise ValueError(f"{task}: privileged must be one of {tuple(choices)}, got {privileged!r}")
    return privileged


class CatalogTask(ProceduralTask):
    """A procedural task whose prompts are an enumerated catalog (see the module docstring).

    Args:
        seed: orders each split (which items come first); the splits themselves do not depend on it.
        eval_fraction: share of the catalog's prompts held out (by prompt hash).
    """

    name = "catalog"

    def __init__(self, *, seed: int = 0, eval_fraction: float = 0.2) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        self._splits: dict[str, list[Spec]] | None = None

    # ------------------------------------------------------------------ subclass hooks
    def catalog(self) -> list[Spec]:  # pragma: no cover - abstract
        """Every spec of the configured levels, unique by prompt, in a fixed order."""
        raise NotImplementedError

    def make_item(self, spec: Spec) -> TaskItem:  # pragma: no cover - abstract
        raise NotImplementedError

    # ------------------------------------------------------------------ splits
    def _split_specs(self) -> dict[str, list[Spec]]:
        if self._splits is None:
            specs = self.catalog()
            prompts = [s.prompt for s in specs]
            if len(set(prompts)) != len(prompts):
                raise RuntimeError(f"task {self.name!r}: its catalog repeats a prompt (a bug in the task)")
            out: dict[str, list[Spec]] = {}
            for split in ("train", "eval"):
                mine = [s for s in specs if prompt_in_eval(s.prompt, self.eval_fraction) == (split == "eval")]
                out[split] = _interleave(mine, random.Random(f"grpolab:{self.name}:{split}:{self.seed}"))
            self._splits = out
        return self._splits

    def available(self, split: str) -> int:
        """How many distinct prompts ``split`` holds."""
        check_split(split, 0)
        return len(self._split_specs()[split])

    def specs(self, split: str, n: int | None = None) -> list[Spec]:
        """The first ``n`` specs of ``split`` (None: all of it, at most :data:`PROCEDURAL_DEFAULT_N`)."""
        check_split(split, 0 if n is None else n)
        pool = self._split_specs()[split]
        if n is None:
            n = min(len(pool), PROCEDURAL_DEFAULT_N[split])
        if n > len(pool):
            raise TooFewItems(self.name, split, len(pool), n)
        return pool[:n]

    def items(self, split: str, n: int | None = None) -> list[TaskItem]:
        """``n`` items of ``split`` (None: all of it, at most 4096 train / 256 held-out).

        Raises:
            TooFewItems: ``n`` is more than the split holds (the message names how many it holds).
        """
        return [self.make_item(s) for s in self.specs(split, n)]

    def generate(self, rng: random.Random) -> TaskItem:
        """One item of the whole catalog drawn with ``rng`` (either split)."""
        return self.make_item(rng.choice(self.catalog()))


def _interleave(specs: list[Spec], rng: random.Random) -> list[Spec]:
    """Each family shuffled by ``rng``, then one item of each family in turn (families in sorted
    order; a family that runs out drops out)."""
    by_family: dict[str, list[Spec]] = {}
    for s in specs:
        by_family.setdefault(f"{s.level}:{s.family}", []).append(s)
    queues = []
    for key in sorted(by_family):
        group = by_family[key]
        rng.shuffle(group)
        queues.append(group)
    out: list[Spec] = []
    depth = 0
    while len(out) < len(specs):
        out.extend(q[depth] for q in queues if depth < len(q))
        depth += 1
    return out
