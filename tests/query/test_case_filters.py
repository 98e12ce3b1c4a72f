"""A one-arm CASE inside COUNT, SUM or AVG read as the aggregate's FILTER (proxy/query/parse/case_filters.py,
issue #29 item 4): answered as written (DuckDB's answer on both bounding paths, NULLs and unmatched groups
included), priced as the FILTER form, and so served by bounds chosen per query."""

from __future__ import annotations

import pytest

from proxy.cli.demo import DemoFiles
from proxy.policy.load import load_policy
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import UnsupportedQuery
from proxy.query.planner import QueryPlan, plan
from tests.support import differential as diff

T = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
                             ColumnSpec("n", "INTEGER", bounds=(0, 20)), ColumnSpec("x", "DOUBLE", bounds=(-8, 8))),
                max_rows=100, max_groups=100)
ROWS = [(1, "a", 4, 1.5), (1, "a", None, 2.0), (2, "b", 7, None), (3, "a", None, None), (3, "c", 12, -3.25),
        (4, "c", 2, 6.0), (4, "a", 9, -1.0)]

CASES = [
    "SUM(CASE WHEN n > 5 THEN x ELSE 0 END)",
    "SUM(CASE WHEN n > 5 THEN x ELSE 0.0 END)",
    "SUM(CASE WHEN n > 5 THEN x END)",
    "SUM(CASE WHEN n > 5 THEN x ELSE NULL END)",
    "SUM(CASE WHEN n > 3 THEN 1 ELSE 0 END)",
    "SUM(CASE WHEN x IS NULL OR n < 5 THEN n ELSE 0 END)",
    "COUNT(CASE WHEN n > 3 THEN 'y' END)",
    "COUNT(CASE WHEN n > 3 THEN 1 END)",
    "COUNT(CASE WHEN x > 0 THEN n END)",
    "AVG(CASE WHEN n >= 4 THEN x END)",
    "SUM(CASE WHEN n > 3 THEN n END) FILTER (WHERE x > 1.7)",
    "COUNT(CASE WHEN n > 3 THEN x END) FILTER (WHERE x < 2)",
]
FILTERS = {  # each CASE's FILTER form: what it is read as
    "SUM(CASE WHEN n > 5 THEN x ELSE 0 END)": "SUM(x) FILTER (WHERE n > 5)",
    "SUM(CASE WHEN n > 3 THEN 1 ELSE 0 END)": "COUNT(*) FILTER (WHERE n > 3)",
    "COUNT(CASE WHEN n > 3 THEN 'y' END)": "COUNT(*) FILTER (WHERE n > 3)",
    "COUNT(CASE WHEN x > 0 THEN n END)": "COUNT(n) FILTER (WHERE x > 0)",
    "AVG(CASE WHEN n >= 4 THEN x END)": "AVG(x) FILTER (WHERE n >= 4)",
}


def _both(sql: str) -> tuple[list[object], list[object], set[int]]:
    db = diff.Database({"t": ("uid BIGINT, g VARCHAR, n INTEGER, x DOUBLE", ROWS)}, Catalog((T,)))
    try:
        ours = {b: diff.sort_rows(diff.product_rows(db, sql, "duckdb", b)) for b in ("per_query", "store")}
        assert ours["per_query"] == ours["store"]
        zero = diff.sums(diff.planned(sql, "duckdb", "store", Catalog((T,))))
        return ours["store"], diff.sort_rows(diff.reference_rows(db, sql, "duckdb")), zero
    finally:
        db.close()


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("keys", ["g, ", ""])
def test_a_case_aggregate_is_answered_as_written(case: str, keys: str) -> None:
    sql = f"SELECT {keys}{case} AS v FROM t" + (" GROUP BY g" if keys else "")
    ours, theirs, zero = _both(sql)
    assert theirs and diff.rows_match(ours, theirs, zero), (ours, theirs)


def test_the_differential_check_can_fail() -> None:
    """ELSE 0 inside AVG averages the zeros: read as a FILTER it would be another query; it stays an expression."""
    ours, theirs, zero = _both("SELECT g, AVG(CASE WHEN n > 5 THEN x ELSE 0 END) AS v FROM t GROUP BY g")
    assert diff.rows_match(ours, theirs, zero)
    filtered, _, _ = _both("SELECT g, AVG(x) FILTER (WHERE n > 5) AS v FROM t GROUP BY g")
    assert not diff.rows_match(filtered, theirs, zero)


@pytest.mark.parametrize("case", sorted(FILTERS))
def test_a_case_is_priced_and_rewritten_as_its_filter(case: str) -> None:
    catalog = Catalog((T,))

    def planned(text: str) -> QueryPlan:
        return plan(f"SELECT g, {text} AS v FROM t GROUP BY g", catalog, epsilon=0.5, delta=1e-6,
                    mechanism="laplace", bounding="store")

    as_case, as_filter = planned(case), planned(FILTERS[case])
    assert as_case.price == as_filter.price and as_case.sql == as_filter.sql
    assert as_case.analysis.aggregates == as_filter.analysis.aggregates


@pytest.mark.parametrize("expression", [
    "SUM(CASE WHEN n > 5 THEN x * 2 ELSE 0 END)",   # an expression for x
    "SUM(CASE WHEN n > 5 THEN x ELSE 1 END)",       # an ELSE of another value
    "SUM(CASE WHEN n > 5 THEN x WHEN n < 2 THEN n END)",  # two arms
])
def test_other_cases_stay_expressions_at_their_own_range(expression: str) -> None:
    p = plan(f"SELECT {expression} AS v FROM t", Catalog((T,)), epsilon=0.5, delta=1e-6, mechanism="laplace")
    (aggregate,) = p.analysis.aggregates
    assert aggregate.expr and not aggregate.where
    ours, theirs, zero = _both(f"SELECT {expression} AS v FROM t")
    assert diff.rows_match(ours, theirs, zero)


def test_a_case_sum_on_the_demo_chooses_its_bounds(demo: DemoFiles) -> None:
    """Issue #29: `SUM(CASE WHEN age > 50 THEN amount ELSE 0 END)` ran at the declared limits (1000 rows of up to
    100 000 each, ±4.8e10 at ε = 0.1); read as SUM(amount) FILTER it chooses each user's total cap."""
    dataset = load_policy(demo.policy).dataset("demo")
    assert dataset is not None
    p = plan("SELECT region, SUM(CASE WHEN age > 50 THEN amount ELSE 0 END) AS s FROM visits GROUP BY region",
             dataset.catalog, epsilon=0.1, delta=1e-8, mechanism="laplace", bounding=dataset.bounding,
             auto_share=dataset.auto_bounds_share)
    assert p.auto is not None and p.auto.note is None
    assert [(part.bound, part.column) for part in p.auto.parts] == [("total", "amount")]


def test_a_count_of_a_case_with_else_zero_is_not_a_filter() -> None:
    """It counts every row (a 0 is a value): not `COUNT(x) FILTER`, and as a COUNT of an expression, refused."""
    with pytest.raises(UnsupportedQuery, match="inside an aggregate"):
        plan("SELECT COUNT(CASE WHEN n > 5 THEN x ELSE 0 END) FROM t", Catalog((T,)), epsilon=0.5, delta=0.0,
             mechanism="laplace")
