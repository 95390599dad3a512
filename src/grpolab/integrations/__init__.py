"""grpolab.integrations: adapters that run grpolab's objectives inside other RL engines.

- :mod:`grpolab.integrations.verl`: verl (``pip install 'grpolab[verl]'``): the policy losses and
  the Balanced-Aggregation estimator in verl's registries (``verl.losses``, loaded by verl through
  the ``verl.plugin`` entry point), RLSD / GEAR as a trainer extension (``verl.credit``, launched
  by ``verl.main``), verl on the CPU (``verl.cpu``).
- :mod:`grpolab.integrations.trl`: TRL (``pip install 'grpolab[trl]'``): a ``trl.GRPOTrainer``
  subclass with grpolab's objective (``trl.trainer``) and the SmolLM2 recipe (``trl.recipe``).

Nothing else in grpolab imports these modules, and they import verl / trl only when used.
"""
