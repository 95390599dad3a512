"""verl on CPU: a rehearsal backend for verl 0.9's real trainer (tests, laptops; not a fast path).

verl 0.9.x cannot run without an accelerator: it has no CPU platform (and silently rewrites
``trainer.device=cpu`` to ``cuda``), no training engine registered for the CPU and no CPU
rollout, and its defaults (8 TransferQueue storage units, 8 agent-loop and 8 reward workers, one
Ray GPU per worker) do not fit a small machine. This package fills those gaps from outside verl,
through verl's own extension points, with no edit to verl:

- :class:`~grpolab.integrations.verl.cpu.platform.CPUPlatform`, verl platform ``cpu`` (selected
  by ``VERL_PLATFORM=cpu`` only, never auto-detected);
- verl's own FSDP engine (``FSDPEngineWithLMHead`` / ``FSDPEngineWithValueHead``, FSDP2 over
  gloo) registered for device ``cpu``;
- the ``hf_cpu`` rollout (:mod:`grpolab.integrations.verl.cpu.rollout`): a Hugging Face
  ``generate`` server in its own Ray actor with the weights synced from the trainer every step;
- :data:`CPU_OVERRIDES`, the small settings, applied by the launcher
  ``python -m grpolab.integrations.verl.cpu {main_ppo|verl_main} [overrides]``
  (:mod:`grpolab.integrations.verl.cpu.__main__`), which also keeps Ray on the loopback
  interface (:data:`RAY_ENV`).

verl loads the package in every process (driver, task runner, workers) through its own
``VERL_USE_EXTERNAL_MODULES=grpolab.integrations.verl.cpu`` (the launcher sets it). Only the
verl releases of grpolab's ``verl`` extra are accepted (``>=0.9.1,<0.10``); another one stops
:func:`register` with one message. See docs/scale-out.md, "verl on CPU".
"""

from __future__ import annotations

import os

from grpolab.integrations.verl.credit import VERL_SPEC, VerlVersionError, check_verl_version

__all__ = ["CPU_OVERRIDES", "EXTERNAL_MODULE", "RAY_ENV", "REGISTERED", "VerlVersionError", "cpu_env",
           "cpu_overrides", "register"]

#: What ``VERL_USE_EXTERNAL_MODULES`` must name for verl to load this backend in every process.
EXTERNAL_MODULE = "grpolab.integrations.verl.cpu"

#: The launcher's defaults (Hydra overrides; any of them given by the caller wins). Ray's CPU
#: count is *logical* (placement bundles ask for several CPUs per worker; nothing is pinned) and
#: its GPU count is one logical slot per training process, the platform's stand-in for a device.
CPU_OVERRIDES: dict[str, str] = {
    "trainer.device": "cpu",
    "trainer.nnodes": "1",
    "trainer.n_gpus_per_node": "1",
    "actor_rollout_ref.rollout.name": "hf_cpu",
    "actor_rollout_ref.actor.strategy": "fsdp2",  # FSDP1 asks torch for an accelerator
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "1",
    "actor_rollout_ref.rollout.agent.num_workers": "1",
    "reward.num_workers": "1",
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": "1",
    "data.dataloader_num_workers": "0",
    # no flash-attention on CPU: torch's SDPA over padded rows (packed rows would need varlen kernels)
    "+actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
    "actor_rollout_ref.model.use_remove_padding": "false",
    "ray_kwargs.ray_init.num_cpus": "16",
    "+ray_kwargs.ray_init.include_dashboard": "false",
    "+ray_kwargs.ray_init._node_ip_address": "127.0.0.1",
}

#: Environment of the launched run: the CPU platform, this backend in every verl process, no usage
#: report, no Hub or wandb traffic, and the loopback asked for wherever a setting exists (Ray 2.60
#: still opens some servers on every interface: the launcher's network namespace confines them).
RAY_ENV: dict[str, str] = {
    "VERL_PLATFORM": "cpu",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_RECORD_ACTOR_TASK_LOGGING": "0",
    "RAY_DISABLE_DOCKER_CPU_WARNING": "1",
    "RAY_NODE_IP_ADDRESS": "127.0.0.1",
    "GLOO_SOCKET_IFNAME": "lo",
    "MASTER_ADDR": "127.0.0.1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "WANDB_MODE": "disabled",
}


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def cpu_overrides(overrides: list[str] | tuple[str, ...] = ()) -> list[str]:
    """:data:`CPU_OVERRIDES` not set by ``overrides``, then ``overrides`` (Hydra ``key=value`` strings).

    ``ray_init.num_gpus`` follows ``trainer.n_gpus_per_node * trainer.nnodes`` when the caller
    sets them (one logical slot per training process).
    """
    given = {_key(o): o.split("=", 1)[1] if "=" in o else "" for o in overrides}
    out = [f"{k}={v}" for k, v in CPU_OVERRIDES.items() if _key(k) not in given]
    if "ray_kwargs.ray_init.num_gpus" not in given:
        n = int(given.get("trainer.n_gpus_per_node", CPU_OVERRIDES["trainer.n_gpus_per_node"]))
        n *= int(given.get("trainer.nnodes", CPU_OVERRIDES["trainer.nnodes"]))
        out.append(f"+ray_kwargs.ray_init.num_gpus={n}")
    return out + list(overrides)


def cpu_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: ``os.environ``) with :data:`RAY_ENV` and this backend added to verl's modules."""
    env = dict(os.environ if base is None else base)
    env.update(RAY_ENV)
    mods = [m for m in env.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    if EXTERNAL_MODULE not in mods:
        mods.append(EXTERNAL_MODULE)
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join(mods)
    return env


def _check_version() -> str:
    """The installed verl's version; :class:`VerlVersionError` (one line) unless it is ``>=0.9.1,<0.10``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("verl")
    except PackageNotFoundError:
        raise VerlVersionError(f"verl is not installed; the CPU backend needs verl{VERL_SPEC}: "
                               "pip install -c constraints-cpu.txt 'grpolab[verl]'") from None
    try:
        return check_verl_version(found)
    except VerlVersionError:
        raise VerlVersionError(
            f"grpolab's verl CPU backend supports verl{VERL_SPEC} only (it registers into verl's platform, "
            f"engine and rollout registries, which change between releases); found verl {found}: "
            f"pip install 'verl{VERL_SPEC}'") from None


def register() -> bool:
    """Register the CPU platform, engine and rollout in verl (idempotent). Returns True.

    Where ``VERL_PLATFORM=cpu`` the CPU platform also becomes this process's verl platform, even
    if verl resolved one before the module was loaded.
    """
    _check_version()
    from verl.plugin.platform import platform_manager as pm

    from grpolab.integrations.verl.losses import guard_trl_value_head, register as register_losses

    register_losses()  # also where verl's plug-in auto-loading is off
    guard_trl_value_head()

    from grpolab.integrations.verl.cpu.platform import PLATFORM_NAME, CPUPlatform

    # the platform first: importing verl's engines reads it (module-level get_device_name())
    if pm.PlatformRegistry.get(PLATFORM_NAME) is not CPUPlatform:
        pm.PlatformRegistry.register(platform=PLATFORM_NAME)(CPUPlatform)
    if os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME:
        if not isinstance(pm._current_platform, CPUPlatform):
            pm._current_platform = CPUPlatform()
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry
    for model_type, cls in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        for backend in ("fsdp", "fsdp2"):
            if "cpu" not in EngineRegistry._engines.get(model_type, {}).get(backend, {}):
                EngineRegistry.register(model_type=model_type, backend=backend, device="cpu")(cls)
    from grpolab.integrations.verl.cpu.rollout import ROLLOUT_NAME

    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = (
        "grpolab.integrations.verl.cpu.rollout.HFCPURolloutAdapter")

    def _replica():
        from grpolab.integrations.verl.cpu.rollout import HFCPURolloutReplica

        return HFCPURolloutReplica

    RolloutReplicaRegistry.register(ROLLOUT_NAME, _replica)
    if isinstance(pm._current_platform, CPUPlatform):
        _one_gloo_backend()
        _unpinned_offload()
    return True


def _unpinned_offload() -> None:
    """verl's FSDP2 engine gives forward-only models (the reference) ``CPUOffloadPolicy(pin_memory=True)``;
    pinning needs an accelerator, and on the CPU there is nothing to pin for: the policy is unpinned."""
    import verl.workers.engine.fsdp.transformer_impl as impl

    base = impl.CPUOffloadPolicy
    if base is None or getattr(base, "_grpolab_cpu", False):
        return

    class CPUOffloadPolicy(base):
        _grpolab_cpu = True

        def __init__(self, pin_memory: bool = False, *args, **kwargs):
            super().__init__(False, *args, **kwargs)

    impl.CPUOffloadPolicy = CPUOffloadPolicy


def _one_gloo_backend() -> None:
    """verl's workers join their process group with ``"cpu:gloo,<device>:<backend>"``, which torch
    refuses when the device is the CPU (``cpu`` twice): on the CPU platform they join with ``gloo``."""
    import verl.utils.distributed as dist_utils
    import verl.workers.engine_workers as engine_workers

    base = dist_utils.initialize_global_process_group_ray
    if getattr(base, "_grpolab_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return base(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray._grpolab_cpu = True
    dist_utils.initialize_global_process_group_ray = initialize_global_process_group_ray
    engine_workers.initialize_global_process_group_ray = initialize_global_process_group_ray


#: Importing the package registers the backend where ``VERL_PLATFORM=cpu`` (verl's own import of
#: ``VERL_USE_EXTERNAL_MODULES`` in a launched run); elsewhere (the launcher, tests) it only defines.
REGISTERED = register() if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu" else False
