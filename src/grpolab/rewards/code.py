r"""The "code" verifier: run the model's Python program and the item's tests in the sandbox.

Reference: the tests, as a list of Python snippets (typically ``assert`` statements), run one
after another *after* the program, in the program's global namespace:
``["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]``. Also accepted: a JSON string holding
that list (a dataset column), one snippet as a plain string, or a dict
``{"tests": [...], "stdin": "...", "setup": "...", "judge_setup": "..."}`` (``setup`` runs
before the program, e.g. imports the tests rely on, and the program can see it;
``judge_setup`` runs only in the judge, e.g. a HumanEval ``check(candidate)`` with the
expected values; ``stdin`` feeds the program).

Program: the last fenced ```` ```python ```` (or ```` ```py ````, or bare ```` ``` ````) block of the
completion; an unclosed fence takes the rest of the text; no fence -> the whole completion
(``extract=False``: always the whole completion).

Score: fraction of tests that ran without raising (``all_or_nothing=True``: 1.0 only when all
pass). A program that raises (or exits non-zero) before the tests scores 0; ``sys.exit(0)`` /
``exit()`` at the program's top level ends the program part and the tests still run. Everything
runs under one deadline, so ``timeout_s`` covers program and tests together; tests that did not
report before a timeout count as failed.

Reward integrity (details: docs/sandbox.md, :mod:`grpolab.rewards.sandbox.harness`): no value
the program produces vouches for itself, and no verdict is read from anything the program can
write. **Fast path** (:func:`fast_plan`; every test is ``assert <program side> <op> <literal>``,
e.g. ``assert add(2, 3) == 5``): only the program side enters the sandbox, which reports each
value as plain data on its report channel, and the comparison with the literal runs here, in
the verifier (a program that forges these reports only chooses its own answers). **Judge
path** (any other test): the program runs in a **solver** sandbox that answers call requests;
the tests run in a separate **judge** sandbox (its own process and namespaces) that the
program cannot reach, which gets the program's names as proxies and writes the verdicts on a
channel only it holds. Values cross as plain data rebuilt by the judge, so a test's ``==``
compares real ints, strs, lists... (no always-equal objects, no ``__eq__`` on subclasses, no
patched ``AssertionError``/``builtins``/``sys.exit`` reaching the comparison); objects that are
not plain data come back as handles that refuse to be compared; printed text is never parsed;
if the program's process ends, every test not yet reported fails. Tests that need the
program's own objects (``isinstance(x, Program's class)``, identity) see proxies: such a test
fails rather than trusting the program (docs/sandbox.md).
"""

from __future__ import annotations

import ast
import builtins
import json
import operator
import re
import sys
import time
from typing import Any

from grpolab.rewards.base import RewardResult, VerifierTimeout, register_reward
from grpolab.rewards.sandbox import SandboxError, SandboxLimits, SandboxPool, default_pool
from grpolab.rewards.sandbox.harness import NO_COMPARE, decode

__all__ = ["code_reward", "extract_code", "fast_plan", "parse_code_reference"]

#: The pool the code verifier runs in (None: the process-wide one); tests set their own.
POOL: SandboxPool | None = None
#: Most failure lines kept in ``info["failures"]``, and the length of each.
MAX_FAILURES, MAX_FAILURE_CHARS = 5, 200

_FENCE_RE = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def extract_code(completion: str) -> tuple[str, str]:
    """``(code, method)``: the last fenced block ("fence"), else the whole text ("whole").

    Fences tagged python/py/python3 win over untagged ones.
    """
    blocks = [(m.group(1), m.group(2)) for m in _FENCE_RE.finditer(completion)]
    tagged = [code for tag, code in blocks if tag]
    if tagged:
        return tagged[-1], "fence"
    if blocks:
        return blocks[-1][1], "fence"
    return completion, "whole"


def parse_code_reference(reference: Any) -> dict[str, Any]:
    """Normalise a code reference to ``{"tests": [str, ...], "stdin": str, "setup": str,
    "judge_setup": str}``. ``setup`` runs before the program in its own sandbox too (imports,
    helpers the program may see); ``judge_setup`` runs only in the judge, after ``setup``
    (a HumanEval ``check(candidate)``, expected values: nothing the program may see)."""
    if isinstance(reference, str):
        text = reference.strip()
        if text.startswith("[") or text.startswith("{"):
            try:
                reference = json.loads(text)
            except json.JSONDecodeError:
                reference = [reference]
        else:
            reference = [reference]
    if isinstance(reference, (list, tuple)):
        reference = {"tests": list(reference)}
    if not isinstance(reference, dict):
        raise TypeError(
            "the code reward needs a list of test snippets (or a dict with 'tests'), got "
            f"{type(reference).__name__}"
        )
    unknown = set(reference) - {"tests", "stdin", "setup", "judge_setup"}
    if unknown:
        raise ValueError(f"unknown keys in the code reference: {sorted(unknown)}; "
                         "allowed: 'tests', 'stdin', 'setup', 'judge_setup'")
    tests = reference.get("tests")
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise TypeError("the code reference's 'tests' must be a list of str snippets")
    stdin = reference.get("stdin", "") or ""
    setup = reference.get("setup", "") or ""
    judge_setup = reference.get("judge_setup", "") or ""
    if not all(isinstance(x, str) for x in (stdin, setup, judge_setup)):
        raise TypeError("the code reference's 'stdin', 'setup' and 'judge_setup' must be str")
    return {"tests": tests, "stdin": stdin, "setup": setup, "judge_setup": judge_setup}


_OPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
        ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_NO_LITERAL = object()


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO_LITERAL


def _bound_names(source: str) -> set[str] | None:
    """Names a snippet binds at its top level (None when it does not parse)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _chain_of(node: ast.AST, foreign: set[str]) -> list | None:
    """The steps of ``node`` when it is computed from a name the program defines (not a
    builtin, not the setup's) by attribute access, indexing by literals and calls with literal
    arguments: ``[("name", n), ("call", args, kwargs) | ("attr", a) | ("index", k)...]``, else
    None. No operators: they could carry the expected value into the sandbox
    (``abs(f(x) - 2.5) < 1e-9`` goes through the judge instead)."""
    if isinstance(node, ast.Name):
        ok = node.id not in foreign and not node.id.startswith("_")
        return [("name", node.id)] if ok else None
    if isinstance(node, ast.Attribute):
        inner = None if node.attr.startswith("_") else _chain_of(node.value, foreign)
        return inner + [("attr", node.attr)] if inner else None
    if isinstance(node, ast.Subscript):
        key = _literal(node.slice)
        inner = None if key is _NO_LITERAL else _chain_of(node.value, foreign)
        return inner + [("index", key)] if inner else None
    if isinstance(node, ast.Call):
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
                k.arg is None for k in node.keywords):
            return None
        args = [_literal(a) for a in node.args]
        kwargs = [(k.arg, _literal(k.value)) for k in node.keywords]
        if any(x is _NO_LITERAL for x in args) or any(x is _NO_LITERAL for _, x in kwargs):
            return None
        inner = _chain_of(node.func, foreign)
        return inner + [("call", tuple(args), tuple(kwargs))] if inner else None
    return None


def _program_side(node: ast.AST, foreign: set[str]) -> bool:
    return _chain_of(node, foreign) is not None


def fast_plan(tests: list[str], setup: str = "") -> list[dict] | None:
    """Per test ``{"expr", "chain", "check"}`` when EVERY test is ``assert <program side> <op>
    <literal>`` (or ``assert <program side>`` / ``assert not <program side>``); else None (the
    judge).

    ``chain`` (the program side's steps, :func:`_chain_of`) is all that enters the sandbox,
    which runs it only up to the first plain value (the judge path's rule, see
    docs/rewards.md); the remaining steps and ``check(value)`` run here, on the plain data the
    program's value was decoded into. ``expr`` is the program side's source text."""
    setup_names = _bound_names(setup)
    if setup_names is None:
        return None
    foreign = set(dir(builtins)) | set(sys.stdlib_module_names) | setup_names
    plan = []
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            return None
        if len(tree.body) != 1 or not isinstance(tree.body[0], ast.Assert):
            return None
        node = tree.body[0].test
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _OPS:
            op = _OPS[type(node.ops[0])]
            left, right = node.left, node.comparators[0]
            lit_l, lit_r = _literal(left), _literal(right)
            if isinstance(node.ops[0], (ast.Is, ast.IsNot)):
                if not any(x is not _NO_LITERAL and x in (None, True, False) and type(x) in
                           (type(None), bool) for x in (lit_l, lit_r)):
                    return None
            if lit_r is not _NO_LITERAL and lit_l is _NO_LITERAL and _program_side(left, foreign):
                expr, check = left, (lambda v, op=op, e=lit_r: op(v, e))
            elif lit_l is not _NO_LITERAL and lit_r is _NO_LITERAL and _program_side(right, foreign):
                expr, check = right, (lambda v, op=op, e=lit_l: op(e, v))
            else:
                return None
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and _program_side(
                node.operand, foreign):
            expr, check = node.operand, (lambda v: not v)
        elif _program_side(node, foreign):
            expr, check = node, (lambda v: bool(v))
        else:
            return None
        plan.append({"expr": ast.unparse(expr), "chain": _chain_of(expr, foreign),
                     "check": check})
    return plan


#: The report decoder's bounds (fast path, in the verifier): values nested deeper, or holding
#: more items in all, are refused (the test fails); a report that takes longer than the time
#: budget to decode is the PROGRAM's failure (score 0, a failure line), never a verifier
#: error: what a program writes is the program's cost.
MAX_REPORT_DEPTH = 100
MAX_REPORT_ITEMS = 200_000
DECODE_BUDGET_S = 2.0
#: A program's frozenset is hashed (to be looked up in a test's set) only up to this size.
MAX_HASHED_FROZENSET = 1000


class ReportTooSlow(ValueError):
    """Decoding a program's report ran past :data:`DECODE_BUDGET_S` (the program's failure)."""


class _HashIndex:
    """Membership over a program's items without a hash table: (hash, position) pairs sorted,
    a lookup bisects to the run of equal hashes and compares inside it. Items that all hash
    alike (``k * (2**61 - 1)``) make one run: O(n log n) to build, a lookup scans the run only
    for a probe with that very hash (no quadratic blow-up, unlike ``set(items)``)."""

    __slots__ = ("items", "keys", "pos")

    def __init__(self, items: list) -> None:
        pairs = []
        for i, x in enumerate(items):
            try:
                pairs.append((hash(x), i))
            except TypeError:
                pass  # unhashable: never equal to a hashable probe
        pairs.sort()
        self.items = items
        self.keys = [h for h, _ in pairs]
        self.pos = [i for _, i in pairs]

    def find(self, probe) -> int:
        """Position of an item equal to ``probe``, or -1."""
        import bisect

        try:
            h = hash(probe)
        except TypeError:
            return -1
        k = bisect.bisect_left(self.keys, h)
        while k < len(self.keys) and self.keys[k] == h:
            if self.items[self.pos[k]] == probe:
                return self.pos[k]
            k += 1
        return -1


def _in_trusted(x, container) -> bool:
    """``x in container`` for a test's own (trusted) set or dict; False when unhashable."""
    try:
        return x in container
    except TypeError:
        return False


class ReportSet:
    """A program's set or frozenset as reported, compared without building a hash table from
    its items (see :class:`_HashIndex`): ``==``, ``!=``, ``<=``, ``<``, ``>=``, ``>`` against a
    test's set, ``in``, ``len``, iteration."""

    __slots__ = ("items", "frozen", "_index")

    def __init__(self, items: list, frozen: bool) -> None:
        self.items, self.frozen, self._index = items, frozen, None

    def _idx(self) -> _HashIndex:
        if self._index is None:
            self._index = _HashIndex(self.items)
        return self._index

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self):
        return iter(self.items)

    def __contains__(self, x) -> bool:
        return self._idx().find(x) >= 0

    def __repr__(self) -> str:
        return ("frozenset(" if self.frozen else "set(") + repr(self.items) + ")"

    def _subset_of(self, other) -> bool:
        return all(_in_trusted(x, other) for x in self.items)

    def _superset_of(self, other) -> bool:
        idx = self._idx()
        return all(idx.find(y) >= 0 for y in other)

    def __eq__(self, other):
        if isinstance(other, ReportSet):
            other = other.items
        elif not isinstance(other, (set, frozenset)):
            return NotImplemented if not isinstance(other, list) else False
        # equal sizes, other within ours and ours within other: no duplicates, same elements
        return len(self.items) == len(other) and self._superset_of(other) and (
            all(_in_trusted(x, other) for x in self.items) if isinstance(other, (set, frozenset))
            else ReportSet(list(other), True)._superset_of(self.items))

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __le__(self, other):
        if not isinstance(other, (set, frozenset)):
            return NotImplemented
        return self._subset_of(other)

    def __lt__(self, other):
        if not isinstance(other, (set, frozenset)):
            return NotImplemented
        return self._subset_of(other) and not self._superset_of(other)

    def __ge__(self, other):
        if not isinstance(other, (set, frozenset)):
            return NotImplemented
        return self._superset_of(other)

    def __gt__(self, other):
        if not isinstance(other, (set, frozenset)):
            return NotImplemented
        return self._superset_of(other) and not self._subset_of(other)

    def __hash__(self):
        if not self.frozen:
            raise TypeError("unhashable type: 'set'")
        if len(self.items) > MAX_HASHED_FROZENSET:
            raise TypeError(f"a reported frozenset of over {MAX_HASHED_FROZENSET} items is "
                            "not hashed")
        return hash(frozenset(self.items))


class ReportDict:
    """A program's dict as reported: ``(key, value)`` pairs compared with a test's dict without
    building a hash table from the program's keys; ``==``, ``!=``, ``[key]``, ``get``, ``in``,
    ``len``, ``keys``/``values``/``items``, iteration over keys."""

    __slots__ = ("pairs", "_keys")

    def __init__(self, pairs: list) -> None:
        self.pairs = pairs
        self._keys = ReportSet([k for k, _ in pairs], True)

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self):
        return iter(k for k, _ in self.pairs)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __getitem__(self, key):
        i = self._keys._idx().find(key)
        if i < 0:
            raise KeyError(key)
        return self.pairs[i][1]

    def get(self, key, default=None):
        i = self._keys._idx().find(key)
        return default if i < 0 else self.pairs[i][1]

    def keys(self):
        return [k for k, _ in self.pairs]

    def values(self):
        return [v for _, v in self.pairs]

    def items(self):
        return list(self.pairs)

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self.pairs) + "}"

    def __eq__(self, other):
        if not isinstance(other, dict):
            return NotImplemented if not isinstance(other, list) else False
        if len(self.pairs) != len(other) or not self._keys._superset_of(other):
            return False
        return all(_in_trusted(k, other) and other[k] == v for k, v in self.pairs)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None


def decode_report(v, deadline: float):
    """A value the fast path's harness reported (JSON, parsed), rebuilt for the comparison in
    the verifier with bounded work: at most :data:`MAX_REPORT_ITEMS` items and
    :data:`MAX_REPORT_DEPTH` levels (else ValueError: the test fails), sets and dicts as
    :class:`ReportSet` / :class:`ReportDict` (no hash table built from the program's data), and
    :class:`ReportTooSlow` past ``deadline`` (``time.monotonic()``)."""
    budget = [MAX_REPORT_ITEMS]

    def rec(v, depth):
        if depth > MAX_REPORT_DEPTH:
            raise ValueError(f"reported value nested deeper than {MAX_REPORT_DEPTH} levels")
        budget[0] -= 1
        if budget[0] < 0:
            raise ValueError(f"reported value holds more than {MAX_REPORT_ITEMS} items")
        if budget[0] % 4096 == 0 and time.monotonic() > deadline:
            raise ReportTooSlow("decoding the program's report took over "
                                f"{DECODE_BUDGET_S} s")
        t = type(v)
        if v is None or t in (bool, int, float, str):
            return v
        if t is list:
            return [rec(e, depth + 1) for e in v]
        if t is not dict:
            raise ValueError(f"malformed value of type {t.__name__}")
        tag, body = v.get("$"), v.get("v")
        if tag == "ref":
            return _Opaque(str(v.get("type", "?")))
        if tag in ("int", "float", "complex", "bytes", "bytearray"):
            if tag == "int" and (type(body) is not str or len(body) > 10_000):
                raise ValueError("malformed int")
            return decode({"$": tag, "v": body}, None)
        if type(body) is not list:
            raise ValueError(f"malformed {tag!r} value")
        if tag == "dict":
            pairs = []
            for kv in body:
                if type(kv) is not list or len(kv) != 2:
                    raise ValueError("malformed dict item")
                pairs.append((rec(kv[0], depth + 1), rec(kv[1], depth + 1)))
            return ReportDict(pairs)
        items = [rec(e, depth + 1) for e in body]
        if tag == "tuple":
            return tuple(items)
        if tag in ("set", "frozenset"):
            return ReportSet(items, tag == "frozenset")
        raise ValueError(f"unknown value tag {tag!r}")

    return rec(v, 0)


class _Opaque:
    """A non-plain value the program returned (fast path): it refuses to be compared."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def _refuse(self, *_a):
        raise TypeError(NO_COMPARE.format(self.type_name))

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __contains__ = _refuse
    __len__ = __iter__ = __getitem__ = _refuse
    __hash__ = None


def _fast_check(check, payload, deadline: float) -> str:
    """"" when ``check`` holds for the decoded value (``payload``: the report's parsed JSON),
    else the failure ("ErrorType: message"). A verifier timeout raised by ``check`` is not a
    failure of the program: it propagates (``info["error"]``); :class:`ReportTooSlow` does
    too (the caller fails the whole program)."""
    try:
        value = decode_report(payload, deadline)
        return "" if check(value) else "AssertionError: "
    except (VerifierTimeout, ReportTooSlow):
        raise
    except Exception as exc:  # noqa: BLE001 - a malformed report or an opaque value: failed
        return f"{type(exc).__name__}: {exc}"


def _rest_of(step: dict, at):
    """``check`` preceded by the chain's steps the sandbox did not run (from ``at``, which the
    program reports: it may only claim to have run calls and attributes, never an index)."""
    chain, check = step["chain"], step["check"]
    if type(at) is not int or not 1 <= at <= len(chain) or any(
            s[0] == "index" for s in chain[1:at]):
        def refuse(_value):
            raise ValueError("malformed report (steps)")
        return refuse
    rest = chain[at:]

    def run(value):
        for s in rest:
            value = _host_step(value, s)
        return check(value)
    return run


#: A reported set or dict is rebuilt as a real one for a method call only up to this size.
MAX_METHOD_CONTAINER = 1000


def _host_step(value, step):
    """One step of a test's chain on a reported plain value, here in the verifier."""
    if isinstance(value, _Opaque):
        value._refuse()
    if isinstance(value, (ReportSet, ReportDict)):
        if len(value) > MAX_METHOD_CONTAINER:
            raise TypeError(f"a reported set or dict of over {MAX_METHOD_CONTAINER} items "
                            "takes no method call or index on the fast path")
        value = (dict(value.pairs) if isinstance(value, ReportDict) else
                 (frozenset if value.frozen else set)(value.items))
    if step[0] == "attr":
        return getattr(value, step[1])
    if step[0] == "index":
        return value[step[1]]
    return value(*step[1], **dict(step[2]))


def _reason_from(failures: list[str]) -> str:
    """A label for a program error the harness caught (the program's own claim about itself)."""
    for f in failures:
        if f.startswith("program: MemoryError"):
            return "memory"
        if f.startswith("program: ") and "File too large" in f:
            return "file_size"
    return ""


def _clip(text: Any) -> str:
    return str(text)[:MAX_FAILURE_CHARS]


def _fast_verdicts(records: list, plan: list[dict], failures: list[str]) -> tuple[bool, set[int]]:
    """(loaded, passed) from the fast path's reports: ``started``, then ``loaded``, then one
    ``{"i", "value" | "raise"}`` per expression; a test with more than one report fails."""
    recs = [r for r in records[:2 + 2 * len(plan) + 2] if isinstance(r, dict)]
    if len(recs) < 2 or recs[0] != {"started": True} or "loaded" not in recs[1]:
        return False, set()
    if recs[1].get("loaded") is not True:
        failures.append(_clip(f"program: {recs[1].get('what', '')}"))
        return False, set()
    reports: dict[int, list[dict]] = {}
    for r in recs[2:]:
        i = r.get("i")
        if type(i) is int and 0 <= i < len(plan):
            reports.setdefault(i, []).append(r)
    passed, deadline = set(), time.monotonic() + DECODE_BUDGET_S
    for i in sorted(reports):
        rs = reports[i]
        if len(rs) != 1:
            why = "more than one report for this test"
        elif "value" in rs[0]:
            try:
                why = _fast_check(_rest_of(plan[i], rs[0].get("at")), rs[0]["value"], deadline)
            except ReportTooSlow as exc:  # the program's cost: it fails as a whole
                failures.append(_clip(f"program: {exc}"))
                return True, set()
        else:
            why = _clip(rs[0].get("raise", "no value"))
        if not why:
            passed.add(i)
        elif len(failures) < MAX_FAILURES:
            failures.append(_clip(f"{i}: {why}"))
    return True, passed


def _judge_verdicts(records: list, total: int, failures: list[str]) -> tuple[bool, set[int]]:
    """(loaded, passed) from the judge's verdict channel (only the judge sandbox holds it)."""
    recs = [r for r in records[:2 + total + 1] if isinstance(r, dict)]
    if len(recs) < 2 or recs[0] != {"started": True} or "loaded" not in recs[1]:
        return False, set()
    if recs[1].get("loaded") is not True:
        failures.append(_clip(f"program: {recs[1].get('what', '')}"))
        return False, set()
    passed, seen = set(), set()
    for r in recs[2:]:
        i = r.get("i")
        if type(i) is not int or not 0 <= i < total or i in seen:
            continue
        seen.add(i)
        if r.get("ok") is True:
            passed.add(i)
        elif len(failures) < MAX_FAILURES:
            failures.append(_clip(f"{i}: {r.get('what', '')}"))
    return True, passed


def _run(program: str, ref: dict, plan, limits: SandboxLimits):
    """Run the fast or the judge path; (loaded, passed, failures, result, stderr)."""
    pool = POOL or default_pool()
    failures: list[str] = []
    if plan is not None:
        result, records = pool.run_fast(program, ref["setup"], [p["chain"] for p in plan],
                                        ref["stdin"], limits)
        if result.reason == "output_limit" and result.detail.startswith("report"):
            failures.append(_clip(f"program: {result.detail}"))  # its own cost: no test passes
            return False, set(), failures, result, result.stderr
        loaded, passed = _fast_verdicts(records, plan, failures)
        return loaded, passed, failures, result, result.stderr
    judged = pool.run_judged(program, ref["setup"], ref["tests"], ref["stdin"], limits,
                             judge_setup=ref["judge_setup"])
    loaded, passed = _judge_verdicts(judged.records, len(ref["tests"]), failures)
    result = judged.judge
    if judged.solver.reason and judged.solver.reason != "killed":
        result = judged.solver if result.reason in ("", "killed") else result
    if judged.solver.reason == "output_limit" and judged.solver.detail.startswith("report"):
        failures[:] = [_clip(f"program: {judged.solver.detail}")]
        return False, set(), failures, judged.solver, judged.solver.stderr
    return loaded, passed, failures, result, judged.solver.stderr


@register_reward("code")
def code_reward(
    completion: str,
    reference: Any,
    *,
    all_or_nothing: bool = False,
    extract: bool = True,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_bytes: int = 1_000_000,
    mode: str = "auto",
) -> RewardResult:
    """Run the program and the tests in the sandbox; score = fraction passed (see module doc).

    ``info``: ``passed``, ``total``, ``loaded`` (the program ran to its end), ``method`` (code
    extraction), ``harness`` ("fast" or "judge", see the module doc), ``failures`` (first few "i: ErrorType: message"), ``reason`` / ``returncode`` /
    ``timed_out`` from the sandbox, ``stderr`` (tail, 500 characters); ``error`` only when the
    sandbox itself failed before the program started (a verifier failure, counted by the
    trainer): nothing a program prints or raises can produce it. ``mode``: "auto" (a sandbox
    failure is ``info["error"]``) or "strict" (it raises :class:`SandboxError`).
    """
    ref = parse_code_reference(reference)
    program, method = extract_code(completion) if extract else (completion, "whole")
    tests = ref["tests"]
    if not tests:
        raise ValueError("the code reference has no tests; give at least one assert snippet")
    plan = None if ref["judge_setup"] else fast_plan(tests, ref["setup"])
    limits = SandboxLimits(timeout_s=timeout_s, memory_mb=memory_mb,
                           max_output_bytes=max_output_bytes)
    if mode not in ("auto", "strict"):
        raise ValueError(f"mode must be 'auto' or 'strict', got {mode!r}")
    try:
        loaded, passed, failures, result, stderr = _run(program, ref, plan, limits)
    except SandboxError as exc:
        if mode != "auto":
            raise
        return RewardResult(0.0, {"passed": 0, "total": len(tests), "loaded": False,
                                  "method": method, "failures": [], "reason": "sandbox_error",
                                  "error": _clip(f"SandboxError: {exc}")[:500]})
    total = len(tests)
    n_pass = len(passed) if loaded else 0
    value = (1.0 if n_pass == total else 0.0) if all_or_nothing else n_pass / total
    info: dict[str, Any] = {
        "passed": n_pass,
        "total": total,
        "loaded": loaded,
        "method": method,
        "harness": "fast" if plan is not None else "judge",
        "failures": failures[:MAX_FAILURES],
        "reason": result.reason or _reason_from(failures),
        "returncode": result.returncode,
        "timed_out": result.timed_out,
        "stderr": stderr[-500:],
    }
    if result.reason == "sandbox_error":
        info["error"] = _clip(f"SandboxError: {result.detail}")
    return RewardResult(value, info)
