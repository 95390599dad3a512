"""A new task: "max_of", the largest of a few digits (docs/extending.md, "A task").

A task turns ``(split, n)`` into :class:`grpolab.tasks.TaskItem` s. Subclass
:class:`grpolab.tasks.ProceduralTask` and write ``generate(rng)``: the base class draws items,
keeps them unique, and splits train from eval by a hash of the prompt, so the two splits never
share a prompt. Register the class under a name and the config can use it::

    prompt:         "max 3 9 4="
    demonstration:  "#9"          (the warm start learns from it)
    reference:      "9"
    reward:         "math"        (reads the answer after "#")

Train it (Python API: the task is registered when this module is imported)::

    python examples/extending/max_task.py runs/max_of trainer.steps=50
"""

from __future__ import annotations

import random
import sys

from grpolab.tasks import ProceduralTask, TaskItem, register_task


@register_task("max_of")
class MaxOfTask(ProceduralTask):
    """The largest of ``n_digits`` random digits.

    Args:
        n_digits: how many digits a prompt lists (2..6).
        seed, eval_fraction: see :class:`grpolab.tasks.ProceduralTask`.
    """

    name = "max_of"

    def __init__(self, *, n_digits: int = 4, seed: int = 0, eval_fraction: float = 0.1) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        if isinstance(n_digits, bool) or not isinstance(n_digits, int) or not 2 <= n_digits <= 6:
            raise ValueError(f"max_of: n_digits must be a whole number in 2..6, got {n_digits!r}")
        self.n_digits = n_digits

    def generate(self, rng: random.Random) -> TaskItem:
        digits = [rng.randint(0, 9) for _ in range(self.n_digits)]
        answer = str(max(digits))
        return TaskItem(
            prompt="max " + " ".join(map(str, digits)) + "=",
            reference=answer,
            privileged="#" + answer,      # what a self-teacher (docs/credit.md) may read
            reward="math",
            demonstration="#" + answer,   # the warm start's target
            meta={"difficulty": self.n_digits},
        )


def main(argv: list[str]) -> int:
    """``max_task.py RUN_DIR [section.key=value ...]``: RL on max_of with the built-in tiny model."""
    from grpolab.config import load_config
    from grpolab.train import train

    run_dir, *overrides = argv or ["runs/max_of"]
    cfg = load_config(overrides=["task.name=max_of", "task.options.n_digits=4", f"trainer.run_dir={run_dir}",
                                 "trainer.steps=50", *overrides])
    result = train(cfg)
    print(f"max_of: held-out accuracy {result.start_accuracy:.3f} -> {result.final_accuracy:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
