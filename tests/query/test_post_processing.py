"""Post-processing over released values (issue #28, item 3): CAST, ROUND, FLOOR, CEIL, COALESCE, NULLIF, CASE,
IF, CONCAT and || in SELECT, HAVING and ORDER BY, computed in Python (proxy/query/expr.py) on released values
only, with DuckDB's semantics on the same numbers, at the same charge as without them."""

from __future__ import annotations

import datetime as dt
import itertools
import math

import duckdb
import pytest

from mechanisms.sampling import FixedSampler
from proxy.query.analyse.analysis import analyse
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import UnsupportedQuery
from proxy.query.expr import evaluate, round_to
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.release.publish import release

T = TableSchema("t", "u", (
    ColumnSpec("u", "BIGINT"),
    ColumnSpec("k", "VARCHAR", groupable=True, public_domain=("north", "south")),
    ColumnSpec("i", "INTEGER", groupable=True, public_domain=(-1250, 7)),
    ColumnSpec("d", "DATE", groupable=True, public_domain=("2024-03-01",)),
    ColumnSpec("x", "DOUBLE", bounds=(-100, 100)),
), max_groups=2, max_rows=2)
CATALOG = Catalog((T,))
HEAD = "SELECT COUNT(*), AVG(x), SUM(x), "  # aggregates 0, 1, 2: c, a, s below
AGGREGATES = {"COUNT(*)": "c", "AVG(x)": "a", "SUM(x)": "s"}

EXPRESSIONS = (
    "COUNT(*)::int", "CAST(COUNT(*) AS BIGINT)", "CAST(COUNT(*) AS SMALLINT)", "CAST(AVG(x) AS INTEGER)",
    "TRY_CAST(AVG(x) AS BIGINT)", "CAST(SUM(x) AS DOUBLE)", "CAST(AVG(x) AS REAL)", "CAST(COUNT(*) AS TINYINT)",
    "CAST(AVG(x) AS VARCHAR)", "CAST(COUNT(*) AS VARCHAR)", "CAST(k AS VARCHAR)", "CAST(i AS TEXT)",
    "CAST(d AS VARCHAR)", "CAST(d AS DATE)", "CAST(AVG(x) AS UTINYINT)",
    "ROUND(AVG(x), 2)", "ROUND(AVG(x))", "ROUND(AVG(x), 0)", "ROUND(AVG(x), -2)", "ROUND(COUNT(*), -2)",
    "ROUND(COUNT(*), 2)", "ROUND(SUM(x) / 3, 4)", "ROUND(i, -2)", "ROUND(-AVG(x), 1)",
    "FLOOR(AVG(x))", "CEIL(AVG(x))", "CEILING(SUM(x))", "FLOOR(COUNT(*))", "CEIL(COUNT(*) / 10)",
    "COALESCE(AVG(x), 0)", "COALESCE(SUM(x), 0)", "COALESCE(AVG(x), SUM(x), -1)", "COALESCE(AVG(x), 0.5)",
    "NULLIF(COUNT(*), 0)", "NULLIF(AVG(x), 2.5)", "NULLIF(k, 'north')",
    "CASE WHEN COUNT(*) > 100 THEN 'many' WHEN COUNT(*) > 0 THEN 'some' ELSE 'none' END",
    "CASE WHEN AVG(x) > 0 THEN AVG(x) END", "CASE k WHEN 'north' THEN 1 WHEN 'south' THEN 2 END",
    "IF(COUNT(*) > 5, 'a', 'b')", "CASE WHEN k = 'north' AND AVG(x) < 0 THEN -1 ELSE 1 END",
    "CONCAT(k, ': ', COUNT(*))", "CONCAT(k, '/', i, '/', d)", "k || '-' || CAST(i AS VARCHAR)", "k || AVG(x)",
    "CONCAT(k, AVG(x))", "ROUND(AVG(x), 2) * 100 + COUNT(*)", "COUNT(*)::int / 2", "ROUND(COUNT(*)::DOUBLE / 3, 3)",
)
COUNTS = (0, 7, 1250, 2**40)
DOUBLES = (2.5, -2.5, 0.125, 1.005, 2.675, 1234.5, -0.0, 3.0, 1e-7, 1e20, 1e300, 123456.789, None)


def _expr(sql: str):  # type: ignore[no-untyped-def]
    analysis = analyse(parse(f"{HEAD}{sql} AS e FROM t GROUP BY k, i, d"), CATALOG)
    assert [a.kind for a in analysis.aggregates[:3]] == ["count", "avg", "sum"]
    return analysis.outputs[3].expr


def _duckdb(con: duckdb.DuckDBPyConnection, sql: str, keys: tuple[object, ...], values: tuple[object, ...]) -> object:
    for call, name in AGGREGATES.items():
        sql = sql.replace(call, name)
    query = (f"SELECT {sql} FROM (SELECT ?::VARCHAR AS k, ?::INTEGER AS i, ?::DATE AS d, ?::BIGINT AS c, "
             "?::DOUBLE AS a, ?::DOUBLE AS s)")
    try:
        (found,) = con.execute(query, [*keys, *values]).fetchone()  # type: ignore[misc]
    except duckdb.Error:
        return "error"
    return found.isoformat() if isinstance(found, dt.date) else found


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    return duckdb.connect()


def _same(ours: object, theirs: object) -> bool:
    if theirs == "error":
        return ours is None  # DuckDB would raise (a cast out of range): released as NULL, never an error
    if isinstance(theirs, float) and isinstance(ours, float):
        return (math.isnan(theirs) and math.isnan(ours)) or (ours == theirs and math.copysign(1, ours) == math.copysign(
            1, theirs))
    return type(ours) is type(theirs) and ours == theirs


@pytest.mark.parametrize("sql", EXPRESSIONS)
def test_each_function_computes_what_duckdb_computes_on_the_same_values(con: duckdb.DuckDBPyConnection,
                                                                        sql: str) -> None:
    expr = _expr(sql)
    mismatches = []
    for keys in (("north", 7, "2024-03-01"), ("south", -1250, "2024-03-01")):
        for c, a, s in itertools.product(COUNTS, DOUBLES, (-7.5, 1e16, None)):
            ours = evaluate(expr, keys, (c, a, s))
            theirs = _duckdb(con, sql, keys, (c, a, s))
            # COALESCE of a NULL DOUBLE and an integer: DuckDB's type is static (DOUBLE 0.0), ours the value's (0)
            loose = sql.startswith("COALESCE") and isinstance(theirs, float) and ours == theirs
            if not (_same(ours, theirs) or loose):
                mismatches.append((keys, (c, a, s), ours, theirs))
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize(("plain", "post"), [
    ("SELECT k, COUNT(*) AS n FROM t GROUP BY k", "SELECT k, COUNT(*)::int AS n FROM t GROUP BY k"),
    ("SELECT k, AVG(x) AS a, SUM(x) AS s FROM t GROUP BY k",
     "SELECT CAST(k AS VARCHAR) || '!' AS shout, ROUND(AVG(x), 2) AS a, COALESCE(CAST(SUM(x) AS DOUBLE), 0) AS s "
     "FROM t GROUP BY k HAVING FLOOR(AVG(x)) > -1000 ORDER BY CEIL(SUM(x)) DESC"),
    ("SELECT i, COUNT(*) AS n FROM t GROUP BY i",
     "SELECT CONCAT(i, ':') AS label, CASE WHEN COUNT(*) > 3 THEN 'many' ELSE 'few' END AS n, NULLIF(COUNT(*), 0) AS z "
     "FROM t GROUP BY i"),
])
def test_post_processing_is_free_the_same_charge_and_noise(plain: str, post: str) -> None:
    for mechanism in ("laplace", "gaussian"):
        a = plan(plain, CATALOG, epsilon=1.0, delta=1e-6, mechanism=mechanism)
        b = plan(post, CATALOG, epsilon=1.0, delta=1e-6, mechanism=mechanism)
        assert (a.price.event, a.price.epsilon, a.price.delta, a.price.noise) == (
            b.price.event, b.price.epsilon, b.price.delta, b.price.noise)
        assert a.sql == b.sql  # the same SQL runs: the functions act after noise only


def test_the_release_computes_the_functions_on_the_noisy_values() -> None:
    p = plan("SELECT k, COUNT(*)::int AS n, ROUND(AVG(x), 1) AS a, CONCAT(k, '=', COUNT(*)) AS label, "
             "CASE WHEN COUNT(*) > 5 THEN 'many' ELSE 'few' END AS size FROM t GROUP BY k ORDER BY n DESC",
             CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    bare = plan("SELECT k, COUNT(*) AS n, AVG(x) AS a FROM t GROUP BY k", CATALOG, epsilon=1.0, delta=1e-6,
                mechanism="laplace")
    assert p.analysis.measures == bare.analysis.measures
    width = len(p.analysis.measures)  # key, units, then the measures as the SQL returns them
    exact = [("north", 2, *(5 * (j + 1) for j in range(width))), ("south", 1, *(9 - 40 * j for j in range(width)))]
    noisy = release(exact, p.analysis, p.price, FixedSampler((3, -1)))
    plain = release(exact, bare.analysis, bare.price, FixedSampler((3, -1)))
    expected = sorted(((k, n, round_to(a, 1), f"{k}={n}", "many" if n > 5 else "few") for k, n, a in plain.rows),
                      key=lambda row: -row[1])
    assert list(noisy.rows) == expected


@pytest.mark.parametrize(("sql", "construct"), [
    ("SELECT CAST(AVG(x) AS DECIMAL(10, 2)) FROM t", "CAST"),
    ("SELECT CAST(COUNT(*) AS BOOLEAN) FROM t", "CAST"),
    ("SELECT k, ROUND(k) FROM t GROUP BY k", "ARITHMETIC"),
    ("SELECT k, ROUND(CAST(i AS VARCHAR), 1) FROM t GROUP BY k, i", "ARITHMETIC"),
    ("SELECT k, CONCAT(k, '!') + COUNT(*) FROM t GROUP BY k", "ARITHMETIC"),
    ("SELECT ROUND(AVG(x), COUNT(*)) FROM t", "ROUND()"),
    ("SELECT ROUND(AVG(x), 2.5) FROM t", "ROUND()"),
    ("SELECT FLOOR(AVG(x), 1) FROM t", "FLOOR()"),
    ("SELECT CAST(x AS INTEGER) FROM t", "COLUMN"),  # a raw value is never released, cast or not
])
def test_what_is_not_post_processing_is_refused_naming_it(sql: str, construct: str) -> None:
    with pytest.raises(UnsupportedQuery if construct != "COLUMN" else Exception) as refused:
        plan(sql, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert refused.value.detail.get("construct") == construct, refused.value  # type: ignore[attr-defined]
