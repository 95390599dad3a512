"""Prestarted sandboxes (grpolab.rewards.sandbox.prestart): each slot keeps one fresh sandbox
started ahead of time; it serves exactly one program, a different /tmp size gets a fresh one,
a dead one is replaced, and closing the pool leaves no process behind."""

from __future__ import annotations

import os
import signal
import time

import pytest

from grpolab.rewards.sandbox import SandboxLimits, SandboxPool, bwrap_path

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="needs bubblewrap")


def _idle_after(pool: SandboxPool, timeout_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pids = pool.idle_sandbox_pids()
        if pids:
            return pids
        time.sleep(0.01)
    return []


def test_each_run_takes_the_prestarted_sandbox_and_a_new_one_is_started(fresh_pool, alive):
    seen = []
    for _ in range(4):
        [idle] = _idle_after(fresh_pool)
        assert idle not in seen  # never the same sandbox twice
        r = fresh_pool.run("import os; print(os.getpid())", "", SandboxLimits())
        assert r.stdout == "1\n" and r.reason == ""  # PID 1 of its own namespace
        seen.append(idle)
        assert not alive(idle)  # the sandbox that ran is gone
    assert len(set(seen)) == 4


def test_a_run_leaves_nothing_in_the_next_prestarted_sandbox(fresh_pool):
    limits = SandboxLimits()
    r = fresh_pool.run("open('/tmp/mark', 'w').write('x'); import sys; sys.modules['x'] = 1",
                 "", limits)
    assert r.reason == ""
    r = fresh_pool.run("import os, sys; print(os.listdir('/tmp'), 'x' in sys.modules)", "", limits)
    assert r.stdout == "[] False\n"


def test_other_tmp_size_discards_the_prestarted_sandbox(fresh_pool, alive):
    [idle] = _idle_after(fresh_pool)
    # the default /tmp is 16 MB; a program may write up to file_size_mb, so /tmp must be 40 MB
    src = ("import os\nwith open('/tmp/big', 'wb') as f:\n    f.write(b'x' * (30 << 20))\n"
           "print(os.path.getsize('/tmp/big'))")
    r = fresh_pool.run(src, "", SandboxLimits(file_size_mb=40, memory_mb=512))
    assert r.stdout == str(30 << 20) + "\n", (r.reason, r.stderr[-300:])
    assert not alive(idle)  # discarded, not left behind
    r = fresh_pool.run(src, "", SandboxLimits())  # back to 16 MB: the write fails
    assert r.returncode != 0 and "File too large" in r.stderr


def test_a_dead_prestarted_sandbox_is_replaced(fresh_pool, alive):
    [idle] = _idle_after(fresh_pool)
    os.killpg(idle, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while alive(idle) and time.monotonic() < deadline:
        time.sleep(0.01)
    r = fresh_pool.run("print(6 * 7)", "", SandboxLimits())
    assert r.stdout == "42\n" and r.reason == ""


def test_the_judge_path_runs_on_a_prestarted_solver(fresh_pool):
    limits = SandboxLimits()
    for _ in range(3):
        judged = fresh_pool.run_judged("def add(a, b):\n    return a + b\n", "",
                                 ["assert add(1, 2) == 3", "assert add(2, 2) == 5"], "", limits)
        verdicts = [r["ok"] for r in judged.records if "ok" in r]
        assert verdicts == [True, False], judged.records


def test_close_kills_the_prestarted_sandboxes(alive):
    p = SandboxPool(size=2)
    p.warm_up()
    deadline = time.monotonic() + 10
    while len(p.idle_sandbox_pids()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    idle = p.idle_sandbox_pids()
    assert len(idle) == 2
    p.close()
    assert p.idle_sandbox_pids() == []
    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in idle) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(alive(pid) for pid in idle)
