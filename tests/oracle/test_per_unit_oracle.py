"""The neighbouring-dataset oracle of two-level aggregation (docs/privacy.md §14): D′ = D minus one customer with
every order; the planned SQL (per query and on the bounding store) runs on both, and the exact bounded answer may
change in at most one cell, each measure by at most its planned sensitivity. Adversarial units have many orders
(past every clamp), extreme totals, and rows the filters keep or drop; customers with no order stay in a LEFT
JOIN with a count of 0.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from tests.support import oracle_db

CUSTOMER = TableSchema("customer", "c_custkey", (
    ColumnSpec("c_custkey", "BIGINT"),
    ColumnSpec("c_seg", "VARCHAR", unit_level=True, groupable=True, public_domain=("A", "B")),
), one_row_per_unit=True)
ORDERS = TableSchema("orders", "o_custkey", (
    ColumnSpec("o_orderkey", "BIGINT"), ColumnSpec("o_custkey", "BIGINT"), ColumnSpec("o_comment", "VARCHAR"),
    ColumnSpec("o_total", "DECIMAL(10,2)", bounds=(-5, 100)),
), max_rows=3, max_groups=2)
CATALOG = Catalog((CUSTOMER, ORDERS))
TABLES = {"customer": "c_custkey BIGINT, c_seg VARCHAR",
          "orders": "o_orderkey BIGINT, o_custkey BIGINT, o_comment VARCHAR, o_total DECIMAL(10,2)"}

QUERIES = [
    "SELECT c_count, COUNT(*) AS custdist FROM (SELECT c_custkey, COUNT(o_orderkey) FROM customer LEFT OUTER JOIN "
    "orders ON c_custkey = o_custkey AND o_comment NOT LIKE '%special%' GROUP BY c_custkey) AS c_orders "
    "(c_custkey, c_count) GROUP BY c_count",
    "SELECT n, COUNT(*), SUM(t) FROM (SELECT c_custkey, COUNT(*) AS n, SUM(o_total) AS t FROM customer JOIN orders "
    "ON c_custkey = o_custkey WHERE c_seg = 'A' GROUP BY c_custkey) AS q GROUP BY n",
    "SELECT COUNT(*), SUM(n), SUM(t), AVG(t) FROM (SELECT o_custkey, COUNT(o_comment) AS n, SUM(o_total) AS t "
    "FROM orders WHERE o_total > 0 GROUP BY o_custkey) AS q WHERE n >= 2",
    "SELECT t, COUNT(*) FROM (SELECT o_custkey, SUM(o_total) AS t FROM orders GROUP BY o_custkey) AS q GROUP BY t",
]

customers = st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["A", "B", "C"])), max_size=6,
                     unique_by=lambda c: c[0])
orders = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.sampled_from(["plain", "special", None]),
                            st.one_of(st.none(), st.decimals(-1e6, 1e6, places=2))), max_size=24)


def _run(sql: str, cs: list[tuple[object, ...]], os_: list[tuple[object, ...]], n_keys: int, bounding: str
         ) -> dict[tuple[object, ...], tuple[object, ...]]:
    rows = [(i, *o) for i, o in enumerate(os_)]
    tables = {"customer": (TABLES["customer"], cs), "orders": (TABLES["orders"], rows)}
    store = (CUSTOMER, ORDERS) if bounding == "store" else ()
    return oracle_db.run(sql, tables, n_keys, value=oracle_db.as_int, store=store, key="k")


@pytest.mark.parametrize("bounding", ["per_query", "store"])
@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cs=customers, os_=orders, removed=st.integers(0, 5))
# one customer with many orders past every clamp, each total extreme; another with none
@example(cs=[(0, "A"), (1, "A")], os_=[(0, "plain", 10**6)] * 10 + [(0, "special", -(10**6))] * 4, removed=0)
@example(cs=[(0, "A"), (1, "B")], os_=[(1, "plain", 50)] * 2, removed=0)
def test_removing_a_customer_with_all_its_orders_changes_one_cell_within_the_sensitivity(
    query: str, bounding: str, cs: list[tuple[object, ...]], os_: list[tuple[object, ...]], removed: int
) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding=bounding)  # type: ignore
    analysis = planned.analysis
    assert analysis.max_groups == 1 and analysis.table.max_rows == 1  # one row per unit: one cell, one row
    n_keys = len(analysis.keys)
    big = _run(planned.sql, cs, os_, n_keys, bounding)
    small = _run(planned.sql, [c for c in cs if c[0] != removed], [o for o in os_ if o[0] != removed], n_keys,
                 bounding)
    sensitivities = [1] + [m.sensitivity(analysis.table.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, 1, query)


def test_the_sensitivities_are_one_unit_and_the_clamp_widths() -> None:
    planned = plan(QUERIES[2], CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    measures = planned.analysis.measures
    # COUNT(*) 1; SUM(n) the count's clamp C = 3; SUM(t) and AVG(t)'s sum the sum's clamp [3·-5, 3·100]
    assert [(m.kind, m.sensitivity(1) / m.grid) for m in measures if m.kind in ("rows", "sum")][:3] == [
        ("rows", 1.0), ("sum", 3.0), ("sum", 300.0)]


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(10), deadline=None)
@given(cs=customers, os_=orders)
@example(cs=[(0, "A")], os_=[(0, "plain", 10**6)] * 10 + [(0, "special", -(10**6))] * 9)
def test_the_per_unit_query_has_one_row_per_unit_each_value_within_its_clamp(
    query: str, cs: list[tuple[object, ...]], os_: list[tuple[object, ...]]
) -> None:
    """The inner query on its own (the outer rewrite clamps and bounds again: this checks the first line of
    defence, which makes a histogram's unit land at the end of the range rather than out of the domain)."""
    analysis = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace").analysis
    inner = analysis.source.this.sql(dialect="duckdb")  # type: ignore[union-attr]
    got = _run(inner, cs, os_, 1, "per_query")
    assert None not in {k[0] for k in got}  # no row of no unit
    value_columns = [c for c in analysis.table.columns if c.name != analysis.table.privacy_unit]
    units = [k[0] for k in got]
    assert len(units) == len(set(units))
    for values in got.values():
        for spec, v in zip(value_columns, values, strict=True):
            low, high = spec.bounds  # type: ignore[misc]
            assert low <= v <= high, (spec, v)  # a NULL sum (no row) reads 0, inside every range
