"""grpolab.measure: measuring a model as a run would, below the trainer.

- :func:`evaluate` -- held-out accuracy, mean reward and pass@k through the run's collector.
- :mod:`grpolab.measure.preflight` -- the preflight before RL (greedy vs sampled outcomes, the
  method verdicts, the pilot) and its report, headroom included as a section.
- :mod:`grpolab.measure.readability` -- how readable the teacher's credit is on a batch.

Its numbers come from :mod:`grpolab.rollout` (sampling and scoring as a run does) and its
statistics and verdicts from :mod:`grpolab.diagnostics`. It sits below the trainer:
:mod:`grpolab.train` calls it (the preflight at step 0) and the commands call it directly, so it
imports rollout, diagnostics, models, tasks, rewards, envs and the config -- never
:mod:`grpolab.train` (``tools/check_structure.py`` holds this).
"""

from grpolab.measure.evaluate import SOLVED, EvalResult, evaluate

__all__ = ["SOLVED", "EvalResult", "evaluate"]
