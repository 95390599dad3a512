"""The "sql" verifier: result-set equality, read-only enforcement, time and row limits."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from grpolab.rewards import extract_sql, safe_score, score


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, price REAL);
        INSERT INTO items VALUES (1, 'apple', 0.5), (2, 'pear', 0.75), (3, 'fig', 2.0);
        """
    )
    conn.commit()
    conn.close()
    return path


def ref(db, query, ordered=False):
    return {"db_path": str(db), "query": query, "ordered": ordered}


def rows(db):
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT * FROM items ORDER BY id").fetchall()
    finally:
        conn.close()


def test_equal_result_sets_score_one(db):
    r = ref(db, "SELECT name FROM items WHERE price < 1")
    assert score("sql", "SELECT name FROM items WHERE price <= 0.75", r).score == 1.0
    # unordered by default: a different order still matches
    assert score("sql", "SELECT name FROM items WHERE price < 1 ORDER BY name DESC", r).score == 1.0
    assert score("sql", "SELECT name FROM items", r).score == 0.0
    # duplicates matter (multiset, not set)
    assert score("sql", "SELECT name FROM items WHERE price < 1 UNION ALL SELECT 'apple'", r).score == 0.0


def test_ordered_references_compare_order(db):
    r = ref(db, "SELECT name FROM items ORDER BY price", ordered=True)
    assert score("sql", "SELECT name FROM items ORDER BY price ASC", r).score == 1.0
    assert score("sql", "SELECT name FROM items ORDER BY price DESC", r).score == 0.0


def test_floats_compare_after_rounding(db):
    r = ref(db, "SELECT 0.1 + 0.2")
    assert score("sql", "SELECT 0.3", r).score == 1.0  # 0.30000000000000004 vs 0.3 at 9 digits
    assert score("sql", "SELECT 0.3000001", r).score == 0.0


def test_extraction_and_reference_as_json(db):
    completion = "The query:\n```sql\nSELECT name FROM items WHERE id = 3;\n```"
    assert extract_sql(completion) == "SELECT name FROM items WHERE id = 3"
    assert score("sql", completion, json.dumps(ref(db, "SELECT 'fig'"))).score == 1.0


@pytest.mark.parametrize(
    "query",
    [
        "INSERT INTO items VALUES (4, 'kiwi', 1.0)",
        "UPDATE items SET price = 0",
        "DELETE FROM items",
        "DROP TABLE items",
        "CREATE TABLE t(x)",
        "PRAGMA journal_mode = DELETE",
        "SELECT 1; DELETE FROM items",
        "WITH x AS (SELECT 1) DELETE FROM items",
    ],
)
def test_writes_are_refused_and_the_database_is_unchanged(db, query):
    before = rows(db)
    res = score("sql", query, ref(db, "SELECT 1"))
    assert res.score == 0.0 and "sql_error" in res.info and "error" not in res.info
    assert rows(db) == before


def test_attach_is_refused(db, tmp_path):
    other = tmp_path / "other.sqlite"
    res = score("sql", f"ATTACH DATABASE '{other}' AS o", ref(db, "SELECT 1"))
    assert res.score == 0.0 and "sql_error" in res.info
    assert not other.exists()


def test_runaway_recursive_cte_is_interrupted(db):
    runaway = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
               "SELECT count(*) FROM c")
    t0 = time.monotonic()
    res = score("sql", runaway, ref(db, "SELECT 1"), timeout_s=0.5)
    assert time.monotonic() - t0 < 3.0
    assert res.score == 0.0 and "interrupted" in res.info["sql_error"]
    # an endless stream of rows stops at max_rows instead
    stream = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c"
    res = score("sql", stream, ref(db, "SELECT 1"), max_rows=100)
    assert res.score == 0.0 and "more than 100 rows" in res.info["sql_error"]


def test_reference_problems_are_verifier_errors(db, tmp_path):
    bad = safe_score("sql", "SELECT 1", ref(db, "SELEC 1"))
    assert bad.score == 0.0 and "SQLQueryError" in bad.info["error"]
    missing = safe_score("sql", "SELECT 1", ref(tmp_path / "nope.sqlite", "SELECT 1"))
    assert "FileNotFoundError" in missing.info["error"]
    assert not (tmp_path / "nope.sqlite").exists()  # read-only open never creates it
    assert "ValueError" in safe_score("sql", "SELECT 1", {"query": "SELECT 1"}).info["error"]
    assert "ValueError" in safe_score("sql", "SELECT 1", "not json").info["error"]


def test_giant_values_are_refused(db):
    import sys

    if sys.version_info < (3, 11):
        pytest.skip("Connection.setlimit needs Python 3.11")
    res = score("sql", "SELECT length(randomblob(500000000))", ref(db, "SELECT 1"))
    assert res.score == 0.0 and "too big" in res.info["sql_error"]
