"""grpolab.rollout: batched sampling with a KV cache and teacher-forced scoring.

- :func:`sample` -- prompts -> :class:`Rollout` (token ids, masks, sampling log-probs, group ids).
- :func:`response_logprobs` -- differentiable log-probs / entropies of a response batch under a
  model (the policy-update forward, and the privileged "teacher" forward).
"""

from .batch import Rollout
from .logprobs import LogprobResult, response_logprobs
from .sampler import left_pad, sample

__all__ = ["Rollout", "LogprobResult", "sample", "response_logprobs", "left_pad"]
