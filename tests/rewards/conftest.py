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
    pool, feats = sandbox_pool
    missing = {"netns", "pidns", "uid", "mountns", "readonly_fs"} - set(feats)
    if missing:
        pytest.skip(f"sandbox isolation {sorted(missing)} unavailable here (needs root and "
                    "Linux namespaces); features: {feats}")
    pool.features()  # makes sure its one server is alive (an earlier test may have killed it)
    (uid,) = pool.sandbox_uids()
    yield pool, uid
    # After every test: nothing of its programs is left, neither processes nor files.
    from grpolab.rewards import run_sandboxed

    assert _wait_no_processes(uid) == [], "a sandboxed process outlived its call"
    r = run_sandboxed("import os; print(os.getcwd(), os.listdir('/tmp'))", pool=pool,
                      mode="forkserver")
    assert r.stdout == "/tmp []\n", f"files left behind: {r.stdout!r} {r.stderr!r}"


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
