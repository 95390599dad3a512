"""Launch and supervise sandboxed processes: one fresh bubblewrap sandbox per process.

:class:`Launcher` holds what every launch shares (the interpreter, the staged view, the seccomp
filter, the harness code) and builds the ``bwrap`` command line; :func:`supervise` feeds the
processes their input, reads their output and reports with caps, samples their CPU time, and
kills each sandbox as one unit at the deadline: SIGKILL to the program (PID 1 of its own PID
namespace, so the kernel kills everything in it) and to bubblewrap's process group.

The sandboxed interpreter starts as ``python -I -S -c BOOT fd...``: :data:`BOOT` moves the
descriptors it was given to 3 (request, then a program's private input), 4 (reports), 5 and 6
(the judge<->solver channel), reads the request (a marshal'ed dict the host wrote; the host is
the only writer), loads the harness (:mod:`grpolab.rewards.sandbox.harness`) and calls its
``boot``, which applies the rlimits before any program code runs.
"""

from __future__ import annotations

import json
import marshal
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from grpolab.rewards.sandbox import seccomp, view
from grpolab.rewards.sandbox.limits import SandboxError, SandboxLimits
from grpolab.rewards.sandbox.protocol import FrameReader

__all__ = ["BOOT", "Launcher", "Proc", "discard", "spawn", "start", "supervise"]

HARNESS = Path(__file__).with_name("harness.py")
VIEW_SCRIPT = Path(__file__).with_name("view.py")
#: Third-party packages programs may import (when installed): bound read-only into the view.
DEFAULT_PACKAGES: tuple[str, ...] = ("numpy",)
#: Marks every sandbox's command line (audits look for it).
MARK = "#grpolab-sandbox"
BOOT = MARK + r"""
import posix as os,sys,marshal
a=[int(x) for x in sys.argv[1:]]
t=max(a)+1
for k,f in enumerate(a):
 if f>=0:os.dup2(f,t+k);os.close(f)
for k,f in enumerate(a):
 if f>=0:os.dup2(t+k,3+k);os.close(t+k)
def rd(n):
 b=b''
 while len(b)<n:
  c=os.read(3,n-len(b))
  if not c:raise SystemExit(121)
  b+=c
 return b
q=marshal.loads(rd(int.from_bytes(rd(4),'big')))
if q['role']!='program':os.close(3)
sys.path[:]=q['path']
h=type(sys)('_grpolab_code_harness')
sys.modules['_grpolab_code_harness']=h
exec(marshal.loads(q['code']) if q['code'] else compile(q['src'],'harness.py','exec'),h.__dict__)
del a,t,k,f,rd,marshal
h.boot(q)
"""
#: Environment besides PATH/LANG/HOME: RLIMIT_AS counts reserved address space, so no 64 MB
#: malloc arena per thread and no OpenBLAS thread pool (whose buffers would eat the budget).
ENV = {"MALLOC_ARENA_MAX": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
#: Seconds past the deadline the supervisor still drains pipes after killing.
DRAIN_S = 0.3
#: Cap on a sandbox's report channel (fd 4), bytes: the judge server's (its records are the
#: judge's own); a program's sandbox gets :data:`REPORT_CAPS` for its role.
MAX_REPORT_BYTES = 64 << 20
#: (bytes, items over all frames) a program's own report channel may carry, by role: the
#: fast path's values, or only the ``started`` frame and an exit label (a solver's and a
#: plain program's channel: nothing else on it is read). Past them the program is killed
#: (``output_limit``): what the program writes there is the program's cost, never the host's.
REPORT_CAPS = {"fast": (8 << 20, 500_000), "solver": (64 << 10, 1000),
               "program": (64 << 10, 1000)}
SAMPLE_S = 0.02
#: Inodes a sandbox's /tmp may hold (checked every SAMPLE_S; past it the program is killed:
#: ``reason="file_size"``). A program creating empty files as fast as it can gets ~1,000 past it
#: within one sampling interval.
MAX_TMP_FILES = 10_000
#: Seconds the other sandboxes (the solver) get to exit by themselves after the primary did.
PEER_GRACE_S = 0.5
CLK_TCK = os.sysconf("SC_CLK_TCK")


#: util-linux's setpriv: how a root pool starts bubblewrap under a slot's uid (see :func:`start`).
SETPRIV = shutil.which("setpriv")


def landlock_abi() -> int:
    """This kernel's Landlock ABI version (0: none, or disabled at boot): the programs' mount
    tables are hidden with it (see ``_hide_mount_tables`` in the harness)."""
    try:
        import ctypes  # noqa: PLC0415 - host side, once per pool

        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    except (OSError, AttributeError):
        return 0
    return max(int(abi), 0)


def bwrap_path() -> str | None:
    """The bubblewrap binary, or None when it is not installed."""
    return shutil.which("bwrap") or (os.path.exists("/usr/bin/bwrap") and "/usr/bin/bwrap") or None


class Launcher:
    """What every sandbox of a pool shares; :meth:`argv` is one sandbox's command line.

    ``python``: the interpreter programs run under (default: this one). ``user``: uid (= gid)
    to run bubblewrap as (root only; None = this process's uid). ``packages``: allow-list.
    """

    def __init__(self, python: str | None = None, user: int | None = None,
                 packages: tuple[str, ...] = DEFAULT_PACKAGES) -> None:
        self.bwrap = bwrap_path()
        if self.bwrap is None:
            raise SandboxError("bubblewrap is not installed: the code sandbox needs it "
                               "(apt-get install bubblewrap); see docs/sandbox.md")
        self.python = python or sys.executable
        self.user = user
        self.spec = _view_spec(self.python, packages)
        self.staged = view.stage(self.spec)
        self.filter = seccomp.filter_bytes() if seccomp.supported() else b""
        self.harness = _harness_payload(self.python)
        self.packages = tuple(self.spec.get("packages", ()))
        #: Whether every sandbox hides the mount tables with Landlock (this kernel has it and
        #: the programs' interpreter has ``_ctypes``); a sandbox that then cannot does not start.
        self.landlock = landlock_abi() >= 1 and bool(self.spec.get("ctypes"))
        self._static = self._static_args()

    def close(self) -> None:
        shutil.rmtree(self.staged["root"], ignore_errors=True)

    def restage(self) -> None:
        """Stage the view again with every folder mirrored into the staging tree (see
        :func:`~.view.stage`): a root pool's way to a uid of its own per slot when the
        interpreter is below a folder other users cannot enter."""
        old = self.staged["root"]
        self.staged = view.stage(self.spec, mirror=True)
        shutil.rmtree(old, ignore_errors=True)
        self._static = self._static_args()

    def _static_args(self) -> list[str]:
        # no nested user namespaces: the seccomp filter refuses unshare/setns and every clone
        # but a thread's (the kernel refuses CLONE_NEWUSER|CLONE_THREAD); without the filter,
        # bubblewrap's --disable-userns does it (~0.4 ms more per sandbox)
        nested = [] if self.filter else ["--disable-userns"]
        args = [self.bwrap, "--unshare-all", "--unshare-user", *nested,
                "--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL",
                "--uid", "65534", "--gid", "65534", "--hostname", "sandbox"]
        for src, dst in self.staged["binds"]:
            args += ["--ro-bind", src, dst]
        # /proc/sys read-only (bubblewrap covers it only when the folder itself is writable,
        # and the files in it are checked against the uid alone, not capabilities)
        args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys"]
        for dev in view.VIEW_DEVICES:  # no ptmx, pts, shm: five device nodes in a read-only /dev
            args += ["--dev-bind", dev, dev]
        return args

    def argv(self, limits: SandboxLimits, fds: list[int], seccomp_fd: int | None,
             info_fd: int) -> list[str]:
        args = list(self._static)
        args += ["--perms", "1777", "--size", str(limits.tmp_mb() << 20), "--tmpfs", "/tmp",
                 "--chdir", "/tmp", "--clearenv",
                 "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
                 "--setenv", "HOME", "/tmp", "--info-fd", str(info_fd)]
        for k, v in ENV.items():
            args += ["--setenv", k, v]
        if seccomp_fd is not None:
            args += ["--seccomp", str(seccomp_fd)]
        args += ["--", self.spec["executable"], "-I", "-S", "-c", BOOT, *map(str, fds)]
        return args

    def request(self, role: str, limits: SandboxLimits, **fields) -> bytes:
        rlimits = {getattr(resource, name): value for name, value in limits.rlimits().items()}
        req = {"role": role, "rlimits": rlimits, "path": self.spec["sys_path"],
               "stdlib": self.spec["stdlib"],
               "packages": [self.spec["sys_path"][-1]] if self.packages else [],
               "code": self.harness[0], "src": self.harness[1], "landlock": self.landlock,
               **fields}
        data = marshal.dumps(req)
        return len(data).to_bytes(4, "big") + data


_SPECS: dict[tuple, dict] = {}
_SPECS_LOCK = threading.Lock()


def _view_spec(python: str, packages: tuple[str, ...]) -> dict:
    """The view of ``python`` with ``packages`` (computed once per pair, by that interpreter
    in a clean process: the trainer's own mapped libraries stay out of it)."""
    key = (python, tuple(packages))
    with _SPECS_LOCK:
        if key not in _SPECS:
            out = subprocess.run([python, "-I", str(VIEW_SCRIPT), *packages],
                                 capture_output=True, text=True, timeout=60,
                                 env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
            if out.returncode != 0:
                raise SandboxError(f"could not compute the sandbox view of {python}: "
                                   f"{out.stderr.strip()[-300:]}")
            _SPECS[key] = json.loads(out.stdout)
        return _SPECS[key]


#: Compiles the harness under another interpreter, once per pool (its marshal format and
#: bytecode are that interpreter's own): stdin is the source, stdout the marshal'ed code.
COMPILE = ("import marshal,sys;sys.stdout.buffer.write(marshal.dumps(compile("
           "sys.stdin.read(),'harness.py','exec')))")


def _harness_payload(python: str) -> tuple[bytes, str]:
    """(marshal'ed code object, ""): compiled here when ``python`` is this interpreter, else
    once by ``python`` itself (not in every sandbox); (b"", source) only when that fails (the
    sandbox then compiles the harness itself)."""
    src = HARNESS.read_text()
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return marshal.dumps(compile(src, "harness.py", "exec")), ""
    try:
        out = subprocess.run([python, "-I", "-S", "-c", COMPILE], input=src.encode(),
                             capture_output=True, timeout=60,
                             env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    except (OSError, subprocess.TimeoutExpired):
        return b"", src
    return (out.stdout, "") if out.returncode == 0 and out.stdout else (b"", src)


# ------------------------------------------------------------------------------ one process


@dataclass
class Proc:
    """One sandboxed process under supervision."""

    popen: subprocess.Popen
    request: bytes
    stdin: bytes
    report: FrameReader
    fds: dict = field(default_factory=dict)  # name -> our end of its pipes
    out: dict = field(default_factory=lambda: {"stdout": bytearray(), "stderr": bytearray()})
    info: bytearray = field(default_factory=bytearray)
    child_pid: int | None = None
    cpu_s: float = 0.0
    killed: str = ""
    over: str = ""  # "output_limit" when a stream passed its cap
    returncode: int | None = None
    seen: bool = False  # on_start ran for it
    #: Host-side descriptors that go with this sandbox and are closed with it (a solver's
    #: judge-side channel ends until they are handed to the judge).
    extra_fds: list = field(default_factory=list)
    #: A long-lived process (the judge server) seen through one request: supervision reads
    #: its descriptors but never closes or drains them unless it was killed.
    persistent: bool = False

    def load(self, launcher: Launcher, role: str, limits: SandboxLimits, stdin: bytes,
             private: bytes = b"", **fields) -> "Proc":
        """Give a started, still unused sandbox its request (written when it is supervised)."""
        self.request = launcher.request(role, limits, **fields) + private
        self.stdin = stdin
        if role in REPORT_CAPS:
            cap, items = REPORT_CAPS[role]
            self.report = FrameReader(cap, 2 + len(fields.get("exprs", ())), items)
        return self

    def kill(self, why: str) -> None:
        if self.returncode is not None or self.popen.returncode is not None:
            return  # reaped: its pid may belong to another process by now
        if not self.killed:
            self.killed = why
        for pid in (self.child_pid,):
            if pid:
                try:
                    os.kill(pid, signal.SIGKILL)  # PID 1 of its namespace: all of it dies
                except OSError:
                    pass
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except OSError:
            pass

    def sample_cpu(self) -> None:
        if not self.child_pid or self.returncode is not None:
            return
        try:
            with open(f"/proc/{self.child_pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            self.cpu_s = max(self.cpu_s, (int(fields[11]) + int(fields[12])) / CLK_TCK)
        except (OSError, IndexError, ValueError):
            pass

    def over_tmp_files(self) -> bool:
        """Whether the sandbox's /tmp holds more than :data:`MAX_TMP_FILES` inodes (seen from
        the host through ``/proc/<pid>/root``: bubblewrap's tmpfs has a byte size but no inode
        count, and every empty file costs kernel memory that size does not count)."""
        if (not self.child_pid or self.returncode is not None or self.persistent
                or not self.report.records):
            return False  # before its "started" frame /proc/<pid>/root may still be the host's
        try:
            st = os.statvfs(f"/proc/{self.child_pid}/root/tmp")
        except OSError:
            return False
        return st.f_files - st.f_ffree > MAX_TMP_FILES


def start(launcher: Launcher, limits: SandboxLimits, peer: tuple[int, int] | None = None,
          user: int | None = None, extra: tuple[int, ...] = ()) -> Proc:
    """Start one fresh sandbox that waits for its request (see :meth:`Proc.load`); ``peer`` =
    (fd it reads, fd it writes) of the judge<->solver channel (the caller closes its copies
    after both started); ``extra``: more descriptors it gets, as fd 7, 8... (the judge server's
    socket). Only ``limits.tmp_mb()`` and ``user`` shape the sandbox itself: the role, the code
    and every other limit come with the request."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    info_r, info_w = os.pipe()
    keep = [req_r, rep_w, info_w]
    seccomp_fd = None
    if launcher.filter:
        sr, sw = os.pipe()
        os.write(sw, launcher.filter)
        os.close(sw)
        seccomp_fd = sr
        keep.append(sr)
    child_fds = [req_r, rep_w, *(peer or (-1, -1)), *extra]
    argv = launcher.argv(limits, child_fds, seccomp_fd, info_w)
    user = launcher.user if user is None else user
    kwargs = {}
    if user is not None and SETPRIV and os.geteuid() == 0:
        # the uid change in setpriv, not in the child: subprocess cannot vfork a child that
        # changes its uid, and fork() copies the trainer's page tables (ms per sandbox, more
        # the bigger the trainer)
        argv = [SETPRIV, "--reuid", str(user), "--regid", str(user), "--clear-groups", *argv]
    elif user is not None:
        kwargs = {"user": user, "group": user, "extra_groups": []}
    (in_r, in_w), (out_r, out_w), (err_r, err_w) = os.pipe(), os.pipe(), os.pipe()
    theirs = [*keep, in_r, out_w, err_w]
    ours = {"req": req_w, "report": rep_r, "info": info_r, "stdin": in_w, "stdout": out_r,
            "stderr": err_r}
    try:
        popen = subprocess.Popen(argv, stdin=in_r, stdout=out_w, stderr=err_w,
                                 pass_fds=[*keep, *(f for f in (*(peer or ()), *extra) if f >= 0)],
                                 close_fds=True, start_new_session=True,
                                 env={"LANG": "C.UTF-8"}, **kwargs)
    except OSError as exc:
        for fd in (*theirs, *ours.values()):
            os.close(fd)
        raise SandboxError(f"could not start bubblewrap: {exc}") from exc
    for fd in theirs:
        os.close(fd)
    for fd in ours.values():
        os.set_blocking(fd, False)
    proc = Proc(popen, b"", b"", FrameReader(MAX_REPORT_BYTES))
    proc.fds = ours
    return proc


def spawn(launcher: Launcher, role: str, limits: SandboxLimits, stdin: bytes,
          peer: tuple[int, int] | None = None, private: bytes = b"", user: int | None = None,
          **fields) -> Proc:
    """:func:`start` a sandbox and :meth:`Proc.load` its request for ``role``."""
    return start(launcher, limits, peer, user).load(launcher, role, limits, stdin, private,
                                                    **fields)


def discard(procs: list[Proc]) -> None:
    """Kill, reap and close sandboxes that will not run (e.g. unused prestarted ones)."""
    for p in procs:
        _close(p)


# ------------------------------------------------------------------------------ supervision


def supervise(procs: list[Proc], limits: SandboxLimits, primary: Proc, on_start=None) -> float:
    """Run ``procs`` to their end: feed, read (capped), sample CPU, kill at the wall-clock
    deadline or past ``cpu_s``; once ``primary`` exits, the others get PEER_GRACE_S to exit
    by themselves, then are killed. Returns the
    wall time. Every process is dead and reaped when it returns."""
    t0 = time.monotonic()
    deadline = t0 + limits.timeout_s
    next_sample = t0 + SAMPLE_S
    primary_end = 0.0
    try:
        while True:
            now = time.monotonic()
            if now >= deadline and not primary_end:
                for p in procs:
                    p.kill("timeout")
            if now >= next_sample:
                next_sample = now + SAMPLE_S
                for p in procs:
                    p.sample_cpu()
                    if p.over_tmp_files():
                        p.over = p.over or f"/tmp holds over {MAX_TMP_FILES} files"
                        p.kill("output_limit")
                    if p.cpu_s > limits.cpu_limit_s:
                        p.kill("timeout")
            _reap(procs)
            if primary.returncode is not None:
                # the others (the solver) see their channel close and exit by themselves
                # (reaped, so their CPU is counted); whatever is left at PEER_GRACE_S dies
                deadline = min(deadline, primary_end or now + PEER_GRACE_S)
                primary_end = deadline
                if now >= deadline:
                    for p in procs:
                        p.kill("peer_done")
            if all(p.returncode is not None for p in procs):
                break
            _pump(procs, limits, min(max(deadline - now, 0.001), SAMPLE_S))
            for p in procs:
                if p.child_pid and not p.seen:
                    p.seen = True
                    if on_start is not None:
                        on_start()
        _drain(procs, limits, time.monotonic() + DRAIN_S)
    finally:
        for p in procs:
            _close(p)
    return time.monotonic() - t0


def _reap(procs: list[Proc]) -> None:
    for p in procs:
        if p.returncode is None:
            try:
                pid, status, usage = os.wait4(p.popen.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status, usage = p.popen.pid, 0, None
            if pid:
                p.returncode = os.waitstatus_to_exitcode(status)
                p.popen.returncode = p.returncode
                if usage is not None:
                    p.cpu_s = max(p.cpu_s, usage.ru_utime + usage.ru_stime)
                p.kill("")  # anything of its namespace still alive dies with it


def _pump(procs: list[Proc], limits: SandboxLimits, wait_s: float) -> None:
    rd, wr = {}, {}
    for p in procs:
        for name in ("report", "info", "stdout", "stderr"):
            if name in p.fds:
                rd[p.fds[name]] = (p, name)
        if "req" in p.fds:
            wr[p.fds["req"]] = (p, "req")
        elif "stdin" in p.fds:
            wr[p.fds["stdin"]] = (p, "stdin")
    if not rd and not wr:
        time.sleep(wait_s)
        return
    r, w, _ = select.select(list(rd), list(wr), [], wait_s)
    for fd in r:
        _read(*rd[fd], limits)
    for fd in w:
        _write(*wr[fd])


def _read(p: Proc, name: str, limits: SandboxLimits) -> None:
    fd = p.fds[name]
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        return
    except OSError:
        chunk = b""
    if not chunk:
        os.close(p.fds.pop(name))
        return
    if name == "info":
        p.info += chunk[:4096]
        _parse_info(p)
    elif name == "report":
        if not p.report.feed(chunk):
            p.over = p.over or p.report.over or "output_limit"
            p.kill("output_limit")
    else:
        buf = p.out[name]
        room = limits.max_output_bytes - len(buf)
        buf += chunk[:max(room, 0)]
        if len(chunk) > room:
            p.over = p.over or "output_limit"
            p.kill("output_limit")


def _parse_info(p: Proc) -> None:
    if p.child_pid:
        return
    try:
        pid = json.loads(bytes(p.info)).get("child-pid")
    except ValueError:
        return
    if isinstance(pid, int) and pid > 1:
        p.child_pid = pid


def _write(p: Proc, name: str) -> None:
    data = p.request if name == "req" else p.stdin
    try:
        n = os.write(p.fds[name], data[:1 << 16]) if data else 0
    except BlockingIOError:
        return
    except OSError:
        n, data = 0, b""
    data = data[n:]
    if name == "req":
        p.request = data
    else:
        p.stdin = data
    if not data:
        os.close(p.fds.pop(name))


def _drain(procs: list[Proc], limits: SandboxLimits, until: float) -> None:
    """Read what is left in the pipes (the processes are dead: EOF comes at once unless a
    descriptor lives on elsewhere, which the namespace kill rules out) until ``until``."""
    for p in procs:
        for name in ("req", "stdin"):
            if name in p.fds:
                os.close(p.fds.pop(name))
    procs = [p for p in procs if not p.persistent]  # a live server's pipes never reach EOF
    while time.monotonic() < until:
        fds = {p.fds[n]: (p, n) for p in procs for n in ("report", "info", "stdout", "stderr")
               if n in p.fds}
        if not fds:
            return
        r, _, _ = select.select(list(fds), [], [], max(until - time.monotonic(), 0))
        for fd in r:
            _read(*fds[fd], limits)


def _close(p: Proc) -> None:
    if p.persistent and not p.killed:
        p.fds = {}  # the server's own descriptors: it lives on
        return
    for fd in p.extra_fds:
        try:
            os.close(fd)
        except OSError:
            pass
    p.extra_fds = []
    if p.returncode is None:
        p.kill("")
        try:
            p.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        p.returncode = p.popen.returncode
    for fd in list(p.fds.values()):
        try:
            os.close(fd)
        except OSError:
            pass
    p.fds.clear()
