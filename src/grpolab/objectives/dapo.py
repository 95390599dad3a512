"""Deprecated home of DAPO's batch shaping; import from :mod:`grpolab.objectives.shaping`.

The module was renamed by its role (dynamic sampling's group filter, the soft overlong penalty,
truncation masking: how a batch is shaped), like its neighbours advantages, ratios, aggregation,
kl, credit and loss. This re-export keeps ``grpolab.objectives.dapo`` working for one release.
"""

from grpolab.objectives.shaping import group_has_signal, overlong_penalty, truncation_mask

__all__ = ["group_has_signal", "overlong_penalty", "truncation_mask"]
