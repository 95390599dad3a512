"""grpolab inside TRL (``trl.GRPOTrainer``, trl 1.16; docs/scale-out.md).

- :mod:`~grpolab.integrations.trl.trainer`: ``GrpolabGRPOConfig`` / ``GrpolabGRPOTrainer``,
  TRL's trainer with grpolab's objective and credit.
- :mod:`~grpolab.integrations.trl.recipe`: the SmolLM2 recipe run by TRL's trainer or the adapter.

The equal-work speed harness (TRL and grpolab side by side) is a benchmark helper:
:mod:`grpolab.bench.trl_equal_work`.
"""
