"""The neighbouring-dataset sensitivity oracle (tests/oracle/test_sensitivity.py) over the store's rank filters for
computed keys and joins (docs/privacy.md §11, *Computed keys and joins*): the store is rebuilt for D and for
D′ (D minus one unit) with `store_layout.build_sql`, the planned store SQL runs on both, and no measure may move by
more than the planned sensitivity. The data breaks every declaration it can while the store still builds:
unit-level columns vary within a unit, values are extreme; `q` is one row per unit (the build checks that).
"""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from tests.support import oracle_db

P = TableSchema("p", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
    ColumnSpec("age", "INTEGER", unit_level=True, groupable=True, bounds=(18, 90)),
    ColumnSpec("d", "DATE", groupable=True), ColumnSpec("x", "DOUBLE", bounds=(-3.0, 5.5)),
), max_groups=2, max_rows=3)
Q = TableSchema("q", "uid", (
    ColumnSpec("uid", "BIGINT"),
    ColumnSpec("plan", "VARCHAR", unit_level=True, groupable=True, public_domain=("free", "pro")),
    ColumnSpec("y", "INTEGER", bounds=(0, 7)),
), max_groups=1, max_rows=1, one_row_per_unit=True)
CATALOG = Catalog((P, Q))

# (query, served by the rank filter): every one of them runs on the store without per-query windows over rows
QUERIES = [
    "SELECT CAST(FLOOR(age / 10) * 10 AS INTEGER) AS a, COUNT(*), SUM(x), COUNT(DISTINCT uid) FROM p GROUP BY a",
    "SELECT age // 20 AS a, AVG(x) FROM p WHERE age > 30 GROUP BY a",
    "SELECT CASE WHEN age < 40 THEN 'young' ELSE 'old' END AS a, COUNT(*) FROM p WHERE x > 0 GROUP BY a",
    "SELECT date_trunc('month', d) AS m, COUNT(*), SUM(x) FROM p GROUP BY m",  # row-level: window over cells
    "SELECT q.plan, COUNT(*), SUM(p.x), AVG(y) FROM p JOIN q USING (uid) GROUP BY q.plan",
    "SELECT plan, g, COUNT(*), COUNT(DISTINCT uid) FROM p LEFT JOIN q USING (uid) GROUP BY plan, g",
    "SELECT g, COUNT(*), SUM(y) FROM p JOIN q ON p.uid = q.uid WHERE q.plan = 'pro' GROUP BY g",
    "SELECT UPPER(q.plan) AS up, COUNT(*) FROM p JOIN q USING (uid) WHERE p.x > 1 GROUP BY up",
    "SELECT COUNT(*), SUM(x) FROM p JOIN q USING (uid)",
]

days = st.dates(date(2026, 1, 1), date(2026, 12, 31))
values = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e6, 1e6))
p_rows = st.lists(st.tuples(st.integers(0, 4), st.sampled_from("abc"), st.one_of(st.none(), st.integers(0, 120)),
                            days, values), max_size=30)
q_rows = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["free", "pro", "other", None]),
                            st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))), max_size=5,
                  unique_by=lambda row: row[0])


def _run(sql: str, ps: list[tuple[object, ...]], qs: list[tuple[object, ...]], n_keys: int, key: str) -> dict[
        tuple[object, ...], tuple[int, ...]]:
    tables = {"p": ("uid BIGINT, g VARCHAR, age INTEGER, d DATE, x DOUBLE", ps),
              "q": ("uid BIGINT, plan VARCHAR, y INTEGER", qs)}
    return oracle_db.run(sql, tables, n_keys, value=oracle_db.as_int, store=(P, Q), key=key)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=7, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ps=p_rows, qs=q_rows, removed=st.integers(0, 4), salt=st.integers(0, 2**62),
       key=st.text("0123456789abcdef", min_size=1))
# a heavy unit in every group, its unit-level age varying, extreme values
@example(ps=[(0, g, age, day, 5.5) for g in "abc" for age in (20, 45, 80) for day in (
    date(2026, 1, 5), date(2026, 7, 9)) for _ in range(2)],
    qs=[(0, "pro", 7), (1, "free", 2**31 - 1)], removed=0, salt=1, key="k")
def test_store_rank_filter_moves_each_measure_within_its_sensitivity(
    query: str, ps: list[tuple[object, ...]], qs: list[tuple[object, ...]], removed: int, salt: int, key: str
) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store", salt=salt)
    assert planned.tree is None  # the store's own SQL (rank filter or per cell), not per-query windows over rows
    analysis = planned.analysis
    n_keys = len(analysis.keys)
    big = _run(planned.sql, ps, qs, n_keys, key)
    small = _run(planned.sql, [r for r in ps if r[0] != removed], [r for r in qs if r[0] != removed], n_keys, key)
    l0 = analysis.max_groups
    sensitivities = [1] + [m.sensitivity(analysis.table.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, l0, query)


@pytest.mark.parametrize(("query", "filtered"), [
    # a count and a sum of the stored grid: every row less those above the filter (on_store.complements_rank_filter)
    ("SELECT CAST(FLOOR(age / 10) * 10 AS INTEGER) AS a, COUNT(*), SUM(x) FROM p GROUP BY a",
     "__unit_rows > 3 AND __row_rank > 3"),
    ("SELECT q.plan, COUNT(*), SUM(p.x) FROM p JOIN q USING (uid) GROUP BY q.plan", "__row_rank <= 3"),
    ("SELECT g, SUM(x) FROM p JOIN q USING (uid) GROUP BY g", "__row_rank__g <= 3 AND __group_rank__g <= 2"),
    # counts only: one row per kept cell (on_store.counts_from_first_rows)
    ("SELECT CAST(FLOOR(age / 10) * 10 AS INTEGER) AS a, COUNT(*) FROM p GROUP BY a",
     "SUM(LEAST(__unit_rows, 3)), 0) AS __m0 FROM (SELECT *, TRY("),
    ("SELECT q.plan, COUNT(*) FROM p JOIN q USING (uid) GROUP BY q.plan", "__joined WHERE __row_rank = 1 GROUP BY"),
    ("SELECT g, COUNT(*) FROM p JOIN q USING (uid) GROUP BY g", "__row_rank__g = 1 AND __group_rank__g <= 2"),
])
def test_unit_level_computed_keys_and_one_row_joins_filter_the_stored_ranks(query: str, filtered: str) -> None:
    sql = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store").sql
    assert filtered in sql and "OVER" not in sql


@pytest.mark.parametrize("query", [
    "SELECT COUNT(*) FROM q JOIN p USING (uid)",  # the base is one row per unit, the other side fans out
    "SELECT q.plan, MEDIAN(x) FROM p JOIN q USING (uid) GROUP BY q.plan",  # not a plain measure
])
def test_other_joins_keep_the_per_query_windows(query: str) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store")
    assert planned.tree is not None and "__row_rank" not in planned.sql
