"""Run untrusted Python source in a sandboxed subprocess: :func:`run_sandboxed`.

How it works (details and what it does NOT protect against: ``docs/rewards.md``):

* A pool of **fork servers** (:class:`ForkServerPool`, one per CPU by default) -- pre-started
  ``python -I`` processes running :mod:`grpolab.rewards._sandbox_server`. Each server isolates
  itself once at start (root, or an ordinary user through a user namespace): its own network
  namespace with only a downed loopback; its own mount namespace whose root is a minimal,
  read-only view -- the interpreter, its standard library and shared libraries, the allow-listed
  packages (:data:`DEFAULT_PACKAGES`) under /sandbox/packages, a few device nodes, empty /proc,
  /sys and /tmp; nothing else of the host (no project, data, home, run directory); then a
  seccomp filter that refuses
  AF_UNIX sockets (no host UNIX socket can be reached, wherever it lives), user namespaces,
  namespace-making clones, pivot_root/chroot, io_uring, ptrace and more. Then it forks one child
  per program. The child becomes PID 1 of a fresh PID namespace (when it exits, the kernel kills
  everything it spawned), gets its own IPC and mount namespace with a fresh size-capped tmpfs on
  /tmp as working directory, a new session, rlimits (CPU, address space, file size, open files,
  process count, no core), no capabilities at all (bounding, ambient, effective, permitted),
  an unprivileged uid of its own (root only), no_new_privs and an empty environment, then
  ``exec``s the source. The server kills the namespace at the wall-clock deadline or when
  stdout/stderr exceed their cap and reaps the child. A fork costs ~1-2 ms instead of the ~80 ms
  of a fresh interpreter.
* **Fresh mode** (``mode="fresh"``, and the fallback when a pool server cannot be used): a
  one-shot server process per program -- the same isolation code, plus an interpreter start.

Limits are per call (:class:`SandboxLimits`); isolation features actually in force are listed
in ``SandboxResult.isolation`` (``netns``, ``mountns``, ``minimal_fs``, ``readonly_fs``, ``private_dirs``,
``pidns``, ``ipcns``, ``nocaps``, ``seccomp``, and ``uid`` (root) or ``userns`` (an ordinary
user); fewer on a degraded platform: :func:`sandbox_isolation` says which are missing).
"""

from __future__ import annotations

import atexit
import json
import math
import os
import queue
import select
import struct
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ForkServer",
    "ForkServerPool",
    "SandboxError",
    "SandboxLimits",
    "SandboxResult",
    "default_pool",
    "SandboxIsolation",
    "isolation_of",
    "isolation_required",
    "run_sandboxed",
    "sandbox_features",
    "sandbox_isolation",
    "shutdown_pool",
]

SERVER_SCRIPT = Path(__file__).with_name("_sandbox_server.py")
#: Standard-library-only modules every server imports before isolating itself (as
#: ``_grpolab<stem>``): the code verifier's harness, so that programs need not compile it.
PRELOAD = (Path(__file__).with_name("_code_harness.py"),)
#: File descriptor on which a program reads its ``private_input``.
PRIVATE_FD = 3
#: Size of each server's private tmpfs (/tmp, /var/tmp, /dev/shm each), in MB.
SERVER_DISK_MB = 256
#: Extra seconds the client waits for a server's reply beyond the program's own time limit.
REPLY_GRACE_S = 15.0
#: Third-party packages programs may import (when installed here): each is bind-mounted
#: read-only into the view at ``/sandbox/packages``; nothing else of ``sys.path`` is visible.
DEFAULT_PACKAGES: tuple[str, ...] = ("numpy",)
REASONS = ("", "timeout", "memory", "output_limit", "file_size", "killed", "setup_failed")


class SandboxError(RuntimeError):
    """The sandbox itself failed (a server would not start or answer), not the program."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits (validated).

    Attributes:
        timeout_s: wall-clock limit, seconds (the whole namespace is SIGKILLed at it).
        cpu_s: CPU-time limit of all the program's processes together (cgroup v2 cpu.stat or
            the sampled process tree, see docs/rewards.md; plus RLIMIT_CPU per process, whole
            seconds rounded up); None = ``timeout_s``.
        memory_mb: memory limit of all the program's processes together (cgroup v2
            memory.max, or sampled), and the address-space limit (RLIMIT_AS) of each process.
        file_size_mb: largest file a process may write (RLIMIT_FSIZE).
        max_processes: processes + threads the program may have at once (cgroup pids.max where
            there is one; RLIMIT_NPROC on its own uid or in the server's user namespace).
        max_open_files: RLIMIT_NOFILE.
        max_output_bytes: cap on stdout and on stderr, each; exceeding it kills the program.
    """

    timeout_s: float = 5.0
    cpu_s: float | None = None
    memory_mb: int = 512
    file_size_mb: int = 16
    max_processes: int = 32
    max_open_files: int = 64
    max_output_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_s"):
            v = getattr(self, name)
            if v is None and name == "cpu_s":
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                math.isfinite(v) and v > 0
            ):
                raise ValueError(f"SandboxLimits.{name} must be a positive number, got {v!r}")
        for name, lo in (("memory_mb", 16), ("file_size_mb", 1), ("max_processes", 1),
                         ("max_open_files", 8), ("max_output_bytes", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"SandboxLimits.{name} must be an int >= {lo}, got {v!r}")

    def request(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpu_s"] = float(self.cpu_s if self.cpu_s is not None else self.timeout_s)
        return d


@dataclass
class SandboxResult:
    """What happened to one sandboxed program.

    Attributes:
        returncode: exit status; negative = killed by that signal (like ``subprocess``).
        stdout, stderr: captured text (UTF-8, invalid bytes replaced), each at most
            ``max_output_bytes`` bytes before decoding.
        timed_out: the wall-clock or CPU-time limit stopped it.
        reason: why it was stopped: "" (it exited by itself), "timeout" (wall or CPU limit),
            "memory" (MemoryError under the address-space limit), "output_limit",
            "file_size" (an uncaught "File too large"), "killed" (another signal),
            "setup_failed" (the limits could not be applied; the code did not run), or
            "sandbox_error" (the sandbox machinery failed; see ``detail``).
        detail: a human-readable line about ``reason``.
        duration_s: wall time seen by the server (from request to reaped child).
        cpu_s: user + system CPU of the program (and the children it waited for).
        mode: "forkserver" or "fresh".
        isolation: isolation features in force ("netns", "mountns", "readonly_fs",
            "private_dirs", "pidns", "ipcns", "nocaps", "seccomp", "uid", "userns").
    """

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    reason: str
    detail: str = ""
    duration_s: float = 0.0
    cpu_s: float = 0.0
    mode: str = ""
    isolation: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0."""
        return self.returncode == 0 and not self.reason


# ------------------------------------------------------------------------------ one server


#: (server arguments, isolate) -> the JSON view spec its first server reported.
_VIEW_CACHE: dict[tuple, str] = {}


def _check_packages(packages) -> tuple[str, ...]:
    if isinstance(packages, str) or not all(
            isinstance(p, str) and p.isidentifier() for p in packages):
        raise ValueError("sandbox packages must be a list of top-level module names "
                         f"(identifiers, e.g. ['numpy']), got {packages!r}")
    return tuple(packages)


def _pack(obj: dict) -> bytes:
    data = json.dumps(obj, ensure_ascii=True).encode()
    return struct.pack(">I", len(data)) + data


class ForkServer:
    """One fork-server process; :meth:`run` is not thread-safe (the pool hands it out)."""

    def __init__(self, disk_mb: int = SERVER_DISK_MB, start_timeout_s: float = 30.0,
                 isolate: bool = True, launcher: list[str] | None = None,
                 packages: tuple[str, ...] | None = None) -> None:
        """Start a server. ``isolate=False`` skips namespaces and the uid switch (rlimits
        only): for tests of the degraded mode, never for untrusted code. ``launcher``
        replaces ``[sys.executable]`` (e.g. ``["setpriv", "--reuid", "4242", ...,
        "/usr/bin/python3"]`` to test the unprivileged path). ``packages``: the third-party
        packages programs may import (default :data:`DEFAULT_PACKAGES`; those the server's
        interpreter cannot find are left out, see :attr:`packages`)."""
        packages = _check_packages(DEFAULT_PACKAGES if packages is None else packages)
        args = [*(launcher or [sys.executable]), "-I", str(SERVER_SCRIPT), str(int(disk_mb)),
                *(f"--preload={p}" for p in PRELOAD), "--packages=" + ",".join(packages)]
        # The view spec of an earlier server with the same interpreter and allow-list: later
        # servers (a pool's, and every fresh-mode one) skip computing it (~0.1 s).
        view_key = (tuple(args), isolate)
        cached = _VIEW_CACHE.get(view_key)
        if cached is not None:
            args.append("--view=" + cached)
        if not isolate:
            args.append("--no-isolation")
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
            close_fds=True,
            start_new_session=True,  # Ctrl-C in the terminal goes to the trainer, not here
        )
        self.owner_pid = os.getpid()
        try:
            hello = self._read(start_timeout_s)
        except BaseException:
            self.close()
            raise
        if not hello.get("ready"):
            self.close()
            raise SandboxError(f"sandbox server failed to start: {hello.get('error')}")
        self.features: tuple[str, ...] = tuple(hello.get("features", ()))
        self.notes: list[str] = list(hello.get("notes", ()))
        #: uid the programs of this server run as (None when not root).
        self.uid: int | None = hello.get("uid")
        #: allow-listed packages actually in the programs' view.
        self.packages: tuple[str, ...] = tuple(hello.get("packages", ()))
        if hello.get("view") and cached is None:
            _VIEW_CACHE[view_key] = json.dumps(hello["view"])
        #: how per-program limits (all processes together) are enforced: ``{"kind":
        #: "cgroup2" | "sampled", "detail": ...}``.
        self.limits: dict[str, str] = dict(hello.get("limits") or {})

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self, timeout_s: float) -> dict:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        buf = b""
        need = 4
        header = True
        while True:
            while len(buf) < need:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise SandboxError(f"sandbox server did not answer within {timeout_s:.1f} s")
                ready, _, _ = select.select([fd], [], [], remaining)
                if not ready:
                    continue
                chunk = os.read(fd, max(65536, need - len(buf)))
                if not chunk:
                    raise SandboxError(
                        f"sandbox server exited (status {self.proc.poll()}) before answering"
                    )
                buf += chunk
            if header:
                (need,) = struct.unpack(">I", buf[:4])
                buf = buf[4:]
                header = False
                continue
            return json.loads(buf[:need])

    def run(self, source: str, stdin: str, limits: SandboxLimits,
            private_input: str = "") -> SandboxResult:
        req = limits.request()
        req["source"] = source
        req["stdin"] = stdin
        private = private_input.encode()
        req["private_len"] = len(private)
        try:
            self.proc.stdin.write(_pack(req) + private)
            self.proc.stdin.flush()
        except OSError as exc:
            raise SandboxError(f"sandbox server is gone: {exc}") from exc
        reply = self._read(limits.timeout_s + REPLY_GRACE_S)
        if "error" in reply:
            raise SandboxError(f"sandbox server error: {reply['error']}")
        return SandboxResult(
            returncode=int(reply["returncode"]),
            stdout=reply["stdout"],
            stderr=reply["stderr"],
            timed_out=bool(reply["timed_out"]),
            reason=reply["reason"],
            detail=reply.get("detail", ""),
            duration_s=float(reply.get("duration_s", 0.0)),
            cpu_s=float(reply.get("cpu_s", 0.0)),
            isolation=self.features,
        )

    def kill(self) -> None:
        """Stop the server at once (its running program dies with it: parent-death signal)."""
        if os.getpid() == self.owner_pid and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.close()

    def close(self) -> None:
        """Stop the server (it kills nothing else: each program ended with its request)."""
        if self.proc.poll() is None and os.getpid() == self.owner_pid:
            try:
                self.proc.stdin.write(_pack({"op": "exit"}))
                self.proc.stdin.flush()
            except (OSError, ValueError):
                pass
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass


# ------------------------------------------------------------------------------ the pool


def _default_size() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(2, n)


class ForkServerPool:
    """``size`` fork servers handed out one per call; thread-safe; servers start lazily.

    A server that fails (dies, stops answering) is discarded and replaced on next use.
    """

    def __init__(self, size: int | None = None, disk_mb: int = SERVER_DISK_MB,
                 isolate: bool = True, packages: tuple[str, ...] | None = None) -> None:
        size = _default_size() if size is None else size
        self.packages = _check_packages(DEFAULT_PACKAGES if packages is None else packages)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"ForkServerPool size must be a positive int, got {size!r}")
        self.size = size
        self.disk_mb = disk_mb
        self.isolate = isolate
        self.owner_pid = os.getpid()
        self._idle: queue.LifoQueue[ForkServer | None] = queue.LifoQueue()
        for _ in range(size):
            self._idle.put(None)  # a slot; the server starts on first use
        self._all: list[ForkServer] = []
        self._lock = threading.Lock()
        self.closed = False

    def run(self, source: str, stdin: str, limits: SandboxLimits,
            private_input: str = "") -> SandboxResult:
        if self.closed:
            raise SandboxError("the fork-server pool is shut down")
        server = self._idle.get()
        try:
            server = self._revive(server)
            result = server.run(source, stdin, limits, private_input)
            result.mode = "forkserver"
            return result
        except BaseException:
            if server is not None:
                server.kill()  # mid-request (error, or an alarm in this thread): not reusable
                self._discard(server)
            server = None
            raise
        finally:
            self._idle.put(server)

    def _revive(self, server: ForkServer | None) -> ForkServer:
        """The idle slot's server, or a fresh one in its place when it is missing or dead."""
        if server is None or not server.alive:
            if server is not None:
                self._discard(server)
            server = ForkServer(self.disk_mb, isolate=self.isolate, packages=self.packages)
            with self._lock:
                self._all.append(server)
        return server

    def _discard(self, server: ForkServer) -> None:
        server.close()
        with self._lock:
            self._all = [s for s in self._all if s is not server]

    def warm_up(self) -> None:
        """Start every server now (instead of on first use)."""
        taken = [self._idle.get() for _ in range(self.size)]
        try:
            for k, server in enumerate(taken):
                if server is None or not server.alive:
                    if server is not None:
                        self._discard(server)
                    taken[k] = server = ForkServer(self.disk_mb, isolate=self.isolate, packages=self.packages)
                    with self._lock:
                        self._all.append(server)
        finally:
            for server in taken:
                self._idle.put(server)

    def features(self) -> tuple[str, ...]:
        """Isolation features of this pool's servers (starts one if none is running)."""
        return self._probe().features

    def sandbox_uids(self) -> list[int]:
        """uids the programs of the live servers run as (to audit leftovers)."""
        with self._lock:
            return [s.uid for s in self._all if s.uid is not None and s.alive]

    def _probe(self) -> ForkServer:
        server = self._idle.get()
        try:
            server = self._revive(server)
            return server
        finally:
            self._idle.put(server)

    def close(self) -> None:
        self.closed = True
        if os.getpid() != self.owner_pid:
            return  # a forked copy: the servers belong to the parent
        with self._lock:
            servers, self._all = self._all, []
        for s in servers:
            s.close()


_POOL: ForkServerPool | None = None
_POOL_LOCK = threading.Lock()


def default_pool() -> ForkServerPool:
    """The process-wide pool (created on first use; a forked child gets its own)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.closed or _POOL.owner_pid != os.getpid():
            _POOL = ForkServerPool()
        return _POOL


def shutdown_pool() -> None:
    """Stop the process-wide pool's servers (also runs at interpreter exit)."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None:
        pool.close()


atexit.register(shutdown_pool)


def _forget_pool_in_child() -> None:
    global _POOL, _POOL_LOCK
    _POOL = None  # the parent's servers and pipes are not ours
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def sandbox_features() -> tuple[str, ...]:
    """Isolation features a sandbox server gets on this machine (starts the default pool)."""
    return default_pool().features()


#: Features every fully isolated server has, in both modes (root, or an ordinary user).
REQUIRED_FEATURES = ("netns", "mountns", "minimal_fs", "readonly_fs", "private_dirs", "pidns",
                     "ipcns", "nocaps", "seccomp")
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
        notes: the server's own reasons (``ForkServer.notes``).
        limits: how the per-program limits over all processes are enforced: ``"cgroup2"``
            (kernel-enforced memory.max / pids.max, CPU from cpu.stat) or ``"sampled"`` (the
            server measures the process tree in /proc; see docs/rewards.md), "" when unknown.
        limits_detail: one line on it (the cgroup's path, or why there is none).
        packages: the allow-listed third-party packages in the programs' view.
    """

    features: tuple[str, ...]
    missing: tuple[str, ...]
    degraded: bool
    description: str
    notes: tuple[str, ...] = ()
    limits: str = ""
    limits_detail: str = ""
    packages: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"features": list(self.features), "missing": list(self.missing),
                "degraded": self.degraded, "description": self.description,
                "notes": list(self.notes), "limits": self.limits,
                "limits_detail": self.limits_detail, "packages": list(self.packages)}


def isolation_of(features, notes=(), limits=None, packages=()) -> SandboxIsolation:
    """The :class:`SandboxIsolation` for a server's ``features`` (pure; see
    :func:`sandbox_isolation`); ``limits`` is ``ForkServer.limits``."""
    limits = dict(limits or {})
    features = tuple(features)
    missing = [f for f in REQUIRED_FEATURES if f not in features]
    if "uid" not in features and "userns" not in features:
        missing.append("uid|userns")
    mode = ("root: programs under a uid of their own" if "uid" in features else
            "unprivileged: programs in a user namespace" if "userns" in features else
            "no namespaces")
    if missing:
        why = "; ".join(notes) if notes else "no reason given"
        desc = (f"sandbox isolation DEGRADED: missing {', '.join(missing)} ({mode}; {why}); "
                "untrusted code is less contained, see docs/rewards.md")
    else:
        desc = f"sandbox isolation: full ({mode}; {', '.join(features)})"
    if limits.get("kind"):
        desc += f"; per-program limits: {limits['kind']}"
    return SandboxIsolation(features, tuple(missing), bool(missing), desc, tuple(notes),
                            limits.get("kind", ""), limits.get("detail", ""), tuple(packages))


def sandbox_isolation(pool: ForkServerPool | None = None) -> SandboxIsolation:
    """The isolation of ``pool``'s servers (default: the process-wide pool; starts one server).

    For the trainer: call once at start when a reward uses the sandbox, write ``as_dict()``
    into the run summary, log ``description`` and warn when ``degraded``.
    """
    server = (pool or default_pool())._probe()
    return isolation_of(server.features, server.notes, server.limits, server.packages)


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
    pool: ForkServerPool | None = None,
) -> SandboxResult:
    """Run Python ``source`` in the sandbox and return what happened; never runs it unconfined.

    Args:
        source: a Python program (run as ``__main__``).
        stdin: text fed to its standard input.
        private_input: text the program can read from file descriptor 3
            (:data:`PRIVATE_FD`), delivered only *after* its process started: it is not in
            the memory the program starts with, so a process the program forks before reading
            it (the code verifier's untrusted solver) can never find it. Written by the server
            as the program reads; at most what fits in memory.
        timeout_s, memory_mb, cpu_s, file_size_mb, max_processes, max_open_files,
        max_output_bytes: limits, see :class:`SandboxLimits`.
        mode: "auto" (fork-server pool, falling back to a fresh interpreter if the pool fails),
            "forkserver" (pool only) or "fresh" (one new server process for this program).
        pool: a specific :class:`ForkServerPool` (default: the process-wide one).

    Returns:
        a :class:`SandboxResult`. A failure of the sandbox machinery itself in "auto" mode after
        the fallback also failed gives ``reason="sandbox_error"`` and returncode -1 rather than
        an exception (so verifiers score 0 and go on).

    Raises:
        TypeError / ValueError: bad arguments (the message names the argument).
        SandboxError: only in "forkserver" / "fresh" mode, when the machinery failed.
    """
    if not isinstance(source, str):
        raise TypeError(f"source must be a str, got {type(source).__name__}")
    if not isinstance(stdin, str):
        raise TypeError(f"stdin must be a str, got {type(stdin).__name__}")
    if not isinstance(private_input, str):
        raise TypeError(f"private_input must be a str, got {type(private_input).__name__}")
    if mode not in ("auto", "forkserver", "fresh"):
        raise ValueError(f"mode must be 'auto', 'forkserver' or 'fresh', got {mode!r}")
    limits = SandboxLimits(
        timeout_s=timeout_s, cpu_s=cpu_s, memory_mb=memory_mb, file_size_mb=file_size_mb,
        max_processes=max_processes, max_open_files=max_open_files,
        max_output_bytes=max_output_bytes,
    )
    # JSON cannot carry lone surrogates; replace them rather than fail.
    source = source.encode("utf-8", "replace").decode("utf-8")
    stdin = stdin.encode("utf-8", "replace").decode("utf-8")
    private_input = private_input.encode("utf-8", "replace").decode("utf-8")
    if mode in ("auto", "forkserver"):
        try:
            return (pool or default_pool()).run(source, stdin, limits, private_input)
        except SandboxError as exc:
            if mode == "forkserver":
                raise
            first_error = exc
    else:
        first_error = None
    try:
        server = ForkServer()
        try:
            result = server.run(source, stdin, limits, private_input)
        finally:
            server.close()
        result.mode = "fresh"
        if first_error is not None:
            result.detail = (result.detail + f" (fork server failed: {first_error})").strip()
        return result
    except SandboxError as exc:
        if mode == "fresh":
            raise
        return SandboxResult(-1, "", "", False, "sandbox_error",
                             f"fork server: {first_error}; fresh: {exc}", mode="fresh")
