"""Per-program limits and what a sandboxed run returns (:class:`SandboxLimits`,
:class:`SandboxResult`). How each limit is enforced: docs/sandbox.md ("Limits")."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["REASONS", "SandboxError", "SandboxLimits", "SandboxResult"]

REASONS = ("", "timeout", "memory", "output_limit", "file_size", "killed", "setup_failed",
           "sandbox_error")


class SandboxError(RuntimeError):
    """The sandbox itself failed (a server would not start or answer), not the program."""


@dataclass(frozen=True)
class SandboxLimits:
    """Per-program limits (validated).

    Attributes:
        timeout_s: wall-clock limit, seconds (the whole namespace is SIGKILLed at it).
        cpu_s: CPU-time limit of the program (ONE process: new processes are refused, threads
            count): sampled every 20 ms and killed past it, plus RLIMIT_CPU (whole seconds
            rounded up); None = ``timeout_s``.
        memory_mb: everything the program can hold: its address space (RLIMIT_AS) plus its
            private /tmp (a tmpfs of :meth:`tmp_mb`), together at most this. Socket buffers,
            SysV objects, memfds and pipes are refused (docs/sandbox.md).
        file_size_mb: largest file the program may write (RLIMIT_FSIZE), and the size of its
            /tmp (capped at a quarter of ``memory_mb``).
        max_processes: threads the program may have at once, itself included (RLIMIT_NPROC in
            its own user namespace; new processes are refused in any case).
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

    @property
    def cpu_limit_s(self) -> float:
        return float(self.cpu_s if self.cpu_s is not None else self.timeout_s)

    def tmp_mb(self) -> int:
        """Size of the program's /tmp (tmpfs), MB: ``file_size_mb``, at most memory_mb // 4."""
        return max(1, min(self.file_size_mb, self.memory_mb // 4))

    def rlimits(self) -> dict[str, int]:
        """The rlimits the sandbox's bootstrap applies (soft = hard) before any program code."""
        return {
            "RLIMIT_AS": (self.memory_mb - self.tmp_mb()) << 20,
            "RLIMIT_CPU": int(math.ceil(self.cpu_limit_s)),
            "RLIMIT_FSIZE": self.file_size_mb << 20,
            "RLIMIT_NOFILE": self.max_open_files,
            "RLIMIT_NPROC": self.max_processes + 1,  # + bubblewrap's setup process
            "RLIMIT_CORE": 0,
            "RLIMIT_MEMLOCK": 0,
            "RLIMIT_MSGQUEUE": 0,
        }


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
            "file_size" (an uncaught "File too large", or /tmp holding more files than
            ``runner.MAX_TMP_FILES``: then ``detail`` says so), "killed" (another signal),
            "setup_failed" (the limits could not be applied; the code did not run), or
            "sandbox_error" (the sandbox machinery failed before the program started; see
            ``detail``; a program cannot produce this one). "memory" and "file_size" come from
            the program's own process, so a program can claim them for itself (labels only).
        detail: a human-readable line about ``reason``.
        duration_s: wall time seen by the server (from request to reaped child).
        cpu_s: user + system CPU of the program's one process (all its threads).
        mode: "bwrap" (a fresh bubblewrap sandbox per program; the only mode).
        isolation: isolation features in force (see :data:`FEATURES`).
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
