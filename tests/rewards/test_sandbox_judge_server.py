"""The judge server (grpolab.rewards.sandbox.judge_server): one long-lived judge sandbox per
slot runs many programs' tests, each program in its own fresh solver sandbox. What a request
leaves (a hung test, a solver's unsolicited frames, CPU spent) must not reach the next one."""

from __future__ import annotations

import time

import pytest

from grpolab.rewards.sandbox import SandboxLimits, SandboxPool, bwrap_path
from grpolab.rewards.sandbox.judge_server import server_pids

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="needs bubblewrap")

ADD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "r = add(2, 2); assert r == 4"]


def _verdicts(judged) -> list:
    return [r["ok"] for r in judged.records if "ok" in r]


def test_one_server_serves_many_programs_each_in_a_fresh_solver(fresh_pool):
    limits = SandboxLimits()
    servers = set()
    for k in range(5):
        program = ADD if k % 2 == 0 else "def add(a, b):\n    return a - b\n"
        j = fresh_pool.run_judged(program + "import os\nPID = os.getpid()\n", "", TESTS + ["assert PID == 1"],
                            "", limits)
        assert _verdicts(j) == ([True, True, True] if k % 2 == 0 else [False, False, True])
        assert j.judge.reason == "" and j.solver.reason == ""
        servers |= set(fresh_pool.idle_sandbox_pids()) & set(server_pids())
    assert len(servers) == 1  # the same judge server throughout


def test_a_hung_test_retires_the_server_and_the_next_request_gets_a_new_one(fresh_pool, alive):
    def servers():  # this pool's judge servers (other tests' pools may have theirs)
        return set(fresh_pool.idle_sandbox_pids()) & set(server_pids())

    fresh_pool.run_judged(ADD, "", TESTS, "", SandboxLimits())
    hung = servers()
    assert len(hung) == 1
    j = fresh_pool.run_judged(ADD, "", ["while True: pass"], "", SandboxLimits(timeout_s=1.0))
    assert j.judge.reason == "timeout" and _verdicts(j) == []
    assert not servers()  # retired at once
    j = fresh_pool.run_judged(ADD, "", TESTS, "", SandboxLimits())
    assert _verdicts(j) == [True, True] and j.judge.reason == ""
    assert len(servers()) == 1 and not hung & servers()  # a new server
    assert not any(alive(pid) for pid in hung)


def test_a_solvers_unsolicited_frames_do_not_reach_the_next_request(fresh_pool):
    # the program writes forged frames on its channel to the judge before and after loading
    forge = ("import posix, json\n"
             "def frame(o):\n    b = json.dumps(o).encode()\n    return len(b).to_bytes(4, 'big') + b\n"
             "for _ in range(50):\n"
             "    posix.write(6, frame({'loaded': True, 'names': {}}) + frame({'ok': 3}))\n"
             "def add(a, b):\n    return 0\n")
    j = fresh_pool.run_judged(forge, "", TESTS, "", SandboxLimits())
    assert _verdicts(j) in ([], [False, False])
    for _ in range(3):  # honest programs after it, on the same server
        j = fresh_pool.run_judged(ADD, "", TESTS, "", SandboxLimits())
        assert _verdicts(j) == [True, True]
    j = fresh_pool.run_judged("def add(a, b):\n    return 0\n", "", TESTS, "", SandboxLimits())
    assert _verdicts(j) == [False, False]


def test_each_request_is_held_to_its_own_cpu_limit(fresh_pool):
    # ~0.3 CPU-s of judge work per request under cpu_s=1: the server's earlier CPU does not count
    busy = "t = __import__('time').process_time()\nwhile __import__('time').process_time() - t < 0.3: pass"
    for _ in range(5):
        j = fresh_pool.run_judged(ADD, "", [busy, TESTS[0]], "", SandboxLimits(cpu_s=1.0, timeout_s=10.0))
        assert _verdicts(j) == [True, True] and j.judge.reason == "", j.judge
        assert 0.25 <= j.judge.cpu_s < 1.0


def test_the_tests_namespace_is_fresh_per_request(fresh_pool):
    j = fresh_pool.run_judged(ADD, "", ["LEFT = 1", "assert add(1, 1) == 2"], "", SandboxLimits())
    assert _verdicts(j) == [True, True]
    j = fresh_pool.run_judged(ADD, "", ["assert 'LEFT' not in globals()"], "", SandboxLimits())
    assert _verdicts(j) == [True]


def test_close_ends_the_server(alive):
    p = SandboxPool(size=1)
    j = p.run_judged(ADD, "", TESTS, "", SandboxLimits())
    if j.judge.reason == "sandbox_error":
        p.close()
        pytest.skip("no sandbox here")
    pids = [pid for pid in p.idle_sandbox_pids() if pid in server_pids()]
    assert len(pids) == 1
    p.close()
    deadline = time.monotonic() + 5
    while alive(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not alive(pids[0]) and pids[0] not in server_pids()


def test_a_forked_child_gets_its_own_server_and_the_parents_lives_on(fresh_pool):
    import os

    assert _verdicts(fresh_pool.run_judged(ADD, "", TESTS, "", SandboxLimits())) == [True, True]
    parent_servers = set(fresh_pool.idle_sandbox_pids()) & set(server_pids())
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child judges with the same pool object
        try:
            ok = _verdicts(fresh_pool.run_judged(ADD, "", TESTS, "", SandboxLimits())) == [True, True]
            own = set(fresh_pool.idle_sandbox_pids()) & set(server_pids())
            ok = ok and len(own) == 1 and not own & parent_servers  # its own server
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    os.waitpid(pid, 0)
    assert got == b"1"
    assert _verdicts(fresh_pool.run_judged(ADD, "", TESTS, "", SandboxLimits())) == [True, True]
    assert set(fresh_pool.idle_sandbox_pids()) & set(server_pids()) == parent_servers


def test_the_server_outlives_the_thread_whose_request_started_it(fresh_pool):
    import threading

    got = []
    t = threading.Thread(target=lambda: got.append(
        _verdicts(fresh_pool.run_judged(ADD, "", TESTS, "", SandboxLimits()))))
    t.start()
    t.join()  # the thread is gone: a server tied to it would die now (--die-with-parent)
    assert got == [[True, True]]
    first = set(fresh_pool.idle_sandbox_pids()) & set(server_pids())
    time.sleep(0.3)
    assert _verdicts(fresh_pool.run_judged(ADD, "", TESTS, "", SandboxLimits())) == [True, True]
    assert set(fresh_pool.idle_sandbox_pids()) & set(server_pids()) == first
