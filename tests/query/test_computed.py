"""Computed keys and filters: each admitted function against DuckDB's own behaviour, their domains, their
composition, and totality on hostile data (no run-time error after admission)."""

from __future__ import annotations

import datetime as dt
import math

import duckdb
import pytest
from sqlglot import parse_one

from proxy.query.analyse.analysis import analyse
from proxy.query.analyse.names import Names
from proxy.query.analyse.where import predicate
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.computed.values import scalar, total
from proxy.query.errors import QueryError
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.rewrite.per_query import rewrite
from tests.support import scratch_db

T = TableSchema("t", "uid", (
    ColumnSpec("uid", "BIGINT"),
    ColumnSpec("i", "INTEGER", unit_level=True, groupable=True, bounds=(18, 90)),
    ColumnSpec("b", "BIGINT", groupable=True),
    ColumnSpec("d", "DOUBLE", groupable=True, bounds=(0, 500)),
    ColumnSpec("dec", "DECIMAL(10,2)", groupable=True),
    ColumnSpec("s", "VARCHAR", unit_level=True, groupable=True, public_domain=("North", "south", "Ēast")),
    ColumnSpec("day", "DATE", groupable=True, date_bounds=("2026-01-01", "2026-12-31")),
    ColumnSpec("secret", "DOUBLE"),
), max_groups=3, max_rows=2)
CATALOG = Catalog((T,))
DDL = ("CREATE TABLE t (uid BIGINT, i INTEGER, b BIGINT, d DOUBLE, dec DECIMAL(10,2), s VARCHAR, day DATE, "
       "secret DOUBLE)")
ROWS = [
    (1, 18, 5, 0.5, "1.25", "North", "2026-01-31", 1.0),
    (1, 19, -7, -2.5, "-3.50", "south", "2026-02-01", 2.0),
    (2, 0, 2**62, 1e308, "99999999.99", "Ēast", "2026-12-31", None),
    (2, -(2**31), -(2**63), float("nan"), "0.00", "", "1970-01-01", None),
    (3, 2**31 - 1, 0, float("inf"), None, None, None, None),
    (3, None, None, None, "0.01", "x" * 5000, "9999-12-31", None),
    (4, 45, 3, -0.0, "10.00", "MiXeD cAsE", "2024-02-29", None),
]

EXPRESSIONS = [
    "i + 1", "i * 3 - b", "i / 4", "i // 4", "i % 3", "b * b", "d * 2.5", "-d", "FLOOR(i / 10) * 10",
    "CAST(FLOOR(i / 10) * 10 AS INTEGER)", "CEIL(d)", "ROUND(d, 1)", "ROUND(d)", "ABS(i)", "CAST(d AS BIGINT)",
    "CAST(s AS INTEGER)", "CAST(i AS VARCHAR)", "TRY_CAST(s AS DATE)", "CAST(dec AS DOUBLE)", "dec * 2",
    "CASE WHEN i < 0 THEN 'neg' WHEN i = 0 THEN 'zero' ELSE 'pos' END", "CASE s WHEN 'North' THEN 1 END",
    "IF(d > 0, 1, 0)", "COALESCE(s, 'none')", "COALESCE(i, b)", "LOWER(s)", "UPPER(s)", "SUBSTR(s, 2, 3)",
    "SUBSTRING(s, 2)", "LEFT(s, 2)", "date_trunc('month', day)", "date_trunc('week', day)",
    "date_trunc('quarter', day)", "EXTRACT(year FROM day)", "EXTRACT(dow FROM day)", "date_part('doy', day)",
    "YEAR(day)", "MONTH(day)", "QUARTER(day)", "DAYOFWEEK(day)", "ISODOW(day)", "strftime(day, '%Y-%m')",
    "strftime(day, '%b %d, %Y')", "i / 0", "i % 0", "i // 0", "d / b",
]


def _connection() -> duckdb.DuckDBPyConnection:
    con = scratch_db.connect()
    con.execute(DDL)
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ROWS)
    return con


def _same(ours: object, theirs: object) -> bool:
    if isinstance(theirs, dt.datetime):
        theirs = theirs.date()
    if isinstance(theirs, float) and not math.isfinite(theirs):
        return ours is None  # not finite: NULL by design
    if isinstance(theirs, float | int) and isinstance(ours, float | int) and not isinstance(theirs, bool):
        return math.isclose(float(ours), float(theirs), rel_tol=1e-12, abs_tol=0.0) or ours == theirs
    if hasattr(theirs, "as_tuple") and isinstance(ours, float):  # a DECIMAL: we compute in DOUBLE
        return math.isclose(ours, float(theirs), rel_tol=1e-12)  # type: ignore[arg-type]
    return ours == theirs


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_each_function_computes_what_duckdb_computes_and_never_fails(text: str) -> None:
    value = scalar(parse_one(text, read="duckdb"), Names(T, None, CATALOG, conditions=predicate))
    con = _connection()
    ours = con.execute(f"SELECT uid, {total(value).sql('duckdb')} FROM t ORDER BY rowid").fetchall()  # never raises
    assert len(ours) == len(ROWS)
    for index, (_, mine) in enumerate(ours):
        try:
            theirs = con.execute(f"SELECT {text} FROM t WHERE rowid = {index}").fetchone()[0]  # type: ignore[index]
        except duckdb.Error:
            continue  # DuckDB fails on this row; ours is NULL or a value, never an error
        assert _same(mine, theirs), (text, ROWS[index], mine, theirs)


def test_typed_division_of_integers_truncates_as_in_postgres() -> None:
    value = scalar(parse_one("i / 2", read="postgres"), Names(T, None, CATALOG, conditions=predicate))
    con = scratch_db.connect()
    assert con.execute(f"SELECT {total(value).sql('duckdb')} FROM (SELECT -7 AS i)").fetchone() == (-3,)
    assert value.type == "BIGINT"


@pytest.mark.parametrize("text", [
    "random()", "now()", "read_text('/etc/passwd')", "getenv('HOME')", "current_date", "uuid()",
    "regexp_replace(s, 'a', 'b')", "repeat(s, 1000000)", "strftime(day, '%H:%M %s')", "date_trunc('hour', day)",
    "strftime(day, '%q')",
    "SUBSTR(s, 1, 100000)", "CAST(day AS INTEGER)", "CAST(i AS BLOB)", "s || s", "day + 1", "LOWER(i)",
    "(SELECT 1)", "COUNT(*)", "i / 'a'",
])
def test_everything_else_is_refused_naming_the_construct(text: str) -> None:
    with pytest.raises(QueryError) as caught:
        scalar(parse_one(text, read="duckdb"), Names(T, None, CATALOG, conditions=predicate))
    assert caught.value.detail.get("construct")


@pytest.mark.parametrize(("query", "domain", "max_groups", "composition"), [
    ("SELECT CAST(FLOOR(i / 10) * 10 AS INTEGER) AS a, COUNT(*) FROM t GROUP BY CAST(FLOOR(i / 10) * 10 AS INTEGER)",
     (10, 20, 30, 40, 50, 60, 70, 80, 90), 1, "parallel"),
    ("SELECT date_trunc('month', day) AS m, COUNT(*) FROM t GROUP BY 1",
     tuple(f"2026-{m:02d}-01" for m in range(1, 13)), 3, "sequential"),
    ("SELECT LOWER(s) AS r, COUNT(*) FROM t GROUP BY r", ("north", "south", "ēast"), 1, "parallel"),
    ("SELECT CASE WHEN secret > 1 THEN 'hi' ELSE 'lo' END AS h, COUNT(*) FROM t GROUP BY h", ("hi", "lo"), 3,
     "sequential"),
    ("SELECT d > 100 AS big, COUNT(*) FROM t GROUP BY d > 100", (False, True), 3, "sequential"),
    ("SELECT EXTRACT(quarter FROM day) AS q, COUNT(*) FROM t GROUP BY q", (1, 2, 3, 4), 3, "sequential"),
    ("SELECT COALESCE(s, 'none') AS r, COUNT(*) FROM t GROUP BY 1", ("North", "none", "south", "Ēast"), 1,
     "parallel"),
])
def test_computed_keys_have_derived_public_domains_and_unit_level_composition(
    query: str, domain: tuple[object, ...], max_groups: int, composition: str
) -> None:
    p = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert p.analysis.partitions == "public"
    assert p.analysis.domains == (domain,)
    assert p.analysis.max_groups == max_groups
    assert p.price.composition == composition


def test_a_day_column_with_date_bounds_has_every_day_as_its_public_domain() -> None:
    a = analyse(parse("SELECT day, COUNT(*) FROM t GROUP BY day"), CATALOG)
    assert a.partitions == "public" and len(a.domains[0]) == 365
    assert a.domains[0][0] == "2026-01-01" and a.domains[0][-1] == "2026-12-31"


@pytest.mark.parametrize("query", [
    "SELECT FLOOR(d / 10) AS f, COUNT(*) FROM t GROUP BY f",  # a DOUBLE: no finite declared domain
    "SELECT b % 7 AS m, COUNT(*) FROM t GROUP BY m",  # an unbounded BIGINT
    "SELECT COALESCE(s, CAST(b AS VARCHAR)) AS r, COUNT(*) FROM t GROUP BY r",
])
def test_keys_without_a_finite_public_domain_use_private_partitions(query: str) -> None:
    assert analyse(parse(query), CATALOG).partitions == "private"


@pytest.mark.parametrize(("query", "code"), [
    ("SELECT COUNT(*) FROM t GROUP BY uid % 10", "policy"),  # the unit smuggled into a key
    ("SELECT COUNT(*) FROM t GROUP BY CAST(uid AS VARCHAR)", "policy"),
    ("SELECT COUNT(*) FROM t GROUP BY CASE WHEN i > 1 THEN uid END", "unsupported"),
    ("SELECT COUNT(*) FROM t GROUP BY FLOOR(secret)", "policy"),  # not groupable, not even computed
    ("SELECT COUNT(*) FROM t GROUP BY NULL", "unsupported"),
    ("SELECT COUNT(*) FROM t GROUP BY 2", "unsupported"),
    ("SELECT COUNT(*) AS n FROM t GROUP BY 1", "unsupported"),
    ("SELECT i + 1, COUNT(*) FROM t GROUP BY i + 2", "policy"),  # the output is not the key
    ("SELECT COUNT(*) FROM t WHERE LOWER(s) = 1", "policy"),
    ("SELECT COUNT(*) FROM t WHERE LOWER(s) = day", "policy"),
    ("SELECT COUNT(*) FROM t WHERE LOWER(s) = EXTRACT(year FROM day)", "unsupported"),
])
def test_computed_refusals(query: str, code: str) -> None:
    with pytest.raises(QueryError) as caught:
        analyse(parse(query), CATALOG)
    assert caught.value.code == code, caught.value.message
    assert caught.value.detail.get("construct")


def test_outputs_match_their_key_by_expression_alias_or_position() -> None:
    for query in (
        "SELECT CAST(FLOOR(i / 10) * 10 AS INTEGER), COUNT(*) FROM t GROUP BY CAST(FLOOR(i/10)*10 AS INT)",
        "SELECT CAST(FLOOR(i / 10) * 10 AS INTEGER) AS a, COUNT(*) FROM t GROUP BY a",
        "SELECT CAST(FLOOR(i / 10) * 10 AS INTEGER) AS a, COUNT(*) FROM t GROUP BY 1 ORDER BY a DESC",
    ):
        a = analyse(parse(query), CATALOG)
        assert a.keys == ("__key0",) and a.outputs[0].expr == exp_key(0)


def exp_key(index: int) -> object:
    from proxy.query.expr import Key

    return Key(index)


def test_computed_filters_keep_the_scope_at_every_cell() -> None:
    # `i` is an axis of the cell space; a computed condition on it must never narrow the scope
    for where in ("CAST(i AS BIGINT) = 30", "i + 0 < 30", "FLOOR(i / 10) = 3", "LOWER(s) = 'north'",
                  "CASE WHEN i < 30 THEN 'y' END = 'y'", "i // 1 IN (20, 21)"):
        a = analyse(parse(f"SELECT COUNT(*) FROM t WHERE {where}"), CATALOG, canonical_units=True)
        assert a.scope.cells is None, where
    # combined with a plain condition, only the plain one restricts
    narrow = analyse(parse("SELECT COUNT(*) FROM t WHERE i < 30 AND FLOOR(i / 10) = 5"), CATALOG)
    plain = analyse(parse("SELECT COUNT(*) FROM t WHERE i < 30"), CATALOG)
    assert narrow.scope.cells == plain.scope.cells


@pytest.mark.parametrize("query", [
    "SELECT CAST(FLOOR(i / 10) * 10 AS INTEGER) AS a, COUNT(*), SUM(d) FROM t GROUP BY 1",
    "SELECT b * b AS sq, COUNT(*) FROM t WHERE d / b > 1 OR i // 0 = 1 GROUP BY sq",
    "SELECT LOWER(s) AS r, COUNT(*) FROM t WHERE UPPER(SUBSTR(s, 1, 1)) LIKE 'N%' GROUP BY r",
    "SELECT strftime(day, '%Y') AS y, COUNT(*) FROM t WHERE date_trunc('month', day) >= DATE '2026-02-01' GROUP BY y",
    "SELECT FLOOR(d / 10) AS f, COUNT(*) FROM t WHERE CAST(s AS INTEGER) IS NULL GROUP BY f",
])
def test_rewritten_sql_runs_on_hostile_data_without_error(query: str) -> None:
    con = _connection()
    con.execute(rewrite(analyse(parse(query), CATALOG, canonical_units=True), 5)).fetchall()


def test_dialects_give_the_same_key() -> None:
    texts = {
        "duckdb": "SELECT date_trunc('month', day) AS m, COUNT(*) FROM t GROUP BY 1",
        "postgres": "SELECT date_trunc('month', day) AS m, COUNT(*) FROM t GROUP BY 1",
        "snowflake": "SELECT DATE_TRUNC('MONTH', day) AS m, COUNT(*) FROM t GROUP BY 1",
        "bigquery": "SELECT DATE_TRUNC(day, MONTH) AS m, COUNT(*) FROM t GROUP BY 1",
        "tsql": "SELECT DATETRUNC(month, day) AS m, COUNT(*) FROM t GROUP BY DATETRUNC(month, day)",
    }
    sqls = {d: plan(q, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", dialect=d).sql for d, q in texts.items()}
    assert len(set(sqls.values())) == 1, sqls


@pytest.mark.parametrize(("query", "line", "column"), [
    ("SELECT COUNT(*) FROM t\nWHERE random() < 0.5", 2, 7),
    ("SELECT COUNT(*) FROM t GROUP BY uid % 10", 1, 33),
    ("SELECT nope, COUNT(*) FROM t", 1, 8),
    ("SELECT COUNT(*)\n  FROM t WHERE read_text('/etc/passwd') = 'x'", 2, 16),
])
def test_refusals_say_where_the_construct_starts(query: str, line: int, column: int) -> None:
    with pytest.raises(QueryError) as caught:
        analyse(parse(query), CATALOG)
    at = caught.value.detail["at"]
    assert (at["line"], at["column"]) == (line, column)
    assert f"(line {line}, column {column})" in caught.value.message
    offset = at["offset"]
    assert query[offset:].lower().startswith(query.splitlines()[line - 1][column - 1:][:3].lower())


@pytest.mark.parametrize("dialect", ["duckdb", "postgres", "mysql", "bigquery", "snowflake", "tsql"])
def test_the_age_histogram_has_the_same_buckets_in_every_dialect(dialect: str) -> None:
    sql = ("SELECT CAST(FLOOR(i / 10) * 10 AS INTEGER) AS a, COUNT(*) AS n FROM t "
           "GROUP BY CAST(FLOOR(i / 10) * 10 AS INTEGER)")
    p = plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", dialect=dialect)
    assert p.analysis.domains == ((10, 20, 30, 40, 50, 60, 70, 80, 90),)
    assert (p.analysis.max_groups, p.price.composition, p.analysis.partitions) == (1, "parallel", "public")
