"""Queries over a public table alone (proxy/query/public/single_table.py, planner.plan_public) against DuckDB: the
rebuilt query answers exactly what the analyst's text answers when run plainly, on a table with NULLs, decimals
and dates; only declared columns of a declared public table are read; anything reading a protected table is a DP
query (None); and the row limit is one more than may be released."""

from __future__ import annotations

import duckdb
import pytest

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import plan_public

PRODUCTS = PublicTable("products", (
    ColumnSpec("sku", "VARCHAR"), ColumnSpec("kind", "VARCHAR"), ColumnSpec("price", "DECIMAL(10,2)"),
    ColumnSpec("launched", "DATE"), ColumnSpec("stock", "INTEGER")), ("sku",), unique=True)
SALES = TableSchema("sales", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("sku", "VARCHAR", groupable=True)))
CATALOG = Catalog((SALES,), public=(PRODUCTS,))
ROWS = [("a1", "toy", "9.99", "2026-01-05", 3), ("a2", "toy", "19.50", "2026-02-01", None),
        ("b1", "book", None, "2025-12-31", 0), ("b2", None, "5.00", None, 12), ("c1", "food", "0.10", "2026-03-01", -1)]

SAME = [
    "SELECT DISTINCT kind FROM products ORDER BY kind",
    "SELECT kind, COUNT(*) AS n, COUNT(price) AS c, SUM(price) AS s, AVG(stock) AS a, MIN(launched) AS m "
    "FROM products GROUP BY kind ORDER BY 1",
    "SELECT COUNT(DISTINCT kind) AS k, MAX(price) AS hi FROM products WHERE launched >= DATE '2026-01-01'",
    "SELECT p.sku, p.price FROM products p WHERE p.price BETWEEN 1 AND 20 OR p.kind IS NULL ORDER BY p.sku DESC",
    "SELECT sku, stock FROM products WHERE kind IN ('toy', 'book') AND stock > 0 ORDER BY sku LIMIT 1",
    "SELECT kind AS k, COUNT(*) FROM products GROUP BY k ORDER BY k",
    "SELECT sku FROM (SELECT sku, kind FROM products WHERE kind LIKE 't%') AS q ORDER BY sku",
    # with HAVING, a self-join or a subquery: the rules of public/joined.py (tests/query/test_public_joins.py)
    "SELECT kind, COUNT(*) AS n FROM products GROUP BY kind HAVING COUNT(*) > 1 ORDER BY kind",
    "SELECT p.sku, q.sku FROM products p, products q WHERE p.kind = q.kind AND p.sku < q.sku ORDER BY 1, 2",
    "SELECT sku FROM products WHERE price > (SELECT AVG(price) FROM products) ORDER BY sku",
]


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE products (sku VARCHAR, kind VARCHAR, price DECIMAL(10,2), launched DATE, stock INTEGER,"
                " secret VARCHAR)")
    con.executemany("INSERT INTO products VALUES (?, ?, ?, ?, ?, 'x')", ROWS)
    con.execute("CREATE TABLE sales (uid BIGINT, sku VARCHAR)")
    return con


@pytest.mark.parametrize("sql", SAME)
def test_the_rebuilt_query_answers_exactly_what_the_text_does(sql: str, con: duckdb.DuckDBPyConnection) -> None:
    planned = plan_public(sql, CATALOG, max_rows=100)
    assert planned is not None
    assert con.execute(planned.tree.sql("duckdb")).fetchall() == con.execute(sql).fetchall()


def test_star_is_the_declared_columns_only(con: duckdb.DuckDBPyConnection) -> None:
    planned = plan_public("SELECT * FROM products", CATALOG, max_rows=100)
    assert planned is not None and planned.query.columns == ("sku", "kind", "price", "launched", "stock")
    assert "secret" not in planned.tree.sql("duckdb")


def test_the_limit_asks_for_one_row_more_than_may_be_released() -> None:
    assert str(plan_public("SELECT sku FROM products", CATALOG, max_rows=3).tree.args["limit"].expression) == "4"
    assert str(plan_public("SELECT sku FROM products LIMIT 2", CATALOG, max_rows=3).tree.args["limit"].expression) \
        == "2"


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM sales",
    "SELECT COUNT(*) FROM sales s JOIN products p ON s.sku = p.sku",
    "SELECT COUNT(*) FROM products p JOIN sales s ON s.sku = p.sku",
    "SELECT COUNT(*) FROM sales s, products p WHERE s.sku = p.sku",
])
def test_a_query_reading_a_protected_table_is_a_dp_query(sql: str) -> None:
    assert plan_public(sql, CATALOG, max_rows=100) is None


@pytest.mark.parametrize(("sql", "code", "construct"), [
    ("SELECT secret FROM products", "policy", "COLUMN"),
    ("SELECT COUNT(*) FROM products p JOIN products q USING (sku)", "unsupported", "JOIN"),
    ("SELECT kind, COUNT(*) FROM products", "policy", "COLUMN"),
    ("SELECT sku, COUNT(*) FROM products GROUP BY kind", "policy", "COLUMN"),
    ("SELECT SUM(kind) FROM products", "policy", "SUM"),
    ("SELECT UPPER(kind) FROM products", "unsupported", "UPPER()"),
    ("SELECT sku FROM products ORDER BY stock", "unsupported", "ORDER BY"),
    ("SELECT sku FROM products LIMIT 1 OFFSET 1", "unsupported", "OFFSET"),
    ("SELECT DISTINCT ON (kind) sku FROM products", "unsupported", "DISTINCT ON"),
    ("SELECT sku FROM products WHERE RANDOM() > 0.5", "unsupported", "RAND()"),
    ("SELECT sku FROM staging.products", "policy", "SCHEMA"),
    ("SELECT sku FROM products WHERE sku IN (SELECT sku FROM sales)", "unsupported", "SUBQUERY"),
    ("SELECT kind FROM products GROUP BY kind HAVING UPPER(kind) > 'A'", "unsupported", "UPPER()"),
])
def test_what_a_public_query_may_not_do_is_refused(sql: str, code: str, construct: str) -> None:
    with pytest.raises(QueryError) as err:
        plan_public(sql, CATALOG, max_rows=100)
    assert (err.value.code, err.value.detail.get("construct")) == (code, construct), err.value.message
