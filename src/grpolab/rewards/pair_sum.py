"""The ``pair_sum`` verifier: the marked answer must name two of the listed numbers that add up to
the target (the reward of the "pairsum" search task, ``grpolab.tasks.pairsum``).

The answer is the text after the last ``#`` and must be exactly ``"a+b"``: two non-negative
integers in canonical decimal (no sign, no leading zero but for ``"0"``), taken from ``numbers``
at two *different* positions (``"4+4"`` needs two 4s in the list), with ``a + b == target``. The
order of ``a`` and ``b`` does not matter. Anything else scores 0: the target alone (``"#8"``),
three numbers, a number not in the list, an answer without a ``#`` marker, or an empty one.
``reference`` is the canonical pair (for ``info``); the verdict uses ``numbers`` and ``target``,
so an item whose list held a second solving pair would accept it too (the task never builds one).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

from grpolab.rewards.base import RewardResult, register_reward

__all__ = ["pair_sum_reward"]

_PAIR_RE = re.compile(r"(0|[1-9]\d{0,8})\+(0|[1-9]\d{0,8})")


@register_reward("pair_sum")
def pair_sum_reward(
    completion: str, reference: str, *, numbers: Sequence[int], target: int
) -> RewardResult:
    """1.0 when the answer after the last ``#`` is ``"a+b"`` with a, b in ``numbers`` (distinct
    positions) and ``a + b == target``; else 0.0 (see the module docstring)."""
    if not isinstance(completion, str):
        raise TypeError(f"the pair_sum reward needs the completion as a str, got {type(completion).__name__}")
    if (isinstance(target, bool) or not isinstance(target, int)
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in numbers)):
        raise TypeError(
            "the pair_sum reward needs reward_options numbers (a list of ints) and target (an int), "
            f"got numbers={numbers!r}, target={target!r}"
        )
    if "#" not in completion:
        return RewardResult(0.0, {"extracted": None, "method": "none", "reference": reference})
    answer = completion.rsplit("#", 1)[1].strip()
    info = {"extracted": answer, "method": "marker", "reference": reference}
    m = _PAIR_RE.fullmatch(answer)
    if m is None:
        info["why"] = "not of the form a+b"
        return RewardResult(0.0, info)
    a, b = int(m.group(1)), int(m.group(2))
    if a + b != target:
        info["why"] = f"{a}+{b} != {target}"
        return RewardResult(0.0, info)
    if Counter([a, b]) - Counter(numbers):
        info["why"] = "a number not in the list (or used twice)"
        return RewardResult(0.0, info)
    return RewardResult(1.0, info)
