"""The judge server: one long-lived judge sandbox per pool slot that runs many programs' tests.

Why: a judge-path item used to start two fresh interpreters in two fresh sandboxes (solver and
judge), ~29 ms of CPU on the 2-core machine the targets are set on. The program must get a
fresh process (its code runs there); the judge runs only the dataset's setup and tests and the
plain values the bounded decoder rebuilds from what the solver sends, so it can serve one
request after another. Each request brings its own fresh solver sandbox and its own two pipes:
the host creates them, hands the judge's ends over the server's socket pair (SCM_RIGHTS) with the
request, and closes its copies; nothing a solver writes can outlive its request, reach a later
one or reach the host's side of the socket.

Isolation between the server and programs is what the judge sandbox had before: its own
sandbox (namespaces, seccomp, read-only view) that no program process is in, verdicts on the
server's fd 4 that only it holds. Between requests a test gets a fresh namespace, channel and
exception table; modules the tests imported (from the read-only view) stay loaded. A request
past its deadline or CPU limit, or a server that dies, retires the server (the next request
starts a new one); so does serving :data:`MAX_REQUESTS` requests or limits of another shape.
"""

from __future__ import annotations

import os
import select
import socket
import time
import weakref
from dataclasses import replace

from grpolab.rewards.sandbox.limits import SandboxError, SandboxLimits
from grpolab.rewards.sandbox.protocol import FrameReader
from grpolab.rewards.sandbox.runner import (MAX_REPORT_BYTES, Launcher, Proc, discard, start)

__all__ = ["JudgeServer", "MAX_REQUESTS", "ServerRequest", "server_key", "server_pids"]

#: Requests one server serves before it is replaced (bounds what tests leave in its modules).
MAX_REQUESTS = 256
#: CPU seconds the server may use in its whole life (each request is held to its own limit by
#: sampling; this only backs that up).
LIFETIME_CPU_S = 3600
START_TIMEOUT_S = 30.0


_LIVE: "weakref.WeakSet[JudgeServer]" = weakref.WeakSet()


def server_pids() -> list[int]:
    """bubblewrap pids of this process's live judge servers (audits for leftover program
    processes leave them out: they hold no program)."""
    return [s.proc.popen.pid for s in list(_LIVE) if not s.dead]


def server_key(limits: SandboxLimits) -> tuple:
    """What a server's sandbox and rlimits depend on (all but the CPU limit)."""
    r = limits.rlimits()
    r.pop("RLIMIT_CPU", None)
    return (limits.tmp_mb(), tuple(sorted(r.items())))


class _DoneReader(FrameReader):
    """A request's report frames; ``{"done": True}`` ends the request (not kept)."""

    def __init__(self, cap: int, request: "ServerRequest") -> None:
        super().__init__(cap)
        self.request = request

    def feed(self, chunk: bytes) -> bool:
        ok = super().feed(chunk)
        if self.records and self.records[-1] == {"done": True}:
            self.records.pop()
            self.request.returncode = 0  # the request is over; the server lives on
        return ok


class ServerRequest(Proc):
    """The judge server seen through one request: its report, stdout and stderr read for this
    request, its CPU counted from the request's start; killing it kills the server."""

    cpu_base: float = 0.0

    def sample_cpu(self) -> None:
        if not self.child_pid or self.returncode is not None:
            return
        total = _cpu_of(self.child_pid)
        if total is not None:
            self.cpu_s = max(self.cpu_s, total - self.cpu_base)


def _cpu_of(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class JudgeServer:
    """One judge server sandbox (see the module doc). ``start`` raises SandboxError when the
    server does not come up."""

    def __init__(self, launcher: Launcher, limits: SandboxLimits, user: int | None) -> None:
        self.key = server_key(limits)
        self.served = 0
        self.dead = False
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = ours
        server_limits = replace(limits, cpu_s=float(LIFETIME_CPU_S),
                                timeout_s=max(limits.timeout_s, float(LIFETIME_CPU_S)))
        try:
            self.proc = start(launcher, server_limits, None, user, extra=(theirs.fileno(),))
        finally:
            theirs.close()
        self.proc.load(launcher, "judge_server", server_limits, b"")
        try:
            self._boot()
        except BaseException:
            self.close()
            raise
        _LIVE.add(self)

    def _boot(self) -> None:
        """Write the boot request, read the server's pid and its first ``started`` frame."""
        p, deadline = self.proc, time.monotonic() + START_TIMEOUT_S
        os.set_blocking(p.fds["req"], True)
        try:
            _write_all(p.fds["req"], p.request)
        finally:
            os.close(p.fds.pop("req"))
        os.close(p.fds.pop("stdin"))
        p.request = b""
        boot = FrameReader(MAX_REPORT_BYTES)
        info, info_fd = bytearray(), p.fds.pop("info")
        watch = [p.fds["report"], info_fd]
        try:
            while not (p.child_pid and boot.records):
                left = deadline - time.monotonic()
                if left <= 0 or p.popen.poll() is not None or p.fds["report"] not in watch:
                    raise SandboxError("the judge server did not start")
                r, _, _ = select.select(watch, [], [], left)
                for fd in r:
                    chunk = os.read(fd, 1 << 16)
                    if not chunk:
                        watch.remove(fd)
                    elif fd == info_fd:
                        info += chunk
                        _parse_pid(p, info)
                    else:
                        boot.feed(chunk)
        finally:
            os.close(info_fd)
        if boot.records[0] != {"started": True}:
            raise SandboxError("the judge server did not start")

    def alive(self) -> bool:
        """Not retired and its process still running (checked before every reuse; a server
        that dies anyway before it starts a request makes the pool re-run that request on a
        new one, see ``SandboxPool.run_judged``)."""
        if self.dead or self.proc.popen.poll() is not None:
            self.dead = True
            return False
        return True

    def submit(self, setup: str, tests: list, peer_ends: list[int]) -> ServerRequest:
        """Send one request with the judge's ends of a fresh solver's channel (then closed
        here); the returned view is what :func:`~.runner.supervise` runs as the primary."""
        from grpolab.rewards.sandbox.harness import dumps  # noqa: PLC0415 - the judge's own encoder

        body = dumps({"setup": setup, "tests": list(tests)}).encode("ascii")
        try:
            self.sock.sendmsg([len(body).to_bytes(4, "big")],
                              [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fd_bytes(peer_ends))])
            self.sock.sendall(body)
        except OSError as exc:
            self.dead = True
            raise SandboxError(f"the judge server is gone: {exc}") from exc
        finally:
            for fd in peer_ends:
                os.close(fd)
        p = self.proc
        view = ServerRequest(p.popen, b"", b"", FrameReader(0))
        view.report = _DoneReader(MAX_REPORT_BYTES, view)
        # the SAME dict as the server's: each descriptor is owned once (whoever closes one
        # pops it, so nothing is closed twice -- a second close could hit a descriptor number
        # the prestarting thread has reused for another sandbox's pipe)
        view.fds = p.fds
        view.child_pid = p.child_pid
        view.persistent = True
        view.seen = True
        view.cpu_base = _cpu_of(p.child_pid) or 0.0
        self.served += 1
        return view

    def after(self, view: ServerRequest) -> None:
        """Retire the server when its request did not end cleanly (it was killed, died, or
        did not say "done", which it says only once ready for the next request) or it has
        served enough."""
        if view.popen.returncode is not None:  # reaped through the view: the server is gone
            self.proc.returncode = view.popen.returncode
        if view.killed or view.returncode != 0 or view.over or self.served >= MAX_REQUESTS:
            self.close()

    def close(self) -> None:
        self.dead = True
        try:
            self.sock.close()
        except OSError:
            pass
        self.proc.persistent = False
        self.proc.killed = self.proc.killed or "retired"
        discard([self.proc])


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]


def _fd_bytes(fds: list[int]) -> bytes:
    import array  # noqa: PLC0415

    return array.array("i", fds).tobytes()


def _parse_pid(p: Proc, info: bytearray) -> None:
    import json  # noqa: PLC0415

    try:
        pid = json.loads(bytes(info)).get("child-pid")
    except ValueError:
        return
    if isinstance(pid, int) and pid > 1:
        p.child_pid = pid
