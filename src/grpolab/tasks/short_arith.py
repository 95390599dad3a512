"""The "short_arith" task: a sum or difference asked in words, answered with the number alone.

Made for small pretrained instruct models (docs/real-models.md: SmolLM2-135M-Instruct), where the
tiny model's scratchpad format of "arith" means nothing. One item::

    prompt:         "What is 47 + 8?"
    reference:      "55"
    reward:         "final_line" the last line must be "55", "Answer: 55" or "47 + 8 = 55" (the
                                 question's own expression); the number inside a sentence, a
                                 restated sum with other operands, or a right line followed by
                                 more text scores 0 (:mod:`grpolab.rewards.final_line`)
    demonstration:  "55"
    privileged:     the worked solution, column by column (option ``privileged``):
                    "7 + 8 = 15: write 5, carry 1. 4 + 1 = 5. So 47 + 8 = 55.\nAnswer: 55"
    meta:           {"difficulty": number of carries/borrows, "family": "carry" | "no carry",
                     "digits": [2, 1]}

The prompt asks only the question; the instruction ("Answer with the number only.") belongs to
the run's ``task.prompt_template``, so the same items serve other answer formats (e.g.
"... End with a line 'Answer: N'.", which the same verifier accepts).

Operands: ``digits`` gives the number of digits of each operand (``[2, 1]``: a two-digit and a
one-digit number, 10-99 and 0-9); ``shuffle`` (default true) puts them in either order. ``ops``:
a subset of "+-"; a difference is never negative (the larger operand comes first).
"""

from __future__ import annotations

import random

from grpolab.tasks.arith import PRIVILEGED_KINDS
from grpolab.tasks.base import ProceduralTask, TaskItem, register_task

#: What an item's ``privileged`` holds (option ``privileged``): arith's kinds and "reworded", the worked
#: solution in another wording (:data:`STYLES`)
PRIVILEGED = (*PRIVILEGED_KINDS, "reworded")

__all__ = ["DEMONSTRATION_KINDS", "PRIVILEGED", "STYLES", "ShortArithTask", "reworded_style", "worked_solution"]

#: What an item's ``demonstration`` holds (option ``demonstration``).
DEMONSTRATION_KINDS = ("number", "worked", "reworded")


def _digits_of(n: int, width: int) -> list[int]:
    return [(n // 10**i) % 10 for i in range(width)]  # least significant first


#: The wordings of a worked solution (:func:`worked_solution`'s ``style``): the same column steps and
#: numbers in other sentences. Style 0 is the canonical one the ``worked`` demonstration writes; 1-3 are
#: the rewordings ``privileged: reworded`` / ``demonstration: reworded`` use (a teacher that sees one
#: cannot copy its text token by token, only its numbers: issue 60's paraphrase-trained teacher).
#: Each entry: (a column without a carry, one with a carry, the closing sentence), formatted with
#: ``e`` (the column's expression), ``v`` (its value), ``d`` (the digit written), ``s`` (the restated sum).
STYLES = (
    ("{e} = {v}", "{e} = {v}: write {d}, carry 1", "So {s}."),
    ("next column: {e} = {v}", "next column: {e} = {v}, so put down {d} and carry one", "That makes {s}."),
    ("then {e} = {v}", "then {e} = {v} (keep {d}, carry 1)", "All together {s}."),
    ("the column gives {e} = {v}", "the column gives {e} = {v}; the digit is {d} with 1 carried", "Hence {s}."),
)


def _column_steps(a: int, op: str, b: int) -> tuple[list[tuple[str, int, str]], int]:
    """``([(expression, value, kind), ...], carries)`` of ``a op b`` column by column, ones first; kind is
    "plain", "carry" (a sum >= 10 before the last column) or "borrow" (a difference below 0)."""
    top, bottom = (a, b) if op == "-" or a >= b else (b, a)  # columns of the longer number
    width = len(str(top))
    dt, db = _digits_of(top, width), _digits_of(bottom, width)
    n_bottom = len(str(bottom))
    steps: list[tuple[str, int, str]] = []
    carry = carries = 0
    for i in range(width):
        x, y, in_b = dt[i], db[i], i < n_bottom
        if not in_b and carry == 0:
            continue  # the digit is copied as it is
        sign = "+" if op == "+" else "-"
        expr = f"{x}" + (f" {sign} {y}" if in_b else "") + (f" {sign} {carry}" if carry else "")
        value = x + y + carry if op == "+" else x - y - carry
        if op == "+" and value >= 10 and i < width - 1:
            steps.append((expr, value, "carry"))
            carry, carries = 1, carries + 1
        elif op == "-" and value < 0:
            steps.append((expr, value, "borrow"))
            carry, carries = 1, carries + 1
        else:
            steps.append((expr, value, "plain"))
            carry = 0
    return steps, carries


def worked_solution(a: int, op: str, b: int, style: int = 0) -> tuple[str, int]:
    """``(text, carries)``: the column-by-column working of ``a op b`` ending with ``Answer: N``.

    ``worked_solution(47, "+", 8)`` -> ``("7 + 8 = 15: write 5, carry 1. 4 + 1 = 5. So 47 + 8 = 55.\\nAnswer: 55", 1)``
    (the answer line is the last line, so the solution itself passes the "final_line" verifier).
    ``style`` 1-3 words the same steps otherwise (:data:`STYLES`); a borrow reads ``x - y: borrow 10, z``
    in every style (the form :mod:`grpolab.diagnostics.rederive` checks).
    """
    if op not in "+-" or len(op) != 1:
        raise ValueError(f"op must be '+' or '-', got {op!r}")
    if a < 0 or b < 0 or (op == "-" and b > a):
        raise ValueError(f"worked_solution needs non-negative operands and a non-negative result, got {a}{op}{b}")
    if isinstance(style, bool) or not isinstance(style, int) or not 0 <= style < len(STYLES):
        raise ValueError(f"style must be an int in 0..{len(STYLES) - 1}, got {style!r}")
    plain, carried, close = STYLES[style]
    result = a + b if op == "+" else a - b
    steps, carries = _column_steps(a, op, b)
    out = []
    for expr, value, kind in steps:
        if kind == "borrow":
            out.append(plain.replace("{e} = {v}", "{e}: borrow 10, {b}").format(e=expr, b=value + 10))
        else:
            out.append((carried if kind == "carry" else plain).format(e=expr, v=value, d=value % 10))
    # the most significant digit comes out of the last step; the sentence below states the total
    text = ". ".join(out) + ". " + close.format(s=f"{a} {op} {b} = {result}") + f"\nAnswer: {result}"
    return text, carries


def reworded_style(a: int, op: str, b: int) -> int:
    """The rewording (1..3) an item's reworded solution uses: fixed by its operands, so the task's
    random stream (and every other option's items) is untouched."""
    return 1 + (a * 7 + b * 13 + (op == "-")) % (len(STYLES) - 1)


@register_task("short_arith")
class ShortArithTask(ProceduralTask):
    """A sum or difference in words with a one-number answer (see the module docstring).

    Args:
        digits: digits of each operand, a list of 2 ints in 1..4 (default ``[2, 1]``).
        max_operand: instead of ``digits``: both operands are drawn from ``0..max_operand``
            (e.g. 20: the 441 sums ``0 + 0`` .. ``20 + 20``).
        shuffle: with ``digits``, put the operands in either order (a difference keeps the larger first).
        ops: a non-empty subset of "+-".
        privileged: "solution" (the worked solution), "hint" (its first step), "answer", or
            "reworded" (the worked solution in one of :data:`STYLES`' other wordings, fixed per item).
        demonstration: what a supervised warm start learns to write: "number" (default, the answer
            alone), "worked" (the worked solution, ending with its ``Answer: N`` line, which the
            ``final_line`` verifier accepts): responses that show their working, where a teacher
            shown the solution can point at the first wrong step (docs/credit.md); or "reworded"
            (the same rewording as ``privileged: reworded``).
        seed, eval_fraction: see :class:`grpolab.tasks.ProceduralTask` (``eval_fraction`` defaults
            to 0.2 here). The prompt space is finite and small, so :meth:`available` counts each
            split exactly and ``items(split, None)`` returns all of it (at most 4096 / 256 items).
    """

    name = "short_arith"

    def __init__(self, *, digits=(2, 1), max_operand: int | None = None, shuffle: bool = True, ops: str = "+",
                 privileged: str = "solution", demonstration: str = "number", seed: int = 0,
                 eval_fraction: float = 0.2) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        digits = list(digits) if isinstance(digits, (list, tuple)) else digits
        if (not isinstance(digits, list) or len(digits) != 2
                or any(isinstance(d, bool) or not isinstance(d, int) or not 1 <= d <= 4 for d in digits)):
            raise ValueError(f"short_arith: digits must be a list of two ints in 1..4 (e.g. [2, 1]), got {digits!r}")
        if max_operand is not None and (isinstance(max_operand, bool) or not isinstance(max_operand, int)
                                        or not 1 <= max_operand <= 999):
            raise ValueError(f"short_arith: max_operand must be an int in 1..999 (or null), got {max_operand!r}")
        if not isinstance(shuffle, bool):
            raise ValueError(f"short_arith: shuffle must be true or false, got {shuffle!r}")
        if not ops or not isinstance(ops, str) or set(ops) - set("+-"):
            raise ValueError(f"short_arith: ops must be a non-empty subset of '+-', got {ops!r}")
        if privileged not in PRIVILEGED:
            raise ValueError(f"short_arith: privileged must be one of {PRIVILEGED}, got {privileged!r}")
        if demonstration not in DEMONSTRATION_KINDS:
            raise ValueError(f"short_arith: demonstration must be one of {DEMONSTRATION_KINDS}, got {demonstration!r}")
        self.demonstration = demonstration
        self.digits = digits
        self.max_operand = max_operand
        self.shuffle = shuffle
        self.ops = "".join(dict.fromkeys(ops))
        self.privileged = privileged
        self._counts: dict[str, int] | None = None

    def _ranges(self) -> tuple[range, range]:
        if self.max_operand is not None:
            r = range(0, self.max_operand + 1)
            return r, r
        a, b = ((range(0 if d == 1 else 10 ** (d - 1), 10**d)) for d in self.digits)
        return a, b

    def _prompts(self):
        """Every (a, op, b) the task can ask, once each."""
        ra, rb = self._ranges()
        seen = set()
        for op in self.ops:
            for x in ra:
                for y in rb:
                    pairs = [(x, y)] + ([(y, x)] if self.shuffle and self.max_operand is None else [])
                    for a, b in pairs:
                        if op == "-" and b > a:
                            a, b = b, a
                        if (a, op, b) not in seen:
                            seen.add((a, op, b))
                            yield a, op, b

    def available(self, split: str) -> int:
        """How many distinct prompts ``split`` holds."""
        if self._counts is None:
            from grpolab.tasks.base import prompt_in_eval

            n_eval = sum(prompt_in_eval(f"What is {a} {op} {b}?", self.eval_fraction) for a, op, b in self._prompts())
            n_all = sum(1 for _ in self._prompts())
            self._counts = {"train": n_all - n_eval, "eval": n_eval}
        return self._counts[split]

    def items(self, split: str, n: int | None = None) -> list[TaskItem]:
        """``n`` items of ``split`` (None: all of it, at most 4096 train / 256 eval).

        Raises:
            TooFewItems: ``n`` is more than the split holds.
        """
        from grpolab.tasks.base import PROCEDURAL_DEFAULT_N, TooFewItems, check_split

        check_split(split, 0 if n is None else n)
        have = self.available(split)
        if n is None:
            n = min(have, PROCEDURAL_DEFAULT_N[split])
        if n > have:
            raise TooFewItems(self.name, split, have, n)
        return super().items(split, n)

    def generate(self, rng: random.Random) -> TaskItem:
        ra, rb = self._ranges()
        a, b = rng.choice(ra), rng.choice(rb)
        op = rng.choice(self.ops)
        if op == "+" and self.shuffle and self.max_operand is None and rng.random() < 0.5:
            a, b = b, a
        if op == "-" and b > a:
            a, b = b, a
        solution, carries = worked_solution(a, op, b)
        reworded = worked_solution(a, op, b, reworded_style(a, op, b))[0]
        answer = str(a + b if op == "+" else a - b)
        privileged = {"solution": solution, "hint": solution.split(". ")[0], "answer": answer,
                      "reworded": reworded}[self.privileged]
        return TaskItem(
            prompt=f"What is {a} {op} {b}?",
            reference=answer,
            privileged=privileged,
            reward="final_line",
            reward_options={"expression": f"{a} {op} {b}"},
            demonstration={"worked": solution, "reworded": reworded, "number": answer}[self.demonstration],
            meta={"difficulty": carries, "family": "carry" if carries else "no carry",
                  "digits": [len(str(a)), len(str(b))], "op": op},
        )
