"""run_sandboxed: results, limits validation, modes, a missing bubblewrap, concurrency."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from grpolab.rewards import SandboxLimits, SandboxResult, run_sandboxed
from grpolab.rewards import sandbox as sandbox_mod


def run(pool, source, **kw):
    return run_sandboxed(source, pool=pool, mode="strict", **kw)


def test_stdout_stdin_stderr_and_exit_codes(sandbox_pool):
    pool, _ = sandbox_pool
    r = run(pool, "import sys\nname = input()\nprint('hello', name)\nprint('warn', file=sys.stderr)",
            stdin="ada\n")
    assert isinstance(r, SandboxResult)
    assert (r.returncode, r.stdout, r.stderr, r.timed_out, r.reason) == (0, "hello ada\n", "warn\n", False, "")
    assert r.ok and r.mode == "bwrap"
    assert run(pool, "raise SystemExit(3)").returncode == 3
    assert run(pool, "import sys; sys.exit('bye')").returncode == 1
    r = run(pool, "1 / 0")
    assert r.returncode == 1 and "ZeroDivisionError" in r.stderr and r.reason == "" and not r.ok
    r = run(pool, "import os, signal; os.kill(os.getpid(), signal.SIGTERM)")
    # PID 1 of a namespace ignores signals it has no handler for, even from itself: it exits 0
    assert r.returncode in (0, -signal.SIGTERM)
    r = run(pool, "import ctypes; ctypes.string_at(0)")  # a segfault
    assert r.returncode == -signal.SIGSEGV and r.reason == "killed" and "SIGSEGV" in r.detail


def test_unicode_and_invalid_bytes_survive(sandbox_pool):
    pool, _ = sandbox_pool
    r = run(pool, "import sys\nprint('héllo ✓')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\n')")
    assert r.stdout == "héllo ✓\n\ufffd\n"
    r = run(pool, "print(input()[::-1])", stdin="åß\n")
    assert r.stdout == "ßå\n"


def test_program_sees_a_fresh_private_working_directory(sandbox_pool):
    pool, _ = sandbox_pool
    r1 = run(pool, "import os; open('f.txt', 'w').write('1'); print(os.getcwd(), os.listdir('.'))")
    r2 = run(pool, "import os; print(os.getcwd(), os.listdir('.'))")
    cwd1, files1 = r1.stdout.split(" ", 1)
    cwd2, files2 = r2.stdout.split(" ", 1)
    # each program has its own fresh tmpfs (same path, nothing carried over)
    assert files1.strip() == "['f.txt']" and files2.strip() == "[]"


def test_imports_from_the_standard_library_work(sandbox_pool):
    pool, _ = sandbox_pool
    r = run(pool, "import json, fractions, decimal, statistics\nprint(json.dumps(statistics.mean([1, 2, 3])))")
    assert r.stdout == "2\n", r.stderr


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(timeout_s=0), "timeout_s"),
        (dict(timeout_s=float("nan")), "timeout_s"),
        (dict(cpu_s=-1), "cpu_s"),
        (dict(memory_mb=1), "memory_mb"),
        (dict(max_processes=0), "max_processes"),
        (dict(max_output_bytes=1.5), "max_output_bytes"),
    ],
)
def test_bad_limits_are_rejected_with_the_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        run_sandboxed("pass", **kwargs)


def test_bad_arguments():
    with pytest.raises(TypeError, match="source"):
        run_sandboxed(b"print(1)")
    with pytest.raises(TypeError, match="stdin"):
        run_sandboxed("pass", stdin=None)
    with pytest.raises(ValueError, match="mode"):
        run_sandboxed("pass", mode="docker")
    assert SandboxLimits().cpu_limit_s == SandboxLimits().timeout_s


def test_the_fork_server_modes_and_names_are_gone():
    import grpolab.rewards as rewards

    for mode in ("fresh", "forkserver"):
        with pytest.raises(ValueError, match="mode"):
            run_sandboxed("print(1)", mode=mode)
    assert not hasattr(rewards, "ForkServerPool") and not hasattr(sandbox_mod, "ForkServer")
    with pytest.raises(ImportError):
        import grpolab.rewards._code_harness  # noqa: F401


def test_a_machinery_failure_is_a_result_in_auto_mode_and_raises_in_strict():
    class BrokenPool:
        def run(self, *a, **k):
            raise sandbox_mod.SandboxError("server gone")

    r = run_sandboxed("print(6 * 7)", pool=BrokenPool())
    assert r.reason == "sandbox_error" and r.returncode == -1 and "server gone" in r.detail
    with pytest.raises(sandbox_mod.SandboxError):
        run_sandboxed("print(1)", pool=BrokenPool(), mode="strict")


def test_without_bubblewrap_every_run_is_a_clear_error_never_a_weaker_mode(monkeypatch):
    from grpolab.rewards.sandbox import runner

    monkeypatch.setattr(runner, "bwrap_path", lambda: None)
    pool = sandbox_mod.SandboxPool(size=1)
    r = run_sandboxed("print(1)", pool=pool)
    assert r.reason == "sandbox_error" and r.stdout == "" and "apt-get install bubblewrap" in r.detail
    with pytest.raises(sandbox_mod.SandboxError, match="apt-get install bubblewrap"):
        run_sandboxed("print(1)", pool=pool, mode="strict")
    iso = sandbox_mod.sandbox_isolation(pool)
    assert iso.degraded and "bwrap" in iso.missing and "apt-get install bubblewrap" in iso.description
    import grpolab.rewards.code as code_mod

    monkeypatch.setattr(code_mod, "POOL", pool)
    res = code_mod.code_reward("def f(): return 1", ["assert f() == 1"])
    assert res.score == 0.0 and "apt-get install bubblewrap" in res.info["error"]


def test_concurrent_calls_each_get_their_own_answer():
    pool = sandbox_mod.SandboxPool(size=2)
    try:
        with ThreadPoolExecutor(4) as ex:
            results = list(ex.map(lambda i: run(pool, f"print({i} * {i})"), range(40)))
        assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(40)]
    finally:
        pool.close()


def test_unprivileged_server_isolates_itself_through_a_user_namespace(unprivileged_server):
    """The path a non-root user takes: user namespace, then net/mount/pid/ipc inside it."""
    server, uid = unprivileged_server
    assert {"netns", "mountns", "readonly_fs", "pidns", "ipcns", "nocaps", "seccomp"} <= set(server.features())
    limits = SandboxLimits(timeout_s=1.0)
    r = server.run("print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev')"
                   ".readlines()[2:]))\nopen('/etc/x', 'w')", "", limits)
    assert r.stdout == "['lo']\n" and "Read-only file system" in r.stderr
    r = server.run("while True: pass", "", limits)
    assert r.timed_out and r.returncode == -signal.SIGKILL
    r = server.run("import subprocess, sys\ntry:\n    subprocess.Popen([sys.executable, '-c', "
                   "'import time; time.sleep(30)'], start_new_session=True)\nexcept OSError as e:\n"
                   "    print('refused', e.errno)\nprint('bg')", "", limits)
    assert r.stdout == "refused 1\nbg\n"  # new processes are refused (seccomp)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline and _sleepers(uid):
        time.sleep(0.05)
    assert _sleepers(uid) == []  # the background sleep died with the namespace


def _sleepers(uid):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/status") as f:
                    st = f.read()
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if f"\nUid:\t{uid}\t" in st and b"time.sleep(30)" in cmd:
                out.append(int(name))
    return out


def test_the_pool_is_exported_under_its_own_name():
    import grpolab.rewards as rewards

    assert "SandboxPool" in rewards.__all__ and "ForkServerPool" not in rewards.__all__
