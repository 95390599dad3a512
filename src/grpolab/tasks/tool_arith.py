"""The "tool_arith" task: arithmetic too large to do by hand, solved with the calculator tool.

Multi-turn: the items are played in the "tool_arith" environment (:mod:`grpolab.envs.tool_env`).
An item with ``k`` terms::

    prompt:      "q: 482*37+995\\n"
    transcript:  [["act", "calc(482*37+995)"], ["obs", "\\n=18829\\n"], ["act", "answer(18829)"]]
    reference:   "18829"

The transcript is the scripted expert's episode, recorded by playing its actions through the
environment (so the observations are exactly what the environment returns); the warm start
trains on the actions (each followed by EOS) with the observations masked out of the loss.
``demonstration`` is the same transcript as plain text (actions and observations concatenated).

Operands have ``min_digits..max_digits`` digits; operators come from ``ops`` (default ``+-*``).
A three-digit product is beyond what the ~2 M parameter char-level model can compute, but
copying the expression into ``calc(...)`` and the result into ``answer(...)`` is learnable.
"""

from __future__ import annotations

import random

from grpolab.tasks.base import ProceduralTask, TaskItem, register_task

__all__ = ["ToolArithTask", "transcript_text"]


def transcript_text(transcript: list[list[str]]) -> str:
    """The plain text of a ``[[role, text], ...]`` transcript (no EOS markers)."""
    return "".join(text for _, text in transcript)


@register_task("tool_arith")
class ToolArithTask(ProceduralTask):
    """Arithmetic expressions for the calculator environment (see the module docstring).

    Args:
        min_terms, max_terms: number of operands (2..5).
        min_digits, max_digits: operand digit range (1..6).
        ops: operators to draw from, a non-empty subset of "+-*".
        seed, eval_fraction: see :class:`ProceduralTask`.
    """

    name = "tool_arith"

    def __init__(self, *, min_terms: int = 2, max_terms: int = 3, min_digits: int = 2, max_digits: int = 3,
                 ops: str = "+-*", seed: int = 0, eval_fraction: float = 0.1) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        for label, v in (("min_terms", min_terms), ("max_terms", max_terms), ("min_digits", min_digits),
                         ("max_digits", max_digits)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"ToolArithTask.{label} must be an int, got {v!r}")
        if not 2 <= min_terms <= max_terms <= 5:
            raise ValueError(f"ToolArithTask needs 2 <= min_terms <= max_terms <= 5, got {min_terms}, {max_terms}")
        if not 1 <= min_digits <= max_digits <= 6:
            raise ValueError(f"ToolArithTask needs 1 <= min_digits <= max_digits <= 6, got {min_digits}, {max_digits}")
        if not ops or not isinstance(ops, str) or set(ops) - set("+-*"):
            raise ValueError(f"ToolArithTask.ops must be a non-empty subset of '+-*', got {ops!r}")
        self.min_terms, self.max_terms = min_terms, max_terms
        self.min_digits, self.max_digits = min_digits, max_digits
        self.ops = "".join(dict.fromkeys(ops))

    def generate(self, rng: random.Random) -> TaskItem:
        from grpolab.envs import make_env, run_script, safe_arith

        n = rng.randint(self.min_terms, self.max_terms)
        parts = []
        for j in range(n):
            d = rng.randint(self.min_digits, self.max_digits)
            parts.append(str(rng.randint(10 ** (d - 1), 10**d - 1)))
            if j < n - 1:
                parts.append(rng.choice(self.ops))
        expr = "".join(parts)
        value = str(safe_arith(expr))
        prompt = f"q: {expr}\n"
        item = TaskItem(prompt=prompt, reference=value, reward="math",
                        meta={"env": "tool_arith", "difficulty": n, "n_terms": n, "expression": expr})
        transcript, ret, done = run_script(make_env("tool_arith"), item, [f"calc({expr})", f"answer({value})"])
        if not (done and ret == 1.0):  # pragma: no cover - the expert is exact by construction
            raise RuntimeError(f"tool_arith expert failed on {expr!r}")
        item.meta["transcript"] = transcript
        item.demonstration = transcript_text(transcript)
        item.privileged = item.demonstration
        return item
