r"""The "code" verifier: run the model's Python program and the item's tests in the sandbox.

Reference: the tests, as a list of Python snippets (typically ``assert`` statements), run one
after another *after* the program, in the program's global namespace:
``["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]``. Also accepted: a JSON string holding
that list (a dataset column), one snippet as a plain string, or a dict
``{"tests": [...], "stdin": "...", "setup": "..."}`` (``setup`` runs before the program, e.g.
imports the tests rely on; ``stdin`` feeds the program).

Program: the last fenced ```` ```python ```` (or ```` ```py ````, or bare ```` ``` ````) block of the
completion; an unclosed fence takes the rest of the text; no fence -> the whole completion
(``extract=False``: always the whole completion).

Score: fraction of tests that ran without raising (``all_or_nothing=True``: 1.0 only when all
pass). A program that raises (or exits non-zero) before the tests scores 0; ``sys.exit(0)`` /
``exit()`` in the program ends the program part and the tests still run. Everything runs in ONE
sandboxed process (:func:`grpolab.rewards.run_sandboxed`), so ``timeout_s`` covers program and
tests together; tests that did not report before a timeout count as failed.

How results come back: the harness prints one marker line per test, prefixed by a random nonce,
on a private duplicate of stdout. A program that exits early, kills its own process, closes the
descriptor or floods the output simply gets no markers -> failed (fail-closed); replacing
``builtins.exec`` / ``compile`` / ``enumerate`` or ``os.write`` does not reach the harness, which
holds its own references; only the original process reports, so a program that forks copies
to try several answers gets no credit from the copies. The nonce is in
the harness source, so a program that *introspects the harness* (frames, ``gc``) could forge
markers, and a program can always return objects whose ``__eq__`` is always true: the sandbox
protects the machine, not the reward's integrity against a deliberately adversarial policy.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

from grpolab.rewards.base import RewardResult, register_reward
from grpolab.rewards.sandbox import run_sandboxed

__all__ = ["build_harness", "code_reward", "extract_code", "parse_code_reference"]

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
    """Normalise a code reference to ``{"tests": [str, ...], "stdin": str, "setup": str}``."""
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
    unknown = set(reference) - {"tests", "stdin", "setup"}
    if unknown:
        raise ValueError(f"unknown keys in the code reference: {sorted(unknown)}; "
                         "allowed: 'tests', 'stdin', 'setup'")
    tests = reference.get("tests")
    if not isinstance(tests, list) or not all(isinstance(t, str) for t in tests):
        raise TypeError("the code reference's 'tests' must be a list of str snippets")
    stdin = reference.get("stdin", "") or ""
    setup = reference.get("setup", "") or ""
    if not isinstance(stdin, str) or not isinstance(setup, str):
        raise TypeError("the code reference's 'stdin' and 'setup' must be str")
    return {"tests": tests, "stdin": stdin, "setup": setup}


def build_harness(program: str, tests: list[str], nonce: str, setup: str = "") -> str:
    """The Python source that runs ``setup``, ``program``, then each test, reporting markers."""
    # The harness keeps its own references to exec, compile, enumerate, os.write, ...: a program
    # that replaces builtins.exec or os.write cannot turn failing tests into passes that way.
    return f"""
import os as _h_os, sys as _h_sys, traceback as _h_tb
_h_fd = _h_os.dup(1)
_h_exec, _h_compile, _h_write, _h_str, _h_type = exec, compile, _h_os.write, str, type
_h_enum, _h_repr = enumerate, repr
_h_enc = str.encode
_h_getpid = _h_os.getpid
_h_pid = _h_getpid()
def _h_mark(i, status, what=""):
    if _h_getpid() != _h_pid:
        return  # a forked copy of the program: only the original process reports
    try:
        _h_sys.stdout.flush()
    except BaseException:
        pass
    line = "\\n{nonce}:%d:%s:%s\\n" % (i, status, _h_str.replace(what[:200], "\\n", " "))
    _h_write(_h_fd, _h_enc(line))
_h_g = {{"__name__": "__main__", "__builtins__": __builtins__}}
try:
    _h_exec(_h_compile({setup!r}, "setup.py", "exec"), _h_g)
    _h_exec(_h_compile({program!r}, "solution.py", "exec"), _h_g)
    _h_ok = True
except SystemExit as _h_e:
    _h_ok = _h_e.code in (None, 0)
    if not _h_ok:
        _h_mark(-1, "EXIT", _h_repr(_h_e.code))
except BaseException as _h_e:
    _h_ok = False
    _h_tb.print_exc()
    _h_mark(-1, "ERROR", _h_type(_h_e).__name__ + ": " + _h_str(_h_e))
if _h_ok:
    _h_mark(-1, "LOADED")
    for _h_i, _h_t in _h_enum({tests!r}):
        try:
            _h_exec(_h_compile(_h_t, "test_%d.py" % _h_i, "exec"), _h_g)
            _h_mark(_h_i, "PASS")
        except BaseException as _h_e:
            _h_mark(_h_i, "FAIL", _h_type(_h_e).__name__ + ": " + _h_str(_h_e))
"""


def _reason_from(failures: list[str]) -> str:
    """The sandbox reason for a program error the harness caught (it then exits normally)."""
    for f in failures:
        if f.startswith("program: MemoryError"):
            return "memory"
        if f.startswith("program: ") and "File too large" in f:
            return "file_size"
    return ""


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
    extraction), ``failures`` (first few "i: ErrorType: message"), ``reason`` / ``returncode`` /
    ``timed_out`` from the sandbox, ``stderr`` (tail); ``error`` only when the sandbox itself
    failed (a verifier failure, counted by the trainer), never for a bad program.
    """
    ref = parse_code_reference(reference)
    program, method = extract_code(completion) if extract else (completion, "whole")
    tests = ref["tests"]
    if not tests:
        raise ValueError("the code reference has no tests; give at least one assert snippet")
    nonce = secrets.token_hex(16)
    result = run_sandboxed(
        build_harness(program, tests, nonce, ref["setup"]),
        stdin=ref["stdin"],
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_output_bytes=max_output_bytes,
        mode=mode,
    )
    passed: set[int] = set()
    failures: list[str] = []
    loaded = False
    prefix = nonce + ":"
    for line in result.stdout.splitlines():
        if not line.startswith(prefix):
            continue
        parts = line[len(prefix):].split(":", 2)
        if len(parts) < 2:
            continue
        try:
            i = int(parts[0])
        except ValueError:
            continue
        status, what = parts[1], parts[2] if len(parts) > 2 else ""
        if i == -1:
            loaded = loaded or status == "LOADED"
            if status in ("ERROR", "EXIT"):
                failures.append(f"program: {what}")
        elif 0 <= i < len(tests):
            if status == "PASS":
                passed.add(i)
            elif len(failures) < 5:
                failures.append(f"{i}: {what}")
    total = len(tests)
    n_pass = len(passed) if loaded else 0
    if all_or_nothing:
        value = 1.0 if n_pass == total else 0.0
    else:
        value = n_pass / total
    info: dict[str, Any] = {
        "passed": n_pass,
        "total": total,
        "loaded": loaded,
        "method": method,
        "failures": failures,
        "reason": result.reason or _reason_from(failures),
        "returncode": result.returncode,
        "timed_out": result.timed_out,
        "stderr": result.stderr[-500:],
    }
    if result.reason == "sandbox_error":
        info["error"] = f"SandboxError: {result.detail}"
    return RewardResult(value, info)
