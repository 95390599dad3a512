"""Deprecated home of the training step's batch; import from the modules named by role.

``grpolab.train.dapo`` held the step's batch (``collect_step``, DAPO's dynamic sampling, truncation
masking; now :mod:`grpolab.train.step_batch`) and general batch operations (``select_groups``,
``concat_experiences``: :mod:`grpolab.rollout.experience`; ``concat_rollouts``:
:mod:`grpolab.rollout.batch`). These re-exports keep the old imports working for one release.
"""

from grpolab.rollout.batch import concat_rollouts
from grpolab.rollout.experience import concat_experiences, select_groups
from grpolab.train.step_batch import collect_step, overlong_buffer_tokens, without_truncated

__all__ = ["collect_step", "concat_experiences", "concat_rollouts", "overlong_buffer_tokens", "select_groups",
           "without_truncated"]
