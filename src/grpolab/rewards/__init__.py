"""grpolab.rewards: verifiers that turn (completion, reference) into a RewardResult.

Registry: :func:`register_reward`, :func:`get_reward`, :func:`list_rewards`; scoring:
:func:`score` (may raise) and :func:`safe_score` (never raises; failures score 0.0 with
``info["error"]``). Built-in rewards:

* ``"math"`` -- final-answer extraction (``\\boxed{}``, ``#``/``answer:`` marker, last number)
  and string-or-numeric comparison (:mod:`grpolab.rewards.math`).
* ``"exact"`` -- stripped string equality of the marked answer (:mod:`grpolab.rewards.math`).
* ``"reasoning_gym"`` -- a reasoning-gym dataset's own ``score_answer``
  (:mod:`grpolab.rewards.reasoning_gym`; the package is imported only when used).
"""

from grpolab.rewards.base import (
    RewardFn,
    RewardResult,
    get_reward,
    list_rewards,
    register_reward,
    safe_score,
    score,
)
from grpolab.rewards.math import (
    Extraction,
    exact_reward,
    extract_answer,
    extract_boxed,
    extract_marked,
    math_reward,
    normalize_answer,
    numbers_equal,
    parse_number,
)
from grpolab.rewards.reasoning_gym import import_reasoning_gym, reasoning_gym_reward

__all__ = [
    "Extraction",
    "RewardFn",
    "RewardResult",
    "exact_reward",
    "extract_answer",
    "extract_boxed",
    "extract_marked",
    "get_reward",
    "import_reasoning_gym",
    "list_rewards",
    "math_reward",
    "normalize_answer",
    "numbers_equal",
    "parse_number",
    "reasoning_gym_reward",
    "register_reward",
    "safe_score",
    "score",
]
