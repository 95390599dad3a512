"""grpolab inside verl (https://github.com/volcengine/verl, 0.9.x; docs/scale-out.md).

- :mod:`~grpolab.integrations.verl.losses`: grpolab's policy losses and the ``grpolab_balanced``
  advantage estimator, added to verl's registries by ``register()``.
- :mod:`~grpolab.integrations.verl.plugin`: the entry point verl loads (``verl.plugins``).
- :mod:`~grpolab.integrations.verl.credit`: RLSD / GEAR's privileged teacher forward as a verl
  trainer extension; :mod:`~grpolab.integrations.verl.main` launches it
  (``python -m grpolab.integrations.verl.main``), :mod:`~grpolab.integrations.verl.runner` is its
  Ray task runner.
- :mod:`~grpolab.integrations.verl.cpu`: verl's real trainer on the CPU
  (``python -m grpolab.integrations.verl.cpu``).
"""
