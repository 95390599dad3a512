"""The code sandbox: run untrusted Python in a fresh bubblewrap sandbox (:func:`run_sandboxed`).

Every program runs in its own ``bwrap --unshare-all`` sandbox (user, PID, IPC, network, UTS,
cgroup and mount namespaces) under a fresh ``python -I -S``: the only files it sees are the
interpreter, its standard library and shared libraries and the allow-listed packages, all
read-only, plus a private size-capped /tmp; a seccomp filter refuses new processes, sockets,
SysV IPC, memfds, pipes, inotify and every call that reaches the kernel's or other processes'
state; rlimits bound its memory, CPU, files and threads; at its deadline the whole PID namespace
is killed at once. The code verifier's tests run in a second sandbox (the judge: a long-lived
judge server per pool slot, :mod:`.judge_server`) that the program cannot reach. Details, the
threat model and what is NOT covered: docs/sandbox.md.

Split by concern: :mod:`.limits` (limits, results), :mod:`.seccomp` (the filter), :mod:`.view`
(the filesystem view), :mod:`.protocol` (report frames), :mod:`.runner` (bwrap command line,
supervision), :mod:`.prestart` (the next sandbox started ahead), :mod:`.judge_server` (the
judge sandbox that serves many requests), :mod:`.pool` (runs, concurrency), :mod:`.harness`
(the code inside the sandbox).

Requires bubblewrap (``apt-get install bubblewrap``). Without it every run is a
``sandbox_error`` result (or :class:`SandboxError` with ``mode="strict"``) naming the fix, and
:func:`sandbox_isolation` reports the sandbox as DEGRADED (the trainer records it in
``RUN_DIR/sandbox.json`` and fails under ``GRPOLAB_REQUIRE_SANDBOX=1``): never a silent
weaker mode.
"""

from __future__ import annotations

import atexit
import os
import threading
from dataclasses import dataclass
from typing import Any

from grpolab.rewards.sandbox.limits import REASONS, SandboxError, SandboxLimits, SandboxResult
from grpolab.rewards.sandbox.pool import FEATURES, UID_BASE, Judged, SandboxPool
from grpolab.rewards.sandbox.runner import DEFAULT_PACKAGES, bwrap_path

__all__ = [
    "DEFAULT_PACKAGES",
    "FEATURES",
    "Judged",
    "PRIVATE_FD",
    "REASONS",
    "REQUIRED_FEATURES",
    "SandboxError",
    "SandboxIsolation",
    "SandboxLimits",
    "SandboxPool",
    "SandboxResult",
    "UID_BASE",
    "bwrap_path",
    "default_pool",
    "isolation_of",
    "isolation_required",
    "run_sandboxed",
    "sandbox_features",
    "sandbox_isolation",
    "shutdown_pool",
]

#: File descriptor on which a program reads its ``private_input``.
PRIVATE_FD = 3

_POOL: SandboxPool | None = None
_POOL_LOCK = threading.Lock()


def default_pool() -> SandboxPool:
    """The process-wide pool (created on first use; a forked child gets its own)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.closed or _POOL.owner_pid != os.getpid():
            _POOL = SandboxPool()
        return _POOL


def shutdown_pool() -> None:
    """Close the process-wide pool (also runs at interpreter exit)."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.close()


atexit.register(shutdown_pool)


def _forget_pool_in_child() -> None:
    global _POOL, _POOL_LOCK
    _POOL = None
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def sandbox_features() -> tuple[str, ...]:
    """Isolation features a sandbox gets on this machine (runs one probe program)."""
    return default_pool().features()


#: Features every sandbox must have, in both modes (root, or an ordinary user).
REQUIRED_FEATURES = FEATURES
#: Setting this environment variable to 1 turns degraded isolation into an error (CI).
REQUIRE_ENV = "GRPOLAB_REQUIRE_SANDBOX"


def isolation_required() -> bool:
    """Whether ``GRPOLAB_REQUIRE_SANDBOX`` asks for full isolation (set and not "0")."""
    return os.environ.get(REQUIRE_ENV, "").strip() not in ("", "0")


@dataclass(frozen=True)
class SandboxIsolation:
    """The isolation sandboxed programs get here (what the trainer records).

    Attributes:
        features: features in force (see :class:`SandboxResult`).
        missing: required features that are not (``"uid|userns"``: programs share the caller's
            uid without a user namespace).
        degraded: ``missing`` is not empty.
        description: one line for a log, e.g. ``"sandbox isolation: full (...)"`` or
            ``"sandbox isolation DEGRADED: missing seccomp, nocaps (...)"``.
        notes: the pool's own reasons (``SandboxPool.notes``).
        limits: how the per-program limits over all processes are enforced: ``"cgroup2"``
            (kernel-enforced memory.max / pids.max, CPU from cpu.stat) or ``"sampled"`` (the
            server measures the process tree in /proc; see docs/sandbox.md), "" when unknown.
        limits_detail: one line on it (the cgroup's path, or why there is none).
        packages: the allow-listed third-party packages in the programs' view.
        uids: the host uids programs run as (one per pool slot as root; this process's uid
            otherwise); never 0.
    """

    features: tuple[str, ...]
    missing: tuple[str, ...]
    degraded: bool
    description: str
    notes: tuple[str, ...] = ()
    limits: str = ""
    limits_detail: str = ""
    packages: tuple[str, ...] = ()
    uids: tuple[int, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"features": list(self.features), "missing": list(self.missing),
                "degraded": self.degraded, "description": self.description,
                "notes": list(self.notes), "limits": self.limits,
                "limits_detail": self.limits_detail, "packages": list(self.packages),
                "uids": list(self.uids)}


def isolation_of(features, notes=(), limits=None, packages=(), uids=()) -> SandboxIsolation:
    """The :class:`SandboxIsolation` for a pool's ``features`` (pure; see
    :func:`sandbox_isolation`); ``limits`` is ``SandboxPool.limits``, ``uids`` the host uids
    programs run as."""
    limits = dict(limits or {})
    features = tuple(features)
    missing = [f for f in REQUIRED_FEATURES if f not in features]
    mode = ("root, bubblewrap: programs under a uid of their own" if "uid" in features else
            "unprivileged, bubblewrap: programs in a user namespace" if "userns" in features else
            "no sandbox")
    if missing:
        why = "; ".join(notes) if notes else "no reason given"
        desc = (f"sandbox isolation DEGRADED: missing {', '.join(missing)} ({mode}; {why}); "
                "untrusted code is less contained, see docs/sandbox.md")
    else:
        desc = f"sandbox isolation: full ({mode}; {', '.join(features)})"
    uids = tuple(sorted(set(uids)))
    if uids:
        desc += "; programs run as host uid " + (f"{uids[0]}" if len(uids) == 1
                                                  else f"{uids[0]}..{uids[-1]}")
    if limits.get("kind"):
        desc += f"; per-program limits: {limits['kind']}"
    return SandboxIsolation(features, tuple(missing), bool(missing), desc, tuple(notes),
                            limits.get("kind", ""), limits.get("detail", ""), tuple(packages),
                            uids)


def sandbox_isolation(pool: SandboxPool | None = None) -> SandboxIsolation:
    """The isolation of ``pool``'s servers (default: the process-wide pool; starts one server).

    For the trainer: call once at start when a reward uses the sandbox, write ``as_dict()``
    into the run summary, log ``description`` and warn when ``degraded``.
    """
    pool = pool or default_pool()
    feats = pool.features()
    if not feats:
        feats = ()
    packages = pool._launcher.packages if pool._launcher is not None else ()
    notes = list(pool.notes)
    if not feats and not notes:
        notes.append("no sandbox could run")
    uids = pool.host_uids() if feats else ()
    return isolation_of(feats, notes, pool.limits, packages, uids)



# ------------------------------------------------------------------------------ entry point


def run_sandboxed(
    source: str,
    *,
    stdin: str = "",
    private_input: str = "",
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    cpu_s: float | None = None,
    file_size_mb: int = 16,
    max_processes: int = 32,
    max_open_files: int = 64,
    max_output_bytes: int = 1_000_000,
    mode: str = "auto",
    pool: SandboxPool | None = None,
) -> SandboxResult:
    """Run Python ``source`` in the sandbox and return what happened; never runs it unconfined.

    Args:
        source: a Python program (run as ``__main__``).
        stdin: text fed to its standard input.
        private_input: text the program can read from file descriptor 3
            (:data:`PRIVATE_FD`); written by the host after the program's process started.
        timeout_s, memory_mb, cpu_s, file_size_mb, max_processes, max_open_files,
        max_output_bytes: limits, see :class:`SandboxLimits`.
        mode: "auto" (default): a failure of the sandbox machinery is a result with
            ``reason="sandbox_error"`` (so verifiers score 0 and go on); "strict": it raises
            :class:`SandboxError`. Every run is a fresh bubblewrap sandbox.
        pool: a specific :class:`SandboxPool` (default: the process-wide one).

    Raises:
        TypeError / ValueError: bad arguments (the message names the argument).
        SandboxError: only when ``mode`` is not "auto", when the machinery failed (e.g.
            bubblewrap is not installed: ``apt-get install bubblewrap``).
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    if not isinstance(stdin, str):
        raise TypeError(f"stdin must be a str, got {type(stdin).__name__}")
    if not isinstance(private_input, str):
        raise TypeError(f"private_input must be a str, got {type(private_input).__name__}")
    if mode not in ("auto", "strict"):
        raise ValueError(f"mode must be 'auto' or 'strict', got {mode!r}")
    limits = SandboxLimits(
        timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb, file_size_mb=file_size_mb,
        max_processes=max_processes, max_open_files=max_open_files,
        max_output_bytes=max_output_bytes,
    )
    # JSON cannot carry lone surrogates; replace them rather than fail.
    source = source.encode("utf-8", "replace").decode("utf-8")
    stdin = stdin.encode("utf-8", "replace").decode("utf-8")
    private_input = private_input.encode("utf-8", "replace").decode("utf-8")
    try:
        return (pool or default_pool()).run(source, stdin, limits, private_input)
    except SandboxError as exc:
        if mode != "auto":
            raise
        return SandboxResult(-1, "", "", False, "sandbox_error", str(exc), mode="bwrap")
