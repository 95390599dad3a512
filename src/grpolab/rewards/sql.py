"""The "sql" verifier: run predicted and reference queries on a read-only SQLite database.

Reference: ``{"db_path": "shop.sqlite", "query": "SELECT ...", "ordered": False}`` (also as a
JSON string, the form a dataset column holds). ``ordered`` (default False) says whether row order
matters; without it rows are compared as a multiset.

Completion: the last fenced ```` ```sql ```` block (or bare ```` ``` ```` block), else the whole
text; surrounding whitespace and one trailing ``;`` are dropped.

Safety, per connection:

* the database is opened with the URI ``file:...?mode=ro`` (SQLite refuses writes) and
  ``PRAGMA query_only``;
* an authorizer allows only reading (SELECT, READ, FUNCTION, RECURSIVE): INSERT / UPDATE /
  DELETE / CREATE / DROP / ATTACH / DETACH / PRAGMA / transactions are denied before they run;
* a progress handler aborts a query running past ``timeout_s`` (a runaway recursive CTE);
* at most ``max_rows`` rows are fetched (an endless CTE streamed row by row);
* no value longer than :data:`MAX_VALUE_BYTES` (``randomblob(1e9)`` fails instead of allocating
  a gigabyte in the trainer) and no query longer than :data:`MAX_QUERY_CHARS` (Python >= 3.11);
* one statement only (sqlite3 refuses more).

Score: 1.0 when the two result sets are equal (values compared exactly, except floats, which
are rounded to ``float_digits`` decimals), else 0.0. A predicted query that fails (syntax error,
denied, timed out) scores 0 with ``info["sql_error"]``; a failing *reference* query is a
verifier error (``info["error"]`` via the raised exception in ``safe_score``).
"""

from __future__ import annotations

import json
import re
import sqlite3
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

from grpolab.rewards.base import RewardResult, register_reward

__all__ = ["SQLQueryError", "extract_sql", "parse_sql_reference", "run_readonly_query", "sql_reward"]

#: Largest string / blob value a query may build (SQLITE_LIMIT_LENGTH; Python >= 3.11).
MAX_VALUE_BYTES = 10_000_000
#: Longest query text (SQLITE_LIMIT_SQL_LENGTH; Python >= 3.11).
MAX_QUERY_CHARS = 100_000

_FENCE_RE = re.compile(r"```[ \t]*(sql|sqlite)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)

_ALLOWED_ACTIONS = {
    sqlite3.SQLITE_SELECT,
    sqlite3.SQLITE_READ,
    sqlite3.SQLITE_FUNCTION,
    getattr(sqlite3, "SQLITE_RECURSIVE", 33),
}


class SQLQueryError(Exception):
    """A query failed: denied, malformed, too slow, or too many rows."""


def extract_sql(completion: str) -> str:
    """The last fenced SQL block (``sql``-tagged blocks win), else the whole text; no trailing ``;``."""
    blocks = [(m.group(1), m.group(2)) for m in _FENCE_RE.finditer(completion)]
    tagged = [b for tag, b in blocks if tag]
    text = tagged[-1] if tagged else (blocks[-1][1] if blocks else completion)
    text = text.strip()
    if text.endswith(";"):
        text = text[:-1].rstrip()
    return text


def parse_sql_reference(reference: Any) -> dict[str, Any]:
    """Normalise to ``{"db_path": Path, "query": str, "ordered": bool}``."""
    if isinstance(reference, str):
        try:
            reference = json.loads(reference)
        except json.JSONDecodeError as exc:
            raise ValueError(
                "the sql reward needs a dict (or its JSON) with 'db_path' and 'query', got a "
                f"string that is not JSON: {reference[:80]!r}"
            ) from exc
    if not isinstance(reference, dict):
        raise TypeError(f"the sql reward needs a dict reference, got {type(reference).__name__}")
    missing = {"db_path", "query"} - set(reference)
    if missing:
        raise ValueError(f"the sql reference lacks {sorted(missing)}; give "
                         "dict(db_path=..., query=..., ordered=False)")
    unknown = set(reference) - {"db_path", "query", "ordered"}
    if unknown:
        raise ValueError(f"unknown keys in the sql reference: {sorted(unknown)}")
    db_path = Path(reference["db_path"])
    if not db_path.is_file():
        raise FileNotFoundError(f"sql reference database {str(db_path)!r} does not exist")
    query = reference["query"]
    if not isinstance(query, str) or not query.strip():
        raise ValueError("the sql reference 'query' must be a non-empty str")
    return {"db_path": db_path, "query": query, "ordered": bool(reference.get("ordered", False))}


def _authorizer(action, arg1, arg2, db_name, trigger):  # noqa: ARG001
    return sqlite3.SQLITE_OK if action in _ALLOWED_ACTIONS else sqlite3.SQLITE_DENY


def run_readonly_query(
    db_path: str | Path, query: str, *, timeout_s: float = 2.0, max_rows: int = 10_000
) -> list[tuple]:
    """Rows of ``query`` on the database opened read-only; raises :class:`SQLQueryError`."""
    uri = "file:" + urllib.parse.quote(str(Path(db_path).resolve())) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, timeout=1.0, check_same_thread=False)
    try:
        conn.execute("PRAGMA query_only = ON")
        if hasattr(conn, "setlimit"):  # Python >= 3.11: no giant values built in this process
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
            conn.setlimit(sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_QUERY_CHARS)
        conn.set_authorizer(_authorizer)
        deadline = time.monotonic() + timeout_s
        conn.set_progress_handler(lambda: 1 if time.monotonic() > deadline else 0, 1000)
        try:
            cur = conn.execute(query)
            rows = cur.fetchmany(max_rows + 1)
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
            msg = str(exc)
            if "interrupted" in msg:
                msg = f"query ran past {timeout_s} s (interrupted)"
            raise SQLQueryError(f"{type(exc).__name__}: {msg}") from None
        if len(rows) > max_rows:
            raise SQLQueryError(f"query returned more than {max_rows} rows")
        return rows
    finally:
        conn.close()


def _normalise(rows: list[tuple], digits: int) -> list[tuple]:
    return [tuple(round(v, digits) if isinstance(v, float) else v for v in row) for row in rows]


@register_reward("sql")
def sql_reward(
    completion: str,
    reference: Any,
    *,
    timeout_s: float = 2.0,
    max_rows: int = 10_000,
    float_digits: int = 9,
    extract: bool = True,
) -> RewardResult:
    """1.0 when the predicted query's result equals the reference query's (see module doc)."""
    ref = parse_sql_reference(reference)
    predicted = extract_sql(completion) if extract else completion.strip()
    info: dict[str, Any] = {"query": predicted[:1000], "ordered": ref["ordered"]}
    # The reference failing is the verifier's problem: let it raise (-> info["error"]).
    want = _normalise(
        run_readonly_query(ref["db_path"], ref["query"], timeout_s=timeout_s, max_rows=max_rows),
        float_digits,
    )
    if not predicted:
        info["sql_error"] = "empty query"
        return RewardResult(0.0, info)
    try:
        got = _normalise(
            run_readonly_query(ref["db_path"], predicted, timeout_s=timeout_s, max_rows=max_rows),
            float_digits,
        )
    except SQLQueryError as exc:
        info["sql_error"] = str(exc)
        return RewardResult(0.0, info)
    info["rows"] = len(got)
    info["expected_rows"] = len(want)
    same = got == want if ref["ordered"] else Counter(got) == Counter(want)
    return RewardResult(1.0 if same else 0.0, info)
