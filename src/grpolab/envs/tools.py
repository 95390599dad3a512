"""Tools an agent can call inside an episode: a calculator, Python (sandboxed), SQL (read-only).

Each tool is a callable ``tool(argument_text) -> ToolOutput(text, error)``; it never raises.

* :class:`CalcTool` -- arithmetic on integers and decimals: ``+ - * / // % **`` and parentheses.
  ``backend="ast"`` (default) evaluates in-process by walking the parsed expression (no names,
  no calls, no attributes: only number literals and operators; exponents and magnitudes are
  bounded, so ``9**9**9`` is refused instead of hanging). ``backend="sandbox"`` runs
  ``print(<expression>)`` through :func:`grpolab.rewards.run_sandboxed` instead (slower: one
  sandboxed process per call).
* :class:`PythonTool` -- runs the argument as a Python program with
  :func:`grpolab.rewards.run_sandboxed`; the observation is its stdout (truncated).
* :class:`SqlTool` -- runs one query against a SQLite database opened read-only (URI
  ``mode=ro`` plus ``PRAGMA query_only``), with an authorizer that refuses ``ATTACH`` and every
  write, and a progress-handler time limit; rows come back as ``a,b;c,d`` (truncated).
"""

from __future__ import annotations

import ast
import math
import operator
import sqlite3
import time
from dataclasses import dataclass

__all__ = ["CalcTool", "PythonTool", "SqlTool", "ToolOutput", "safe_arith"]


@dataclass
class ToolOutput:
    """A tool's reply: ``text`` for the observation; ``error`` True when the call failed."""

    text: str
    error: bool = False


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------- calculator

_BINOPS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}
_UNOPS = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_MAGNITUDE = 10**30
MAX_EXPONENT = 64


def safe_arith(expression: str) -> int | float:
    """Evaluate an arithmetic expression of number literals; raise ValueError on anything else."""
    if len(expression) > 200:
        raise ValueError("expression too long")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError("syntax error") from None

    def ev(node: ast.AST) -> int | float:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            value = node.value
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
            value = _UNOPS[type(node.op)](ev(node.operand))
        elif isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Pow) and (abs(b) > MAX_EXPONENT or (abs(a) > 1 and b > MAX_EXPONENT)):
                raise ValueError("exponent too large")
            try:
                value = _BINOPS[type(node.op)](a, b)
            except ZeroDivisionError:
                raise ValueError("division by zero") from None
        else:
            raise ValueError(f"not allowed: {type(node).__name__.lower()}")
        if isinstance(value, complex) or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError("not a finite real number")
        if abs(value) > MAX_MAGNITUDE:
            raise ValueError("number too large")
        return value

    return ev(tree.body)


def format_number(value: float) -> str:
    """Integers as digits; floats with up to 6 significant digits (integral floats as ints)."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return format(value, ".6g")
    return str(value)


class CalcTool:
    """The calculator (see the module docstring). ``backend`` is "ast" or "sandbox"."""

    name = "calc"

    def __init__(self, *, backend: str = "ast", timeout_s: float = 2.0, memory_mb: int = 256) -> None:
        if backend not in ("ast", "sandbox"):
            raise ValueError(f"CalcTool backend must be 'ast' or 'sandbox', got {backend!r}")
        self.backend = backend
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb

    def __call__(self, argument: str) -> ToolOutput:
        if self.backend == "sandbox":
            try:  # refuse anything that is not arithmetic before spending a process on it
                safe_arith(argument)
            except ValueError as e:
                return ToolOutput(f"error: {e}", True)
            return PythonTool(timeout_s=self.timeout_s, memory_mb=self.memory_mb)(f"print({argument.strip()})")
        try:
            return ToolOutput(format_number(safe_arith(argument)))
        except ValueError as e:
            return ToolOutput(f"error: {e}", True)


class PythonTool:
    """Run the argument as a Python program in the code sandbox; the observation is stdout."""

    name = "python"

    def __init__(self, *, timeout_s: float = 2.0, memory_mb: int = 256, max_chars: int = 200) -> None:
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self.max_chars = max_chars

    def __call__(self, argument: str) -> ToolOutput:
        try:
            from grpolab.rewards import run_sandboxed
        except ImportError:  # pragma: no cover - the sandbox is part of grpolab.rewards
            return ToolOutput("error: the python sandbox is not available", True)
        try:
            res = run_sandboxed(argument, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        except Exception as e:  # noqa: BLE001 - the tool never raises into the episode
            return ToolOutput(f"error: {type(e).__name__}", True)
        if res.timed_out:
            return ToolOutput("error: timeout", True)
        if res.returncode != 0:
            lines = [ln for ln in (res.stderr or "").strip().splitlines() if ln.strip()]
            return ToolOutput("error: " + _clip(lines[-1] if lines else f"exit {res.returncode}", self.max_chars), True)
        return ToolOutput(_clip(res.stdout or "", self.max_chars))


# ----------------------------------------------------------------------------- SQL

_SQL_ALLOWED = {
    sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE,
}


def _authorizer(action: int, *_args) -> int:
    return sqlite3.SQLITE_OK if action in _SQL_ALLOWED else sqlite3.SQLITE_DENY


class SqlTool:
    """Read-only SQL over a SQLite file (see the module docstring).

    Args:
        db_path: the database file (opened with ``mode=ro``; it must exist).
        timeout_s: wall-clock limit per query, enforced by a progress handler.
        max_rows: rows shown in the observation (more are summarised as ``...``).
        max_chars: observation length cap.
    """

    name = "sql"

    def __init__(self, db_path: str, *, timeout_s: float = 1.0, max_rows: int = 20, max_chars: int = 200) -> None:
        self.db_path = str(db_path)
        self.timeout_s = timeout_s
        self.max_rows = max_rows
        self.max_chars = max_chars

    def run(self, query: str) -> list[tuple]:
        """The query's rows (at most ``max_rows + 1``); raises ``sqlite3.Error`` on failure."""
        from pathlib import Path

        uri = Path(self.db_path).resolve().as_uri() + "?mode=ro"
        con = sqlite3.connect(uri, uri=True, timeout=0.1, check_same_thread=False)
        try:
            con.execute("PRAGMA query_only = ON")
            deadline = time.monotonic() + self.timeout_s
            con.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
            con.set_authorizer(_authorizer)
            cur = con.execute(query)
            return cur.fetchmany(self.max_rows + 1)
        finally:
            con.close()

    def __call__(self, argument: str) -> ToolOutput:
        try:
            rows = self.run(argument)
        except sqlite3.Error as e:
            msg = str(e)
            if "interrupted" in msg:
                msg = "timeout"
            elif "not authorized" in msg:
                msg = "not allowed (read-only)"
            return ToolOutput("error: " + _clip(msg, self.max_chars), True)
        except Exception as e:  # noqa: BLE001 - e.g. ValueError for a query with a NUL byte
            return ToolOutput(f"error: {type(e).__name__}", True)
        shown = rows[: self.max_rows]
        text = ";".join(",".join(str(v) for v in row) for row in shown)
        if len(rows) > self.max_rows:
            text += ";..."
        return ToolOutput(_clip(text, self.max_chars) if text else "(no rows)")
