"""The pool: at most ``size`` sandboxes at once, each a fresh bubblewrap sandbox per process.

A "slot" is a permit to run, plus, as root, the uid its sandboxes run as (``UID_BASE + slot``;
never the host's uid 0), plus its long-lived judge server. Three kinds of run:

* :meth:`SandboxPool.run` -- one program (``run_sandboxed``);
* :meth:`SandboxPool.run_fast` -- the code verifier's fast path: one sandbox reports values;
* :meth:`SandboxPool.run_judged` -- the judge path: a solver sandbox and a judge sandbox,
  joined by two pipes that carry plain data only; the verdict comes on the judge's fd 4.
"""

from __future__ import annotations

import os
import queue
import signal
import stat
import threading
from dataclasses import dataclass

from grpolab.rewards.sandbox.limits import SandboxError, SandboxLimits, SandboxResult
from grpolab.rewards.sandbox.judge_server import JudgeServer, server_key
from grpolab.rewards.sandbox.prestart import Key, Prestarter
from grpolab.rewards.sandbox.runner import DEFAULT_PACKAGES, Launcher, Proc, discard, start, supervise

__all__ = ["FEATURES", "SandboxPool", "UID_BASE", "default_size"]

#: As root, slot k's sandboxes run as uid UID_BASE + k (never as the host's uid 0).
UID_BASE = 1_500_000
#: Isolation features every sandbox has (see docs/sandbox.md).
FEATURES = ("bwrap", "userns", "netns", "mountns", "minimal_fs", "readonly_fs", "private_dirs",
            "pidns", "ipcns", "nocaps", "seccomp", "fresh_process", "judge_process")


def default_size() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(2, n)


def _world_readable(paths) -> bool:
    """Whether a user without any privilege can reach every path (each ancestor o+x)."""
    for p in paths:
        parts = os.path.realpath(p).strip("/").split("/")
        for i in range(1, len(parts) + 1):
            try:
                mode = os.stat("/" + "/".join(parts[:i])).st_mode
            except OSError:
                return False
            need = stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH
            if not mode & need:
                return False
    return True


@dataclass
class Judged:
    """What a judge-path run gives: the judge's verdict records and both sandboxes' results."""

    records: list
    judge: SandboxResult
    solver: SandboxResult


class SandboxPool:
    """Runs sandboxed processes, at most ``size`` runs at once (thread-safe).

    ``python``: interpreter of the programs (default: this one). ``user``: "auto" or None (as
    root, a uid of its own per slot, ``UID_BASE + slot``; else this process's uid) or a uid > 0
    (root only, e.g. 4242 to test the unprivileged path). Programs never run as the host's uid
    0 (:meth:`_choose_uids`). ``packages``: the import allow-list.
    """

    def __init__(self, size: int | None = None, python: str | None = None, user="auto",
                 packages: tuple[str, ...] | None = None, disk_mb: int | None = None,
                 isolate: bool = True) -> None:
        """``disk_mb`` (ignored: /tmp's size follows each run's limits) and ``isolate`` are
        the fork server's arguments; ``isolate=False`` is refused (there is no unisolated mode)."""
        if isolate is not True:
            raise ValueError("SandboxPool(isolate=False): the sandbox has no unisolated mode "
                             "(docs/sandbox.md)")
        size = default_size() if size is None else size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"SandboxPool size must be a positive int, got {size!r}")
        packages = DEFAULT_PACKAGES if packages is None else packages
        if isinstance(packages, str) or not all(
                isinstance(p, str) and p.isidentifier() for p in packages):
            raise ValueError("sandbox packages must be a list of top-level module names "
                             f"(identifiers, e.g. ['numpy']), got {packages!r}")
        if not (user in ("auto", None) or (isinstance(user, int) and not isinstance(user, bool)
                                           and user > 0)):
            raise ValueError(f"SandboxPool user must be 'auto', None or a uid > 0, got {user!r} "
                             "(programs never run as the host's root)")
        self.size, self.python, self.packages = size, python, tuple(packages)
        self.user = user
        self.owner_pid = os.getpid()
        self.closed = False
        self._slots: queue.Queue[int] = queue.Queue()
        for k in range(size):
            self._slots.put(k)
        self._lock = threading.Lock()
        self._launcher: Launcher | None = None
        self._prestart: Prestarter | None = None
        self._judges: dict[int, JudgeServer] = {}
        self._judges_pid = os.getpid()
        self._uids: list[int | None] | None = None
        #: PID-namespace inodes of every sandbox started (audits: nothing may outlive a run).
        self.pid_namespaces: set[int] = set()
        self.notes: list[str] = []

    # -------------------------------------------------------------- setup

    def launcher(self) -> Launcher:
        with self._lock:
            if self.closed:
                raise SandboxError("the sandbox pool is shut down")
            if self._launcher is None:
                launcher = Launcher(self.python, None, self.packages)
                try:
                    uids = self._choose_uids(launcher)
                except BaseException:
                    launcher.close()  # no launcher without its uids: every call refuses again
                    raise
                self._launcher, self._uids = launcher, uids
                if not launcher.landlock:
                    self.notes.append(
                        "no Landlock (kernel < 5.13, disabled at boot, or no _ctypes in the "
                        "programs' interpreter): programs can read their mount tables, which "
                        "name the host folders the view is bound from (docs/sandbox.md)")
                self._prestart = Prestarter(self._start_key)
            return self._launcher

    def _choose_uids(self, launcher: Launcher) -> list[int | None]:
        """The host uid of each slot's sandboxes: never 0. As root, ``UID_BASE + slot`` (or the
        ``user`` asked for); the view is restaged (folders mirrored into the staging tree) when
        that uid could not read it, and refused when even that does not help. Not root: this
        process's uid (None), mapped to 65534 in each sandbox's user namespace."""
        if os.geteuid() != 0:
            if isinstance(self.user, int) and not isinstance(self.user, bool):
                raise SandboxError(f"SandboxPool(user={self.user}): only root can run the "
                                   "sandboxes as another user; leave user='auto'")
            return [None] * self.size
        uids = ([self.user] * self.size if isinstance(self.user, int)
                else [UID_BASE + k for k in range(self.size)])
        srcs = [s for s, _ in launcher.staged["binds"]] + [launcher.bwrap]
        if not _world_readable(srcs):
            launcher.restage()
            srcs = [s for s, _ in launcher.staged["binds"]] + [launcher.bwrap]
        if not _world_readable(srcs):
            bad = [s for s in srcs if not _world_readable([s])]
            raise SandboxError(
                "the code sandbox never runs programs as the host's root, and the uid it runs "
                f"them as cannot read {bad[:3]} (nor a copy staged under "
                f"{os.path.dirname(launcher.staged['root'])}): make the interpreter, its "
                "standard library and bubblewrap readable by other users (chmod o+rx on each "
                "folder above them), or point TMPDIR at a folder other users can enter")
        self.notes.append(f"programs run as host uid {uids[0]}"
                          + (f"..{uids[-1]}" if uids[-1] != uids[0] else "")
                          + (" (view mirrored into the staging tree: the interpreter's "
                             "folders are not readable by other users)"
                             if launcher.staged.get("mirrored") else ""))
        return uids

    def idle_sandbox_pids(self) -> list[int]:
        """bubblewrap pids of the sandboxes that hold no program: prestarted ones no program has
        used yet (:mod:`.prestart`) and the judge servers (:mod:`.judge_server`). Audits for
        leftover processes leave these (and their children) out."""
        prestart = self._prestart
        with self._lock:
            servers = [s.proc.popen.pid for s in self._judges.values() if not s.dead]
        return (prestart.idle_pids() if prestart is not None else []) + servers

    def sandbox_uids(self) -> list[int]:
        """Host uids programs run as (empty when they run as this process's uid)."""
        self.launcher()
        return sorted({u for u in (self._uids or ()) if u is not None})

    def host_uids(self) -> list[int]:
        """The host uids programs run as: a uid per slot as root, else this process's uid."""
        return self.sandbox_uids() or [os.getuid()]

    def features(self) -> tuple[str, ...]:
        """Isolation features in force (runs one probe program; () when none can run)."""
        try:
            r = self.run("print(6 * 7)", "", SandboxLimits(timeout_s=30.0))
        except SandboxError as exc:
            self.notes.append(str(exc))
            return ()
        if r.stdout != "42\n":
            self.notes.append(f"the probe program failed: {r.reason} {r.detail} "
                              f"{r.stderr[-300:]}")
            return ()
        return self.isolation_features()

    def warm_up(self) -> None:
        """Stage the view and prestart one sandbox per slot for the default limits."""
        self.launcher()
        key = ("one", SandboxLimits().tmp_mb())
        for slot in range(self.size):
            for _ in range(self._prestart.depth if self._prestart is not None else 0):
                self._prestart.fill(slot, key)

    def _probe(self) -> "SandboxPool":
        return self

    @property
    def limits(self) -> dict[str, str]:
        return {"kind": "rlimit+seccomp", "detail": "one process per program (fork refused); "
                "RLIMIT_AS + /tmp tmpfs within memory_mb; RLIMIT_CPU + 20 ms CPU sampling; "
                "wall-clock SIGKILL of the PID namespace"}

    def close(self) -> None:
        self.closed = True
        if os.getpid() != self.owner_pid:
            return
        with self._lock:
            launcher, self._launcher = self._launcher, None
            prestart, self._prestart = self._prestart, None
            judges, self._judges = list(self._judges.values()), {}
        if prestart is not None:
            prestart.close()
        for server in judges:
            server.close()
        if launcher is not None:
            launcher.close()

    # -------------------------------------------------------------- runs

    def _start_key(self, slot: int, key: Key) -> list[Proc]:
        """Start a fresh sandbox for ``key``: ("one", tmp_mb), or ("solver", tmp_mb) with two
        fresh pipes to a judge whose ends it carries in ``extra_fds`` (from the solver, to the
        solver) until they are handed to the judge server."""
        launcher = self.launcher()
        user = (self._uids or [None])[slot]
        limits = SandboxLimits(memory_mb=max(16, 4 * key[1]), file_size_mb=key[1])  # tmp_mb() = key[1]
        if key[0] == "one":
            return [start(launcher, limits, None, user)]
        s2j_r, s2j_w = os.pipe()
        j2s_r, j2s_w = os.pipe()
        try:
            solver = start(launcher, limits, (j2s_r, s2j_w), user)
        except BaseException:
            for fd in (s2j_r, j2s_w):
                os.close(fd)
            raise
        finally:
            for fd in (j2s_r, s2j_w):
                os.close(fd)
        solver.extra_fds = [s2j_r, j2s_w]
        return [solver]

    def _judge_server(self, slot: int, limits: SandboxLimits) -> JudgeServer:
        """The slot's judge server for ``limits`` (started, or replaced, when needed). A forked
        child starts its own servers: its parent's belong to the parent (their socket copies
        are closed here, the parent's servers live on)."""
        with self._lock:
            if self._judges_pid != os.getpid():
                for inherited in self._judges.values():
                    inherited.sock.close()
                self._judges, self._judges_pid = {}, os.getpid()
            server = self._judges.get(slot)
        if server is not None and server.alive() and server.key == server_key(limits):
            return server
        if server is not None:
            server.close()
        launcher, user = self.launcher(), (self._uids or [None])[slot]
        # started on the pool's own long-lived thread: --die-with-parent follows that thread
        prestart = self._prestart
        server = (prestart.call(lambda: JudgeServer(launcher, limits, user)) if prestart
                  else JudgeServer(launcher, limits, user))
        with self._lock:
            if self.closed:
                server.close()
                raise SandboxError("the sandbox pool is shut down")
            self._judges[slot] = server
        return server

    def _sandboxes(self, slot: int, kind: str, limits: SandboxLimits) -> list[Proc]:
        """Fresh, never-used sandboxes for one run: the slot's prestarted ones when they fit
        ``limits``, else started now (see :mod:`.prestart`)."""
        self.launcher()
        key = (kind, limits.tmp_mb())
        prestart = self._prestart
        procs = prestart.take(slot, key) if prestart is not None else None
        return procs if procs is not None else self._start_key(slot, key)

    def _record_ns(self, procs: list[Proc]) -> None:
        for p in procs:
            if p.child_pid:
                try:
                    self.pid_namespaces.add(os.stat(f"/proc/{p.child_pid}/ns/pid").st_ino)
                except OSError:
                    pass

    def _go(self, procs: list[Proc], limits, primary: Proc) -> float:
        def seen():
            self._record_ns(procs)
        return supervise(procs, limits, primary, on_start=seen)

    def run(self, source: str, stdin: str, limits: SandboxLimits,
            private_input: str = "") -> SandboxResult:
        slot = self._slots.get()
        procs: list[Proc] = []
        try:
            procs = self._sandboxes(slot, "one", limits)
            [p] = procs
            p.load(self.launcher(), "program", limits, stdin.encode(),
                   private_input.encode(), source=source)
            wall = self._go([p], limits, p)
            return result_of(p, limits, wall, self.isolation_features())
        finally:
            discard(procs)
            self._slots.put(slot)

    def run_fast(self, program: str, setup: str, exprs: list[str], stdin: str,
                 limits: SandboxLimits) -> tuple[SandboxResult, list]:
        slot = self._slots.get()
        procs: list[Proc] = []
        try:
            procs = self._sandboxes(slot, "one", limits)
            [p] = procs
            p.load(self.launcher(), "fast", limits, stdin.encode(), source=program,
                   setup=setup, exprs=list(exprs))
            wall = self._go([p], limits, p)
            return result_of(p, limits, wall, self.isolation_features()), p.report.records
        finally:
            discard(procs)
            self._slots.put(slot)

    #: Times a judge-path item is re-run when its judge server was gone before the request
    #: started (another program's damage must never cost an honest program its score).
    JUDGE_RETRIES = 2

    def run_judged(self, program: str, setup: str, tests: list[str], stdin: str,
                   limits: SandboxLimits, judge_setup: str = "") -> Judged:
        """A fresh solver sandbox runs ``program``; the slot's judge server runs ``tests``
        against it over two fresh pipes (see :mod:`.judge_server`). A server that turns out
        dead before it starts the request (it never wrote the request's ``started`` frame) is
        replaced and the whole item re-run with a fresh solver. ``judge_setup`` runs in the
        judge only, after ``setup`` (the solver never sees it)."""
        slot = self._slots.get()
        try:
            for _ in range(self.JUDGE_RETRIES + 1):
                judged = self._judged_once(slot, program, setup, tests, stdin, limits,
                                           judge_setup)
                if judged is not None:
                    return judged
            raise SandboxError(f"the judge server died before starting the request "
                               f"{self.JUDGE_RETRIES + 1} times in a row")
        finally:
            self._slots.put(slot)

    def _judged_once(self, slot: int, program: str, setup: str, tests: list[str], stdin: str,
                     limits: SandboxLimits, judge_setup: str = "") -> Judged | None:
        """One try of :meth:`run_judged`; None when the server was gone before the request."""
        procs: list[Proc] = []
        try:
            procs = self._sandboxes(slot, "solver", limits)
            [solver] = procs
            solver.load(self.launcher(), "solver", limits, stdin.encode(), source=program,
                        setup=setup)
            server = self._judge_server(slot, limits)
            ends, solver.extra_fds = solver.extra_fds, []
            try:
                view = server.submit(setup + ("\n" + judge_setup if judge_setup else ""),
                                     tests, ends)
            except SandboxError:
                server.close()
                return None
            try:
                wall = self._go([solver, view], limits, view)
            finally:
                server.after(view)
            if not view.report.records:
                server.close()
                return None  # it never started this request: not this program's doing
            feats = self.isolation_features()
            return Judged(view.report.records, result_of(view, limits, wall, feats),
                          result_of(solver, limits, wall, feats))
        finally:
            discard(procs)  # no-op for sandboxes supervise already reaped and closed

    def isolation_features(self) -> tuple[str, ...]:
        """:data:`FEATURES`, plus "uid" (a host uid of their own per slot) and "landlock" (no
        mount table readable: docs/sandbox.md) where they hold."""
        launcher = self._launcher
        return (FEATURES + (("uid",) if any(u is not None for u in (self._uids or ())) else ())
                + (("landlock",) if launcher is not None and launcher.landlock else ()))


def result_of(p: Proc, limits: SandboxLimits, wall: float, features) -> SandboxResult:
    """The :class:`SandboxResult` of a finished :class:`Proc` (see SandboxResult.reason)."""
    recs = p.report.records
    started = bool(recs) and recs[0] == {"started": True}
    rc = p.returncode if p.returncode is not None else -9
    if started and 128 < rc < 128 + 65:
        rc = -(rc - 128)  # bubblewrap passes a signal death on as 128 + signal
    out = bytes(p.out["stdout"]).decode("utf-8", "replace")
    err = bytes(p.out["stderr"]).decode("utf-8", "replace")
    labels = [r.get("exit") for r in recs[1:2] if isinstance(r, dict)] if p.killed != "timeout" else []
    # a SIGKILL the host did not send comes from the kernel (RLIMIT_CPU): the program, PID 1
    # of its namespace, cannot SIGKILL itself
    cpu_kill = rc == -9 and p.killed in ("", "peer_done") and p.cpu_s >= 0.5 * limits.cpu_limit_s
    if cpu_kill:  # the kernel's own (exact) accounting reached RLIMIT_CPU = ceil(cpu_s)
        p.cpu_s = max(p.cpu_s, float(limits.rlimits()["RLIMIT_CPU"]))
    if p.killed == "timeout" or cpu_kill:
        reason = "timeout"
    elif p.over.startswith("/tmp"):
        reason = "file_size"
    elif p.over:
        reason = "output_limit"
    elif not started:
        reason = "setup_failed" if p.child_pid else "sandbox_error"
    elif labels and labels[0] in ("memory", "file_size"):
        reason = labels[0]
    elif rc < 0 and p.killed != "peer_done":
        reason = "killed"
    else:
        reason = ""
    detail = ""
    if reason == "timeout":
        detail = (f"CPU time over {limits.cpu_limit_s:g} s" if p.cpu_s > limits.cpu_limit_s
                  or cpu_kill else f"wall-clock limit of {limits.timeout_s:g} s")
    elif reason == "killed":
        try:
            detail = f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            detail = f"killed by signal {-rc}"
    elif reason == "file_size" and p.over:
        detail = p.over
    elif reason == "output_limit":
        detail = (p.over if p.over.startswith("report") else
                  f"output over {limits.max_output_bytes} bytes")
    elif reason in ("sandbox_error", "setup_failed"):
        detail = ("the sandbox did not start: " if reason == "sandbox_error" else
                  "the interpreter could not start under these limits: ") + err.strip()[-300:]
        err = "" if reason == "sandbox_error" else err
    return SandboxResult(rc, out, err, reason == "timeout", reason, detail, wall, p.cpu_s,
                         "bwrap", tuple(features))
