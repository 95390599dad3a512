"""The "short_sql" task: answer a question with one SELECT over a small SQLite shop database.

Made for small instruct models (docs/tasks.md, "short_sql"). One item::

    prompt:         "Database schema (SQLite):\\nCREATE TABLE customers (...);\\n...\\n\\n
                     Question: How many customers live in Lyon?\\n
                     Answer with one SQLite SELECT query in a ```sql code block."
    reference:      '{"db_path": ".../shop-<hash>.sqlite", "query": "SELECT COUNT(*) FROM
                     customers WHERE city = 'Lyon'", "ordered": false}'
    reward:         "sql" (:mod:`grpolab.rewards.sql`): the predicted query's result set equals
                    the reference query's on the read-only database
    demonstration:  the reference query in a ```sql block
    privileged:     option ``privileged``: "solution" (the reference query), "documents" (the
                    database's column guide and business terms, :data:`DOCUMENTS`: what a
                    company's data team would hold; it holds no query) or "both"
    meta:           {"difficulty": level, "family": template, "solution": ..., "documents": ...}

Levels (option ``levels``): 1 = one table, values named as they are stored; 2 = aggregates,
grouping and ordering on one table; 3 = joins, and business terms the schema does not spell out
("revenue", "gold customers", amounts in euros) that the documents define.

The database is fixed (generated from a constant seed, the same on every machine) and written
once to ``db_dir`` (default ``$GRPOLAB_CACHE_DIR/short_sql`` or ``~/.cache/grpolab/short_sql``),
named by a hash of its contents and written atomically. Questions whose answer is empty, NULL
or 0 are left out (a query that selects nothing would match them).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import tempfile
from pathlib import Path

from grpolab.tasks.base import TaskItem, register_task
from grpolab.tasks.catalog import PRIVILEGED_CHOICES, CatalogTask, Spec, check_levels, check_privileged

__all__ = ["DOCUMENTS", "LEVELS", "SCHEMA", "ShortSQLTask", "build_database"]

LEVELS = (1, 2, 3)
SCHEMA = (
    "CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT, tier INTEGER, joined TEXT);\n"
    "CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, category TEXT, price_cents INTEGER, stock INTEGER);\n"
    "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, product_id INTEGER, quantity INTEGER, "
    "status TEXT, placed TEXT);"
)
#: The company's documentation of the database: the privileged "documents" (no query in it).
DOCUMENTS = (
    "Shop database: column guide.\n"
    "customers: one row per customer account. id is the account number. name is the full name "
    "(unique). city is the city of the billing address. tier is the loyalty tier: 1 means standard, "
    "2 means silver, 3 means gold. joined is the day the account was opened, as text YYYY-MM-DD.\n"
    "products: one row per product. name is unique. category is one of books, garden, kitchen, "
    "music, sports, toys. price_cents is the unit price in euro cents (1999 means 19.99 euros). "
    "stock is the number of units in the warehouse today.\n"
    "orders: one row per order. customer_id refers to customers.id and product_id to products.id. "
    "quantity is the number of units ordered. status is paid (paid, not shipped yet), shipped, "
    "cancelled (never paid) or refunded (paid, then paid back). placed is the day the order was "
    "placed, as text YYYY-MM-DD.\n"
    "Business terms: revenue is the sum of quantity times the unit price over the orders whose "
    "status is paid or shipped, reported in euros (divide cents by 100.0). A gold, silver or "
    "standard customer is one with that loyalty tier. An open order is an order whose status is paid."
)
_CITIES = ("Lyon", "Porto", "Graz", "Ghent", "Turin", "Bergen", "Krakow", "Seville")
_CATEGORIES = ("books", "garden", "kitchen", "music", "sports", "toys")
_STATUSES = ("paid", "shipped", "cancelled", "refunded")
_TIERS = {"standard": 1, "silver": 2, "gold": 3}
_YEARS = (2023, 2024)
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_FIRST = ("Ana", "Ben", "Clara", "David", "Elena", "Felix", "Greta", "Hugo", "Ines", "Jonas", "Karin", "Luca",
          "Mira", "Nils", "Olga", "Pavel", "Rosa", "Sven", "Tara", "Uwe")
_LAST = ("Berg", "Costa", "Dahl", "Engel", "Falk", "Gomez", "Horn", "Ivanova", "Jensen", "Klein")
_PRODUCT_WORDS = ("Atlas", "Breeze", "Comet", "Delta", "Ember", "Fjord", "Glade", "Harbor", "Iris", "Juniper")
_N_CUSTOMERS, _N_PRODUCTS, _N_ORDERS = 40, 30, 240
#: The generator's seed: the database is the same for every task seed and on every machine.
_DB_SEED = "grpolab:short_sql:shop:v1"


def _rows() -> dict[str, list[tuple]]:
    rng = random.Random(_DB_SEED)
    names = rng.sample([f"{f} {s}" for f in _FIRST for s in _LAST], _N_CUSTOMERS)
    customers = [(i + 1, names[i], rng.choice(_CITIES), rng.choice((1, 1, 2, 2, 3)),
                  f"{rng.randint(2019, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
                 for i in range(_N_CUSTOMERS)]
    prices = rng.sample(range(199, 9999, 10), _N_PRODUCTS)  # distinct: "the k most expensive" has one answer
    made = rng.sample([(w, c, n) for w in _PRODUCT_WORDS for c in _CATEGORIES for n in (1, 2)], _N_PRODUCTS)
    products = [(i + 1, f"{w} {c.title()} {n}", c, prices[i], rng.randint(0, 60)) for i, (w, c, n) in enumerate(made)]
    orders = [(i + 1, rng.randint(1, _N_CUSTOMERS), rng.randint(1, _N_PRODUCTS), rng.randint(1, 10),
               rng.choice(("paid", "shipped", "shipped", "shipped", "cancelled", "refunded")),
               f"{rng.choice(_YEARS)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
              for i in range(_N_ORDERS)]
    return {"customers": customers, "products": products, "orders": orders}


def _fill(conn: sqlite3.Connection) -> None:
    conn.executescript(SCHEMA)
    for table, rows in _rows().items():
        conn.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    conn.commit()


def build_database(db_dir: str | os.PathLike | None = None) -> Path:
    """The shop database's path, written (atomically) unless a file of the same contents is there.

    Args:
        db_dir: the folder (default ``$GRPOLAB_CACHE_DIR/short_sql`` or ``~/.cache/grpolab/short_sql``).
    """
    base = Path(db_dir) if db_dir else Path(os.environ.get("GRPOLAB_CACHE_DIR") or
                                            Path.home() / ".cache" / "grpolab") / "short_sql"
    digest = hashlib.sha256(json.dumps([SCHEMA, _rows()]).encode()).hexdigest()[:16]
    path = base / f"shop-{digest}.sqlite"
    if path.is_file():
        return path
    base.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=base, prefix=".shop.", suffix=".tmp")
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        try:
            _fill(conn)
        finally:
            conn.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _g(**axes) -> list[dict]:
    out = [{}]
    for key, values in axes.items():
        out = [{**d, key: v} for d in out for v in values]
    return out


_MONTH_GRID = [{"month": m, "mm": f"{i + 1:02d}", "year": y} for y in _YEARS for i, m in enumerate(_MONTHS)]
_TIER_GRID = [{"tiername": k, "tier": v} for k, v in _TIERS.items()]
_PRODUCT_IDS = range(1, _N_PRODUCTS + 1)
_CUSTOMER_IDS = range(1, _N_CUSTOMERS + 1)
_REVENUE = "SUM(o.quantity * p.price_cents) / 100.0"
_SOLD = "o.status IN ('paid', 'shipped')"
_JOIN_OP = "FROM orders o JOIN products p ON p.id = o.product_id"
_JOIN_OC = "FROM orders o JOIN customers c ON c.id = o.customer_id"
_JOIN_OCP = _JOIN_OC + " JOIN products p ON p.id = o.product_id"


def _level1() -> list[tuple]:
    """``(family, params, question, query)`` of level 1: one table, values as stored."""
    return [
        ("city_count", _g(city=_CITIES), "How many customers live in {city}?",
         "SELECT COUNT(*) FROM customers WHERE city = '{city}'"),
        ("city_names", _g(city=_CITIES), "List the names of the customers who live in {city}.",
         "SELECT name FROM customers WHERE city = '{city}'"),
        ("city_tier", _g(city=_CITIES, tier=(1, 2, 3)), "List the names of the customers in {city} with tier {tier}.",
         "SELECT name FROM customers WHERE city = '{city}' AND tier = {tier}"),
        ("joined_year", _g(year=range(2019, 2025)), "How many customers opened their account in {year}?",
         "SELECT COUNT(*) FROM customers WHERE joined LIKE '{year}-%'"),
        ("category_price", _g(cat=_CATEGORIES, p=range(500, 10000, 500)),
         "How many products in the category '{cat}' have a price_cents above {p}?",
         "SELECT COUNT(*) FROM products WHERE category = '{cat}' AND price_cents > {p}"),
        ("stock_below", _g(n=range(1, 61)), "List the names of the products with fewer than {n} units in stock.",
         "SELECT name FROM products WHERE stock < {n}"),
        ("price_between", [{"a": a, "b": b} for a in range(0, 10001, 500) for b in range(a + 500, 10001, 500)],
         "List the names of the products whose price_cents is between {a} and {b}, both included.",
         "SELECT name FROM products WHERE price_cents BETWEEN {a} AND {b}"),
        ("category_stock", _g(cat=_CATEGORIES, n=range(2, 61, 2)),
         "List the names of the products in the category '{cat}' with at least {n} units in stock.",
         "SELECT name FROM products WHERE category = '{cat}' AND stock >= {n}"),
        ("status_count", _g(status=_STATUSES), "How many orders have the status '{status}'?",
         "SELECT COUNT(*) FROM orders WHERE status = '{status}'"),
        ("status_quantity", _g(status=_STATUSES, q=range(1, 11)),
         "How many orders with the status '{status}' have a quantity of {q}?",
         "SELECT COUNT(*) FROM orders WHERE status = '{status}' AND quantity = {q}"),
        ("customer_orders", _g(cid=_CUSTOMER_IDS), "List the ids of the orders of the customer with id {cid}.",
         "SELECT id FROM orders WHERE customer_id = {cid}"),
        ("month_orders", _MONTH_GRID, "How many orders were placed in {month} {year}?",
         "SELECT COUNT(*) FROM orders WHERE placed LIKE '{year}-{mm}-%'"),
    ]


def _level2() -> list[tuple]:
    """Level 2: aggregates, grouping and ordering on one table."""
    return [
        ("category_avg", _g(cat=_CATEGORIES), "What is the average price_cents of the products in the category '{cat}'?",
         "SELECT AVG(price_cents) FROM products WHERE category = '{cat}'"),
        ("top_k", _g(k=range(1, 11)), "What are the names of the {k} products with the highest price_cents?",
         "SELECT name FROM products ORDER BY price_cents DESC LIMIT {k}"),
        ("cheapest_k", _g(cat=_CATEGORIES, k=range(1, 5)),
         "What are the names of the {k} products with the lowest price_cents in the category '{cat}'?",
         "SELECT name FROM products WHERE category = '{cat}' ORDER BY price_cents LIMIT {k}"),
        ("tier_by_city", _g(tier=(1, 2, 3)),
         "For each city, how many customers with tier {tier} live there? Give the city, then the count.",
         "SELECT city, COUNT(*) FROM customers WHERE tier = {tier} GROUP BY city"),
        ("year_by_city", _g(year=range(2019, 2025)),
         "For each city, how many customers opened their account in {year}? Give the city, then the count.",
         "SELECT city, COUNT(*) FROM customers WHERE joined LIKE '{year}-%' GROUP BY city"),
        ("quantity_total", _g(status=_STATUSES, year=_YEARS),
         "What is the total quantity of the orders with the status '{status}' placed in {year}?",
         "SELECT SUM(quantity) FROM orders WHERE status = '{status}' AND placed LIKE '{year}-%'"),
        ("status_customers", _g(status=_STATUSES), "How many different customers have an order with the status '{status}'?",
         "SELECT COUNT(DISTINCT customer_id) FROM orders WHERE status = '{status}'"),
        ("month_by_status", _MONTH_GRID,
         "For each status, how many orders were placed in {month} {year}? Give the status, then the count.",
         "SELECT status, COUNT(*) FROM orders WHERE placed LIKE '{year}-{mm}-%' GROUP BY status"),
        ("max_price_stock", _g(n=range(0, 61)),
         "What is the highest price_cents among the products with more than {n} units in stock?",
         "SELECT MAX(price_cents) FROM products WHERE stock > {n}"),
        ("busy_customers", _g(k=range(2, 6), q=range(1, 11)),
         "Which customer ids have at least {k} orders with a quantity of {q} or more?",
         "SELECT customer_id FROM orders WHERE quantity >= {q} GROUP BY customer_id HAVING COUNT(*) >= {k}"),
        ("stock_below_price", _g(p=range(500, 10001, 250)),
         "How many units are in stock in total over the products whose price_cents is below {p}?",
         "SELECT SUM(stock) FROM products WHERE price_cents < {p}"),
        ("customer_avg_quantity", _g(cid=_CUSTOMER_IDS),
         "What is the average quantity of the orders of the customer with id {cid}?",
         "SELECT AVG(quantity) FROM orders WHERE customer_id = {cid}"),
        ("product_max_quantity", _g(pid=_PRODUCT_IDS),
         "What is the largest quantity in one order of the product with id {pid}?",
         "SELECT MAX(quantity) FROM orders WHERE product_id = {pid}"),
        ("customer_status_count", _g(cid=_CUSTOMER_IDS, status=_STATUSES),
         "How many orders with the status '{status}' has the customer with id {cid} placed?",
         "SELECT COUNT(*) FROM orders WHERE customer_id = {cid} AND status = '{status}'"),
        ("price_stock_count", _g(p=range(1000, 10001, 1000), n=range(0, 60, 6)),
         "How many products have a price_cents below {p} and more than {n} units in stock?",
         "SELECT COUNT(*) FROM products WHERE price_cents < {p} AND stock > {n}"),
    ]


def _level3(names: list[str], products: list[str]) -> list[tuple]:
    """Level 3: joins, and business terms defined in :data:`DOCUMENTS`."""
    return [
        ("city_status_names", _g(city=_CITIES, status=_STATUSES),
         "What are the names of the customers from {city} who have an order with the status '{status}'?",
         f"SELECT DISTINCT c.name {_JOIN_OC} WHERE c.city = '{{city}}' AND o.status = '{{status}}'"),
        ("category_city_units", _g(cat=_CATEGORIES, city=_CITIES),
         "How many units of products in the category '{cat}' did customers from {city} order, whatever the status?",
         f"SELECT SUM(o.quantity) {_JOIN_OCP} WHERE p.category = '{{cat}}' AND c.city = '{{city}}'"),
        ("city_revenue", _g(city=_CITIES), "What was the revenue in euros from customers in {city}?",
         f"SELECT {_REVENUE} {_JOIN_OCP} WHERE c.city = '{{city}}' AND {_SOLD}"),
        ("city_year_revenue", _g(city=_CITIES, year=_YEARS), "What was the revenue in euros from customers in {city} in {year}?",
         f"SELECT {_REVENUE} {_JOIN_OCP} WHERE c.city = '{{city}}' AND o.placed LIKE '{{year}}-%' AND {_SOLD}"),
        ("category_year_revenue", _g(cat=_CATEGORIES, year=_YEARS),
         "What was the revenue in euros from products in the category '{cat}' in {year}?",
         f"SELECT {_REVENUE} {_JOIN_OP} WHERE p.category = '{{cat}}' AND o.placed LIKE '{{year}}-%' AND {_SOLD}"),
        ("city_category_revenue", _g(cat=_CATEGORIES, city=_CITIES),
         "What was the revenue in euros from products in the category '{cat}' bought by customers in {city}?",
         f"SELECT {_REVENUE} {_JOIN_OCP} WHERE p.category = '{{cat}}' AND c.city = '{{city}}' AND {_SOLD}"),
        ("city_month_orders", [{**m, "city": c} for m in _MONTH_GRID for c in _CITIES],
         "How many orders did customers from {city} place in {month} {year}?",
         f"SELECT COUNT(*) {_JOIN_OC} WHERE c.city = '{{city}}' AND o.placed LIKE '{{year}}-{{mm}}-%'"),
        ("month_revenue", _MONTH_GRID, "What was the revenue in euros in {month} {year}?",
         f"SELECT {_REVENUE} {_JOIN_OP} WHERE o.placed LIKE '{{year}}-{{mm}}-%' AND {_SOLD}"),
        ("tier_city_orders", [{**t, "city": c} for t in _TIER_GRID for c in _CITIES],
         "How many orders did {tiername} customers from {city} place?",
         f"SELECT COUNT(*) {_JOIN_OC} WHERE c.tier = {{tier}} AND c.city = '{{city}}'"),
        ("tier_city_revenue", [{**t, "city": c} for t in _TIER_GRID for c in _CITIES],
         "What was the revenue in euros from {tiername} customers in {city}?",
         f"SELECT {_REVENUE} {_JOIN_OCP} WHERE c.tier = {{tier}} AND c.city = '{{city}}' AND {_SOLD}"),
        ("open_orders_category", _g(cat=_CATEGORIES),
         "List the names of the products in the category '{cat}' that have open orders.",
         f"SELECT DISTINCT p.name {_JOIN_OP} WHERE p.category = '{{cat}}' AND o.status = 'paid'"),
        ("top_customers", _g(k=range(1, 6)), "Who are the {k} customers with the highest revenue? Give their names.",
         f"SELECT c.name {_JOIN_OCP} WHERE {_SOLD} GROUP BY c.id ORDER BY SUM(o.quantity * p.price_cents) DESC "
         "LIMIT {k}"),
        ("customer_products", _g(name=names), "List the names of the products ordered by the customer named {name}.",
         f"SELECT DISTINCT p.name {_JOIN_OCP} WHERE c.name = '{{name}}'"),
        ("product_customers", _g(product=products), "List the names of the customers who ordered the product '{product}'.",
         f"SELECT DISTINCT c.name {_JOIN_OCP} WHERE p.name = '{{product}}'"),
        ("product_year_units", _g(product=products, year=_YEARS),
         "How many units of the product '{product}' were sold in {year}, counting paid and shipped orders only?",
         f"SELECT SUM(o.quantity) {_JOIN_OP} WHERE p.name = '{{product}}' AND o.placed LIKE '{{year}}-%' AND {_SOLD}"),
        ("category_status_customers", _g(cat=_CATEGORIES, status=_STATUSES),
         "How many different customers have an order with the status '{status}' for a product in the category '{cat}'?",
         f"SELECT COUNT(DISTINCT o.customer_id) {_JOIN_OP} WHERE p.category = '{{cat}}' AND o.status = '{{status}}'"),
        ("customer_spend", _g(name=names), "How much revenue in euros came from the customer named {name}?",
         f"SELECT {_REVENUE} {_JOIN_OCP} WHERE c.name = '{{name}}' AND {_SOLD}"),
        ("city_product_customers", _g(city=_CITIES, product=products),
         "How many different customers from {city} ordered the product '{product}'?",
         f"SELECT COUNT(DISTINCT c.id) {_JOIN_OCP} WHERE c.city = '{{city}}' AND p.name = '{{product}}'"),
    ]


def _informative(conn: sqlite3.Connection, query: str) -> bool:
    """Whether a reference query's result tells queries apart: not empty, no NULL, not a lone 0 or 1 (a guess),
    and, when its WHERE clause ends the query, different without its last condition (a question
    whose last condition changes nothing would accept the query that forgets it)."""
    from collections import Counter

    rows = conn.execute(query).fetchall()
    if not rows or any(v is None for row in rows for v in row):
        return False
    if len(rows) == 1 and len(rows[0]) == 1 and rows[0][0] in (0, 1):
        return False
    tail = query.rsplit(" WHERE ", 1)[-1]
    if " AND " not in tail or any(k in tail for k in ("GROUP BY", "ORDER BY", "LIMIT", "BETWEEN")):
        return True
    return Counter(conn.execute(query.rsplit(" AND ", 1)[0]).fetchall()) != Counter(rows)


@register_task("short_sql")
class ShortSQLTask(CatalogTask):
    """Answer a question with one SELECT over a small SQLite database (see the module docstring).

    Args:
        levels: a level or a list of levels from (1, 2, 3) (default ``[1]``).
        privileged: "solution" (the reference query, default), "documents" (the database's
            documentation, not the answer) or "both" (documents, then the query).
        db_dir: where the database file is written (default: the cache, see the module docstring).
        seed, eval_fraction: see :class:`grpolab.tasks.catalog.CatalogTask` (``eval_fraction``
            defaults to 0.5: every level holds over 400 questions, so over 200 held out).
    """

    name = "short_sql"

    def __init__(self, *, levels=(1,), privileged: str = "solution", db_dir: str | None = None, seed: int = 0,
                 eval_fraction: float = 0.5) -> None:
        super().__init__(seed=seed, eval_fraction=eval_fraction)
        self.levels = check_levels("short_sql", list(levels) if isinstance(levels, tuple) else levels, LEVELS)
        self.privileged = check_privileged("short_sql", privileged, PRIVILEGED_CHOICES)
        self.db_path = build_database(db_dir)

    def catalog(self) -> list[Spec]:
        rows = _rows()
        names = [r[1] for r in rows["customers"]]
        products = [r[1] for r in rows["products"]]
        tables = {1: _level1(), 2: _level2(), 3: _level3(names, products)}
        conn = sqlite3.connect(f"file:{self.db_path}?mode=ro", uri=True)
        out = []
        try:
            for level in self.levels:
                for family, grid, question, query in tables[level]:
                    for p in grid:
                        q = query.format(**p)
                        if _informative(conn, q):
                            prompt = (f"Database schema (SQLite):\n{SCHEMA}\n\nQuestion: {question.format(**p)}\n"
                                      "Answer with one SQLite SELECT query in a ```sql code block.")
                            out.append(Spec(prompt, family, level, {"query": q, "ordered": False}))
        finally:
            conn.close()
        return out

    def make_item(self, spec: Spec) -> TaskItem:
        query = spec.data["query"]
        solution = f"```sql\n{query}\n```"
        privileged = {"solution": solution, "documents": DOCUMENTS,
                      "both": f"{DOCUMENTS}\n\nReference query:\n{solution}"}[self.privileged]
        reference = {"db_path": str(self.db_path), "query": query, "ordered": spec.data["ordered"]}
        return TaskItem(
            prompt=spec.prompt,
            reference=json.dumps(reference),
            privileged=privileged,
            reward="sql",
            demonstration=solution,
            meta={"difficulty": spec.level, "family": spec.family, "solution": solution, "documents": DOCUMENTS},
        )
