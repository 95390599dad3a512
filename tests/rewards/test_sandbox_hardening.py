"""Issue 14's findings, tried as an attacker would, in both modes: root (a pool of servers that
switch each program to a uid of its own) and an ordinary user (a server started as uid 4242, in
a user namespace). Each test here failed on the main branch before the fix:

1. host UNIX sockets in /var/tmp, /dev/shm, /run accepted connections from inside;
2. without root a program held every capability in the server's user namespace and shared its
   mount namespace: it could unmount /proc and /tmp and plant a module for the next program;
4. a missing isolation feature was a skip, and nothing reported the isolation in force.
(Finding 3, reward hacking, is tests/rewards/test_rewards_code_integrity.py.)
"""

from __future__ import annotations

import json
import os
import socket
import uuid

import pytest

from grpolab.rewards import SandboxLimits, run_sandboxed
from grpolab.rewards.sandbox import SandboxPool

LIMITS = SandboxLimits(timeout_s=5.0)


@pytest.fixture(params=["root", "unprivileged"])
def runner(request):
    """``run(source) -> SandboxResult`` on one server of the given mode (programs in sequence)."""
    if request.param == "root":
        pool, uid = request.getfixturevalue("isolated")
        return lambda src: run_sandboxed(src, pool=pool, mode="strict", timeout_s=5.0)
    server, uid = request.getfixturevalue("unprivileged_server")
    return lambda src: server.run(src, "", LIMITS)


# ------------------------------------------------------------------------------ finding 1

PROBE_SOCKETS = r'''
import json, os, socket, sys
paths = json.loads(sys.argv_paths)
out = {}
for p in paths:
    r = {"exists": os.path.exists(p)}
    for kind in ("stream", "dgram", "dgram_pair"):
        try:
            if kind == "dgram_pair":
                a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
                a.sendto(b"hello", p + ".dg")
            else:
                s = socket.socket(socket.AF_UNIX,
                                  socket.SOCK_STREAM if kind == "stream" else socket.SOCK_DGRAM)
                if kind == "stream":
                    s.settimeout(1)
                    s.connect(p)
                    s.sendall(b"hello")
                else:
                    s.sendto(b"hello", p + ".dg")
            r[kind] = "SENT"
        except OSError as e:
            r[kind] = type(e).__name__ + ":" + str(e.errno)
    out[p] = r
for d in ("/tmp", "/var/tmp", "/dev/shm", "/run"):
    out["ls " + d] = sorted(os.listdir(d)) if os.path.isdir(d) else None
print(json.dumps(out))
'''


def test_host_unix_sockets_are_unreachable_in_both_modes(runner, host_dir):
    tag = uuid.uuid4().hex[:12]
    dirs = [d for d in ("/var/tmp", "/dev/shm", "/run", "/tmp", str(host_dir))
            if os.access(d, os.W_OK)]  # /run: root only
    listeners, paths = [], []
    try:
        for d in dirs:
            path = os.path.join(d, f"grpolab-sbx-{tag}.sock")
            st = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            st.bind(path)
            st.listen(4)
            st.settimeout(0.3)
            dg = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            dg.bind(path + ".dg")
            dg.settimeout(0.3)
            for p in (path, path + ".dg"):
                os.chmod(p, 0o777)  # anyone may connect -- except a sandboxed program
            listeners += [st, dg]
            paths.append(path)
        abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        abstract.bind(f"\0grpolab-sbx-{tag}")
        abstract.listen(4)
        abstract.settimeout(0.3)
        listeners.append(abstract)
        src = (f"import sys\nsys.argv_paths = {json.dumps(json.dumps(paths + ['@']))}\n"
               + PROBE_SOCKETS.replace('p + ".dg"', '(p + ".dg" if p != "@" else "\\0x")')
               .replace("s.connect(p)", f"s.connect(p if p != '@' else '\\0grpolab-sbx-{tag}')"))
        r = runner(src)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        for p in paths + ["@"]:
            assert "SENT" not in out[p].values(), (p, out[p])
        for p in paths:
            # the view holds nothing of the host but the interpreter (and seccomp refuses
            # AF_UNIX sockets and datagram pairs anyway)
            assert out[p]["exists"] is False, (p, out[p])
        for d in ("/tmp", "/var/tmp", "/dev/shm", "/run"):
            assert out["ls " + d] in ([], None), (d, out["ls " + d])
        for s in listeners:  # nothing ever arrived
            with pytest.raises((socket.timeout, BlockingIOError)):
                if s.type == socket.SOCK_STREAM:
                    s.accept()
                else:
                    s.recv(16)
    finally:
        for s in listeners:
            s.close()
        for p in paths:
            for q in (p, p + ".dg"):
                if os.path.exists(q):
                    os.unlink(q)


# ------------------------------------------------------------------------------ finding 2

TAMPER = r'''
import ctypes, json, os, socket, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, ret):
    out[name] = "OK" if ret == 0 else os.strerror(ctypes.get_errno())
attempt("umount2 /proc", libc.umount2(b"/proc", 2))
attempt("umount2 /tmp", libc.umount2(b"/tmp", 2))
attempt("umount2 /sys", libc.umount2(b"/sys", 2))
attempt("mount tmpfs /dev", libc.mount(b"tmpfs", b"/dev", b"tmpfs", 0, None))
here = os.getcwd()
open("json.py", "w").write("PLANTED = True\n")
attempt("bind over json", libc.mount(os.path.abspath("json.py").encode(), json.__file__.encode(),
                                     None, 4096, None))
attempt("remount / rw", libc.mount(None, b"/", None, 32 | 4096 | 0x4000, None))  # MS_REMOUNT|BIND|REC
os.mkdir("newroot"); os.mkdir("newroot/old")
attempt("pivot_root", libc.syscall(155, os.path.abspath("newroot").encode(),
                                   os.path.abspath("newroot/old").encode()))
attempt("chroot", libc.chroot(here.encode()))
for flag, name in ((0x10000000, "user"), (0x20000, "mount"), (0x40000000, "net"),
                   (0x20000000, "pid"), (0x04000000, "uts")):
    attempt("unshare " + name, libc.unshare(flag))
    pid = libc.syscall(56, flag | 17, 0, 0, 0, 0)  # raw clone(flags | SIGCHLD)
    if pid == 0:
        os._exit(0)
    out["clone new" + name] = "OK" if pid > 0 else os.strerror(ctypes.get_errno())
    if pid > 0:
        os.waitpid(pid, 0)
# a thread (the one clone seccomp lets through) may not bring a new user namespace: the
# kernel refuses CLONE_NEWUSER with CLONE_THREAD, so no --disable-userns is needed with the filter
tid = libc.syscall(56, 0x10000000 | 0x10000 | 0x800 | 0x100, 0, 0, 0, 0)  # NEWUSER|THREAD|SIGHAND|VM
out["thread clone newuser"] = "OK" if tid >= 0 else os.strerror(ctypes.get_errno())
try:
    pidfd = os.pidfd_open(os.getpid())  # a real namespace handle
except OSError:
    pidfd = os.open("/proc/self/ns/mnt", os.O_RDONLY)  # pidfd_open is refused: another handle
attempt("setns", libc.setns(pidfd, 0x20000 | 0x40000000))  # its mount + net namespaces
attempt("x32 getpid", 0 if libc.syscall(0x40000000 + 39) > 0 else -1)
attempt("io_uring_setup", 0 if libc.syscall(425, 1, ctypes.create_string_buffer(120)) >= 0 else -1)
hdr = (ctypes.c_uint32 * 2)(0x20080522, 0)
data = (ctypes.c_uint32 * 6)()
libc.capget(hdr, data)
out["caps"] = list(data)
out["bounding"] = [c for c in range(41) if libc.prctl(23, c, 0, 0, 0) == 1]  # PR_CAPBSET_READ
out["no_new_privs"] = libc.prctl(39, 0, 0, 0, 0)
out["seccomp"] = libc.prctl(21, 0, 0, 0, 0)
# leave traces for the next program: environment, cwd, a module on sys.path, a daemon, an
# abstract socket name (socket pairs are refused too, so it cannot even be bound)
try:
    pair = socket.socketpair()
    pair[0].bind("\0grpolab-sbx-planted")
    out["abstract bind"] = "bound"
except OSError as e:
    out["abstract bind"] = "refused " + str(e.errno)
os.environ["PLANTED"] = "1"
os.putenv("PLANTED", "1")
os.chdir("/")
try:
    subprocess.Popen([sys.executable, "-c",
                      "import time, os\ntime.sleep(1)\nopen(os.path.join(%r, 'late'), 'w').write('x')" % here],
                     start_new_session=True)
    out["daemon"] = "started"
except OSError as e:
    out["daemon"] = "refused %d" % e.errno
print(json.dumps(out))
'''

CHECK = r'''
import json, os, socket, sys
sys.path.insert(0, os.getcwd())
import json as j2
try:
    pair = socket.socketpair()
    pair[0].bind("\0grpolab-sbx-planted")
    abstract = "free"
except OSError as e:
    abstract = "taken" if e.errno == 98 else "refused %d" % e.errno
print(json.dumps({"proc": sorted(p for p in os.listdir("/proc") if p.isdigit()),
                  "sys": os.path.exists("/sys"), "tmp": os.listdir("/tmp"),
                  "abstract": abstract,
                  "cwd": os.getcwd(), "planted_env": "PLANTED" in os.environ,
                  "json_planted": hasattr(j2, "PLANTED"), "json_file": j2.__file__}))
'''


def test_a_program_cannot_mount_unshare_or_setns_and_leaves_nothing_for_the_next(runner):
    r = runner(TAMPER)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    refused = {k: v for k, v in out.items()
               if isinstance(v, str) and k not in ("abstract bind", "daemon",
                                                   "thread clone newuser")}
    assert len(refused) == 21 and set(refused.values()) == {"Operation not permitted"}, refused
    assert out["abstract bind"] == "refused 1" and out["daemon"] == "refused 1"
    assert out["thread clone newuser"] == "Invalid argument"
    assert out["caps"] == [0] * 6 and out["bounding"] == []  # no capabilities at all
    assert out["no_new_privs"] == 1 and out["seccomp"] == 2  # filter mode
    import time

    time.sleep(1.2)  # the daemon would have written /tmp/late by now, had it survived
    nxt = json.loads(runner(CHECK).stdout)
    assert nxt["proc"] == ["1"] and nxt["sys"] is False  # its own PID namespace: itself only
    assert nxt["tmp"] == [] and nxt["cwd"] == "/tmp"  # a fresh /tmp; no planted module
    assert not nxt["planted_env"] and not nxt["json_planted"]
    assert nxt["abstract"] != "taken"  # nothing the first program bound survived it


def test_only_the_program_s_own_tmp_is_writable_and_it_is_capped(runner):
    r = runner("import os\nfor d in ('/tmp', '/var/tmp', '/dev/shm', '/run', '/'):\n"
               "    try:\n        open(os.path.join(d, 'w'), 'w').write('x'); print(d, 'ok')\n"
               "    except OSError as e:\n        print(d, e.errno)")
    # /tmp: the program's own; the host's other world-writable places are not in the view
    assert r.stdout.split("\n")[:5] == ["/tmp ok", "/var/tmp 2", "/dev/shm 2", "/run 2", "/ 30"]
    r = runner("print(open('/tmp/big', 'wb').write(b'x' * (15 << 20)))")
    assert r.stdout == "15728640\n"  # the program's /tmp holds what file_size_mb allows...
    r = runner("import os\nfor i in range(40):\n    open(f'/tmp/f{i}', 'wb').write(b'x' * (1 << 20))")
    assert "No space left on device" in r.stderr  # ...and not more: it is inside memory_mb


def test_ordinary_programs_still_work_under_the_filter(runner):
    # threads, generators, the standard library, numpy-free math; NOT subprocesses, sockets or
    # asyncio (its event loop needs a socket pair): refused by the filter (docs/sandbox.md)
    src = ("import threading, json, re, collections, heapq, fractions, concurrent.futures\nr = []\n"
           "ts = [threading.Thread(target=r.append, args=(i,)) for i in range(8)]\n"
           "[t.start() for t in ts]; [t.join() for t in ts]\n"
           "with concurrent.futures.ThreadPoolExecutor(4) as ex:\n"
           "    sq = list(ex.map(lambda x: x * x, range(5)))\n"
           "import subprocess, sys\n"
           "try:\n    subprocess.run([sys.executable, '-c', 'pass'])\nexcept OSError as e:\n"
           "    refused = e.errno\n"
           "print(sorted(r) == list(range(8)), sq, json.dumps(collections.Counter('aab')), refused)")
    r = runner(src)
    assert r.stdout == 'True [0, 1, 4, 9, 16] {"a": 2, "b": 1} 1\n', (r.stdout, r.stderr)


# ------------------------------------------------------------------------------ finding 4

from grpolab.rewards.sandbox import FEATURES  # noqa: E402

FULL_ROOT = FEATURES + ("uid",)


def test_isolation_of_names_what_is_missing_and_flags_it_degraded():
    from grpolab.rewards import isolation_of
    from grpolab.rewards.sandbox import REQUIRED_FEATURES

    full = isolation_of(FULL_ROOT)
    assert not full.degraded and full.missing == ()
    assert full.description.startswith("sandbox isolation: full (root")
    unpriv = isolation_of(tuple(f for f in FULL_ROOT if f != "uid"))
    assert not unpriv.degraded and "unprivileged" in unpriv.description
    weak = isolation_of(tuple(f for f in FULL_ROOT if f not in ("seccomp", "nocaps")),
                        notes=("no seccomp filter: no system-call table for riscv64",))
    assert weak.degraded and weak.missing == ("nocaps", "seccomp")
    assert "DEGRADED" in weak.description and "riscv64" in weak.description
    bare = isolation_of(())
    assert bare.degraded and set(bare.missing) == set(REQUIRED_FEATURES)
    d = weak.as_dict()
    assert d["degraded"] is True and d["missing"] == ["nocaps", "seccomp"]
    with pytest.raises(AttributeError):
        weak.degraded = False  # frozen


def test_sandbox_isolation_reports_the_pool_in_force(monkeypatch):
    from grpolab.rewards import sandbox_isolation
    from grpolab.rewards.sandbox import runner

    with monkeypatch.context() as m:
        m.setattr(runner, "bwrap_path", lambda: None)  # a machine without bubblewrap
        pool = SandboxPool(size=1)
        iso = sandbox_isolation(pool)
        assert iso.degraded and iso.features == ()
        assert "apt-get install bubblewrap" in iso.description
    iso = sandbox_isolation()  # the default pool on this machine
    assert set(iso.features) == set(run_sandboxed("pass").isolation)


def test_required_isolation_turns_a_skip_into_a_failure(monkeypatch, require_isolation):
    monkeypatch.delenv("GRPOLAB_REQUIRE_SANDBOX", raising=False)
    with pytest.raises(pytest.skip.Exception):
        require_isolation("seccomp unavailable")
    monkeypatch.setenv("GRPOLAB_REQUIRE_SANDBOX", "1")
    with pytest.raises(pytest.fail.Exception, match="GRPOLAB_REQUIRE_SANDBOX"):
        require_isolation("seccomp unavailable")
    monkeypatch.setenv("GRPOLAB_REQUIRE_SANDBOX", "0")
    with pytest.raises(pytest.skip.Exception):
        require_isolation("seccomp unavailable")


def test_ci_requires_the_sandbox():
    ci = open(os.path.join(os.path.dirname(__file__), "..", "..", ".ci", "run")).read()
    assert 'GRPOLAB_REQUIRE_SANDBOX=1 pytest -m "not slow"' in ci
