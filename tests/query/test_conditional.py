"""Conditional and computed aggregates: COUNT(*) FILTER (WHERE …), COUNT_IF, SUM(x) FILTER, SUM(CASE …),
SUM(x * 2 + y), AVG(price * qty): the neighbouring-dataset oracle, ranges by interval arithmetic in closed
form, exact noise-free values against DuckDB, bad input (nothing charged) and HTTP."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from sqlglot import parse_one

from mechanisms.sampling import FixedSampler
from proxy.query.analyse.analysis import analyse
from proxy.query.analyse.names import Names
from proxy.query.analyse.row_expr import row_expression
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import QueryError
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.release.publish import release
from proxy.query.rewrite.per_query import rewrite
from tests.oracle.test_sensitivity import CATALOG, TABLE, _run, rows
from tests.oracle.test_sensitivity import st as strategies
from tests.support import oracle_db, scratch_db
from tests.support.live import spend

QUERIES = [
    "SELECT COUNT(*) FILTER (WHERE n > 2), COUNT_IF(x < 0), SUM(x) FILTER (WHERE g = 'a') FROM t",
    "SELECT g, SUM(CASE WHEN n > 5 THEN x ELSE 0 END), SUM(x * 2 + n), AVG(x * n) FROM t GROUP BY g",
    "SELECT r, AVG(n) FILTER (WHERE x IS NULL OR x > 1), SUM(-x / 4 - 1), COUNT(x) FILTER (WHERE p IN ('a') "
    "OR p IS NULL) FROM t GROUP BY r",
]


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(20), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=strategies.integers(0, 5), salt=strategies.integers(0, 2**62))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1)
@example(data=[(0, "a", "N", "a", -1e300, -(2**31))] * 9 + [(1, "a", "N", "a", float("nan"), 7)] * 9, removed=0,
         salt=2)
def test_neighbour_moves_each_measure_within_its_sensitivity(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    analysis = analyse(parse(query), CATALOG)
    sql = rewrite(analysis, salt)
    n_keys = len(analysis.keys)
    big = _run(sql, data, n_keys)
    small = _run(sql, [row for row in data if row[0] != removed], n_keys)
    cells = set(big) | set(small)
    zero = (0,) * (1 + len(analysis.measures))
    assert any(m.where or m.expr for m in analysis.measures)
    for column, measure in enumerate(analysis.measures, start=1):
        per_group = measure.sensitivity(TABLE.max_rows)
        moves = [abs(big.get(c, zero)[column] - small.get(c, zero)[column]) for c in cells]
        assert all(m <= per_group for m in moves), (query, measure)
        assert sum(moves) <= analysis.max_groups * per_group
        assert sum(1 for m in moves if m) <= analysis.max_groups


@pytest.mark.parametrize(("expression", "lo", "hi"), [
    ("x * 2 + n", -6.0, 21.0),  # x in [-3, 5.5], n in [0, 10]
    ("x * n", -30.0, 55.0),
    ("x * x", -16.5, 30.25),  # interval arithmetic treats the two x as independent: a sound over-estimate
    ("-x / 4 - 1", -2.375, -0.25),
    ("x / -0.5", -11.0, 6.0),
    ("CASE WHEN n > 5 THEN x ELSE 0 END", -3.0, 5.5),
    ("CASE WHEN n > 5 THEN n * 10 WHEN n < 2 THEN -1 END", -1.0, 100.0),
])
def test_ranges_by_interval_arithmetic(expression: str, lo: float, hi: float) -> None:
    built = row_expression(parse_one(expression), Names(TABLE, None, CATALOG), "SUM")
    assert (built.lo, built.hi) == (lo, hi)
    assert "x" not in built.sql.replace('"x"', "")  # only quoted, declared names reach the SQL


def test_noise_free_values_equal_duckdb() -> None:
    table = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True,
                        public_domain=("a", "b")), ColumnSpec("price", "DOUBLE", bounds=(0, 50)),
                        ColumnSpec("qty", "INTEGER", bounds=(0, 10))), max_rows=5)
    con = scratch_db.connect()
    con.execute("CREATE TABLE o AS SELECT i AS cid, CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END AS g, "
                "(i % 7) * 1.5 AS price, i % 4 AS qty FROM range(100) t(i)")
    sql = ("SELECT g, COUNT(*) FILTER (WHERE qty > 1), COUNT_IF(price >= 3), SUM(CASE WHEN qty > 1 THEN price ELSE 0 "
           "END), SUM(price * 2 + qty), AVG(price * qty), AVG(qty) FILTER (WHERE price > 3) FROM o GROUP BY g")
    planned = plan(sql, Catalog((table,)), epsilon=1.0, delta=0.0, mechanism="laplace")
    answer = release(con.execute(planned.sql).fetchall(), planned.analysis, planned.price, FixedSampler())
    truth = {row[0]: [float(v) for v in row[1:]] for row in con.execute(sql).fetchall()}
    for g, *values in answer.rows:
        assert values == pytest.approx(truth[g], rel=1e-9)


@pytest.mark.parametrize(("sql", "code", "construct"), [
    ("SELECT COUNT(*) FILTER (WHERE undeclared > 1) FROM visits", "policy", "COLUMN"),
    ("SELECT SUM(amount * 10000000000000) FROM visits", "policy", "SUM"),  # overflows what can be summed exactly
    ("SELECT SUM(amount * user_id) FROM visits", "policy", "SUM"),  # no bounds on user_id
    ("SELECT SUM(ABS(amount)) FROM visits", "unsupported", "ABS()"),
    ("SELECT SUM(amount / age) FROM visits", "unsupported", "DIV"),
    ("SELECT SUM(amount / -age) FROM visits", "unsupported", "DIV"),
    ("SELECT COUNT(DISTINCT user_id) FILTER (WHERE age > 30) FROM visits", "unsupported", "FILTER"),
    ("SELECT COUNT_IF(amount) FROM visits", "unsupported", "WHERE"),
    ("SELECT ABS(amount) FILTER (WHERE age > 1) FROM visits", "unsupported", "ABS()"),
])
def test_bad_input_is_refused_with_the_construct(sql: str, code: str, construct: str) -> None:
    from tests.support.catalogs import CATALOG as DEMO

    with pytest.raises(QueryError) as caught:
        analyse(parse(sql), DEMO)
    assert (caught.value.code, caught.value.detail.get("construct")) == (code, construct), caught.value.message


def test_conditional_and_computed_aggregates_over_http(analyst: httpx.Client) -> None:
    sql = ("SELECT region, COUNT(*) FILTER (WHERE amount > 100) AS big, COUNT_IF(category = 'dining') AS dining, "
           "SUM(amount * 2) AS twice, AVG(CASE WHEN duration_s > 60 THEN amount END) AS long_avg "
           "FROM visits GROUP BY region")
    body = analyst.post("/v1/query", json={"sql": sql, "epsilon": 0.4}).json()
    assert body["ok"] is True, body
    assert body["columns"] == ["region", "big", "dining", "twice", "long_avg"]
    assert all(isinstance(row[1], int) and row[1] >= 0 for row in body["rows"])
    noise = {n["column"]: n for n in body["noise"]}
    assert noise["twice"]["scale"] > 0 and "scale" not in noise["long_avg"]
    before = spend(analyst)
    refused = analyst.post("/v1/query", json={"sql": "SELECT COUNT(*) FILTER (WHERE nope = 1) FROM visits"})
    assert refused.status_code == 400 and refused.json()["charged"] is False
    assert spend(analyst) == before
