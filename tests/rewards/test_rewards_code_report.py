"""Issue 34, finding 3: the fast path's report is decoded in the verifier with bounded work.

A program may replace the harness's encoder and report anything. Before the fix, a set of
40,000 ints that all hash alike (``k * (2**61 - 1)``) took the verifier 18.9-23.7 s to rebuild
(one quadratic C call: no time limit could interrupt it, and a ``score_batch`` thread held the
GIL meanwhile), and the verifier's own timeout inside the check was swallowed as an ordinary
test failure. Now sets and dicts are compared without a hash table built from the program's
items, the decoder has item and depth limits, and a verifier timeout is ``info["error"]``
(issue 58: a report too slow to decode is the program's failure, not the verifier's).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

import grpolab.rewards.code as code_mod
from grpolab.rewards import safe_score, score_batch
from grpolab.rewards.base import VerifierTimeout

#: f() is reported as a set of 40,000 ints with one hash value each (the program swaps the
#: harness's encoder, so nothing of the kind is ever built in the sandbox either).
COLLIDING = '''
import _grpolab_code_harness as H
_orig = H.encode
def _enc(x, ref=None, depth=0):
    if x == "colliding":
        return {"$": "set", "v": [k * (2 ** 61 - 1) for k in range(40000)]}
    if x == "colliding-dict":
        return {"$": "dict", "v": [[k * (2 ** 61 - 1), k] for k in range(40000)]}
    return _orig(x, ref, depth)
H.encode = _enc
def f():
    return "colliding"
def g():
    return "colliding-dict"
'''


def test_a_set_of_40000_colliding_ints_is_judged_in_well_under_a_second():
    t0 = time.monotonic()
    res = safe_score("code", COLLIDING, ["assert f() == {1, 2}", "assert g() == {1: 2}",
                                         "assert 0 in f()", "assert f() >= {0, 2305843009213693951}"],
                     max_output_bytes=8_000_000)
    elapsed = time.monotonic() - t0
    assert "error" not in res.info, res.info
    assert res.info["harness"] == "fast"
    assert res.info["passed"] == 2 and res.score == 0.5, res.info  # 0 is in it, and both
    assert elapsed < 5.0, elapsed  # before: 18.9-23.7 s (the verifier's limit is 10 s)


def test_a_colliding_report_through_score_batch_does_not_freeze_other_threads():
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.01)

    t = threading.Thread(target=ticker)
    t.start()
    try:
        res = score_batch([("code", COLLIDING, ["assert f() == {1, 2}"])] * 2)
    finally:
        stop.set()
        t.join()
    assert [r.score for r in res] == [0.0, 0.0] and all("error" not in r.info for r in res)
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    assert max(gaps) < 1.0, max(gaps)  # before: one thread frozen for 14.9 s


@pytest.mark.parametrize("report, expected, equal", [
    ({"$": "set", "v": [1, 2]}, {1, 2}, True),
    ({"$": "set", "v": [1, 1]}, {1, 2}, False),  # a duplicate cannot stand in for 2
    ({"$": "set", "v": [1, 2, 2]}, {1, 2, 3}, False),
    ({"$": "set", "v": [1, 2]}, [1, 2], False),
    ({"$": "frozenset", "v": [1, {"$": "tuple", "v": [2, 3]}]}, frozenset({1, (2, 3)}), True),
    ({"$": "set", "v": [{"$": "frozenset", "v": [1]}]}, {frozenset({1})}, True),
    ({"$": "dict", "v": [[1, "a"], [2, "b"]]}, {2: "b", 1: "a"}, True),
    ({"$": "dict", "v": [[1, "a"], [1, "b"]]}, {1: "b", 2: "b"}, False),
    ({"$": "dict", "v": [[1, {"$": "set", "v": [3]}]]}, {1: {3}}, True),
    ([{"$": "dict", "v": [["k", [1, 2]]]}], [{"k": [1, 2]}], True),
])
def test_reported_sets_and_dicts_compare_like_the_real_ones(report, expected, equal):
    value = code_mod.decode_report(report, time.monotonic() + 5)
    assert (value == expected) is equal and (expected == value) is equal
    assert (value != expected) is (not equal)


def test_subset_membership_and_lookup_on_reported_containers():
    s = code_mod.decode_report({"$": "set", "v": [1, 2, 3]}, time.monotonic() + 5)
    assert s <= {1, 2, 3, 4} and s < {1, 2, 3, 4} and not s < {1, 2, 3}
    assert s >= {1, 3} and s > {1} and 2 in s and 5 not in s and len(s) == 3
    d = code_mod.decode_report({"$": "dict", "v": [["a", 1], ["b", 2]]}, time.monotonic() + 5)
    assert d["b"] == 2 and d.get("c", 9) == 9 and "a" in d and sorted(d) == ["a", "b"]
    with pytest.raises(KeyError):
        d["c"]
    with pytest.raises(TypeError):
        hash(s)


def test_the_report_decoder_has_item_and_depth_limits():
    deep = 1
    for _ in range(code_mod.MAX_REPORT_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError, match="nested deeper"):
        code_mod.decode_report(deep, time.monotonic() + 5)
    with pytest.raises(ValueError, match="more than"):
        code_mod.decode_report(list(range(code_mod.MAX_REPORT_ITEMS + 1)), time.monotonic() + 5)
    big = {"$": "frozenset", "v": list(range(code_mod.MAX_HASHED_FROZENSET + 1))}
    with pytest.raises(TypeError, match="not hashed"):
        hash(code_mod.decode_report(big, time.monotonic() + 5))


def test_a_verifier_timeout_in_the_check_is_an_error_but_a_slow_report_is_the_programs_failure(
        monkeypatch):
    """Issue 58, item 4: a report too slow to decode is the program's cost (score 0 and a
    failure line), never ``info["error"]`` (before, this test pinned the opposite)."""
    def slow_check(_value):
        raise VerifierTimeout("verifier took longer than 10 s")

    with pytest.raises(VerifierTimeout):
        code_mod._fast_check(slow_check, json.dumps(1), time.monotonic() + 5)
    monkeypatch.setattr(code_mod, "DECODE_BUDGET_S", 0.0)
    res = safe_score("code", "def f():\n    return list(range(10000))\n",
                     ["assert f() == [1]", "assert f()"])
    assert res.score == 0.0 and "error" not in res.info, res.info
    assert res.info["failures"] == ["program: decoding the program's report took over 0.0 s"]
