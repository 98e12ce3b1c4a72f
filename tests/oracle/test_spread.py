"""VAR_POP / VAR_SAMP / STDDEV_POP / STDDEV: the neighbouring-dataset oracle for each noised component
(count, centred sum, centred sum of squares), exact estimates without noise, the noise split, errors, HTTP."""

from __future__ import annotations

import math
import statistics

import duckdb
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings

from mechanisms.sampling import FixedSampler
from proxy.query.analyse.analysis import analyse
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

SPREAD_QUERIES = [
    "SELECT VAR_POP(x), STDDEV(n) FROM t",
    "SELECT g, VAR_SAMP(x), AVG(x), SUM(x), COUNT(x) FROM t GROUP BY g",
    "SELECT r, STDDEV_POP(n), VAR_POP(n) FROM t WHERE x > 0 GROUP BY r",
]


@pytest.mark.parametrize("query", SPREAD_QUERIES)
@settings(max_examples=oracle_db.examples(20), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=strategies.integers(0, 5), salt=strategies.integers(0, 2**62))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1)
@example(data=[(0, "a", "N", "a", 5.5, 10)] * 9 + [(1, "a", "N", "a", -3.0, 0)] * 9, removed=1, salt=2)
def test_neighbour_moves_each_component_within_its_sensitivity(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    analysis = analyse(parse(query), CATALOG)
    sql = rewrite(analysis, salt)
    n_keys = len(analysis.keys)
    big = _run(sql, data, n_keys)
    small = _run(sql, [row for row in data if row[0] != removed], n_keys)
    l0 = analysis.max_groups
    cells = set(big) | set(small)
    zero = (0,) * (1 + len(analysis.measures))
    assert any(m.kind == "centred_squares" for m in analysis.measures)
    for column, measure in enumerate(analysis.measures, start=1):
        per_group = measure.sensitivity(TABLE.max_rows)
        moves = [abs(big.get(c, zero)[column] - small.get(c, zero)[column]) for c in cells]
        assert all(m <= per_group for m in moves), (query, measure)
        assert sum(moves) <= l0 * per_group
        assert sum(1 for m in moves if m) <= l0


def test_measures_and_sensitivities_in_closed_form() -> None:
    analysis = analyse(parse("SELECT VAR_POP(x) FROM t"), CATALOG)
    count, centred, squares = analysis.measures
    # x in [-3, 5.5]: width 8.5, grid 2^12 (2^16/8.5 = 7710 -> 4096), bounds rounded inwards
    assert (centred.grid, centred.lo, centred.hi) == (4096, -12288, 22528)
    assert centred.centre == 5120
    assert count.sensitivity(3) == 3
    assert centred.sensitivity(3) == 3 * 17408
    assert squares.sensitivity(3) == 3 * 17408**2


def _demo_table() -> tuple[TableSchema, duckdb.DuckDBPyConnection]:
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True,
                        public_domain=("a", "b")), ColumnSpec("x", "DOUBLE", bounds=(0.0, 10.0)),
                        ColumnSpec("n", "INTEGER", bounds=(0, 100))), max_rows=5, max_groups=1)
    con = scratch_db.connect()
    con.execute("CREATE TABLE t (uid BIGINT, g VARCHAR, x DOUBLE, n INTEGER)")
    values = [1.5, 2.0, 7.25, 9.0, 3.5, 4.0, 0.5, 6.0]
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                    [(i, "a" if i < 5 else "b", v, int(v * 10)) for i, v in enumerate(values)])
    return table, con


def test_noise_free_estimates_are_the_exact_variances() -> None:
    table, con = _demo_table()
    sql = "SELECT g, VAR_POP(x), VAR_SAMP(x), STDDEV_POP(n), STDDEV(n) FROM t GROUP BY g"
    planned = plan(sql, Catalog((table,)), epsilon=1.0, delta=0.0, mechanism="laplace")
    answer = release(con.execute(planned.sql).fetchall(), planned.analysis, planned.price, FixedSampler())
    truth = {g: (a, b, c, d) for g, a, b, c, d in con.execute(sql).fetchall()}
    for g, *released in answer.rows:
        assert released == pytest.approx(truth[g], rel=1e-12)  # values on the grid: exact
    # the split: VAR weighs count, centred sum, sum of squares 1 : 4 : 1, so ε_j ∝ (1, 4^(1/3), 1) per column
    epsilons = [n.sensitivity / n.scale for n in planned.price.noise]
    assert epsilons[1] / epsilons[0] == pytest.approx(4 ** (1 / 3), rel=1e-9)
    assert epsilons[2] / epsilons[0] == pytest.approx(1.0, rel=1e-9)
    assert math.fsum(epsilons) == pytest.approx(1.0, rel=1e-9)
    assert statistics.pvariance([1.5, 2.0, 7.25, 9.0, 3.5]) == pytest.approx(truth["a"][0], rel=1e-12)


@pytest.mark.parametrize(("sql", "code", "construct"), [
    ("SELECT VAR_POP(region) FROM visits", "policy", "VAR_POP"),
    ("SELECT STDDEV(user_id) FROM visits", "policy", "STDDEV"),
    ("SELECT VARIANCE(amount * 2) FROM visits", "unsupported", "VARIANCE"),
])
def test_bad_spreads_are_refused(sql: str, code: str, construct: str) -> None:
    from tests.support.catalogs import CATALOG as DEMO

    with pytest.raises(QueryError) as caught:
        analyse(parse(sql), DEMO)
    assert (caught.value.code, caught.value.detail.get("construct")) == (code, construct)


def test_stddev_over_http(analyst: httpx.Client) -> None:
    before = spend(analyst)
    response = analyst.post("/v1/query", json={
        "sql": "SELECT region, STDDEV(amount) AS sd, VAR_POP(duration_s) AS v FROM visits GROUP BY region",
        "epsilon": 0.6})
    body = response.json()
    assert response.status_code == 200, body
    for _, sd, v in body["rows"]:
        assert sd is None or 0 <= sd <= 500
        assert v is None or 0 <= v <= 1800**2
    assert body["charge"]["epsilon"] == pytest.approx(0.6, rel=1e-12)
    noise = {n["column"]: n for n in body["noise"]}
    assert "scale" not in noise["sd"] and "ci95" not in noise["sd"]  # derived from three noisy sums
    assert spend(analyst)["epsilon_spent"] == pytest.approx(before["epsilon_spent"] + 0.6, rel=1e-9)
