"""grpolab.integrations: adapters that run grpolab's objectives inside other RL engines.

- :mod:`grpolab.integrations.verl`: policy losses and the Balanced-Aggregation advantage estimator
  registered in verl's registries (``pip install 'grpolab[verl]'``).
- :mod:`grpolab.integrations.trl`: a ``trl.GRPOTrainer`` subclass using grpolab's objective
  (``pip install 'grpolab[trl]'``).

Nothing else in grpolab imports these modules, and they import verl / trl only when used.
"""
