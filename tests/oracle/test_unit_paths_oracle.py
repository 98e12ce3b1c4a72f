"""The neighbouring-dataset oracle over foreign-key paths (docs/privacy.md §13): `lineitem` reaches its unit through
`l_orderkey -> orders.o_orderkey`, `orders.o_custkey`. The store is built for D and for D′ = D minus one customer
with every order and order line reachable from it, exactly as proxy/store/duckdb_store.py builds it; the planned
store SQL runs on both, and no measure may move by more than the planned sensitivity. Orders fan out to many
lines, a customer has many orders, and values are extreme; a key that does not resolve fails the build.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema, UnitHop
from proxy.query.errors import QueryError
from proxy.query.planner import plan
from proxy.query.rewrite import store_layout, unit_paths
from proxy.store.duckdb_store import StoreError
from tests.support import oracle_db, scratch_db

ORDERS = TableSchema("orders", "o_custkey", (
    ColumnSpec("o_orderkey", "BIGINT"), ColumnSpec("o_custkey", "BIGINT"),
    ColumnSpec("o_prio", "VARCHAR", groupable=True, public_domain=("1-URGENT", "2-HIGH", "3-LOW")),
    ColumnSpec("o_total", "DOUBLE", bounds=(0.0, 100.0)),
), max_groups=2, max_rows=2)
LINEITEM = TableSchema("lineitem", "o_custkey", (
    ColumnSpec("l_orderkey", "BIGINT"), ColumnSpec("l_mode", "VARCHAR", groupable=True, public_domain=("MAIL", "SHIP")),
    ColumnSpec("l_qty", "INTEGER", bounds=(0, 50)), ColumnSpec("o_custkey", "BIGINT"),
), max_groups=2, max_rows=3, unit_via=(UnitHop("l_orderkey", "orders", "o_orderkey"),))
CUSTOMER = TableSchema("customer", "c_custkey", (
    ColumnSpec("c_custkey", "BIGINT"),
    ColumnSpec("c_seg", "VARCHAR", unit_level=True, groupable=True, public_domain=("A", "B")),
), one_row_per_unit=True)
CATALOG = Catalog((ORDERS, LINEITEM, CUSTOMER))

QUERIES = [
    "SELECT l_mode, COUNT(*), SUM(l_qty) FROM lineitem GROUP BY l_mode",
    "SELECT COUNT(*), SUM(l_qty), COUNT(DISTINCT o_custkey) FROM lineitem WHERE l_qty > 10",
    "SELECT l_mode, COUNT(*), SUM(l_qty) FROM orders JOIN lineitem ON o_orderkey = l_orderkey "
    "WHERE o_prio = '1-URGENT' GROUP BY l_mode",
    "SELECT o_prio, COUNT(*), SUM(l_qty), SUM(o_total) FROM lineitem l JOIN orders o ON l.l_orderkey = o.o_orderkey "
    "GROUP BY o_prio",
    "SELECT l_mode, SUM(CASE WHEN o_prio = '1-URGENT' THEN 1 ELSE 0 END) FROM orders, lineitem "
    "WHERE orders.o_orderkey = lineitem.l_orderkey GROUP BY l_mode",
    # three protected tables of one unit (TPC-H Q3, Q5's shape): customer on the unit, lineitem along the path
    "SELECT c_seg, l_mode, COUNT(*), SUM(l_qty) FROM customer, orders, lineitem WHERE c_custkey = o_custkey "
    "AND l_orderkey = o_orderkey AND o_prio <> '3-LOW' GROUP BY c_seg, l_mode",
]

orders = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["1-URGENT", "2-HIGH", "3-LOW", "other"]),
                            st.one_of(st.none(), st.floats(-1e6, 1e6))), max_size=8)
lines = st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["MAIL", "SHIP", "AIR"]),
                           st.one_of(st.none(), st.integers(-1000, 1000))), max_size=30)


def _tables(os_: list[tuple[object, ...]], ls: list[tuple[object, ...]]) -> tuple[list[tuple[object, ...]],
                                                                                list[tuple[object, ...]]]:
    """Orders keyed 0, 1, …; each line names an existing order (a line of no order is the build-failure test)."""
    keyed = [(i, *row) for i, row in enumerate(os_)]
    kept = [(row[0] % len(keyed), *row[1:]) for row in ls] if keyed else []
    return keyed, kept


def _run(sql: str, os_: list[tuple[object, ...]], ls: list[tuple[object, ...]], n_keys: int, key: str
         ) -> dict[tuple[object, ...], tuple[object, ...]]:
    con = scratch_db.connect()
    con.execute("ATTACH ':memory:' AS src")
    con.execute("CREATE TABLE src.orders (o_orderkey BIGINT, o_custkey BIGINT, o_prio VARCHAR, o_total DOUBLE)")
    con.execute("CREATE TABLE src.lineitem (l_orderkey BIGINT, l_mode VARCHAR, l_qty INTEGER)")
    con.execute("CREATE TABLE src.customer (c_custkey BIGINT, c_seg VARCHAR)")
    customers = sorted({(o[1], "AB"[o[1] % 2]) for o in os_})  # one per customer who has an order
    if customers:
        con.executemany("INSERT INTO src.customer VALUES (?, ?)", customers)
    if os_:
        con.executemany("INSERT INTO src.orders VALUES (?, ?, ?, ?)", os_)
    if ls:
        con.executemany("INSERT INTO src.lineitem VALUES (?, ?, ?)", ls)
    for hop, check in enumerate(unit_paths.unresolved_sql(LINEITEM)):  # as the store's build checks them
        if bad := con.execute(check).fetchone()[0]:
            con.close()
            raise StoreError(unit_paths.unresolved_message("d", LINEITEM, hop, bad))
    con.execute(store_layout.build_sql(ORDERS, key))
    con.execute(store_layout.build_sql(CUSTOMER, key))
    con.execute(f'CREATE TABLE "lineitem" AS {store_layout.select_sql(LINEITEM, key, unit_paths.source_sql(LINEITEM))}')
    rows = con.execute(sql).fetchall()
    con.close()
    return {tuple(r[:n_keys]): tuple(oracle_db.as_int(v) for v in r[n_keys:]) for r in rows}


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(8), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(os_=orders, ls=lines, removed=st.integers(0, 4), key=st.text("0123456789abcdef", min_size=1, max_size=8))
# one customer with many orders, each fanning out to many lines, every value extreme
@example(os_=[(0, p, 1e6) for p in ("1-URGENT", "2-HIGH", "3-LOW") for _ in range(2)],
         ls=[(o, m, 1000) for o in range(6) for m in ("MAIL", "SHIP") for _ in range(3)], removed=0, key="k")
def test_removing_a_customer_with_all_it_reaches_moves_each_measure_within_its_sensitivity(
    query: str, os_: list[tuple[object, ...]], ls: list[tuple[object, ...]], removed: int, key: str
) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store")
    analysis = planned.analysis
    n_keys = len(analysis.keys)
    big_orders, big_lines = _tables(os_, ls)
    gone = {o[0] for o in big_orders if o[1] == removed}  # the customer's orders, and so their lines
    small_orders = [o for o in big_orders if o[1] != removed]
    small_lines = [line for line in big_lines if line[0] not in gone]
    big = _run(planned.sql, big_orders, big_lines, n_keys, key)
    small = _run(planned.sql, small_orders, small_lines, n_keys, key)
    sensitivities = [1] + [m.sensitivity(analysis.table.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, analysis.max_groups, query)


def test_joins_along_the_path_bound_the_lines_per_customer_and_pair_only_one_customer() -> None:
    planned = plan(QUERIES[2], CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store")
    assert (planned.analysis.table.max_rows, planned.analysis.max_groups) == (3, 2)  # lineitem's: the joined rows
    assert 'ON __b."o_orderkey" = __o."l_orderkey" AND __b."o_custkey" = __o."o_custkey"' in planned.sql
    # one order with 5 lines of one customer: 3 rows kept in its cell; exact values otherwise
    got = _run(planned.sql, [(0, 7, "1-URGENT", 1.0), (1, 8, "1-URGENT", 2.0)],
               [(0, "MAIL", 4)] * 5 + [(1, "MAIL", 2), (1, "SHIP", 9)], 1, "k")
    assert got == {("MAIL",): (2, 4, 14), ("SHIP",): (1, 1, 9)}


def test_a_line_whose_order_is_missing_or_repeated_fails_the_build_naming_the_table_and_key() -> None:
    for os_, ls in (([(0, 1, "2-HIGH", 1.0)], [(5, "MAIL", 1)]),  # no order 5
                    ([(0, 1, "2-HIGH", 1.0), (0, 2, "3-LOW", 1.0)], [(0, "MAIL", 1)]),  # order 0 twice
                    ([(0, 1, "2-HIGH", 1.0)], [(None, "MAIL", 1)])):  # a NULL key
        with pytest.raises(StoreError) as err:
            _run("SELECT 1", os_, ls, 0, "k")
        assert str(err.value) == (
            "dataset d: table lineitem declares its unit through l_orderkey -> orders.o_orderkey, but 1 rows of "
            "lineitem have a l_orderkey that matches no row or several rows of orders.o_orderkey (or is NULL); fix "
            "the data or the declaration")


@pytest.mark.parametrize(("query", "construct"), [
    ("SELECT COUNT(*) FROM orders JOIN lineitem ON o_custkey = l_orderkey", "JOIN ON"),  # not the declared key
    ("SELECT COUNT(*) FROM orders JOIN lineitem ON o_orderkey = l_qty", "JOIN ON"),
])
def test_joins_off_the_declared_path_are_refused(query: str, construct: str) -> None:
    with pytest.raises(QueryError) as err:
        plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store")
    assert err.value.detail.get("construct") == construct, err.value.message
