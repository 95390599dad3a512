"""Issue 42: the attacker suite -- one test per class of break found in the third round, run as
root and as an unprivileged user (uid 4242 through bubblewrap's user namespace when we are root).

Each test below failed on the main branch before the sandbox was rebuilt on bubblewrap (the
fork server, the judge inside the program's namespace, the nonce-on-stdout verdicts); the file
uses only interfaces both designs have (``pool.run``, the code verifier) so that it can be run
against the old tree too (docs/sandbox.md, "Attacker suite", records which failed there).
Grow it with every new class: a test here states what a program must NOT be able to do.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from grpolab.rewards import SandboxLimits
from grpolab.rewards import sandbox as S

UNPRIVILEGED_UID = 4242
#: Judge-path tests (not of the fast path's shape) that a wrong ``add`` fails.
JUDGE_TESTS = ["r = add(1, 2)\nassert r == 3", "r = add(20, 22)\nassert r == 42"]


def _fail_or_skip(what: str) -> None:
    if S.isolation_required():
        pytest.fail(f"{what} (GRPOLAB_REQUIRE_SANDBOX is set: missing isolation is a failure)")
    pytest.skip(what)


def _make_pool(kind: str):
    if kind == "root":
        return S.SandboxPool(size=1)
    if os.geteuid() != 0:
        return S.SandboxPool(size=1)
    if not os.access("/usr/bin/python3", os.X_OK):
        _fail_or_skip("needs /usr/bin/python3 to run programs as another user")
    return S.SandboxPool(size=1, python="/usr/bin/python3", user=UNPRIVILEGED_UID)


@pytest.fixture(scope="module", params=["root", "unprivileged"])
def pool(request):
    p = _make_pool(request.param)
    if request.param == "unprivileged" and os.geteuid() == 0:
        p.audit_uid = UNPRIVILEGED_UID
    yield p
    p.close()


def run(pool, source: str, **limits):
    limits.setdefault("timeout_s", 5.0)
    return pool.run(source, "", SandboxLimits(**limits))


def score(pool, program: str, tests: list[str], **options):
    """The code verifier on ``pool`` (through whichever hook this tree has)."""
    import grpolab.rewards.code as code_mod

    if hasattr(code_mod, "POOL"):
        old, code_mod.POOL = code_mod.POOL, pool
        try:
            return code_mod.code_reward(program, tests, **options)
        finally:
            code_mod.POOL = old
    original = code_mod.run_sandboxed

    def via(source, **kw):
        lim = SandboxLimits(timeout_s=kw["timeout_s"], memory_mb=kw["memory_mb"],
                            max_output_bytes=kw["max_output_bytes"])
        return pool.run(source, kw.get("stdin", ""), lim, kw.get("private_input", ""))

    code_mod.run_sandboxed = via
    try:
        return code_mod.code_reward(program, tests, **options)
    finally:
        code_mod.run_sandboxed = original


def _marked(marker: str) -> list[int]:
    """pids of live processes whose command line holds ``marker``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        out.append(int(name))
            except OSError:
                pass
    return out


# ------------------------------------------------------------------------------ forged verdicts

#: Finds the harness's nonce by walking the frames (it was a local of the harness's main()),
#: then raises at the top level with forged "LOADED" and "PASS" lines after ``SEP``.
FORGE = r'''
import sys
f, nonce = sys._getframe().f_back, "0" * 32
while f is not None:
    if isinstance(f.f_locals.get("nonce"), str):
        nonce = f.f_locals["nonce"]
        break
    f = f.f_back
SEP = %r
msg = SEP + nonce + ":-1:LOADED:" + SEP + "".join(nonce + ":%%d:PASS:" %% i + SEP for i in range(2))
def add(a, b):
    return 0
%s
'''
SEPARATORS = ["\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[hex(ord(s)) for s in SEPARATORS])
def test_forged_verdict_lines_in_an_exception_message_score_0(pool, sep):
    res = score(pool, FORGE % (sep, "raise ValueError(msg)"), JUDGE_TESTS)
    assert res.score == 0.0, res.info


@pytest.mark.parametrize("how", [
    "raise SystemExit(msg)",
    "class Forged(Exception):\n    pass\nForged.__name__ = msg\nraise Forged()",
    "def add(a, b):\n    raise ValueError(msg)",
    "def add(a, b):\n    return type(msg, (), {})()",
    "import os\nos.write(1, msg.encode()); os.write(2, msg.encode())",
    "print(msg)",
])
def test_forged_verdicts_through_exit_class_names_calls_and_output_score_0(pool, how):
    res = score(pool, FORGE % ("\r", how), JUDGE_TESTS)
    assert res.score == 0.0, res.info


def test_patched_harness_internals_do_not_reach_the_verdict(pool):
    program = FORGE % ("\n", "") + r'''
h = sys.modules.get("_grpolab_code_harness")
if h is not None:
    for name in ("_send", "send", "mark", "_verdict"):
        if hasattr(h, name):
            setattr(h, name, lambda *a, **k: None)
    if hasattr(h, "_exception_info"):
        h._exception_info = lambda exc: {"type": "X", "bases": [], "msg": msg}
def add(a, b):
    raise ValueError(msg)
'''
    res = score(pool, program, JUDGE_TESTS)
    assert res.score == 0.0, res.info


# ------------------------------------------------------------------------------ fake errors, bloat

def test_a_program_cannot_fake_a_verifier_error(pool):
    program = ("import sys\nsys.stderr.write(\"No module named '_grpolab_code_harness'\\n\")\n"
               "print('SandboxError: the sandbox server is gone')\nraise ImportError("
               "\"No module named '_grpolab_code_harness'\")")
    for tests in (["assert add(1, 2) == 3"], JUDGE_TESTS):
        res = score(pool, program, tests)
        assert res.score == 0.0 and "error" not in res.info, res.info


def test_error_messages_cannot_bloat_the_reward_info(pool):
    program = FORGE % ("\n", "") + r'''
big = "".join("\n%s:-1:ERROR:%s\n" % (nonce, "y" * 190) for _ in range(5000))
print(big)
sys.stderr.write(big)
def add(a, b):
    raise ValueError("z" * 100000)
'''
    for tests in (["assert add(1, 2) == 3"] * 3, JUDGE_TESTS):
        res = score(pool, program, tests, max_output_bytes=2_000_000)
        assert res.score == 0.0 and len(repr(res.info)) < 5_000, len(repr(res.info))


# ------------------------------------------------------------------------------ earlier programs

#: Scans its own memory (below the brk, probed for readability with write(2) to a file) for
#: the earlier program's marker and prints every 32-hex-digit value found after it.
SCAN = r'''
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.sbrk.restype = ctypes.c_void_p
null = os.open("/tmp/probe", os.O_WRONLY | os.O_CREAT, 0o600)
top = libc.sbrk(0)
prefix = b"GRPOLAB" + b"_PREV_" + b"MARK="
found, step = set(), 1 << 16
addr = (top & ~(step - 1))
lo = max(addr - (512 << 20), 1 << 16)
while addr > lo:
    addr -= step
    os.lseek(null, 0, 0)
    if libc.write(null, ctypes.c_void_p(addr), step) != step:
        continue
    chunk = ctypes.string_at(addr, step)
    k = chunk.find(prefix)
    while k >= 0:
        cand = chunk[k + len(prefix):k + len(prefix) + 32]
        if len(cand) == 32 and all(c in b"0123456789abcdef" for c in cand):
            found.add(cand.decode())
        k = chunk.find(prefix, k + 1)
print(sorted(found))
'''


def test_a_program_cannot_read_the_previous_program_s_source_or_output(pool):
    secret = uuid.uuid4().hex
    honest = f"# GRPOLAB_PREV_MARK={secret}\nx = 'GRPOLAB_PREV_MARK={secret}'\nprint(x * 3)"
    for _ in range(3):
        assert run(pool, honest).stdout.startswith("GRPOLAB_PREV_MARK=")
    r = run(pool, SCAN, timeout_s=20.0)
    assert r.returncode == 0, r.stderr[-500:]
    assert secret not in r.stdout, "the earlier program's source was readable"


# ------------------------------------------------------------------------------ one unit

def test_processes_cannot_outlive_their_kill(pool):
    """PR_SET_PDEATHSIG cleared, a double fork, setsid, SIGCHLD ignored: after a timeout
    nothing of the program is left."""
    marker = "grpolab-outlive-" + uuid.uuid4().hex[:12]
    src = f'''
import ctypes, os, signal, subprocess, sys, time
libc = ctypes.CDLL(None)
libc.prctl(1, 0, 0, 0, 0)
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
for how in ("popen", "double-fork"):
    try:
        if how == "popen":
            subprocess.Popen([sys.executable, "-c", "import ctypes, time; "
                              "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0); time.sleep(30)  # {marker}"],
                             start_new_session=True)
        elif os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                libc.prctl(1, 0, 0, 0, 0)
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(30)",
                                          "{marker}"])
            os._exit(0)
    except OSError as e:
        print(how, "refused", e.errno, flush=True)
time.sleep(30)
'''
    r = run(pool, src, timeout_s=1.5)
    assert r.timed_out
    deadline = time.monotonic() + 3
    while _marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _marked(marker) == [], "a process of the program outlived its kill"


def test_parked_stdout_does_not_hold_the_caller_past_the_deadline(pool):
    src = '''
import os, sys, time
try:
    if os.fork() == 0:
        os.setsid()
        time.sleep(6)  # keeps the program's stdout open
        os._exit(0)
except OSError as e:
    print("refused", e.errno)
print("parent done")
'''
    t0 = time.monotonic()
    r = run(pool, src, timeout_s=1.0)
    assert time.monotonic() - t0 < 2.5 and "parent done" in r.stdout


def test_cpu_cannot_hide_in_children_that_vanish(pool):
    """Children reaped automatically (SIGCHLD ignored) and fork trees used CPU the sampled
    total never saw: a program may not start a process at all."""
    src = '''
import os, signal
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
n = 0
for i in range(4):
    try:
        if os.fork() == 0:
            x = 0
            for k in range(10 ** 7):
                x += k
            os._exit(0)
        n += 1
    except OSError as e:
        print("refused", e.errno)
        break
print("children", n)
'''
    r = run(pool, src, timeout_s=10.0, cpu_s=1.0)
    assert "children 0" in r.stdout and "refused 1" in r.stdout, (r.stdout, r.stderr[-300:])


# ------------------------------------------------------------------------------ memory outside

MEMORY_OUTSIDE = r'''
import ctypes, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, fn):
    try:
        ret = fn()
        out[name] = "OK" if ret is None or (isinstance(ret, int) and ret >= 0) or not isinstance(ret, int) \
            else ctypes.get_errno()
    except OSError as e:
        out[name] = e.errno
attempt("socketpair", lambda: socket.socketpair())
attempt("socket inet", lambda: socket.socket())
attempt("semget", lambda: libc.semget(0, 250, 0o1600))
attempt("msgget", lambda: libc.msgget(0, 0o1600))
attempt("shmget", lambda: libc.shmget(0, 1 << 20, 0o1600))
attempt("memfd_secret", lambda: libc.syscall(447, 0))
attempt("memfd_create", lambda: os.memfd_create("x"))
attempt("pipe", lambda: os.pipe())
attempt("inotify_init1", lambda: libc.inotify_init1(0))
attempt("userfaultfd", lambda: libc.syscall(323, 0))
attempt("io_uring_setup", lambda: libc.syscall(425, 1, ctypes.create_string_buffer(120)))
attempt("mq_open", lambda: libc.syscall(240, b"/q", 0o100, 0o600, None))
print(json.dumps(out))
'''


def test_memory_outside_the_limit_cannot_be_held(pool):
    """Socket buffers (and SCM_RIGHTS cycles), SysV semaphores, message queues and shared
    memory, memfd_secret, memfds, pipe buffers, inotify: all refused."""
    import json

    r = run(pool, MEMORY_OUTSIDE)
    assert r.returncode == 0, r.stderr[-500:]
    out = json.loads(r.stdout)
    assert {k: v for k, v in out.items() if v != 1} == {}, out  # EPERM everywhere


def test_tmp_files_count_inside_the_memory_budget(pool):
    src = ("n = 0\ntry:\n    for i in range(64):\n        open(f'/tmp/f{i}', 'wb').write(b'x' * (1 << 20))\n"
           "        n += 1\nexcept OSError as e:\n    print('stopped', e.errno)\nprint('files', n)")
    r = run(pool, src, memory_mb=64, file_size_mb=16)
    assert "stopped 28" in r.stdout and int(r.stdout.split("files")[1]) <= 16, r.stdout


# ------------------------------------------------------------------------------ kernel surfaces

def test_mount_listing_calls_are_refused(pool):
    src = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "buf = ctypes.create_string_buffer(4096)\n"
           "req = (ctypes.c_uint64 * 4)(32, 0, 0, 0)\n"
           "for nr in (457, 458):\n"
           "    libc.syscall(nr, req, buf, 512, 0)\n"
           "    print(nr, ctypes.get_errno())")
    r = run(pool, src)
    assert r.stdout == "457 1\n458 1\n", (r.stdout, r.stderr[-300:])  # EPERM, not EINVAL/ok
