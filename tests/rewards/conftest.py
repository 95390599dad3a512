"""Fixtures for the sandbox tests: a private fork-server pool and leftover-process audits."""

from __future__ import annotations

import os
import time
import uuid

import pytest

SECRET_ENV = "GRPOLAB_SANDBOX_TEST_SECRET"
# Set before any sandbox server starts in this test process, so a leak would be visible.
SECRET_VALUE = "s3cr3t-" + uuid.uuid4().hex
os.environ[SECRET_ENV] = SECRET_VALUE


def _processes_with_uid(uid: int) -> list[tuple[int, str]]:
    """(pid, command) of every live process whose real uid is ``uid`` (from /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
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


def _wait_no_processes(uid: int, timeout_s: float = 3.0) -> list[tuple[int, str]]:
    """Leftover processes of ``uid`` after waiting up to ``timeout_s`` for them to vanish."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = _processes_with_uid(uid)
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
    """A one-server pool private to these tests (its uid identifies its programs' processes)."""
    from grpolab.rewards.sandbox import ForkServerPool

    pool = ForkServerPool(size=1)
    feats = pool.features()
    yield pool, feats
    pool.close()


@pytest.fixture
def isolated(sandbox_pool):
    """The private pool, skipping when this machine cannot give the full isolation."""
    from grpolab.rewards.sandbox import REQUIRED_FEATURES

    pool, feats = sandbox_pool
    if os.geteuid() != 0:
        pytest.skip("these tests audit programs by their sandbox uid: they need root (the "
                    "unprivileged mode has its own tests in test_sandbox_hardening.py)")
    missing = ({"uid", *REQUIRED_FEATURES}) - set(feats)
    if missing:
        missing_isolation(f"sandbox isolation {sorted(missing)} unavailable here; features: "
                          f"{feats}; notes: {pool._probe().notes}")
    pool.features()  # makes sure its one server is alive (an earlier test may have killed it)
    (uid,) = pool.sandbox_uids()
    yield pool, uid
    # After every test: nothing of its programs is left, neither processes nor files.
    from grpolab.rewards import run_sandboxed

    assert _wait_no_processes(uid) == [], "a sandboxed process outlived its call"
    r = run_sandboxed("import os; print(os.getcwd(), os.listdir('/tmp'))", pool=pool,
                      mode="forkserver")
    assert r.stdout == "/tmp []\n", f"files left behind: {r.stdout!r} {r.stderr!r}"


UNPRIVILEGED_UID = 4242


@pytest.fixture(scope="module")
def unprivileged_server():
    """``(server, uid)``: a fork server as an ordinary user -- started as uid 4242 with the system
    Python through ``setpriv`` when we are root (as a non-root user trains), else our own uid.
    Skips (fails under GRPOLAB_REQUIRE_SANDBOX=1) when it cannot isolate itself fully."""
    import shutil

    from grpolab.rewards import sandbox as sandbox_mod

    if os.geteuid() == 0:
        py = "/usr/bin/python3"
        if not shutil.which("setpriv") or not os.access(py, os.X_OK):
            missing_isolation("needs setpriv and /usr/bin/python3 to start a server as another user")
        launcher = ["setpriv", "--reuid", str(UNPRIVILEGED_UID), "--regid",
                    str(UNPRIVILEGED_UID), "--clear-groups", py]
        uid = UNPRIVILEGED_UID
    else:
        launcher, uid = None, os.getuid()
    try:
        server = sandbox_mod.ForkServer(launcher=launcher, disk_mb=32)
    except sandbox_mod.SandboxError as exc:
        missing_isolation(f"an unprivileged sandbox server would not start: {exc}")
    missing = ({"userns", *sandbox_mod.REQUIRED_FEATURES}) - set(server.features)
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
