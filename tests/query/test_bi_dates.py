"""The date shapes BI tools send on DATE columns (issue #28, item 4): ISO timestamps compared as DuckDB compares
them with a DATE, constant date arithmetic folded to a date before analysis, CURRENT_DATE fixed at planning
(and held by the repeat identity), and ROLLUP refused naming it."""

from __future__ import annotations

import datetime as dt

import duckdb
import pytest

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import QueryError, UnsupportedQuery
from proxy.query.planner import plan, repeat_identity

T = TableSchema("t", "u", (
    ColumnSpec("u", "BIGINT"),
    ColumnSpec("day", "DATE", groupable=True, date_bounds=("2024-01-20", "2024-03-20")),
    ColumnSpec("r", "VARCHAR", groupable=True, public_domain=("a", "b")),
))
CATALOG = Catalog((T,))
TODAY = dt.date(2024, 3, 5)

SHAPES = (
    "day >= '2024-03-01T00:00:00'", "day >= '2024-03-01T12:00:00'", "day = '2024-03-01T12:00:00'",
    "day > '2024-03-01 23:59:59'", "day >= '2024-03-01 00:00:00.000'", "day < '2024-03-01T00:00:00Z'",
    "day BETWEEN '2024-02-28T10:00:00' AND '2024-03-01T00:00:00'", "day IN ('2024-03-01T00:00:00', '2024-03-02 10:00')",
    "day >= TIMESTAMP '2024-03-01 00:00:00'", "day >= TIMESTAMP '2024-03-01 12:00:00'",
    "day > TIMESTAMP '2024-03-01 12:00:00'", "day <= TIMESTAMP '2024-03-01 12:00:00'",
    "day < TIMESTAMP '2024-03-01 00:00:01'", "day = TIMESTAMP '2024-03-01 00:00:00'",
    "day = TIMESTAMP '2024-03-01 06:00:00'", "day <> TIMESTAMP '2024-03-01 06:00:00'",
    "day BETWEEN TIMESTAMP '2024-02-27 01:00:00' AND TIMESTAMP '2024-03-02 23:00:00'",
    "day IN (TIMESTAMP '2024-03-01 00:00:00', TIMESTAMP '2024-03-02 01:00:00')",
    "CAST('2024-03-01' AS TIMESTAMP) <= day",
    "day >= DATE '2024-03-01' - INTERVAL '7' DAY", "day >= DATE '2024-03-01' - INTERVAL 7 DAY",
    "day < DATE '2024-01-31' + INTERVAL 1 MONTH", "day >= DATE '2024-03-31' - INTERVAL 1 MONTH",
    "day >= DATE '2024-03-01' - INTERVAL 36 HOUR", "day > DATE '2024-03-01' + INTERVAL 90 MINUTE",
    "day >= DATE '2025-02-28' - INTERVAL 1 YEAR", "day < DATE '2024-01-01' + INTERVAL 1 QUARTER",
    "day >= DATE '2024-03-10' - INTERVAL 2 WEEK", "day BETWEEN DATE '2024-03-01' - 3 AND DATE '2024-03-01' + 1",
    "DATE '2024-03-01' - INTERVAL 7 DAY <= day", "(day >= (DATE '2024-03-01' - INTERVAL 1 DAY))",
    "day >= CURRENT_DATE - INTERVAL 7 DAY", "day >= CURRENT_DATE - 7", "day < CURRENT_DATE",
    "day BETWEEN CURRENT_DATE - INTERVAL 30 DAY AND CURRENT_DATE - INTERVAL 1 DAY",
)


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    db = duckdb.connect()
    db.execute("CREATE TABLE t AS SELECT i AS u, DATE '2024-01-20' + i::INTEGER AS day, 'a' AS r FROM range(61) s(i)")
    db.execute("INSERT INTO t VALUES (100, NULL, 'b')")
    return db


@pytest.mark.parametrize("where", SHAPES)
def test_each_shape_selects_the_days_duckdb_selects(con: duckdb.DuckDBPyConnection, where: str) -> None:
    planned = plan(f"SELECT COUNT(*) FROM t WHERE {where}", CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace",
                   today=TODAY)
    assert planned.analysis.where is not None
    ours = con.execute(f"SELECT u FROM t WHERE {planned.analysis.where.sql('duckdb')} ORDER BY u").fetchall()
    reference = where.replace("CURRENT_DATE", f"DATE '{TODAY.isoformat()}'")
    theirs = con.execute(f"SELECT u FROM t WHERE {reference} ORDER BY u").fetchall()
    assert ours == theirs, (where, planned.analysis.where.sql("duckdb"))
    assert "INTERVAL" not in planned.analysis.where.sql("duckdb")  # folded to a date literal before analysis


def test_current_date_is_folded_at_planning_and_a_new_day_is_a_new_query() -> None:
    sql = "SELECT r, COUNT(*) FROM t WHERE day >= CURRENT_DATE - INTERVAL 7 DAY GROUP BY r"

    def identity(today: dt.date) -> str:
        p = plan(sql, CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace", today=today, salt=3)
        return repeat_identity(p, CATALOG)

    assert identity(TODAY) == identity(TODAY)  # a repeat the same day is served its stored release
    assert identity(TODAY) != identity(TODAY + dt.timedelta(days=1))  # never the release of another day
    folded = plan(sql.replace("CURRENT_DATE - INTERVAL 7 DAY", "DATE '2024-02-27'"), CATALOG, epsilon=1.0,
                  delta=0.0, mechanism="laplace", today=TODAY + dt.timedelta(days=9), salt=3)
    assert identity(TODAY) == repeat_identity(folded, CATALOG)  # exactly the query with the day written out


def test_a_group_key_on_the_day_is_cut_to_the_days_the_where_reaches() -> None:
    p = plan("SELECT day, COUNT(*) FROM t WHERE day > CURRENT_DATE - INTERVAL 2 DAY GROUP BY day", CATALOG,
             epsilon=1.0, delta=0.0, mechanism="laplace", today=dt.date(2024, 3, 19))
    assert p.analysis.domains == (("2024-03-18", "2024-03-19", "2024-03-20"),)


@pytest.mark.parametrize("where", [
    "day >= '2024-13-01T00:00:00'", "day >= TIMESTAMP 'soon'", "day >= CURRENT_TIMESTAMP - INTERVAL 7 DAY",
    "day > day - INTERVAL 1 DAY", "day >= DATE '2024-03-01' - INTERVAL 'a' DAY",
])
def test_what_is_no_constant_date_is_refused_before_any_charge(where: str) -> None:
    with pytest.raises(QueryError) as refused:
        plan(f"SELECT COUNT(*) FROM t WHERE {where}", CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace",
             today=TODAY)
    assert refused.value.code in ("policy", "unsupported")


@pytest.mark.parametrize(("group", "construct"), [
    ("ROLLUP(r, day)", "ROLLUP"), ("r, ROLLUP(day)", "ROLLUP"), ("CUBE(r)", "CUBE"),
    ("GROUPING SETS ((r), ())", "GROUPING SETS"),
])
def test_rollup_is_refused_naming_it_with_one_group_by_per_level_as_the_hint(group: str, construct: str) -> None:
    with pytest.raises(UnsupportedQuery) as refused:
        plan(f"SELECT r, COUNT(*) FROM t GROUP BY {group}", CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace")
    error = refused.value
    assert error.detail["construct"] == construct and construct in error.message
    assert "one query per level" in str(error.detail["hint"])


@pytest.mark.parametrize("key", [
    "date_trunc('week', day + INTERVAL 1 DAY) - INTERVAL 1 DAY",  # Metabase's Sunday-start weeks
    "day - INTERVAL 2 WEEK", "INTERVAL 3 DAY + day", "date_trunc('month', day - INTERVAL '7' DAYS)",
])
def test_a_day_shifted_key_is_each_days_value_in_duckdb(con: duckdb.DuckDBPyConnection, key: str) -> None:
    p = plan(f"SELECT {key} AS w, COUNT(*) FROM t GROUP BY 1", CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace")
    ((_, sql),) = p.analysis.computed
    rows = con.execute(f"SELECT u, CAST({sql.sql('duckdb')} AS VARCHAR), CAST(CAST({key} AS DATE) AS VARCHAR) "
                       "FROM t ORDER BY u").fetchall()
    assert all(ours == theirs for _, ours, theirs in rows), rows  # DuckDB's TIMESTAMP at 00:00 is that DATE
    days = con.execute(f"SELECT DISTINCT CAST(CAST({key} AS DATE) AS VARCHAR) FROM t WHERE day IS NOT NULL").fetchall()
    assert set(p.analysis.domains[0]) == {d for (d,) in days}  # the public domain: the declared days' values


@pytest.mark.parametrize("key", ["day + INTERVAL 1 MONTH", "day + INTERVAL 6 HOUR", "day - INTERVAL 'x' DAY"])
def test_a_shift_that_is_not_whole_days_is_refused_naming_interval(key: str) -> None:
    with pytest.raises(UnsupportedQuery) as refused:
        plan(f"SELECT {key} AS w, COUNT(*) FROM t GROUP BY 1", CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace")
    assert refused.value.detail["construct"] == "INTERVAL"
