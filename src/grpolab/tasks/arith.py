"""The "arith" task: chains of additions and subtractions with a worked scratchpad.

The default task for the tiny character-level model. A problem with ``k`` terms::

    prompt:         "7+5-3="
    demonstration:  "7+5=12;12-3=9#9"      (one "a op b = c" step per operator, ";"-separated,
                                            then "#" and the final answer; the trainer appends EOS)
    reference:      "9"
    reward:         "math"                 (extracts the text after "#")
    privileged:     the demonstration      (the worked solution, for a self-teacher; option
                                            ``privileged``: "solution" | "hint" | "answer")
    meta:           {"difficulty": k, "n_terms": k, "n_steps": k - 1}

Difficulty is the number of terms (``min_terms..max_terms``, default 2..4, uniform). The
scratchpad grows by one step per extra term, so harder problems need longer completions: a
model that fails tends to fail on long chains, and long completions tend to be wrong -- the
length/correctness correlation that length-normalised objectives have to cope with.

Operands: each has 1..``max_digits`` digits (the digit count is drawn uniformly, then the
value: 0-9 for one digit, 10-99 for two, ...; default 1 digit, which the tiny model learns in
a few hundred warm-start steps). Results are never negative: a "-" whose operand exceeds the
running total is turned into a "+". ``max_terms=5, max_digits=2`` gives completions of up to 46
characters (:meth:`ArithTask.max_completion_length`) for a harder variant.

What the self-teacher reads (``privileged``, see docs/credit.md for the choice):

* ``"solution"`` (default): the whole worked solution ``"7+5=12;12-3=9#9"``. The scratchpad is
  deterministic given the prompt, so a response is correct iff it is this string, and a teacher
  that reads it can mark the first step where a response departs from it;
* ``"hint"``: the first step only, ``"7+5=12"``;
* ``"answer"``: the final answer only, ``"9"``.
"""

from __future__ import annotations

import random

from grpolab.tasks.base import ProceduralTask, TaskItem, register_task

__all__ = ["ArithTask", "PRIVILEGED_KINDS"]

#: What a built-in task's ``privileged`` context can hold (see the module docstrings).
PRIVILEGED_KINDS = ("solution", "hint", "answer")


@register_task("arith")
class ArithTask(ProceduralTask):
    """Addition/subtraction chains with a scratchpad (see the module docstring).

    Args:
        min_terms, max_terms: difficulty range (number of operands), ``2 <= min <= max``.
        max_digits: operands have 1..max_digits digits (1..4).
        ops: operators to draw from, a non-empty subset of "+-".
        privileged: what ``TaskItem.privileged`` holds: "solution", "hint" or "answer".
        seed, eval_fraction: see :class:`ProceduralTask`.
    """

    name = "arith"

    def __init__(
        self,
        *,
        min_terms: int = 2,
        max_terms: int = 4,
        max_digits: int = 1,
        ops: str = "+-",
        privileged: str = "solution",
        seed: int = 0,
        eval_fraction: float = 0.1,
    ) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        for label, value in (("min_terms", min_terms), ("max_terms", max_terms)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"ArithTask.{label} must be an int, got {value!r}")
        if not 2 <= min_terms <= max_terms:
            raise ValueError(
                f"ArithTask needs 2 <= min_terms <= max_terms, got min_terms={min_terms}, "
                f"max_terms={max_terms}"
            )
        if (
            isinstance(max_digits, bool)
            or not isinstance(max_digits, int)
            or not 1 <= max_digits <= 4
        ):
            raise ValueError(f"ArithTask.max_digits must be an int in 1..4, got {max_digits!r}")
        if not ops or not isinstance(ops, str) or set(ops) - set("+-"):
            raise ValueError(f"ArithTask.ops must be a non-empty subset of '+-', got {ops!r}")
        if privileged not in PRIVILEGED_KINDS:
            raise ValueError(f"ArithTask.privileged must be one of {PRIVILEGED_KINDS}, got {privileged!r}")
        self.privileged = privileged
        self.min_terms = min_terms
        self.max_terms = max_terms
        self.max_digits = max_digits
        self.ops = "".join(dict.fromkeys(ops))

    def _operand(self, rng: random.Random) -> int:
        digits = rng.randint(1, self.max_digits)
        low = 0 if digits == 1 else 10 ** (digits - 1)
        return rng.randint(low, 10**digits - 1)

    def generate(self, rng: random.Random) -> TaskItem:
        n_terms = rng.randint(self.min_terms, self.max_terms)
        total = self._operand(rng)
        prompt = str(total)
        steps = []
        for _ in range(n_terms - 1):
            b = self._operand(rng)
            op = rng.choice(self.ops)
            if op == "-" and b > total:
                op = "+"
            new = total + b if op == "+" else total - b
            steps.append(f"{total}{op}{b}={new}")
            prompt += f"{op}{b}"
            total = new
        answer = str(total)
        demonstration = ";".join(steps) + "#" + answer
        privileged = {"solution": demonstration, "hint": steps[0], "answer": answer}[self.privileged]
        return TaskItem(
            prompt=prompt + "=",
            reference=answer,
            privileged=privileged,
            reward="math",
            demonstration=demonstration,
            meta={"difficulty": n_terms, "n_terms": n_terms, "n_steps": n_terms - 1},
        )

    def max_completion_length(self) -> int:
        """Upper bound on ``len(demonstration)`` over the whole task (all-max "+" chains)."""
        m = 10**self.max_digits - 1
        length = 0
        for j in range(1, self.max_terms):
            length += len(str(j * m)) + 1 + len(str(m)) + 1 + len(str((j + 1) * m)) + 1
        return length - 1 + 1 + len(str(self.max_terms * m))

    def max_prompt_length(self) -> int:
        """Upper bound on ``len(prompt)``."""
        return self.max_terms * (self.max_digits + 1)
