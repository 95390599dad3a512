"""grpolab.rollout: batched sampling with a KV cache and teacher-forced scoring.

- :func:`sample` -- prompts -> :class:`Rollout` (token ids, masks, sampling log-probs, group ids).
- :func:`response_logprobs` -- differentiable log-probs / entropies of a response batch under a
  model (the policy-update forward, and the privileged "teacher" forward).
- :func:`run_episodes` -- multi-turn episodes against environments (:mod:`grpolab.envs`) ->
  :class:`EpisodeBatch` (a Rollout whose observation tokens have mask 0, plus rewards and
  per-turn counts).
- :class:`Collector` (:func:`make_collector`) -- a model and task items in, a scored
  :class:`Experience` out: how a run samples and scores (training, evaluation, the preflight).
- :func:`teacher_logprobs` -- the privileged self-teacher forward (RLSD/GEAR/OPSD): teacher
  log-probs of the sampled tokens and, optionally, the full-vocabulary KL to the student. Its
  prompt text and the credit token masks are :mod:`grpolab.teacher_text`.
"""

from .batch import Rollout
from .collector import Collector, EpisodeCollector, SingleTurnCollector, make_collector
from .episodes import EpisodeBatch, run_episodes
from .experience import Experience
from .logprobs import LogprobResult, response_logprobs
from .prompts import encode_prompt, encode_prompts
from .sampler import SamplingSpec, left_pad, sample
from .teacher import TeacherResult, credit_logprobs, encode_teacher_prompts, teacher_logprobs

__all__ = [
    "Rollout", "LogprobResult", "SamplingSpec", "sample", "response_logprobs", "left_pad", "EpisodeBatch", "run_episodes",
    "TeacherResult", "encode_teacher_prompts", "teacher_logprobs", "credit_logprobs", "encode_prompt",
    "encode_prompts", "Collector", "EpisodeCollector", "SingleTurnCollector", "make_collector",
    "Experience",
]
