"""Precedence survives the rebuild of computed values (docs/privacy.md §12: answer the query that was asked).

Regression: `(age - 18) // 10` was rebuilt as `CAST("age" AS BIGINT) - 18 // 10` (the parentheses were dropped
and sqlglot prints a tree as it is), so a histogram of decades became one of ages, with a domain derived from
the same wrong expression; `WHERE 1 // (user_id - 42) = 0` became `1 // "user_id" - 42`. Both must compute what
DuckDB computes for the text as written. The checks are differential: generated expressions from the accepted
arithmetic grammar, run rebuilt and as written on the same DuckDB rows.
"""

from __future__ import annotations

import math

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlglot import parse_one

from proxy.query.analyse.analysis import analyse
from proxy.query.analyse.names import Names
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
    ColumnSpec("d", "DOUBLE", groupable=True, bounds=(-50, 50)),
), max_groups=1000, max_rows=1000)  # bounds that never bind here: the answer must be DuckDB's exactly
CATALOG = Catalog((T,))
# Small values: no overflow anywhere, so the only way to differ from DuckDB is to compute another expression.
ROWS = [(u, i, b, d) for u, (i, b, d) in enumerate([
    (18, 5, 0.5), (19, -7, -2.5), (27, 2, 3.25), (28, 0, 0.0), (45, 3, -0.75), (90, -1, 12.5), (63, 11, -49.0),
    (33, -4, 7.0), (41, 9, 1.5), (56, 1, -3.0),
], start=40)]


def _connection() -> duckdb.DuckDBPyConnection:
    con = scratch_db.connect()
    con.execute("CREATE TABLE t (uid BIGINT, i INTEGER, b BIGINT, d DOUBLE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", ROWS)
    return con


CON = _connection()

_ATOMS = st.sampled_from(["i", "b", "d", "uid", "1", "2", "3", "10", "18", "42", "0.5", "-1", "-3"])


@st.composite
def _expression(draw: st.DrawFn, depth: int = 0) -> str:
    if depth >= 3 or draw(st.integers(0, 3)) == 0:
        return draw(_ATOMS)
    kind = draw(st.sampled_from(["binary", "binary", "binary", "neg", "paren"]))
    if kind == "neg":
        return f"-({draw(_expression(depth + 1))})"
    if kind == "paren":
        return f"({draw(_expression(depth + 1))})"
    op = draw(st.sampled_from(["+", "-", "*", "/", "//", "%"]))
    left, right = draw(_expression(depth + 1)), draw(_expression(depth + 1))
    if op in ("//", "%") and any(x in left + right for x in ("d", ".", "/ ")):
        op = "-"  # `//` and `%` are admitted on integers only
    wrap = draw(st.booleans())
    return f"({left} {op} {right})" if wrap else f"{left} {op} {right}"


def _same(ours: object, theirs: object) -> bool:
    if isinstance(theirs, float) and not math.isfinite(theirs):
        return ours is None  # a non-finite double is NULL by design (computed/values.py)
    if isinstance(theirs, float | int) and isinstance(ours, float | int):
        return math.isclose(float(ours), float(theirs), rel_tol=1e-12, abs_tol=1e-12)
    return ours == theirs


def _values(sql: str) -> list[object]:
    return [row[0] for row in CON.execute(f"SELECT {sql} FROM t ORDER BY uid").fetchall()]


@settings(max_examples=300, deadline=None)
@given(_expression())
def test_a_rebuilt_expression_computes_the_expression_as_written(text: str) -> None:
    try:
        theirs = _values(text)
    except duckdb.Error:
        return  # DuckDB refuses the text itself (a type it cannot combine): nothing to compare
    try:
        value = scalar(parse_one(text, read="duckdb"), Names(T, None, CATALOG))
    except QueryError:
        return  # refused (free): only an answer to another expression is a defect
    ours = _values(total(value).sql("duckdb"))
    assert all(_same(o, t) for o, t in zip(ours, theirs, strict=True)), (text, total(value).sql("duckdb"))


@pytest.mark.parametrize(("text", "expected"), [
    ("(i - 18) // 10", '(CAST("i" AS BIGINT) - 18) // 10'),
    ("1 // (uid - 42)", '1 // ("uid" - 42)'),
    ("-(i - 3)", '-(CAST("i" AS BIGINT) - 3)'),
    ("i - (b - 1)", 'CAST("i" AS BIGINT) - ("b" - 1)'),
])
def test_the_reported_expressions_keep_their_parentheses(text: str, expected: str) -> None:
    assert expected in total(scalar(parse_one(text, read="duckdb"), Names(T, None, CATALOG))).sql("duckdb")


def test_the_decade_histogram_has_decade_buckets() -> None:
    p = plan("SELECT (i - 18) // 10 AS b, COUNT(*) FROM t GROUP BY 1", CATALOG, epsilon=1.0, delta=1e-6,
             mechanism="laplace")
    assert p.analysis.domains == ((0, 1, 2, 3, 4, 5, 6, 7),)  # (90 - 18) // 10 = 7; was 17..89 (i - 1)


@pytest.mark.parametrize("query", [
    "SELECT (i - 18) // 10 AS k, COUNT(*) FROM t GROUP BY 1",
    "SELECT (i - 18) // 10 AS k, COUNT(*) FROM t WHERE 1 // (uid - 42) = 0 GROUP BY 1",
    "SELECT i % (7 - 2) AS k, COUNT(*), SUM(d) FROM t GROUP BY 1",
    "SELECT -(b - 3) * 2 AS k, COUNT(*) FROM t WHERE (i - 20) * (i - 60) < 0 GROUP BY 1",
    "SELECT COUNT(*) FROM t WHERE b - (2 - i) > 30",
])
def test_the_rewritten_query_answers_what_duckdb_answers(query: str) -> None:
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    ours = CON.execute(rewrite(analysis, 5)).fetchall()
    CON.execute("SET error_on_division_by_zero = false")  # DuckDB's NULL for x // 0, as TRY(...) gives
    try:
        theirs = CON.execute(query).fetchall()
    finally:
        CON.execute("RESET error_on_division_by_zero")
    keys = len(analysis.keys)
    grids = [m.grid for m in analysis.measures]  # sums are integers on each measure's fixed-point grid
    got = sorted((row[:keys], tuple(v / g for v, g in zip(row[keys + 1:], grids, strict=True))) for row in ours)
    want = sorted((row[:keys], tuple(row[keys:])) for row in theirs)
    assert len(got) == len(want), (got, want)
    for (got_key, got_values), (want_key, want_values) in zip(got, want, strict=True):
        assert got_key == want_key
        assert all(math.isclose(float(a), float(b), abs_tol=1e-9) for a, b in zip(got_values, want_values,
                                                                                   strict=True))
