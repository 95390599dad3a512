"""verl's platform interface for a machine with no accelerator (the CPU rehearsal backend).

verl 0.9 resolves one :class:`verl.plugin.platform.PlatformBase` per process (``VERL_PLATFORM``
or auto-detection, falling back to ``nvidia``) and asks it for the torch device module, the
collective backend, the Ray resource name and so on. :class:`CPUPlatform` answers for the CPU:
device ``cpu``, collectives over ``gloo``, and ``GPU`` as the Ray resource name, so that verl's
resource pools (which always ask Ray for one accelerator per worker) are satisfied by *logical*
GPUs that the launcher declares to Ray (``ray_init.num_gpus``): one per training process, no
device behind it.

It is registered under the name ``cpu`` and is never auto-detected: it is used only where
``VERL_PLATFORM=cpu`` (the launcher sets it), so installing grpolab changes nothing on a GPU node.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

import torch
from verl.plugin.platform.platform_base import PlatformBase

PLATFORM_NAME = "cpu"


class _CPUDeviceModule:
    """``torch.cpu`` plus the ``torch.cuda``-style calls verl makes on its device module.

    Memory queries report 0 allocated / reserved (the CPU has no caching allocator to ask) and
    ``mem_get_info`` the machine's free and total memory; cache and allocator calls do nothing.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> int:
        return 0

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def synchronize(device: Any = None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


CPU_DEVICE_MODULE = _CPUDeviceModule()


class CPUPlatform(PlatformBase):
    """verl platform ``cpu``: torch's CPU device, gloo collectives, logical Ray ``GPU`` slots."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self):
        return CPU_DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: only VERL_PLATFORM=cpu selects it

    def current_device(self) -> str:  # type: ignore[override]
        # verl places tensors with ``.to(get_device_id())`` / ``torch.device(get_device_id())``;
        # a bare index would mean an accelerator to torch, the string is the CPU
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: Optional[int] = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"  # logical slots declared by the launcher (ray_init.num_gpus); no device behind them

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
