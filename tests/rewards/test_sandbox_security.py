"""Adversarial programs through run_sandboxed and the code verifier.

Each program ends within its limit, scores 0 (or the right partial score), leaves no process
(audited by the sandbox uid of a private fork server) and no file behind, and this process stays
healthy. Network tests only ever target 127.0.0.1. The fork storm is bounded (300 children).
"""

from __future__ import annotations

import os
import socket
import time
import uuid

import pytest

from grpolab.rewards import run_sandboxed


def run(pool, source, **kw):
    kw.setdefault("timeout_s", 5.0)
    return run_sandboxed(source, pool=pool, mode="strict", **kw)


def _code_with_pool(pool, program, tests, **options):
    import grpolab.rewards.code as code_mod

    original = code_mod.POOL
    code_mod.POOL = pool
    try:
        return code_mod.code_reward(program, tests, **options)
    finally:
        code_mod.POOL = original


def test_infinite_loop_is_killed_at_the_wall_clock_limit(isolated, wait_no_processes):
    pool, uid = isolated
    t0 = time.monotonic()
    r = run(pool, "while True:\n    pass\n", timeout_s=1.0)
    elapsed = time.monotonic() - t0
    assert r.timed_out and r.reason == "timeout" and r.returncode == -9
    assert 0.9 <= elapsed < 3.0
    res = _code_with_pool(pool, "while True: pass", ["assert True"], timeout_s=1.0)
    assert res.score == 0.0 and res.info["timed_out"] and "error" not in res.info
    assert wait_no_processes(uid) == []


def test_cpu_limit_applies_to_a_busy_child_process(isolated, wait_no_processes):
    pool, uid = isolated
    # a child process is refused (seccomp); the main thread sleeps while another thread burns
    # CPU: the program is one process, and its CPU limit stops it long before the wall clock
    src = ("import os, threading, time\ntry:\n    os.fork()\nexcept OSError as e:\n"
           "    print('fork refused', e.errno, flush=True)\n"
           "def burn():\n    while True: pass\n"
           "threading.Thread(target=burn, daemon=True).start()\ntime.sleep(30)")
    r = run(pool, src, timeout_s=20.0, cpu_s=1.0)  # a long wall clock: the machine is shared
    assert r.stdout == "fork refused 1\n"
    assert r.reason == "timeout" and "CPU" in r.detail and r.duration_s < 15.0
    assert 0.9 <= r.cpu_s < 2.5
    assert wait_no_processes(uid) == []


def test_bounded_fork_storm_hits_the_process_limit_and_leaves_nothing(isolated, wait_no_processes):
    pool, uid = isolated
    src = """
import os, time
n = 0
for i in range(300):
    try:
        pid = os.fork()
    except OSError as e:
        print("fork failed:", type(e).__name__)
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print("forked", n)
"""
    t0 = time.monotonic()
    r = run(pool, src, timeout_s=5.0, max_processes=32)
    assert time.monotonic() - t0 < 4.0
    forked = int(r.stdout.split("forked")[1])
    assert forked < 32, r.stdout  # not 300: new processes are refused outright (seccomp)
    assert "fork failed: PermissionError" in r.stdout
    assert wait_no_processes(uid) == []  # the sleeping children died with the namespace
    res = _code_with_pool(pool, src, ["assert False"], timeout_s=5.0)
    assert res.score == 0.0
    assert wait_no_processes(uid) == []


def test_allocating_10_gb_fails_with_memory_error(isolated, wait_no_processes):
    pool, uid = isolated
    r = run(pool, "x = bytearray(10 * 1024 ** 3)\nprint('allocated')", memory_mb=512)
    assert r.reason == "memory" and "allocated" not in r.stdout and r.returncode == 1
    res = _code_with_pool(pool, "x = bytearray(10 * 1024 ** 3)", ["assert True"])
    assert res.score == 0.0 and res.info["reason"] == "memory"
    assert wait_no_processes(uid) == []


def test_writing_1_gb_hits_the_file_size_limit(isolated, wait_no_processes):
    pool, uid = isolated
    src = ("f = open('big.bin', 'wb')\nchunk = b'x' * (1 << 20)\n"
           "for i in range(1024):\n    f.write(chunk)\nprint('wrote 1 GB')")
    t0 = time.monotonic()
    r = run(pool, src, file_size_mb=16)
    assert time.monotonic() - t0 < 4.0
    assert r.reason == "file_size" and "wrote 1 GB" not in r.stdout
    res = _code_with_pool(pool, src, ["assert True"])
    assert res.score == 0.0
    assert wait_no_processes(uid) == []


def test_many_files_are_capped_by_the_private_tmpfs(isolated):
    pool, uid = isolated
    # 40 files of 15 MB each (each under the file-size limit) = 600 MB > the 256 MB tmpfs
    src = ("chunk = b'x' * (15 << 20)\nn = 0\ntry:\n    for i in range(40):\n"
           "        open(f'f{i}', 'wb').write(chunk); n += 1\nexcept OSError as e:\n"
           "    print('stopped', e.errno)\nprint('files', n)")
    r = run(pool, src, memory_mb=512, timeout_s=8.0)
    assert "stopped 28" in r.stdout  # ENOSPC
    assert int(r.stdout.split("files")[1]) < 20


def test_files_outside_the_sandbox_cannot_be_read_written_or_deleted(isolated, tmp_path, host_dir):
    pool, uid = isolated
    secret_file = tmp_path / "secret.txt"  # under the host's /tmp: not even visible inside
    secret_file.write_text("top secret")
    readable = host_dir / "readable.txt"  # world-readable, outside every private directory
    readable.write_text("public")
    readable.chmod(0o666)
    marker = "grpolab-sbx-" + uuid.uuid4().hex
    src = f"""
import os
for path in ({str(secret_file)!r}, {str(readable)!r}):
    for action in ("read", "delete"):
        try:
            if action == "read":
                print("READ", open(path).read())
            else:
                os.remove(path); print("DELETED")
        except OSError as e:
            print(action, "failed", type(e).__name__)
for d in ("/var/tmp", "/dev/shm", "/run", "/root", "/work", "/", {str(host_dir)!r}):
    try:
        open(os.path.join(d, {marker!r}), "w").write("x"); print("WROTE", d)
    except OSError as e:
        print("write", d, "failed", type(e).__name__)
open("/tmp/" + {marker!r}, "w").write("x")  # the program's own /tmp
print("cwd", os.getcwd())
"""
    r = run(pool, src)
    assert r.returncode == 0, r.stderr
    # nothing of the host outside the interpreter is in the view, world-readable or not
    assert "READ top secret" not in r.stdout and "READ public" not in r.stdout
    assert r.stdout.count("read failed FileNotFoundError") == 2
    assert "DELETED" not in r.stdout and "WROTE" not in r.stdout
    assert secret_file.read_text() == "top secret" and readable.read_text() == "public"
    for d in ("/tmp", "/var/tmp", "/dev/shm", "/run", "/work", "/", str(host_dir)):
        assert not os.path.exists(os.path.join(d, marker))
    assert r.stdout.split("cwd ")[1].strip() == "/tmp"
    # the next program gets an empty /tmp again
    assert run(pool, "import os; print(os.listdir('/tmp'))").stdout == "[]\n"
    res = _code_with_pool(pool, f"open({str(secret_file)!r}).read()", ["assert True"])
    assert res.score == 0.0


def test_connecting_to_a_loopback_listener_fails_from_inside(isolated):
    pool, uid = isolated
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    try:
        src = f"""
import socket
try:
    s = socket.create_connection(("127.0.0.1", {port}), timeout=2)
    print("CONNECTED")
except OSError as e:
    print("blocked", type(e).__name__)
"""
        r = run(pool, src)
        assert "CONNECTED" not in r.stdout and "blocked" in r.stdout, r
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing ever reached the listener
        res = _code_with_pool(
            pool, f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)",
            ["assert True"])
        assert res.score == 0.0
    finally:
        listener.close()


def test_only_an_isolated_loopback_is_visible(isolated):
    pool, uid = isolated
    ifaces = ("sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:])")
    r = run(pool, f"import os\nprint({ifaces})\nprint(os.path.exists('/sys'))")
    assert r.stdout.splitlines() == ["['lo']", "False"]
    res = _code_with_pool(pool, f"names = {ifaces}",
                          ["assert names == ['lo']", "assert len(names) > 1"])
    assert res.score == 0.5  # only the first test holds: nothing but the loopback


def test_parent_environment_is_not_visible(isolated, parent_secret):
    pool, uid = isolated
    SECRET_ENV, SECRET_VALUE = parent_secret
    assert os.environ[SECRET_ENV] == SECRET_VALUE
    src = f"""
import os
print(sorted(os.environ))
found = {SECRET_VALUE!r} in str(os.environ)
for pid in (os.getppid(), {os.getpid()}, 1):
    try:
        found = found or {SECRET_VALUE!r}.encode() in open(f"/proc/{{pid}}/environ", "rb").read()
    except OSError:
        pass
print("FOUND" if found else "hidden")
"""
    r = run(pool, src)
    assert r.stdout.splitlines()[-1] == "hidden" and SECRET_VALUE not in r.stdout
    assert SECRET_ENV not in r.stdout
    assert set(eval(r.stdout.splitlines()[0])) <= {
        "PATH", "HOME", "TMPDIR", "LANG", "PYTHONHASHSEED",
        "PWD",  # bubblewrap's --chdir sets PWD=/tmp
        "MALLOC_ARENA_MAX", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}  # runner.ENV
    res = _code_with_pool(pool, f"import os\nsecret = os.environ.get({SECRET_ENV!r})",
                          [f"assert secret == {SECRET_VALUE!r}", "assert secret is None"])
    assert res.score == 0.5  # the program cannot see it; only "secret is None" holds


def test_printing_100_mb_is_cut_at_the_output_cap(isolated, wait_no_processes):
    pool, uid = isolated
    t0 = time.monotonic()
    r = run(pool, "import sys\nfor i in range(100):\n    sys.stdout.write('x' * (1 << 20))",
            max_output_bytes=1_000_000)
    assert time.monotonic() - t0 < 4.0
    assert r.reason == "output_limit" and len(r.stdout) == 1_000_000
    res = _code_with_pool(pool, "print('x' * 100_000_000)", ["assert True"])
    assert res.score == 0.0 and res.info["reason"] == "output_limit"
    assert wait_no_processes(uid) == []


def test_background_processes_do_not_outlive_the_call(isolated, wait_no_processes):
    pool, uid = isolated
    src = """
import os, subprocess, sys, time
for start in (lambda: subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                       start_new_session=True), os.fork):
    try:
        if start() == 0:          # a double-forked daemon in its own session
            os.setsid()
            if os.fork() == 0:
                time.sleep(60)
            os._exit(0)
    except OSError as e:
        print("refused", e.errno)
print("started")
"""
    t0 = time.monotonic()
    r = run(pool, src)
    assert r.stdout == "refused 1\nrefused 1\nstarted\n" and time.monotonic() - t0 < 3.0
    assert wait_no_processes(uid) == []
    res = _code_with_pool(pool, src, ["assert 1 + 1 == 2"])
    assert res.score == 1.0  # an honest program that also spawns: its tests still count
    assert wait_no_processes(uid) == []


def test_this_process_stays_healthy(isolated, wait_no_processes):
    pool, uid = isolated
    fds_before = len(os.listdir("/proc/self/fd"))
    for src in ("while True: pass", "print('x' * 10_000_000)", "import os; os.kill(os.getppid(), 9)",
                "import os, signal; os.killpg(0, signal.SIGKILL)", "raise SystemExit(3)"):
        run(pool, src, timeout_s=0.5)
    r = run(pool, "print(sum(range(10)))")
    assert r.ok and r.stdout == "45\n"
    # the count is the whole process's: a thread an earlier test left running (in the full suite) may hold a
    # descriptor for a moment, so a leak is a count that stays up, not one that is up at one instant
    deadline, fds_after = time.monotonic() + 2.0, len(os.listdir("/proc/self/fd"))
    while fds_after > fds_before + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
        fds_after = min(fds_after, len(os.listdir("/proc/self/fd")))
    assert fds_after <= fds_before + 1
    assert wait_no_processes(uid) == []


def test_system_v_shared_memory_does_not_outlive_the_program(isolated):
    pool, uid = isolated
    with open("/proc/sysvipc/shm") as f:
        host_before = f.read()
    make = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.shmget(0x6772706f, 1 << 20, 0o1666), ctypes.get_errno())")  # IPC_CREAT
    r = run(pool, make)
    assert r.stdout == "-1 1\n"  # refused (seccomp; it would live in the IPC namespace anyway)
    find = "import ctypes\nprint(ctypes.CDLL(None).shmget(0x6772706f, 0, 0o666))"
    assert run(pool, find).stdout.strip() == "-1"  # gone with its namespace
    with open("/proc/sysvipc/shm") as f:
        assert f.read() == host_before


def test_killing_the_caller_mid_program_kills_the_program(wait_no_processes, processes_with_uid,
                                                       require_isolation):
    """The trainer dies (SIGKILL) while a program runs: its sandbox dies with it
    (bubblewrap's --die-with-parent; the program cannot clear the parent-death signal)."""
    import subprocess
    import sys

    if os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("audits the program by a uid of its own (4243): needs root")
    uid = 4243
    caller = subprocess.Popen([sys.executable, "-c", f"""
from grpolab.rewards.sandbox import SandboxPool, run_sandboxed
pool = SandboxPool(size=1, python="/usr/bin/python3", user={uid})
run_sandboxed("import ctypes, time\\nctypes.CDLL(None).prctl(1, 0)\\ntime.sleep(60)",
              pool=pool, timeout_s=30)
"""])
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not processes_with_uid(uid):
            time.sleep(0.05)
        assert processes_with_uid(uid), "the program never started"
        time.sleep(0.3)
        caller.kill()
        caller.wait()
        assert wait_no_processes(uid) == []
    finally:
        if caller.poll() is None:
            caller.kill()
            caller.wait()


def test_visible_files_are_read_only_and_host_files_are_not_visible(isolated, host_dir):
    pool, uid = isolated
    path = str(host_dir / ("grpolab-sbx-" + uuid.uuid4().hex))
    with open(path, "w") as f:
        f.write("original")
    os.chmod(path, 0o666)  # anyone may write it -- except from inside the sandbox
    src = f"""
import os
for p in ({path!r}, os.__file__, os.path.join(os.path.dirname(os.__file__), "planted.py")):
    try:
        open(p, "a").write("tampered"); print("WROTE")
    except OSError as e:
        print("write failed", e.errno)
print("READ", open(os.__file__).read(10) != "")
"""
    r = run(pool, src)
    lines = r.stdout.splitlines()
    assert lines[0] == "write failed 2"  # the host file is not in the view at all
    assert lines[1] in ("write failed 30", "write failed 13") and lines[2] in (
        "write failed 30", "write failed 13")  # the standard library: read-only
    assert lines[3] == "READ True"
    with open(path) as f:
        assert f.read() == "original"
