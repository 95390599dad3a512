"""The "pairsum" task: find the two listed numbers that add up to a target, by checking pairs in a
fixed order -- a search task whose failures run long.

Built for the aggregation study where failures are longer than successes (issue 16, part 2;
docs/results/aggregation_coupled.md). A problem with ``n`` numbers::

    prompt:         "3 7 1 5 sum 8="
    demonstration:  "3+7=10,8;3+1=4,8;3+5=8,8#3+5"
                                               (one "a+b=s,T" check per pair, in the fixed order
                                                (1,2), (1,3), ..., (1,n), (2,3), ...; ";" after a
                                                miss, "#" and the pair at the first hit; the
                                                trainer appends EOS)
    reference:      "3+5"
    reward:         "pair_sum"                  (grpolab.rewards.pair_sum: two listed numbers at
                                                different positions whose sum is the target)
    privileged:     the demonstration           (option ``privileged``: "solution" | "hint" = the
                                                first check | "answer" = the pair)
    meta:           {"difficulty": k, "n_numbers": n, "n_checks": k, "pair": [i, j]}

Each check writes the target ``T`` after the sum, so the decision to stop compares two adjacent
numbers instead of a sum with a number far back in the prompt. With ``show_target=False`` a check
is ``a+b=s`` only: the tiny model then learns *how many* checks solutions take better than *when* a
sum hits the target, stops early about as often as it walks past, and failures are hardly longer
than successes (within-group ratio 1.11, docs/results/aggregation_coupled.md).

Exactly one pair sums to the target (lists with a second solving pair are redrawn), and the
solving pair is drawn uniformly among all pairs, so the number of checks ``k`` a correct solution
writes is uniform on ``1..n(n-1)/2``. Why failures run long: a success stops at the solving pair.
A model that miscomputes the solving pair's sum (or misreads it as a miss) walks past it and keeps
checking the remaining pairs; past the last pair it is off the demonstrations' distribution and
may run on to ``rollout.max_new_tokens``, which scores 0. Within a group (one prompt), failures
are therefore longer than successes -- the sign-length coupling that Balanced Aggregation removes.
The opposite error (writing the target as the sum of a wrong pair and stopping early) makes a
short failure; which one dominates is measured, not assumed
(``benchmarks/experiments/preconditions.py lengths``).

Numbers are 0..``max_value`` (default 9: one character each for the tiny model). With the default
4 numbers a demonstration has at most 6 checks and 63 characters (:meth:`max_completion_length`;
45 with ``show_target=False``), so set ``rollout.max_new_tokens`` to 64 or more.
"""

from __future__ import annotations

import random
from itertools import combinations

from grpolab.tasks.arith import PRIVILEGED_KINDS
from grpolab.tasks.base import ProceduralTask, TaskItem, register_task

__all__ = ["PairSumTask"]


@register_task("pairsum")
class PairSumTask(ProceduralTask):
    """Search for the pair that sums to the target, one check per pair (see the module docstring).

    Args:
        min_numbers, max_numbers: how many numbers the list holds, ``3 <= min <= max <= 8``.
        max_value: numbers are drawn from ``0..max_value`` (9..99).
        show_target: each check writes ``,T`` after its sum (default True; see the module docstring).
        privileged: what ``TaskItem.privileged`` holds: "solution", "hint" or "answer".
        seed, eval_fraction: see :class:`ProceduralTask`.
    """

    name = "pairsum"

    def __init__(
        self,
        *,
        min_numbers: int = 4,
        max_numbers: int = 4,
        max_value: int = 9,
        privileged: str = "solution",
        show_target: bool = True,
        seed: int = 0,
        eval_fraction: float = 0.1,
    ) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        for label, value in (("min_numbers", min_numbers), ("max_numbers", max_numbers), ("max_value", max_value)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"PairSumTask.{label} must be an int, got {value!r}")
        if not 3 <= min_numbers <= max_numbers <= 8:
            raise ValueError(
                f"PairSumTask needs 3 <= min_numbers <= max_numbers <= 8, got min_numbers={min_numbers}, "
                f"max_numbers={max_numbers}"
            )
        if not 9 <= max_value <= 99:
            raise ValueError(f"PairSumTask.max_value must be in 9..99, got {max_value!r}")
        if privileged not in PRIVILEGED_KINDS:
            raise ValueError(f"PairSumTask.privileged must be one of {PRIVILEGED_KINDS}, got {privileged!r}")
        if not isinstance(show_target, bool):
            raise TypeError(f"PairSumTask.show_target must be a bool, got {show_target!r}")
        self.show_target = show_target
        self.min_numbers = min_numbers
        self.max_numbers = max_numbers
        self.max_value = max_value
        self.privileged = privileged

    def generate(self, rng: random.Random) -> TaskItem:
        n = rng.randint(self.min_numbers, self.max_numbers)
        pairs = list(combinations(range(n), 2))
        while True:
            numbers = [rng.randint(0, self.max_value) for _ in range(n)]
            i, j = rng.choice(pairs)
            target = numbers[i] + numbers[j]
            if sum(numbers[a] + numbers[b] == target for a, b in pairs) == 1:
                break
        checks = []
        for a, b in pairs:
            checks.append(f"{numbers[a]}+{numbers[b]}={numbers[a] + numbers[b]}"
                          + (f",{target}" if self.show_target else ""))
            if (a, b) == (i, j):
                break
        answer = f"{numbers[i]}+{numbers[j]}"
        demonstration = ";".join(checks) + "#" + answer
        privileged = {"solution": demonstration, "hint": checks[0], "answer": answer}[self.privileged]
        return TaskItem(
            prompt=" ".join(map(str, numbers)) + f" sum {target}=",
            reference=answer,
            privileged=privileged,
            reward="pair_sum",
            demonstration=demonstration,
            meta={"difficulty": len(checks), "n_numbers": n, "n_checks": len(checks), "pair": [i, j]},
            reward_options={"numbers": numbers, "target": target},
        )

    def max_completion_length(self) -> int:
        """Upper bound on ``len(demonstration)``: every pair checked, all numbers at ``max_value``."""
        m = len(str(self.max_value))
        check = m + 1 + m + 1 + len(str(2 * self.max_value))
        if self.show_target:
            check += 1 + len(str(2 * self.max_value))
        n_pairs = self.max_numbers * (self.max_numbers - 1) // 2
        return n_pairs * check + (n_pairs - 1) + 1 + (2 * m + 1)
