"""Issue 58: the fourth round of attacks on the code sandbox, one test per class, as root and as
an unprivileged user (uid 4242 through ``SandboxPool(python="/usr/bin/python3", user=4242)``
when we are root; our own uid otherwise, e.g. in CI's unprivileged run, ``.ci/run``).

Each test failed on main before the fix (docs/sandbox.md, "Attacker suite", says how each
class is closed):

* host root: with an interpreter other users cannot read, programs ran as host uid 0 and
  could open 766 host-wide sysctls for writing (``kernel.core_pattern``...);
* the judge server: one hostile first message (a 5,000-deep list, a container bomb) killed
  it after it said "done", the next honest programs got ``info["error"]``; a dead server
  was reused;
* the report channel: tens of MB of numbers cost the trainer hundreds of MB and seconds;
* /proc, locks and leases on the view's files.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest

from grpolab.rewards import sandbox as S
from grpolab.rewards.sandbox import SandboxError, SandboxLimits, SandboxPool

UNPRIVILEGED_UID = 4242
SYSTEM_PYTHON = "/usr/bin/python3"
HERE = Path(__file__).resolve().parent


def _fail_or_skip(what: str) -> None:
    if S.isolation_required():
        pytest.fail(f"{what} (GRPOLAB_REQUIRE_SANDBOX is set: missing isolation is a failure)")
    pytest.skip(what)


def _private_interpreter(dest: Path) -> str:
    """A copy of this machine's base interpreter (executable + standard library, hard links
    where the file system allows) below ``dest``, a folder only root may enter: the case
    where a root pool used to fall back to host uid 0."""
    exe = os.path.realpath(sys._base_executable)
    stdlib = sysconfig.get_paths()["stdlib"]
    ver = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    (dest / "bin").mkdir(parents=True)
    (dest / "lib").mkdir()
    try:
        os.link(exe, dest / "bin" / ver)
    except OSError:
        shutil.copy2(exe, dest / "bin" / ver)
    shutil.copytree(stdlib, dest / "lib" / ver, symlinks=True, copy_function=_link_or_copy,
                    ignore=shutil.ignore_patterns("site-packages", "dist-packages", "test",
                                                  "idlelib", "tkinter", "__pycache__"))
    # a shared libpython next to a pyenv-style interpreter is found through its RUNPATH
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    for name in os.listdir(libdir) if os.path.isdir(libdir) else ():
        if name.startswith("libpython") and ".so" in name:
            _link_or_copy(os.path.join(libdir, name), str(dest / "lib" / name))
    os.chmod(dest.parent, 0o700)
    return str(dest / "bin" / ver)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


MODES = ["root-auto", "root-private-interpreter", "uid-4242", "unprivileged"]


@pytest.fixture(scope="module", params=MODES)
def any_pool(request, tmp_path_factory):
    """``(mode, pool)`` for every way a pool can choose the uid its programs run as."""
    mode = request.param
    root = os.geteuid() == 0
    private = None
    if mode == "unprivileged":
        if root:
            pytest.skip("runs in CI's unprivileged pass (.ci/run); as root see uid-4242")
        pool = SandboxPool(size=1)
    elif not root:
        pytest.skip(f"{mode} needs root")
    elif mode == "root-auto":
        pool = SandboxPool(size=1)
    elif mode == "uid-4242":
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            _fail_or_skip(f"needs {SYSTEM_PYTHON}")
        pool = SandboxPool(size=1, python=SYSTEM_PYTHON, user=UNPRIVILEGED_UID)
    else:
        private = Path(tempfile_dir()) / "private"
        python = _private_interpreter(private / "py")
        pool = SandboxPool(size=1, python=python)
    if not pool.features():
        notes = pool.notes
        pool.close()
        _fail_or_skip(f"no sandbox in mode {mode}: {notes}")
    yield mode, pool
    pool.close()
    if private is not None:
        shutil.rmtree(private.parent, ignore_errors=True)


def tempfile_dir() -> str:
    """A fresh folder below the tests (not below /tmp: the sandbox's own /tmp covers that)."""
    import tempfile

    d = tempfile.mkdtemp(prefix=".sbx-58-", dir=HERE)
    os.chmod(d, 0o755)
    return d


# ------------------------------------------------------------------ 1. never host uid 0

PROC_WRITES = r"""
import os
writable = []
for base, dirs, files in os.walk("/proc/sys"):
    for f in files:
        p = os.path.join(base, f)
        try:
            fd = os.open(p, os.O_WRONLY)
        except OSError:
            continue
        os.close(fd)
        writable.append(p)
for p in ("/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"):
    for base, dirs, files in os.walk(p) if os.path.isdir(p) else [("", [], [p])]:
        for f in files:
            try:
                os.close(os.open(os.path.join(base, f), os.O_WRONLY))
                writable.append(os.path.join(base, f))
            except OSError:
                pass
print(len(writable), writable[:5])
print(open("/proc/self/uid_map").read().split()[1])
"""


def test_no_program_runs_as_host_root_and_no_proc_sys_file_opens_for_writing(any_pool):
    mode, pool = any_pool
    r = pool.run(PROC_WRITES, "", SandboxLimits(timeout_s=30))
    assert r.ok, (r.reason, r.detail, r.stderr[-500:])
    count_line, host_uid = r.stdout.splitlines()
    assert count_line == "0 []", f"{mode}: writable /proc files: {count_line}"
    assert int(host_uid) != 0, f"{mode}: programs run as the host's root"
    assert int(host_uid) in pool.host_uids()
    record = S.sandbox_isolation(pool)
    assert 0 not in record.uids and int(host_uid) in record.uids
    assert f"host uid {int(host_uid)}" in record.description
    assert record.as_dict()["uids"] == list(record.uids)


def test_a_pool_refuses_uid_0_and_says_how_to_fix_an_unreadable_interpreter(monkeypatch):
    with pytest.raises(ValueError, match="never run as the host's root"):
        SandboxPool(user=0)
    if os.geteuid() != 0:
        pytest.skip("the refusal applies to root")
    base = Path(tempfile_dir())
    try:
        python = _private_interpreter(base / "inner" / "py")
        closed = base / "inner2"
        closed.mkdir()
        os.chmod(closed, 0o700)  # the staging copy cannot be made readable either
        monkeypatch.setenv("TMPDIR", str(closed))
        import tempfile

        monkeypatch.setattr(tempfile, "tempdir", str(closed))
        pool = SandboxPool(size=1, python=python)
        try:
            for _ in range(2):  # and again: a refused pool never falls back to running anything
                with pytest.raises(SandboxError, match="never runs programs as the host's root"):
                    pool.run("print(1)", "", SandboxLimits())
            assert pool.features() == () and "chmod o+rx" in pool.notes[-1]
        finally:
            pool.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------------------------------ 2. the judge server

def _code(pool, program, tests, **kw):
    import grpolab.rewards.code as code_mod

    old, code_mod.POOL = code_mod.POOL, pool
    try:
        return code_mod.code_reward(program, tests, **kw)
    finally:
        code_mod.POOL = old


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def pool2(request):
    """A one-slot pool as root (uid per slot) and as an ordinary user (4242 when root)."""
    if request.param == "root":
        if os.geteuid() != 0:
            pytest.skip("root mode needs root")
        p = SandboxPool(size=1)
    elif os.geteuid() == 0:
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            _fail_or_skip(f"needs {SYSTEM_PYTHON}")
        p = SandboxPool(size=1, python=SYSTEM_PYTHON, user=UNPRIVILEGED_UID)
    else:
        p = SandboxPool(size=1)
    if not p.features():
        notes = p.notes
        p.close()
        _fail_or_skip(f"no sandbox: {notes}")
    yield p
    p.close()


JUDGE_TESTS = ["x = add(1, 2)\nassert x == 3", "assert add(2, 2) == 4"]
HONEST = "def add(a, b):\n    return a + b\n"


def _first_message(payload: str) -> str:
    return textwrap.dedent(f"""
        import posix
        def add(a, b):
            return a + b
        m = {payload}
        posix.write(6, len(m).to_bytes(4, "big") + m)
        import time
        time.sleep(0.2)
    """)


HOSTILE_FIRST_MESSAGES = {
    "5000-deep list": '("[" * 5000 + "]" * 5000).encode()',
    "container bomb": '("[" + ",".join(["{}"] * 6_600_000) + "]").encode()',
    "not ascii": 'b"\\xff" * 100',
    "length past the cap": 'b"x" * 10',  # written under a 2 GB length header below
}


@pytest.mark.parametrize("attack", sorted(HOSTILE_FIRST_MESSAGES))
def test_the_judge_server_survives_a_hostile_first_message_and_serves_the_next_program(
        pool2, attack):
    payload = HOSTILE_FIRST_MESSAGES[attack]
    program = _first_message(payload)
    if attack == "length past the cap":
        program = program.replace('len(m).to_bytes(4, "big")', '(2**31).to_bytes(4, "big")')
    first = _code(pool2, HONEST, JUDGE_TESTS)
    assert first.score == 1.0, first.info
    server = pool2._judges[0]
    r = _code(pool2, program, JUDGE_TESTS, timeout_s=20)
    assert r.score == 0.0 and "error" not in r.info, r.info
    assert server.alive() and pool2._judges[0] is server, "the judge server died"
    for _ in range(3):
        after = _code(pool2, HONEST, JUDGE_TESTS)
        assert after.score == 1.0 and "error" not in after.info, after.info
    assert pool2._judges[0] is server


def test_a_judge_server_that_died_between_requests_is_replaced_and_the_item_re_run(pool2):
    for _ in range(4):
        assert _code(pool2, HONEST, JUDGE_TESTS).score == 1.0
        server = pool2._judges[0]
        os.kill(server.proc.child_pid, signal.SIGKILL)  # dies without the host noticing yet
        r = _code(pool2, HONEST, JUDGE_TESTS)
        assert r.score == 1.0 and "error" not in r.info, r.info
        assert pool2._judges[0] is not server


def test_a_retired_judge_servers_descriptors_are_closed_once(pool2, monkeypatch):
    """A request past its deadline retires the server: its pipes were closed through the
    request's view and again through the server (EBADF, or, when the prestarting thread had
    reused the number meanwhile, another sandbox's pipe). Every host descriptor is owned once."""
    real_close, twice = os.close, []

    def close(fd):
        try:
            real_close(fd)
        except OSError as exc:
            if exc.errno == 9:
                twice.append(fd)
            raise
    monkeypatch.setattr(os, "close", close)
    for _ in range(3):
        r = _code(pool2, "def f():\n    while True:\n        pass\n", ["x = f()\nassert x == 1"],
                  timeout_s=0.5)
        assert r.score == 0.0 and r.info["reason"] == "timeout", r.info
        assert _code(pool2, HONEST, JUDGE_TESTS).score == 1.0
    monkeypatch.undo()
    assert twice == [], f"descriptors closed twice: {twice}"


TRAINER = r"""
import sys, time
import grpolab.rewards.code as code_mod
from grpolab.rewards.sandbox import SandboxPool
pool = SandboxPool(size=2, python=sys.argv[1], user=int(sys.argv[2]))
code_mod.POOL = pool
pool.warm_up()
for tests in (["assert f() == 1"], ["x = f()\nassert x == 1"]):
    r = code_mod.code_reward("def f():\n    return 1\n", tests, timeout_s=30)
    assert r.score == 1.0, r.info
print("ready", flush=True)
if sys.argv[3] == "close":
    pool.close()
    print("closed", flush=True)
time.sleep(60)
"""


def _uid_processes(uid: int) -> list[str]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                st = f.read()
        except OSError:
            continue
        if f"\nUid:\t{uid}\t" in st and "State:\tZ" not in st:
            out.append(name)
    return out


@pytest.mark.parametrize("how", ["close", "sigkill"])
def test_no_sandbox_process_outlives_the_pool_or_a_killed_trainer(how):
    if os.geteuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("needs root (a uid of the test's own to find every process by)")
    uid = 3_000_000 + os.getpid() % 100_000  # nobody else's sandboxes run as it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, SYSTEM_PYTHON, str(uid), how],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        lines = [proc.stdout.readline().strip()]
        if how == "close":
            lines.append(proc.stdout.readline().strip())
        assert lines[0] == "ready", lines
        if how == "sigkill":
            assert _uid_processes(uid), "the pool had no sandboxes running (prestarted, judge)"
            proc.kill()
        deadline = time.monotonic() + 5
        while _uid_processes(uid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _uid_processes(uid) == [], f"sandboxes outlived the {how}"
    finally:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------ 4. the report's cost

FLOOD_FAST = r"""
import posix
def f():
    return 1
chunk = ("[" + ",".join(["12345678"] * 100_000) + "]").encode()
frame = len(chunk).to_bytes(4, "big") + chunk
for _ in range(70):
    posix.write(4, frame)
"""

FLOOD_SOLVER = FLOOD_FAST.replace("return 1", "return 1\nimport time")


@pytest.mark.parametrize("path", ["fast", "judge"])
def test_tens_of_mb_on_a_report_channel_cost_the_program_not_the_trainer(pool2, path):
    tests = ["assert f() == 1"] if path == "fast" else ["x = f()\nassert x == 1"]
    tracemalloc.start()
    try:
        t0 = time.process_time()
        r = _code(pool2, FLOOD_FAST, tests, timeout_s=20)
        cpu = time.process_time() - t0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert r.score == 0.0 and "error" not in r.info, r.info
    assert r.info["failures"] and r.info["failures"][0].startswith("program: report over"), r.info
    assert peak < 40 << 20, f"the trainer held {peak >> 20} MB for one report"
    assert cpu < 1.5, cpu


# ------------------------------------------------------------------ 5. /tmp inodes

EMPTY_FILES = r"""
import sys
for i in range(300_000):
    open(f"/tmp/f{i}", "w").close()
    if i % 1000 == 0:
        sys.stdout.write(f"{i}\n")
        sys.stdout.flush()
print("done")
"""


def test_tmp_is_bounded_in_files_not_only_in_bytes(pool2):
    """Empty files cost kernel memory that the tmpfs's size does not count (+208-252 MB under
    memory_mb=64 in 4 s before): the host counts /tmp's inodes every 20 ms."""
    from grpolab.rewards.sandbox.runner import MAX_TMP_FILES

    r = pool2.run(EMPTY_FILES, "", SandboxLimits(timeout_s=30, memory_mb=64))
    assert r.reason == "file_size" and "/tmp holds over" in r.detail, (r.reason, r.detail)
    assert int(r.stdout.split()[-1]) <= MAX_TMP_FILES + 20_000, r.stdout[-100:]


MOUNT_TABLES = r"""
import json, os, threading
def read(p):
    try:
        with open(p) as f:
            return f.read()
    except OSError as e:
        return f"<{type(e).__name__} {e.errno}>"
out = {p: read(p) for p in (
    "/proc/self/mountinfo", "/proc/self/mounts", "/proc/self/mountstats", "/proc/mounts",
    "/proc/1/mountinfo", "/proc/1/mounts", "/proc/1/mountstats", "/proc/thread-self/mountinfo",
    "/proc/1/task/1/mountinfo", "/proc/1/task/1/mounts", "/proc/1/root/proc/1/mountinfo",
    "/proc/self/cwd/../proc/self/mountinfo", "/proc/self/net/../mountinfo")}
def in_a_thread():
    tid = threading.get_native_id()
    for name in ("mountinfo", "mounts", "mountstats"):
        for p in (f"/proc/{tid}/{name}", f"/proc/1/task/{tid}/{name}", f"/proc/thread-self/{name}"):
            out[p] = read(p)
    out["thread"] = str(tid)
t = threading.Thread(target=in_a_thread)
t.start()
t.join()
handle = os.open("/proc/self/mountinfo", os.O_PATH)  # no access checked yet: reopened below
out["/proc/self/fd/<O_PATH handle>"] = read(f"/proc/self/fd/{handle}")
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("mountinfo", "mounts", "mountstats"):
            out[f"/proc/{pid}/{name}"] = read(f"/proc/{pid}/{name}")
status = read("/proc/self/status")
print(json.dumps({"tables": out, "status": status[:5], "fds": len(os.listdir("/proc/self/fd"))}))
"""


def _host_paths(pool) -> list[str]:
    """Host paths a program must not learn from a mount table: the staging folder, the
    trainer's virtual environment and working folder, this checkout, /root and /work, and the
    host side of every bind whose path in the view differs from it (a package's venv path)."""
    import tempfile

    from grpolab.rewards.sandbox.view import VIEW_PREFIX

    launcher = pool.launcher()
    staged = launcher.staged["root"]
    out = {staged, os.path.join(os.path.dirname(staged), VIEW_PREFIX),
           os.path.join(tempfile.gettempdir(), VIEW_PREFIX), sys.prefix,
           os.path.realpath(sys.prefix), os.getcwd(), str(HERE.parents[1]), "/root", "/work"}
    out |= {src for src, dst in launcher.spec["binds"] if src != dst}
    out |= {src for src, dst in launcher.staged["binds"] if src != dst}
    return sorted(p for p in out if p not in ("/", "/tmp", ""))


def _kernel_has_landlock() -> bool:
    """Whether this kernel answers landlock_create_ruleset's version query (probed here, not
    with the code under test)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1)) >= 1


def test_no_mount_table_shows_a_host_path(any_pool):
    """Before: /proc/self/mountinfo (and mounts, mountstats, /proc/1/..., a thread's
    /proc/<tid>/...) listed every bind of the view with its host source: the staging folder
    (/tmp/grpolab-view-...), hence where the trainer keeps its files. A program, on the plain
    and the fast path, in every mode, reads every mount table it can name (its own, pid 1's, its
    threads', through /proc/1/root and /proc/self/cwd): none shows a host path, while the rest
    of its /proc (status, fd) stays readable."""
    import json

    mode, pool = any_pool
    hosts = _host_paths(pool)
    r = pool.run(MOUNT_TABLES, "", SandboxLimits(timeout_s=20))
    assert r.ok, (r.reason, r.stderr[-500:])
    fast, _ = pool.run_fast(MOUNT_TABLES, "", ["1"], "", SandboxLimits(timeout_s=20))
    assert fast.ok, (fast.reason, fast.stderr[-500:])
    for where, text in (("program", r.stdout), ("fast path", fast.stderr)):
        out = json.loads(text.strip().splitlines()[-1])
        assert out["status"] == "Name:" and out["fds"] >= 3, (mode, where, out["status"])
        tables = out["tables"]
        assert f"/proc/{tables['thread']}/mountinfo" in tables, (mode, where)
        leaks = [(p, h) for p, t in tables.items() for h in hosts if h in t]
        if leaks and not _kernel_has_landlock():
            _fail_or_skip(f"{mode}: no Landlock here, mount tables show {leaks[:3]}: {pool.notes}")
        assert not leaks, (mode, where, leaks[:5], {p: tables[p][:300] for p, _ in leaks[:2]})


def test_the_isolation_record_says_whether_mount_tables_are_hidden(monkeypatch):
    """"landlock" is in a pool's features exactly when its programs cannot read a mount table:
    on a kernel without Landlock (simulated: the ABI probe answers 0) the feature is missing,
    the pool's notes say why, and a program reads its mountinfo again."""
    from grpolab.rewards.sandbox import runner

    pool = SandboxPool(size=1)
    try:
        feats = pool.features()
        if not feats:
            _fail_or_skip(f"no sandbox: {pool.notes}")
        if not _kernel_has_landlock():
            _fail_or_skip("this kernel has no Landlock (or it is not in its lsm= list)")
        assert "landlock" in feats, feats
        r = pool.run("print(open('/proc/self/mountinfo').read())", "", SandboxLimits(timeout_s=20))
        assert r.returncode == 1 and "PermissionError" in r.stderr, (r.stdout[:300], r.stderr)
    finally:
        pool.close()
    monkeypatch.setattr(runner, "landlock_abi", lambda: 0)
    bare = SandboxPool(size=1)
    try:
        feats = bare.features()
        assert feats and "landlock" not in feats, feats
        assert any("no Landlock" in n for n in bare.notes), bare.notes
        r = bare.run("print(open('/proc/self/mountinfo').read())", "", SandboxLimits(timeout_s=20))
        assert r.ok and " /proc " in r.stdout, (r.stdout[:300], r.stderr[-300:])
    finally:
        bare.close()


# ------------------------------------------------------------------ 5. locks, leases, notify

LOCKS = r"""
import fcntl, os, struct
fd = os.open(os.__file__, os.O_RDONLY)
out = []
for name, cmd, arg in (("F_SETLK", fcntl.F_SETLK, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)),
                       ("F_OFD_SETLK", 37, struct.pack("hhqqi", fcntl.F_RDLCK, 0, 0, 0, 0)),
                       ("F_SETLEASE", 1024, fcntl.F_RDLCK), ("F_NOTIFY", 1026, 0x1)):
    try:
        fcntl.fcntl(fd, cmd, arg)
        out.append(name)
    except OSError as e:
        if e.errno != 1:
            out.append(f"{name}:{e.errno}")
d = os.open("/tmp", os.O_RDONLY)
try:
    fcntl.fcntl(d, 1026, 0x1)
    out.append("F_NOTIFY on /tmp")
except OSError as e:
    if e.errno != 1:
        out.append(f"notify:{e.errno}")
print(out)
"""


def test_byte_range_locks_leases_and_dnotify_are_refused(pool2):
    r = pool2.run(LOCKS, "", SandboxLimits(timeout_s=20))
    assert r.ok, r.stderr[-500:]
    assert r.stdout == "[]\n", r.stdout


# ------------------------------------------------------------------ 3. only plain data

EVERYTHING = textwrap.dedent("""
    class Yes:
        def __contains__(self, x): return True
        def __getattr__(self, name): return lambda *a, **k: True
        def __len__(self): return 10
        def __iter__(self): return iter(range(10))
    def primes_below(n): return Yes()
    def greet(name): return Yes()
    class S(str):
        def startswith(self, *a): return True
        def endswith(self, *a): return True
    def hello(name): return S("nope")
""")

PLAIN_DATA_TESTS = {
    "judge: membership answered by the program": ["r = primes_below(30)\nassert 29 in r"],
    "judge: str method on a non-plain result": ["r = greet('a')\nassert r.startswith('a')"],
    "judge: set method on a non-plain result": ["r = greet('a')\nassert r.issubset({1})"],
    "judge: float method on a non-plain result": ["r = greet('a')\nassert r.is_integer()"],
    "fast: str subclass answers startswith": ["assert hello('Bob').startswith('Hello, ')"],
    "fast: membership on a non-plain result": ["assert 29 in primes_below(30)"],
    "fast: method of a non-plain result": ["assert greet('a').startswith('a')"],
    "judge: str subclass answers startswith": ["r = hello('Bob')\nassert r.startswith('Hello, ')"],
    "judge: len of a non-plain result": ["assert len(primes_below(30)) == 10"],
}


@pytest.mark.parametrize("name", sorted(PLAIN_DATA_TESTS))
def test_no_program_object_answers_its_own_test(pool2, name):
    r = _code(pool2, EVERYTHING, PLAIN_DATA_TESTS[name])
    assert r.info["harness"] == name.split(":")[0], r.info
    assert r.score == 0.0 and "error" not in r.info, r.info


def test_a_judge_only_setup_never_reaches_the_program(pool2):
    """A HumanEval ``check(candidate)`` with the expected values belongs to ``judge_setup``:
    the program's process never runs it, so it cannot read the answers from its globals."""
    spy = textwrap.dedent("""
        import sys
        g = sys._getframe(0).f_globals
        def add(a, b):
            if "check" in g:  # it could read the expected values: it shows that it saw them
                return 99
            return a + b
    """)
    ref = {"judge_setup": "def check(candidate):\n    expected = 3\n    assert candidate(1, 2) == 3\n",
           "tests": ["check(add)"]}
    assert _code(pool2, spy, ref).score == 1.0  # the spy found nothing: it computed honestly
    leaky = {"setup": ref["judge_setup"], "tests": ["check(add)"]}
    assert _code(pool2, spy, leaky).score == 0.0  # in "setup" the program sees it (documented)


def test_the_setups_exception_classes_work_on_the_judge_path(pool2):
    ref = {"setup": "class BadInput(Exception):\n    pass\n",
           "tests": ["try:\n    f(-1)\nexcept BadInput:\n    pass\nelse:\n    assert False",
                     "assert f(2) == 2"]}
    r = _code(pool2, "def f(x):\n    if x < 0:\n        raise BadInput('no')\n    return x\n", ref)
    assert r.score == 1.0, r.info


def test_in_place_changes_never_reach_a_module_of_the_judge_server(pool2):
    program = "def f(xs):\n    xs.append('planted')\n    return len(xs)\n"
    tests = ["import keyword\nf(keyword.kwlist)\nassert 'planted' not in keyword.kwlist"]
    r = _code(pool2, program, tests)
    assert r.score == 1.0, r.info
    honest = _code(pool2, "def g():\n    return 1\n",
                   ["import keyword\nassert 'planted' not in keyword.kwlist and g() == 1"])
    assert honest.score == 1.0, honest.info
    mine = _code(pool2, program, ["xs = [1]\nf(xs)\nassert xs == [1, 'planted']"])
    assert mine.score == 1.0, mine.info  # onto the test's own objects it is still mirrored


# the same test and program get the same verdict on the fast and the judge path

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PREAMBLE = textwrap.dedent("""
    class Yes:
        def __eq__(self, o): return True
        def __ne__(self, o): return False
        def __lt__(self, o): return True
        def __contains__(self, x): return True
        def __bool__(self): return True
        def __len__(self): return 1
        def __iter__(self): return iter([1])
        def __getitem__(self, k): return 1
        def __getattr__(self, name): return lambda *a, **k: True
        def __hash__(self): return 0
    class S(str):
        def __eq__(self, o): return True
        def startswith(self, *a): return True
        def count(self, *a): return 1
    class I(int):
        def __eq__(self, o): return True
        def is_integer(self): return True
    class L(list):
        def __contains__(self, x): return True
        def count(self, x): return 1
""")
RETURNS = ["'Hello, Bob'", "S('nope')", "Yes()", "[1, 2, 3]", "{1: 'a'}", "{1, 2}", "(1, 'a')",
           "None", "True", "3", "2.5", "I(4)", "[Yes()]", "L([7])", "(v for v in range(3))",
           "{'k': [1, {2}]}", "frozenset({1})", "b'ab'", "'x' * 3", "Yes", "len"]
LITERALS = ["1", "'Hello, Bob'", "[1, 2, 3]", "{1, 2}", "None", "3", "(1, 'a')", "{1: 'a'}",
            "True", "2.5", "'He'", "0"]
SHAPES = ["assert f(1) == {L}", "assert f(1) != {L}", "assert f(1)", "assert not f(1)",
          "assert f(1) is None", "assert {L} in f(1)", "assert f(1) in [{L}]",
          "assert f(1).startswith('He')", "assert f(1)[0] == {L}", "assert f(1).count(1) == 1",
          "assert f(1).is_integer()", "assert f(1).issubset({{1, 2, 3}})",
          "assert f(1).get(1) == {L}", "assert f(1) < {L}", "assert f(1)() == {L}",
          "assert f(1).real == {L}", "assert f(1)[1:] == {L}"]


def _verdict(pool, program, test, path, monkeypatch):
    import grpolab.rewards.code as code_mod

    if path == "judge":
        monkeypatch.setattr(code_mod, "fast_plan", lambda tests, setup="": None)
    try:
        r = _code(pool, program, [test])
    finally:
        monkeypatch.undo()
    assert r.info["harness"] == path and "error" not in r.info, r.info
    return r.score


@settings(max_examples=20, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=st.sampled_from(RETURNS), shape=st.sampled_from(SHAPES),
       literal=st.sampled_from(LITERALS))
@example(value="S('nope')", shape="assert f(1).startswith('He')", literal="1")  # the cases
@example(value="Yes()", shape="assert f(1).startswith('He')", literal="1")
@example(value="Yes()", shape="assert f(1).issubset({{1, 2, 3}})", literal="1")
@example(value="I(4)", shape="assert f(1).is_integer()", literal="1")
@example(value="L([7])", shape="assert {L} in f(1)", literal="3")
@example(value="S('nope')", shape="assert f(1).count(1) == 1", literal="1")
def test_the_fast_and_the_judge_path_give_the_same_verdict(pool2, monkeypatch, value, shape,
                                                          literal):
    import grpolab.rewards.code as code_mod

    test = shape.format(L=literal)
    if code_mod.fast_plan([test]) is None:
        return  # a shape only the judge runs: nothing to compare
    program = PREAMBLE + f"def f(x):\n    return {value}\n"
    fast = _verdict(pool2, program, test, "fast", monkeypatch)
    judge = _verdict(pool2, program, test, "judge", monkeypatch)
    assert fast == judge, (value, test, fast, judge)
    if value in ("S('nope')", "Yes()", "I(4)", "[Yes()]", "L([7])", "Yes"):
        # a hostile value passes only where its plain value would pass too
        plain = {"S('nope')": "'nope'", "I(4)": "4", "L([7])": "[7]"}.get(value)
        if plain is None:
            assert fast == 0.0, (value, test)
        else:
            honest = PREAMBLE + f"def f(x):\n    return {plain}\n"
            assert fast <= _verdict(pool2, honest, test, "fast", monkeypatch), (value, test)
