"""verl's v1 task runner with grpolab's credit extension (imports verl 0.9.x at import time).

:class:`GrpolabTaskRunner` is verl's own ``TaskRunnerV1`` (``verl.trainer.main_ppo``) whose
``run`` swaps in the credit trainer: while it runs, ``verl.trainer.ppo.v1.get_trainer_cls`` (the
lookup ``TaskRunnerV1.run`` uses for ``trainer.v1.trainer_mode``) returns
:func:`grpolab.integrations.verl.credit.credit_trainer_class` of verl's trainer. Everything else
-- TransferQueue, the agent-loop manager, logging, shutdown -- is verl's code, unchanged. The swap
happens inside the task runner's own Ray actor process and is undone when ``run`` returns.

Use it from Python with verl's ``run_ppo``::

    from verl.trainer.main_ppo import run_ppo
    from grpolab.integrations.verl.runner import remote_task_runner
    run_ppo(config, task_runner_class=remote_task_runner())

or launch ``python -m grpolab.integrations.verl.main`` (docs/scale-out.md).
"""

from __future__ import annotations

from verl.trainer.main_ppo import TaskRunnerV1

from grpolab.integrations.verl.credit import VerlCreditConfig, check_verl_version, credit_trainer_class


class GrpolabTaskRunner(TaskRunnerV1.__ray_actor_class__):
    """``TaskRunnerV1`` whose trainer carries the credit step when the config has ``grpolab.credit``."""

    def run(self, config):
        import verl.trainer.ppo.v1 as v1

        cfg = VerlCreditConfig.from_verl_config(config)
        if cfg is not None:
            check_verl_version()  # also when run_ppo is called without grpolab.integrations.verl.main
        if cfg is None:
            return super().run(config)
        base_lookup = v1.get_trainer_cls

        def get_trainer_cls(name: str):
            return credit_trainer_class(base_lookup(name), cfg)

        v1.get_trainer_cls = get_trainer_cls
        try:
            return super().run(config)
        finally:
            v1.get_trainer_cls = base_lookup


def remote_task_runner():
    """:class:`GrpolabTaskRunner` as a Ray actor class (what ``run_ppo`` takes)."""
    import ray

    return ray.remote(GrpolabTaskRunner)


__all__ = ["GrpolabTaskRunner", "remote_task_runner"]
