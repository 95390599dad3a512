"""Fixtures for the sandbox tests: a private sandbox pool and leftover-process audits.

Audits: a program's processes are found by the PID namespace of its sandbox (every sandbox a
pool starts is recorded in ``pool.pid_namespaces``), or, for a pool that runs programs as a
uid of their own (root with a world-readable interpreter, or ``user=4242``), by that uid."""

from __future__ import annotations

import os
import time
import uuid

import pytest

SECRET_ENV = "GRPOLAB_SANDBOX_TEST_SECRET"
# Set before any sandbox server starts in this test process, so a leak would be visible.
SECRET_VALUE = "s3cr3t-" + uuid.uuid4().hex
os.environ[SECRET_ENV] = SECRET_VALUE


def _descends_from(pid: int, ancestors: set[int]) -> bool:
    """Whether ``pid`` is one of ``ancestors`` or a descendant of one (via /proc PPid)."""
    seen = 0
    while pid > 1 and seen < 64:
        if pid in ancestors:
            return True
        try:
            with open(f"/proc/{pid}/status") as f:
                pid = int(next(ln for ln in f if ln.startswith("PPid:")).split()[1])
        except (OSError, StopIteration, ValueError):
            return False
        seen += 1
    return False


#: Pools these fixtures made (their never-used prestarted sandboxes are not leftovers).
_POOLS: list = []


def _idle(pools) -> set[int]:
    """bubblewrap pids of the prestarted sandboxes no program has used yet: of ``pools`` and of
    every other live pool of this process (a PID namespace's inode number is reused once freed,
    so a test's own pool's idle sandbox can sit in a namespace whose number was recorded)."""
    from grpolab.rewards.sandbox.judge_server import server_pids
    from grpolab.rewards.sandbox.prestart import idle_pids

    return ({pid for pool in pools for pid in pool.idle_sandbox_pids()} | set(idle_pids())
            | set(server_pids()))


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(next(ln for ln in f if ln.startswith("PPid:")).split()[1])
    except (OSError, StopIteration, ValueError):
        return -1


def _processes_with_uid(uid: int) -> list[tuple[int, str]]:
    """(pid, command) of every live process whose real uid is ``uid`` (from /proc), except
    the never-used prestarted sandboxes of the fixtures' pools and their children."""
    found = []
    idle = _idle(_POOLS)
    for name in os.listdir("/proc"):
        if not name.isdigit() or _descends_from(int(name), idle):
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                status = f.read()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) == uid:
                state = [ln for ln in status.splitlines() if ln.startswith("State:")]
                found.append((int(name), cmd + " " + (state[0] if state else "")))
    return found


def _processes_in(pool) -> list[tuple[int, str]]:
    """(pid, command) of every live process inside a sandbox ``pool`` started (its prestarted,
    never-used sandboxes aside: a PID namespace's inode number is reused once it is freed)."""
    found = []
    idle = _idle([pool, *_POOLS])
    me = {os.getpid()}
    for name in os.listdir("/proc"):
        if not name.isdigit() or _descends_from(int(name), idle):
            continue
        # ours (below this test process) or an orphan (its bubblewrap gone); another process's
        # sandboxes (another test run on the machine) may reuse a recorded namespace number
        if not (_descends_from(int(name), me) or _ppid(int(name)) in (0, 1)):
            continue
        try:
            ns = os.stat(f"/proc/{name}/ns/pid").st_ino
            if ns not in pool.pid_namespaces:
                continue
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        found.append((int(name), cmd))
    return found


def _wait_no_processes(who, timeout_s: float = 3.0) -> list[tuple[int, str]]:
    """Leftover processes of ``who`` (a uid, or a pool: its sandboxes' PID namespaces) after
    waiting up to ``timeout_s`` for them to vanish."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = _processes_with_uid(who) if isinstance(who, int) else _processes_in(who)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def missing_isolation(what: str) -> None:
    """Skip the test for a missing isolation feature -- or fail it under GRPOLAB_REQUIRE_SANDBOX=1
    (CI: a machine where isolation silently degrades must not pass)."""
    from grpolab.rewards.sandbox import isolation_required

    if isolation_required():
        pytest.fail(f"{what} (GRPOLAB_REQUIRE_SANDBOX is set: missing isolation is a failure)")
    pytest.skip(what)


@pytest.fixture
def require_isolation():
    """``fn(what)``: skip, or fail under GRPOLAB_REQUIRE_SANDBOX=1 (see :func:`missing_isolation`)."""
    return missing_isolation


@pytest.fixture(scope="session")
def sandbox_pool():
    """A one-slot pool private to these tests (its sandboxes' PID namespaces are recorded)."""
    from grpolab.rewards.sandbox import SandboxPool

    pool = SandboxPool(size=1)
    _POOLS.append(pool)
    feats = pool.features()
    yield pool, feats
    pool.close()


@pytest.fixture
def isolated(sandbox_pool):
    """``(pool, who)``: the private pool and what audits its programs (``wait_no_processes(who)``),
    skipping (failing under GRPOLAB_REQUIRE_SANDBOX=1) when isolation is not complete."""
    from grpolab.rewards.sandbox import REQUIRED_FEATURES

    pool, feats = sandbox_pool
    missing = set(REQUIRED_FEATURES) - set(feats)
    if missing:
        missing_isolation(f"sandbox isolation {sorted(missing)} unavailable here; features: "
                          f"{feats}; notes: {pool.notes}")
    yield pool, pool
    # After every test: nothing of its programs is left, neither processes nor files.
    from grpolab.rewards import run_sandboxed

    assert _wait_no_processes(pool) == [], "a sandboxed process outlived its call"
    r = run_sandboxed("import os; print(os.getcwd(), os.listdir('/tmp'))", pool=pool,
                      mode="strict")
    assert r.stdout == "/tmp []\n", f"files left behind: {r.stdout!r} {r.stderr!r}"


UNPRIVILEGED_UID = 4242


@pytest.fixture(scope="module")
def unprivileged_server():
    """``(pool, uid)``: a one-slot pool whose bubblewrap runs as an ordinary user -- uid 4242
    with the system Python when we are root (as a non-root user trains), else our own uid.
    Skips (fails under GRPOLAB_REQUIRE_SANDBOX=1) when it cannot isolate programs fully."""
    from grpolab.rewards import sandbox as sandbox_mod

    if os.geteuid() == 0:
        py = "/usr/bin/python3"
        if not os.access(py, os.X_OK):
            missing_isolation("needs /usr/bin/python3 to run sandboxes as another user")
        server = sandbox_mod.SandboxPool(size=1, python=py, user=UNPRIVILEGED_UID)
        uid = UNPRIVILEGED_UID
    else:
        server, uid = sandbox_mod.SandboxPool(size=1), os.getuid()
    _POOLS.append(server)
    feats = server.features()
    missing = set(sandbox_mod.REQUIRED_FEATURES) - set(feats)
    if missing:
        notes = server.notes
        server.close()
        missing_isolation(f"unprivileged isolation {sorted(missing)} unavailable: {notes}")
    yield server, uid
    server.close()


@pytest.fixture
def host_dir():
    """A world-readable folder on the host outside every directory the sandbox makes private
    (not under /tmp, /var/tmp, /dev/shm, /run), removed afterwards."""
    import shutil
    import tempfile
    from pathlib import Path

    d = Path(tempfile.mkdtemp(prefix=".sbx-host-", dir=Path(__file__).resolve().parent))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def wait_no_processes():
    """``fn(uid, timeout_s=3.0) -> leftover (pid, command) list`` ([] when none is left)."""
    return _wait_no_processes


@pytest.fixture
def parent_secret():
    """(name, value) of an environment variable set in this process before any server started."""
    return SECRET_ENV, SECRET_VALUE


@pytest.fixture
def processes_with_uid():
    """``fn(uid) -> [(pid, command)]`` of live processes with that real uid."""
    return _processes_with_uid


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "State:\tZ" not in f.read()
    except OSError:
        return False


@pytest.fixture
def alive():
    """``fn(pid) -> bool``: the process exists and is not a zombie."""
    return _alive


@pytest.fixture
def fresh_pool(require_isolation):
    """A one-slot pool of the test's own (closed after it), skipping where no sandbox runs."""
    from grpolab.rewards.sandbox import SandboxPool

    p = SandboxPool(size=1)
    if not p.features():
        p.close()
        require_isolation(f"no sandbox here: {p.notes}")
    yield p
    p.close()
