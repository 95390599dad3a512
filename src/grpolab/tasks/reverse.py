"""The "reverse" task: reverse a string of digits; no scratchpad, fixed-length answer.

A contrast to "arith": the completion length is fixed by the prompt (``len + 1``), so length
carries no signal about correctness::

    prompt:         "rev 38194="
    demonstration:  "#49183"
    reference:      "49183"
    reward:         "exact"      (leading zeros matter: "rev 3800=" -> "0083", so no numeric match)
    privileged:     the demonstration  (option ``privileged``: "solution" = "#49183" (default),
                                        "hint" = the first half "#491", "answer" = "49183")
    meta:           {"difficulty": 5, "length": 5}
"""

from __future__ import annotations

import random

from grpolab.tasks.arith import PRIVILEGED_KINDS
from grpolab.tasks.base import ProceduralTask, TaskItem, register_task

__all__ = ["ReverseTask"]


@register_task("reverse")
class ReverseTask(ProceduralTask):
    """Reverse ``min_len..max_len`` random digits (any digit, leading zeros included).

    Args:
        min_len, max_len: length range, ``1 <= min_len <= max_len <= 32`` (default 3..6).
        privileged: what ``TaskItem.privileged`` holds: "solution", "hint" or "answer".
        seed, eval_fraction: see :class:`ProceduralTask`.
    """

    name = "reverse"

    def __init__(
        self, *, min_len: int = 3, max_len: int = 6, privileged: str = "solution", seed: int = 0,
        eval_fraction: float = 0.1,
    ) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        for label, value in (("min_len", min_len), ("max_len", max_len)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"ReverseTask.{label} must be an int, got {value!r}")
        if not 1 <= min_len <= max_len <= 32:
            raise ValueError(
                f"ReverseTask needs 1 <= min_len <= max_len <= 32, got min_len={min_len}, "
                f"max_len={max_len}"
            )
        if privileged not in PRIVILEGED_KINDS:
            raise ValueError(f"ReverseTask.privileged must be one of {PRIVILEGED_KINDS}, got {privileged!r}")
        self.privileged = privileged
        self.min_len = min_len
        self.max_len = max_len

    def generate(self, rng: random.Random) -> TaskItem:
        length = rng.randint(self.min_len, self.max_len)
        digits = "".join(rng.choice("0123456789") for _ in range(length))
        answer = digits[::-1]
        demonstration = "#" + answer
        privileged = {"solution": demonstration, "hint": demonstration[: 1 + (length + 1) // 2],
                      "answer": answer}[self.privileged]
        return TaskItem(
            prompt=f"rev {digits}=",
            reference=answer,
            privileged=privileged,
            reward="exact",
            demonstration=demonstration,
            meta={"difficulty": length, "length": length},
        )
