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
``exit()`` at the program's top level ends the program part and the tests still run. Everything
runs in ONE sandboxed call (:func:`grpolab.rewards.run_sandboxed`), so ``timeout_s`` covers
program and tests together; tests that did not report before a timeout count as failed.

Reward integrity (details: :mod:`grpolab.rewards._code_harness`, ``docs/rewards.md``): the
sandboxed call splits into a **solver** process, which runs the program and answers calls, and a
**judge** process, which runs the tests. The tests reach the judge on a private channel only
after the split, so they are in no memory the program ever had (no reading them from frames or
``gc``); every value crosses as JSON plain data and is rebuilt by the judge, so a test's ``==``
compares real ints, strs, lists... that the program cannot patch (no always-equal objects, no
``__eq__`` on subclasses, no patched ``AssertionError``/``builtins``/``sys.exit``/``os._exit``
reaching the judge); objects that are not plain data come back as handles that refuse to be
compared; only the judge holds the real stdout, so printed look-alike markers are only stderr;
if the program's process ends, every test not yet run fails.
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


def build_harness(program: str, nonce: str, setup: str = "") -> str:
    """The sandboxed source: the preloaded judge/solver harness run on ``program``.

    The tests are not in it: they go as ``private_input`` (see :func:`code_reward`).
    """
    return ("import _grpolab_code_harness as _h\n"
            f"_h.main({program!r}, {setup!r}, {nonce!r})\n")


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
        build_harness(program, nonce, ref["setup"]),
        stdin=ref["stdin"],
        private_input=json.dumps({"tests": tests}),
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
    elif not loaded and "No module named '_grpolab_code_harness'" in result.stderr:
        info["error"] = "the sandbox server did not preload the code harness"
    return RewardResult(value, info)
