"""grpolab.rewards: verifiers that turn (completion, reference) into a RewardResult.

Registry: :func:`register_reward`, :func:`get_reward`, :func:`list_rewards`; scoring:
:func:`score` (may raise) and :func:`safe_score` (never raises; failures score 0.0 with
``info["error"]``). Built-in rewards:

* ``"math"`` -- final-answer extraction (``\\boxed{}``, ``#``/``answer:`` marker, last number)
  and string-or-numeric comparison (:mod:`grpolab.rewards.math`).
* ``"exact"`` -- stripped string equality of the marked answer (:mod:`grpolab.rewards.math`).
* ``"reasoning_gym"`` -- a reasoning-gym dataset's own ``score_answer``
  (:mod:`grpolab.rewards.reasoning_gym`; the package is imported only when used).
* ``"code"`` -- run the program and its tests in the sandbox; fraction of tests passed
  (:mod:`grpolab.rewards.code`).
* ``"sql"`` -- result-set equality of predicted and reference queries on a read-only SQLite
  database (:mod:`grpolab.rewards.sql`).
* ``"json_schema"`` -- the completion's JSON validated with ``jsonschema``, optional partial
  credit (:mod:`grpolab.rewards.json_schema`).
* ``"final_line"`` -- the last line is the number, ``Answer: N`` or the question's expression
  ``= N`` (the "short_arith" task's verifier, :mod:`grpolab.rewards.final_line`).
* ``"pair_sum"`` -- the answer names two listed numbers that add up to the target (the "pairsum"
  task's verifier, :mod:`grpolab.rewards.pair_sum`).

The ``math`` reward also uses ``math-verify`` (LaTeX, sets, intervals, expressions) when it is
installed. A user's own reward: ``"package.module:function"``, an entry point of the
``grpolab.rewards`` group, or a weighted list of rewards, made usable by :func:`resolve_reward`
(:mod:`grpolab.rewards.user`; ``task.options.reward`` in a config). Sandbox:
:func:`run_sandboxed` (:mod:`grpolab.rewards.sandbox`); the isolation in force:
:func:`sandbox_isolation`. Batches:
:func:`score_batch` (:mod:`grpolab.rewards.batch`). Guide: ``docs/rewards.md``.
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
from grpolab.rewards.final_line import final_line_reward
from grpolab.rewards.reasoning_gym import import_reasoning_gym, reasoning_gym_reward
from grpolab.rewards.sandbox import (
    SandboxError,
    SandboxIsolation,
    SandboxLimits,
    SandboxPool,
    SandboxResult,
    isolation_of,
    isolation_required,
    run_sandboxed,
    sandbox_features,
    sandbox_isolation,
    shutdown_pool,
)
from grpolab.rewards.code import code_reward, extract_code
from grpolab.rewards.sql import extract_sql, sql_reward
from grpolab.rewards.json_schema import extract_json, json_schema_reward
from grpolab.rewards.batch import ScoreRequest, score_batch
from grpolab.rewards.pair_sum import pair_sum_reward
from grpolab.rewards.user import RewardSpecError, WeightedReward, resolve_reward

__all__ = [
    "Extraction",
    "SandboxError",
    "SandboxIsolation",
    "SandboxLimits",
    "SandboxPool",
    "SandboxResult",
    "ScoreRequest",
    "code_reward",
    "extract_code",
    "extract_json",
    "extract_sql",
    "json_schema_reward",
    "isolation_of",
    "isolation_required",
    "run_sandboxed",
    "sandbox_features",
    "sandbox_isolation",
    "score_batch",
    "shutdown_pool",
    "sql_reward",
    "RewardFn",
    "RewardResult",
    "RewardSpecError",
    "WeightedReward",
    "exact_reward",
    "extract_answer",
    "extract_boxed",
    "extract_marked",
    "get_reward",
    "import_reasoning_gym",
    "list_rewards",
    "math_reward",
    "final_line_reward",
    "pair_sum_reward",
    "normalize_answer",
    "numbers_equal",
    "parse_number",
    "reasoning_gym_reward",
    "register_reward",
    "resolve_reward",
    "safe_score",
    "score",
]
