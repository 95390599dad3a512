"""The "code" verifier: extraction, scoring rules, reference forms, fail-closed markers."""

from __future__ import annotations

import json

import pytest

from grpolab.rewards import extract_code, safe_score, score

ADD = "def add(a, b):\n    return a + b\n"
TESTS = ["assert add(1, 2) == 3", "assert add(2, 2) == 5", "assert add(0, 0) == 0", "assert add(-1, 1) == 0"]


def test_fraction_of_tests_passed_and_all_or_nothing():
    res = score("code", ADD, TESTS)
    assert res.score == 0.75  # 3 of 4 (the second test is wrong on purpose)
    assert (res.info["passed"], res.info["total"], res.info["loaded"]) == (3, 4, True)
    assert res.info["failures"] == ["1: AssertionError: "]
    assert score("code", ADD, TESTS, all_or_nothing=True).score == 0.0
    assert score("code", ADD, TESTS[:1] + TESTS[2:], all_or_nothing=True).score == 1.0


@pytest.mark.parametrize(
    "completion, code, method",
    [
        ("Sure:\n```python\nx = 1\n```\nDone.", "x = 1\n", "fence"),
        ("```py\na\n```\n```python\nb\n```", "b\n", "fence"),  # the last tagged block
        ("```python\nx = 1\n```\n```\nshell stuff\n```", "x = 1\n", "fence"),  # tagged wins
        ("```\ny = 2\n```", "y = 2\n", "fence"),
        ("```python\nz = 3\n", "z = 3\n", "fence"),  # unclosed fence: rest of the text
        ("w = 4", "w = 4", "whole"),
    ],
)
def test_extract_code(completion, code, method):
    assert extract_code(completion) == (code, method)


def test_fenced_program_with_prose_around_it():
    completion = f"Here is my solution.\n```python\n{ADD}```\nIt adds."
    assert score("code", completion, TESTS[:1]).score == 1.0
    assert score("code", completion, TESTS[:1], extract=False).score == 0.0  # prose is not Python


def test_program_errors_score_zero():
    res = score("code", "def add(a, b):\n    return a +\n", TESTS)
    assert res.score == 0.0 and not res.info["loaded"]
    assert res.info["failures"][0].startswith("program: SyntaxError")
    res = score("code", ADD + "raise RuntimeError('late')", TESTS)
    assert res.score == 0.0 and "RuntimeError: late" in res.info["failures"][0]
    assert score("code", ADD + "import sys; sys.exit(2)", TESTS).score == 0.0


def test_clean_exit_in_the_program_still_runs_the_tests():
    assert score("code", ADD + "import sys\nsys.exit(0)", TESTS).score == 0.75


def test_early_hard_exit_cannot_fake_a_pass():
    # os._exit(0) skips the tests: no markers -> nothing passed (fail-closed)
    res = score("code", ADD + "import os\nos._exit(0)", TESTS)
    assert res.score == 0.0 and res.info["returncode"] == 0 and not res.info["loaded"]
    # printing look-alike markers without the per-call nonce counts for nothing
    # (add always returns 0: only add(0, 0) == 0 and add(-1, 1) == 0 really pass -> 2 of 4)
    fake = "\n".join(f"print('deadbeef:{i}:PASS:')" for i in range(4))
    assert score("code", "def add(a, b): return 0\n" + fake, TESTS).score == 0.5


def test_reference_forms():
    assert score("code", ADD, json.dumps(TESTS)).score == 0.75  # JSON text (a dataset column)
    assert score("code", ADD, "assert add(2, 3) == 5").score == 1.0  # one snippet
    ref = {"tests": ["assert data == [3, 4]"], "stdin": "3 4\n",
           "setup": "import math"}
    prog = "data = [int(x) for x in input().split()]\nassert math.sqrt(16) == 4"
    assert score("code", prog, ref).score == 1.0
    with pytest.raises(ValueError, match="no tests"):
        score("code", ADD, [])
    with pytest.raises(TypeError, match="list of test snippets"):
        score("code", ADD, 42)
    with pytest.raises(ValueError, match="unknown keys"):
        score("code", ADD, {"tests": ["pass"], "timeout": 3})
    bad = safe_score("code", ADD, {"tests": "assert True"})
    assert bad.score == 0.0 and "TypeError" in bad.info["error"]


def test_a_test_that_hangs_uses_up_the_time_and_later_tests_count_as_failed():
    tests = ["assert add(1, 1) == 2", "while True: pass", "assert add(2, 2) == 4"]
    res = score("code", ADD, tests, timeout_s=1.0)
    assert res.score == pytest.approx(1 / 3) and res.info["timed_out"]
    assert "error" not in res.info  # a bad program is not a verifier error


def test_monkeypatching_builtins_or_os_write_does_not_turn_failures_into_passes():
    hacks = [
        "import builtins\nbuiltins.exec = lambda *a, **k: None",
        "import builtins\nbuiltins.compile = lambda *a, **k: compile('pass', 'x', 'exec')",
        "import builtins\nbuiltins.enumerate = lambda xs: [(i, 'pass') for i in range(4)]",
        "import os\n_w = os.write\nos.write = lambda fd, b: _w(fd, b.replace(b':FAIL:', b':PASS:'))",
    ]
    for hack in hacks:
        res = score("code", ADD + hack, TESTS)
        assert res.score == 0.75, (hack, res.info)  # the one wrong test still fails


def test_forked_copies_trying_other_answers_earn_nothing():
    # each forked copy defines a different `add`; one of them (k = 1) is right for add(1, 2) == 3
    # etc. Only the original process (k = 0, always wrong here) may report.
    program = """
import os
k = 0
for j in range(1, 4):
    if os.fork() == 0:
        k = j
        break
def add(a, b):
    return a + b if k == 1 else -99
"""
    res = score("code", program, TESTS)
    assert res.score == 0.0, res.info
