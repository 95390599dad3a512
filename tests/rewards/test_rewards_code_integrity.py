"""Reward integrity of the "code" verifier: programs that try to earn the reward without solving
the problem score 0; honest programs returning ordinary values keep scoring as before.

Every hack below targets ``add`` against tests whose right answers it does not compute. On the
main branch before the judge/solver split, the always-equal object scored 1.0 and the patched
``AssertionError`` 0.5 (issue 14, finding 3).
"""

from __future__ import annotations

import pytest

from grpolab.rewards import score
from grpolab.rewards.code import fast_plan

TESTS = ["assert add(2, 3) == 5", "assert add(10, -4) == 6", "assert add(0, 7) == 7"]
# the same checks in shapes the fast path does not take: they run in the judge process
JUDGE_TESTS = ["r = add(2, 3)\nassert r == 5", "assert abs(add(10, -4) - 6) < 1e-9",
               "import math\nassert math.isclose(add(0, 7), 7) and sorted([add(0, 7)]) == [7]"]

_FRAME_THIEF = r'''
import gc, re, sys
def add(a, b):
    # look for the test's expected value in every frame above us and in every live string
    texts = []
    f = sys._getframe(1)
    while f is not None:
        texts += [repr(v) for v in list(f.f_locals.values()) + list(f.f_globals.values())]
        f = f.f_back
    texts += [o for o in gc.get_objects() if isinstance(o, str)]
    for t in texts:
        m = re.search(r"add\(%d, %d\) == (-?\d+)" % (a, b), t)
        if m:
            return int(m.group(1))
    return None
'''

_MARKER_FORGER = r'''
import gc, os, re, sys
def add(a, b):
    return 0
nonces = set()
for o in gc.get_objects():
    if isinstance(o, str):
        nonces.update(re.findall(r"\b[0-9a-f]{32}\b", o))
for f in (sys._getframe(),):
    while f is not None:
        for v in list(f.f_locals.values()):
            if isinstance(v, str):
                nonces.update(re.findall(r"\b[0-9a-f]{32}\b", v))
        f = f.f_back
lines = "".join("\n%s:%d:PASS:\n%s:-1:LOADED:\n" % (n, i, n) for n in nonces for i in range(3))
print(lines)
for fd in range(0, 40):
    try:
        os.write(fd, lines.encode())
    except OSError:
        pass
'''

HACKS = {
    "always-equal object": (
        "class T:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\n"
        "    __hash__ = object.__hash__\n"
        "def add(a, b): return T()\n"),
    "always-equal object that is also truthy and ordered": (
        "class T:\n    __eq__ = __le__ = __ge__ = lambda s, o: True\n"
        "    __bool__ = lambda s: True\n    __ne__ = __lt__ = __gt__ = lambda s, o: False\n"
        "def add(a, b): return T()\n"),
    "int subclass whose __eq__ is always true": (
        "class E(int):\n    def __eq__(self, o): return True\n    __hash__ = int.__hash__\n"
        "def add(a, b): return E(0)\n"),
    "int subclass overriding __int__/__index__ too": (
        "class E(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n"
        "    __int__ = __index__ = lambda s: 5\n"
        "def add(a, b): return E(0)\n"),
    "float subclass whose __eq__ is always true": (
        "class F(float):\n    __eq__ = lambda s, o: True\n    __hash__ = float.__hash__\n"
        "def add(a, b): return F(0.5)\n"),
    "str subclass whose __eq__ is always true": (
        "class S(str):\n    __eq__ = lambda s, o: True\n    __hash__ = str.__hash__\n"
        "def add(a, b): return S('nope')\n"),
    "list subclass whose __eq__ is always true": (
        "class L(list):\n    __eq__ = lambda s, o: True\n"
        "def add(a, b): return L([0])\n"),
    "patched builtins.AssertionError": (
        "import builtins\nbuiltins.AssertionError = type('Fake', (BaseException,), {})\n"
        "def add(a, b): return 0\n"),
    "patched builtins exec/compile/isinstance/BaseException": (
        "import builtins\nbuiltins.exec = lambda *a, **k: None\n"
        "builtins.compile = lambda *a, **k: compile('pass', 'x', 'exec')\n"
        "builtins.isinstance = lambda *a: True\nbuiltins.BaseException = type('B', (), {})\n"
        "def add(a, b): return 0\n"),
    "sys.exit(0) inside the function": "import sys\ndef add(a, b):\n    sys.exit(0)\n",
    "os._exit(0) inside the function": "import os\ndef add(a, b):\n    os._exit(0)\n",
    "raise SystemExit inside the function": "def add(a, b):\n    raise SystemExit\n",
    "raise SystemExit(0) inside the function": "def add(a, b):\n    raise SystemExit(0)\n",
    "KeyboardInterrupt inside the function": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "os._exit(0) at the top level after a wrong add": "import os\ndef add(a, b): return 0\nos._exit(0)\n",
    "printing the harness's markers (nonces from gc and frames, every fd)": _MARKER_FORGER,
    "reading the tests from the caller's frame and from gc": _FRAME_THIEF,
    "monkeypatching the comparison (operator, the harness module)": (
        "import operator, sys\noperator.eq = lambda a, b: True\n"
        "h = sys.modules.get('_grpolab_code_harness')\n"
        "if h is not None:\n"
        "    h.Remote._refuse = lambda *a: True\n"
        "    h.Remote.__eq__ = lambda *a: True\n"
        "    h.decode = lambda v, r, depth=0: 5\n"
        "    h._judge = lambda *a, **k: None\n"
        "def add(a, b): return 0\n"),
    "killing the judge (PID 1, the parent, everyone)": (
        "import os, signal\ndef add(a, b):\n"
        "    for pid in (1, os.getppid()):\n"
        "        for sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n"
        "            try: os.kill(pid, sig)\n"
        "            except OSError: pass\n"
        "    return 0\n"),
    "ptrace / process_vm_writev on the judge": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.ptrace(16, 1, 0, 0)  # PTRACE_ATTACH\n"
        "def add(a, b): return 0\n"),
    "reading the private input (fd 3) and the judge's stdout": (
        "import os\nstolen = b''\nfor fd in range(3, 64):\n"
        "    try: stolen += os.read(fd, 65536)\n"
        "    except OSError: pass\n"
        "def add(a, b): return 0\n"),
    # (a well-formed reply written early is only a blind guess, like returning a constant)
    "malformed replies and fake handles on the reply channel": (
        "import os, struct\n"
        "def add(a, b):\n"
        "    for msg in (b'garbage', b'{\"ok\": {\"$\": \"ref\", \"id\": 1}}', b'[1, 2]',\n"
        "                b'{\"raise\": {\"type\": \"AssertionError\"}}'):\n"
        "        for fd in range(3, 16):\n"
        "            try: os.write(fd, struct.pack('>I', len(msg)) + msg)\n"
        "            except OSError: pass\n"
        "    return 0\n"),
    "forked copies answering the calls": (
        "import os\nk = 0\nfor j in range(1, 6):\n    if os.fork() == 0:\n        k = j\n"
        "        break\n"
        "def add(a, b): return a + b if k else -99\n"),
    "shadowing the builtins and modules the tests use (abs, len, math)": (
        "import types\n"
        "abs = lambda x: 0\nlen = lambda x: 1\nsorted = lambda x: [7]\n"
        "math = types.SimpleNamespace(isclose=lambda *a, **k: True)\n"
        "def add(a, b): return 0\n"),
    "returning a fake handle dict": (
        "def add(a, b): return {'$': 'ref', 'id': 1, 'type': 'int'}\n"),
}


@pytest.mark.parametrize("path", ["fast", "judge"])
@pytest.mark.parametrize("name", sorted(HACKS))
def test_reward_hack_scores_zero(name, path):
    tests = TESTS if path == "fast" else JUDGE_TESTS
    assert (fast_plan(tests) is not None) is (path == "fast")
    res = score("code", HACKS[name], tests, timeout_s=5.0)
    assert res.score == 0.0, (name, res.info)
    assert res.info["harness"] == path
    assert "error" not in res.info, res.info  # a hack is a bad program, not a verifier failure


@pytest.mark.parametrize("tests", [TESTS, JUDGE_TESTS], ids=["fast", "judge"])
def test_a_correct_add_passes_the_same_tests(tests):
    # the battery's tests are right: an honest program scores 1.0 against them
    assert score("code", "def add(a, b): return a + b", tests).score == 1.0


@pytest.mark.parametrize(
    "tests, setup, fast",
    [
        (["assert add(2, 3) == 5", "assert not is_odd(2)", "assert is_odd(3)"], "", True),
        (["assert Solution().twoSum([2, 7], 9) == [0, 1]", "assert f(1)[0] in (1, 2)"], "", True),
        (["assert data == [3, 4]", "assert f(x=-1.5) is None"], "", True),
        (["assert abs(f(1) - 2.5) < 1e-9"], "", False),  # the expected value sits in an operand
        (["assert isinstance(f(1), int)"], "", False),  # a builtin would run inside the sandbox
        (["assert check(f(1), 2)"], "def check(a, b): return a == b", False),  # the setup's helper
        (["assert f(y) == 2"], "", False),  # a non-literal argument
        (["assert f(1) == g(1)"], "", False),  # no literal side
        (["assert f(1) is 3"], "", False),  # identity with a non-singleton
        (["x = f(1)\nassert x == 1"], "", False),  # more than one statement
        (["assert f(1) == 2", "for i in range(3): assert f(i) == i + 1"], "", False),  # all or none
        (["assert f._secret() == 1"], "", False),  # private attributes
    ],
)
def test_fast_path_takes_only_tests_whose_expected_value_stays_out_of_the_sandbox(tests, setup, fast):
    plan = fast_plan(tests, setup)
    assert (plan is not None) is fast
    if fast:
        assert all("==" not in p["expr"] for p in plan)


HONEST = [
    # (program, tests) that pass with ordinary return values
    ("def f(x): return x * 2", ["assert f(2) == 4", "assert f(-1) == -2", "assert f(10**30) == 2 * 10**30"]),
    ("def f(x): return x / 3", ["assert abs(f(1) - 0.3333333) < 1e-6", "import math\nassert math.isclose(f(3), 1.0)",
                                "assert f(0) == 0.0", "assert f(float('inf')) == float('inf')"]),
    ("def f(s): return s[::-1]", ["assert f('abc') == 'cba'", "assert f('') == ''", "assert f('héllo') == 'olléh'"]),
    ("def f(n): return list(range(n))", ["assert f(3) == [0, 1, 2]", "assert f(0) == []", "assert len(f(5)) == 5"]),
    ("def f(k): return {k: [k, (k,)], 'n': None}", ["assert f(1) == {1: [1, (1,)], 'n': None}"]),
    ("def f(): return (1, 'a', None, True)", ["assert f() == (1, 'a', None, True)", "assert f()[3] is True",
                                              "assert f()[2] is None", "assert isinstance(f(), tuple)"]),
    ("def f(xs): return set(xs)", ["assert f([1, 1, 2]) == {1, 2}", "assert f([]) == set()"]),
    ("def f(): return frozenset({1}), b'\\x00ab', 1 + 2j", ["assert f() == (frozenset({1}), b'\\x00ab', 1 + 2j)"]),
    ("def f(x): return x > 0", ["assert f(1)", "assert not f(-1)", "assert f(1) is True"]),
    ("def f(): return None", ["assert f() is None", "assert f() == None"]),
    ("def f(xs): xs.sort()", ["l = [3, 1, 2]\nf(l)\nassert l == [1, 2, 3]"]),  # in-place on an argument
    ("def f(d): d['k'] = 1", ["d = {}\nf(d)\nassert d == {'k': 1}"]),
    ("class Stack:\n    def __init__(self): self.items = []\n    def push(self, x): self.items.append(x)\n"
     "    def pop(self): return self.items.pop()\n    def size(self): return len(self.items)",
     ["s = Stack()\ns.push(1)\ns.push(2)\nassert s.pop() == 2", "s = Stack()\ns.push(5)\nassert s.size() == 1",
      "s = Stack()\ns.push(7)\nassert s.items == [7]"]),
    ("class Solution:\n    def twoSum(self, nums, target):\n        seen = {}\n        for i, x in enumerate(nums):\n"
     "            if target - x in seen: return [seen[target - x], i]\n            seen[x] = i",
     ["assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]"]),
    ("def f(x):\n    if x < 0: raise ValueError('negative')\n    return x",
     ["try:\n    f(-1)\nexcept ValueError as e:\n    assert 'negative' in str(e)\nelse:\n    assert False"]),
    ("class MyError(Exception): pass\ndef f(): raise MyError('x')",
     ["try:\n    f()\nexcept MyError:\n    pass\nelse:\n    assert False"]),
    ("N = 10\nTABLE = [i * i for i in range(N)]", ["assert N == 10", "assert TABLE[3] == 9"]),
    ("import math\ndef f(x): return math.sqrt(x)", ["assert f(16) == 4.0", "assert math.floor(f(17)) == 4"]),
    ("def f(x): return x", ["assert f([1, [2, {3: 'x'}]]) == [1, [2, {3: 'x'}]]"]),
    ("def f(*a, **k): return [a, sorted(k.items())]", ["assert f(1, 2, z=3) == [(1, 2), [('z', 3)]]"]),
    ("MEMO = list(range(300_000))\ndef f(i): return MEMO[i]",  # a big table is copied as plain data
     ["x = f(7)\nassert x == 7", "assert len(MEMO) == 300_000 and MEMO[5] == 5",
      "assert sum(1 for _ in MEMO) == 300_000"]),
]


@pytest.mark.parametrize("program, tests", HONEST, ids=[p.split("\n")[0][:30] for p, _ in HONEST])
def test_honest_programs_with_ordinary_values_still_pass(program, tests):
    res = score("code", program, tests)
    assert res.score == 1.0, res.info


def test_plain_values_compared_in_the_judge_not_by_the_program():
    # a wrong answer of the right type still fails; the judge's own == decides
    res = score("code", "def f(x): return [x, x]", ["assert f(1) == [1, 1]", "assert f(1) == [1, 2]"])
    assert res.score == 0.5 and res.info["failures"] == ["1: AssertionError: "]


def test_objects_of_the_program_refuse_comparison_with_a_clear_message():
    prog = "class P:\n    def __init__(self, x): self.x = x\n    def __eq__(self, o): return True\ndef f(): return P(1)"
    res = score("code", prog, ["assert f() == f()", "assert f().x == 1", "assert P(1).x == 1"])
    # a function's result must be plain data (issue 58); an instance the test made itself from
    # the program's class answers attribute reads with plain data
    assert res.info["passed"] == 1, res.info
    assert "cannot be compared" in res.info["failures"][0]
    assert "not plain data" in res.info["failures"][1]


#: Test shapes that used to run the program's own code on a value that was not plain data
#: (issue 58): now every one fails, with a message that says why, on both paths.
REFUSED = [
    ("def gen(n):\n    yield from range(n)", ["assert list(gen(3)) == [0, 1, 2]", "assert sum(gen(4)) == 6"]),
    ("class S:\n    def __init__(self): self.items = [1]\n    def __len__(self): return 1\n"
     "    def __contains__(self, x): return True\n    def __iter__(self): return iter([1])",
     ["s = S()\nassert len(s) == 1", "s = S()\nassert 1 in s", "s = S()\nassert list(s) == [1]"]),
]


@pytest.mark.parametrize("program, tests", REFUSED, ids=[p.split("\n")[0][:30] for p, _ in REFUSED])
def test_non_plain_values_fail_the_test_with_a_clear_message(program, tests):
    res = score("code", program, tests)
    assert res.score == 0.0 and "error" not in res.info, res.info
    assert all("not plain data" in f for f in res.info["failures"]), res.info


def test_a_program_that_ends_inside_a_call_fails_every_later_test():
    prog = "import os\ndef add(a, b):\n    if a == 10: os._exit(0)\n    return a + b"
    res = score("code", prog, TESTS)
    assert res.info["passed"] == 1 and res.score == pytest.approx(1 / 3)


def test_program_prints_do_not_disturb_the_markers():
    prog = "print('hello')\ndef add(a, b):\n    print('\\nxyz:0:PASS:')\n    return a + b"
    assert score("code", prog, TESTS).score == 1.0
