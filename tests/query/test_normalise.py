"""proxy/query/parse/normalise.py: each rule gives the same query. Differential: the normalised text and the original
run on one small DuckDB database (NULLs included, for three-valued logic) and return the same rows."""

from __future__ import annotations

import pytest
from sqlglot import parse_one

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.parse.normalise import normalise
from proxy.query.planner import plan
from tests.support import scratch_db

ROWS = [(1, "a", "1998-08-01", 0.05, 3), (2, "b", "1998-09-02", 0.07, None), (3, None, "1998-09-03", None, 5),
        (4, "a", "1995-01-31", 0.06, 2), (5, "b", "1994-12-31", 0.04, 7), (6, "a", None, 0.08, 1)]

QUERIES = [
    "SELECT id FROM t WHERE d <= DATE '1998-12-01' - INTERVAL '90' DAY ORDER BY id",
    "SELECT id FROM t WHERE d >= DATE '1994-01-01' AND d < DATE '1994-01-01' + INTERVAL '1' YEAR ORDER BY id",
    "SELECT id FROM t WHERE d < DATE '1995-01-31' + INTERVAL '1' MONTH ORDER BY id",
    "SELECT id FROM t WHERE d < DATE '1995-01-01' + INTERVAL '3' MONTH - INTERVAL '1' DAY ORDER BY id",
    "SELECT id FROM t WHERE x BETWEEN 0.06 - 0.01 AND 0.06 + 0.01 ORDER BY id",
    "SELECT id FROM t WHERE q < 24 * 2 - 45 ORDER BY id",
    "SELECT id FROM t WHERE (g = 'a' AND q > 1) OR (q > 1 AND g = 'b') OR (q > 1 AND x IS NULL) ORDER BY id",
    "SELECT id FROM t WHERE (g = 'a' AND q > 1) OR g = 'a' ORDER BY id",
    "SELECT id FROM t WHERE (g = 'a' AND (q > 1 OR q IS NULL)) OR (g = 'a' AND x > 0.06) ORDER BY id",
]


@pytest.mark.parametrize("sql", QUERIES)
def test_the_normalised_query_returns_the_rows_of_the_query_as_written(sql: str) -> None:
    con = scratch_db.connect()
    try:
        con.execute("CREATE TABLE t (id INTEGER, g VARCHAR, d DATE, x DECIMAL(15, 2), q INTEGER)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", ROWS)
        written = parse_one(sql, read="duckdb")
        normalised = normalise(written)
        assert normalised.sql("duckdb") != written.sql("duckdb")  # every example is rewritten
        assert "INTERVAL" not in normalised.sql("duckdb")
        assert con.execute(normalised.sql("duckdb")).fetchall() == con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_join_equality_inside_every_or_arm_becomes_the_join() -> None:
    """TPC-H Q19's shape: the comma join's equality is in each OR arm; factored out, the join is explicit."""
    li = TableSchema("li", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("pk", "BIGINT"),
                                 ColumnSpec("qty", "INTEGER", bounds=(0, 50))), max_rows=5)
    part = PublicTable("part", (ColumnSpec("p_pk", "BIGINT"), ColumnSpec("brand", "VARCHAR")), ("p_pk",), unique=True)
    sql = ("SELECT SUM(qty) FROM li, part WHERE (part.p_pk = li.pk AND brand = 'x' AND qty >= 1 + 1) OR "
           "(part.p_pk = li.pk AND brand = 'y' AND qty <= 10 + 10)")
    planned = plan(sql, Catalog((li,), public=(part,)), epsilon=1.0, delta=1e-6, mechanism="laplace",
                   bounding="store")
    assert 'INNER JOIN "part" AS __o ON __b."pk" = __o."p_pk"' in planned.sql
    assert "\"qty\" >= 2" in planned.sql and "\"qty\" <= 20" in planned.sql
