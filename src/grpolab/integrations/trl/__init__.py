"""grpolab inside TRL (``trl.GRPOTrainer``, trl 1.16; docs/scale-out.md).

- :mod:`~grpolab.integrations.trl.trainer`: ``GrpolabGRPOConfig`` / ``GrpolabGRPOTrainer``,
  TRL's trainer with grpolab's objective and credit.
- :mod:`~grpolab.integrations.trl.recipe`: the SmolLM2 recipe run by TRL's trainer or the adapter.
- :mod:`~grpolab.integrations.trl.equal_work`: TRL and grpolab side by side at equal work, the
  harness of the speed comparisons.
"""
