"""Pure policy-optimisation objectives over padded ``[B,T]`` tensors with a mask.

Nothing here calls a model, logs, or reads a config: tensors in, tensors out. Each axis of the
objective is a small registry (advantage estimators, ratio levels, aggregations, KL estimators),
composed in one place, :func:`policy_loss`.
"""

from grpolab.objectives.advantages import (
    ADVANTAGE_ESTIMATORS,
    get_advantage_estimator,
    group_advantages,
    leave_one_out,
)
from grpolab.objectives.aggregation import AGGREGATIONS, aggregation_weights, sequence_signs
from grpolab.objectives.credit import (
    CREDIT_METHODS,
    CreditResult,
    GearResult,
    check_credit,
    credit_advantages,
    credit_metrics,
    gear_advantages,
    gear_segments,
    lam_schedule,
    opsd_advantages,
    opsd_loss,
    rlsd_advantages,
)
from grpolab.objectives.shaping import group_has_signal, overlong_penalty, truncation_mask
from grpolab.objectives.kl import KL_ESTIMATORS, kl_penalty
from grpolab.objectives.loss import LATE_POSITION, POSITION_BUCKETS, check_objective, policy_loss, position_bucket_labels
from grpolab.objectives.ratios import RATIO_LEVELS, log_importance_ratio

__all__ = [
    "CREDIT_METHODS",
    "CreditResult",
    "GearResult",
    "check_credit",
    "credit_advantages",
    "credit_metrics",
    "gear_advantages",
    "gear_segments",
    "lam_schedule",
    "opsd_advantages",
    "opsd_loss",
    "rlsd_advantages",
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "LATE_POSITION",
    "POSITION_BUCKETS",
    "RATIO_LEVELS",
    "aggregation_weights",
    "check_objective",
    "get_advantage_estimator",
    "group_has_signal",
    "overlong_penalty",
    "truncation_mask",
    "group_advantages",
    "kl_penalty",
    "leave_one_out",
    "log_importance_ratio",
    "policy_loss",
    "position_bucket_labels",
    "sequence_signs",
]
