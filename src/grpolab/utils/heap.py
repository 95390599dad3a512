"""The C heap of a training process: keep glibc from holding freed tensor memory.

torch allocates CPU tensors with ``malloc``. glibc serves a request above ``M_MMAP_THRESHOLD``
(128 KiB) with its own ``mmap`` and returns it to the system on ``free``, and every smaller one
from its heap, which it hands back only from the top. But glibc raises that threshold
*dynamically*: each time a ``mmap``-served block is freed the threshold grows to that block's size
(up to 32 MiB). After the first few tensors are freed, every activation below 32 MiB (on
SmolLM2-135M: nearly all of them) comes from the heap, where the long-lived ones (saved for the
backward) and the short-lived ones interleave. Measured on SmolLM2-135M-Instruct, LoRA update of
6 x 4 rows, one thread: the heap held 1.6-3.4 GiB of *free* memory after an update (226 MiB in
use), and the update's peak RSS was 2.97 GiB with the dynamic threshold against 2.36 GiB with a
fixed 128 KiB one; a whole LoRA RLSD run's peak RSS fell by about the same amount
(docs/performance.md, "Memory").

:func:`bound_heap` fixes the threshold at 128 KiB (glibc's own default, without the dynamic
raise): freed tensors go back to the system at once. The price is a fresh, zero-filled mapping
per large allocation (page faults) and an unmap per free. With one torch thread that cost 0.5 s of
system time per 12 s LoRA update at 16 new tokens, but 53-57 s against 38 s per update at 128
(the kernel zero-filling fresh pages; docs/performance.md); with two threads, where every unmap
also interrupts the other thread's core, a 128-token LoRA update took 36.2 s instead of 24.2 s
(system time 20.8 vs 5.0 s).
So by default the threshold is fixed only when torch runs one thread (the setting of a 2-core
machine shared with other work, where memory matters most). ``GRPOLAB_MMAP_THRESHOLD`` (bytes)
sets a threshold whatever the thread count; ``0`` keeps glibc's dynamic behaviour. A threshold the user gave glibc itself (``MALLOC_MMAP_THRESHOLD_``,
or ``glibc.malloc.mmap_threshold`` in ``GLIBC_TUNABLES``) is left alone. Outside glibc (macOS,
musl) both functions do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

#: glibc's default M_MMAP_THRESHOLD (bytes), made fixed by :func:`bound_heap`
DEFAULT_MMAP_THRESHOLD = 128 * 1024
_M_MMAP_THRESHOLD = -3  # mallopt parameter number (malloc.h)
ENV = "GRPOLAB_MMAP_THRESHOLD"


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.gnu_get_libc_version  # glibc only  # noqa: B018
        return libc
    except (OSError, AttributeError):
        return None


def _threads() -> int:
    try:
        import torch

        return torch.get_num_threads()
    except ImportError:  # pragma: no cover
        return 1


def user_threshold() -> bool:
    """Whether glibc was already given an mmap threshold through its own environment."""
    return "MALLOC_MMAP_THRESHOLD_" in os.environ or "mmap_threshold" in os.environ.get("GLIBC_TUNABLES", "")


def bound_heap(threshold: int | None = None) -> int | None:
    """Fix glibc's mmap threshold so that freed tensor memory leaves the process at once.

    ``threshold``: bytes; default ``GRPOLAB_MMAP_THRESHOLD``, else 128 KiB when torch runs one
    thread (with more, nothing is done unless ``GRPOLAB_MMAP_THRESHOLD`` asks). Returns the threshold
    set, or None when nothing was done (not glibc, ``GRPOLAB_MMAP_THRESHOLD=0``, or a threshold the
    user gave glibc). Idempotent; affects allocations made after the call.
    """
    if threshold is None:
        raw = os.environ.get(ENV, "").strip()
        if not raw and _threads() > 1:
            return None  # unmapping under several threads costs too much (module docstring)
        from grpolab.utils.envvars import check_variable

        check_variable(ENV)  # a whole number of bytes in glibc's range, else one error naming it
        threshold = int(raw) if raw else DEFAULT_MMAP_THRESHOLD
    if threshold <= 0 or user_threshold():
        return None
    libc = _libc()
    if libc is None or libc.mallopt(_M_MMAP_THRESHOLD, int(threshold)) != 1:
        return None
    return int(threshold)


def release_heap() -> bool:
    """Return the heap's free pages to the system (``malloc_trim(0)``); False outside glibc."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
