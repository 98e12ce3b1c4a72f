"""The neighbouring-dataset oracle for semi-joins in WHERE (docs/privacy.md §13.4): `[NOT] EXISTS` / `IN` over the
outer row's own unit's rows (correlated on the unit, or on a `unit_via` key) or over a public table. The store is
built for D and for D′ = D minus one customer with every order and line reachable from it; the planned store SQL
runs on both, and no measure may move by more than the planned sensitivity in more than max_groups groups. The
data is adversarial for a filter that would read other units' rows: several customers' lines share suppliers and
dates, NULL keys of the filter's columns, a customer with many orders fanning out to many lines, extreme values.
The per-query path (a dataset bounded without a store) is checked on tables that hold their unit directly.
"""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema, UnitHop
from proxy.query.planner import plan
from proxy.query.rewrite import store_layout, unit_paths
from tests.support import oracle_db, scratch_db

ORDERS = TableSchema("orders", "o_custkey", (
    ColumnSpec("o_orderkey", "BIGINT"), ColumnSpec("o_custkey", "BIGINT"),
    ColumnSpec("o_prio", "VARCHAR", groupable=True, public_domain=("1-URGENT", "2-HIGH", "3-LOW")),
    ColumnSpec("o_total", "DOUBLE", bounds=(0.0, 100.0)),
), max_groups=2, max_rows=2)
LINEITEM = TableSchema("lineitem", "o_custkey", (
    ColumnSpec("l_orderkey", "BIGINT"), ColumnSpec("l_supp", "BIGINT"),
    ColumnSpec("l_mode", "VARCHAR", groupable=True, public_domain=("MAIL", "SHIP")),
    ColumnSpec("l_qty", "DECIMAL(15,2)", bounds=(0, 50)), ColumnSpec("l_commit", "DATE"),
    ColumnSpec("l_receipt", "DATE"), ColumnSpec("o_custkey", "BIGINT"),
), max_groups=2, max_rows=3, unit_via=(UnitHop("l_orderkey", "orders", "o_orderkey"),))
CUSTOMER = TableSchema("customer", "c_custkey", (
    ColumnSpec("c_custkey", "BIGINT"),
    ColumnSpec("c_seg", "VARCHAR", unit_level=True, groupable=True, public_domain=("A", "B")),
), one_row_per_unit=True)
SUPP = PublicTable("supp", (ColumnSpec("s_suppkey", "BIGINT"), ColumnSpec("s_nation", "VARCHAR")), ("s_suppkey",),
                   unique=True)
CATALOG = Catalog((ORDERS, LINEITEM, CUSTOMER), public=(SUPP,))

QUERIES = [
    # TPC-H Q4's shape: the order's own lines, a column-to-column comparison of dates
    "SELECT o_prio, COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey "
    "AND l_commit < l_receipt) GROUP BY o_prio",
    "SELECT o_prio, COUNT(*), SUM(o_total) FROM orders WHERE NOT EXISTS (SELECT 1 FROM lineitem "
    "WHERE l_orderkey = o_orderkey AND l_qty > 10.5) GROUP BY o_prio",
    # TPC-H Q21's shape: the same order's other lines, correlated on a non-key column too
    "SELECT l_mode, COUNT(*), SUM(l_qty) FROM lineitem l1 WHERE EXISTS (SELECT * FROM lineitem l2 "
    "WHERE l2.l_orderkey = l1.l_orderkey AND l2.l_supp <> l1.l_supp) AND NOT EXISTS (SELECT * FROM lineitem l3 "
    "WHERE l3.l_orderkey = l1.l_orderkey AND l3.l_supp <> l1.l_supp AND l3.l_receipt > l3.l_commit) GROUP BY l_mode",
    "SELECT o_prio, COUNT(*) FROM orders WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem WHERE l_mode = 'MAIL') "
    "OR o_total > 50 GROUP BY o_prio",
    "SELECT o_prio, COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM customer WHERE c_custkey = o_custkey "
    "AND c_seg = 'A') GROUP BY o_prio",
    "SELECT l_mode, SUM(l_qty) FROM lineitem WHERE NOT EXISTS (SELECT * FROM orders WHERE o_orderkey = l_orderkey "
    "AND o_prio = '1-URGENT') GROUP BY l_mode",
    "SELECT l_mode, COUNT(*) FROM lineitem WHERE l_supp NOT IN (SELECT s_suppkey FROM supp WHERE s_nation = 'X') "
    "GROUP BY l_mode",
    "SELECT o_prio, COUNT(*) FROM orders JOIN lineitem ON o_orderkey = l_orderkey WHERE NOT EXISTS (SELECT * "
    "FROM lineitem l2 WHERE l2.l_orderkey = lineitem.l_orderkey AND l2.l_qty > lineitem.l_qty) GROUP BY o_prio",
    # a CTE read twice, along the unit_via key (inlined: docs/privacy.md §12.4)
    "WITH l AS (SELECT l_orderkey, l_mode, l_qty FROM lineitem WHERE l_commit < l_receipt) SELECT o_prio, COUNT(*) "
    "FROM orders WHERE EXISTS (SELECT * FROM l WHERE l.l_orderkey = o_orderkey AND l_mode = 'MAIL') AND NOT EXISTS "
    "(SELECT * FROM l WHERE l.l_orderkey = o_orderkey AND l_qty > 50) GROUP BY o_prio",
]

DAYS = st.one_of(st.none(), st.integers(0, 3).map(lambda d: dt.date(2024, 1, 1) + dt.timedelta(days=d)))
orders = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["1-URGENT", "2-HIGH", "3-LOW", "other"]),
                            st.one_of(st.none(), st.floats(-1e6, 1e6))), max_size=8)
lines = st.lists(st.tuples(st.integers(0, 7), st.one_of(st.none(), st.integers(0, 3)),
                           st.sampled_from(["MAIL", "SHIP", "AIR"]), st.one_of(st.none(), st.integers(-100, 100)),
                           DAYS, DAYS), max_size=30)
SUPPLIERS = [(0, "X"), (1, "Y"), (2, "X"), (3, None)]


def _tables(os_: list[tuple[object, ...]], ls: list[tuple[object, ...]]) -> tuple[list[tuple[object, ...]],
                                                                                list[tuple[object, ...]]]:
    """Orders keyed 0, 1, …; each line names an existing order (the store's build refuses any other)."""
    keyed = [(i, *row) for i, row in enumerate(os_)]
    kept = [(row[0] % len(keyed), *row[1:]) for row in ls] if keyed else []
    return keyed, kept


def _store(sql: str, os_: list[tuple[object, ...]], ls: list[tuple[object, ...]], n_keys: int, key: str
           ) -> dict[tuple[object, ...], tuple[object, ...]]:
    con = scratch_db.connect()
    con.execute("ATTACH ':memory:' AS src")
    con.execute("CREATE TABLE src.orders (o_orderkey BIGINT, o_custkey BIGINT, o_prio VARCHAR, o_total DOUBLE)")
    con.execute("CREATE TABLE src.lineitem (l_orderkey BIGINT, l_supp BIGINT, l_mode VARCHAR, l_qty DECIMAL(15,2), "
                "l_commit DATE, l_receipt DATE)")
    con.execute("CREATE TABLE src.customer (c_custkey BIGINT, c_seg VARCHAR)")
    con.execute("CREATE TABLE supp (s_suppkey BIGINT, s_nation VARCHAR)")
    con.executemany("INSERT INTO supp VALUES (?, ?)", SUPPLIERS)
    customers = sorted({(o[1], "AB"[o[1] % 2]) for o in os_})
    for name, rows in (("customer", customers), ("orders", os_), ("lineitem", ls)):
        if rows:
            con.executemany(f"INSERT INTO src.{name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    for check in unit_paths.unresolved_sql(LINEITEM):
        assert con.execute(check).fetchone()[0] == 0
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
# customer 0: many orders, each with many lines on every supplier and late or early, extreme values; customer 1's
# one order shares those suppliers and days, so a filter reading other units' lines would move when 0 leaves
@example(os_=[(0, p, 1e6) for p in ("1-URGENT", "2-HIGH", "3-LOW") for _ in range(2)] + [(1, "2-HIGH", 60.0)],
         ls=[(o, s, m, 100, dt.date(2024, 1, 1 + (s or 0) % 2), dt.date(2024, 1, 2)) for o in range(6)
             for s in (0, 1, 2, None) for m in ("MAIL", "SHIP")]
         + [(6, 1, "MAIL", 5, dt.date(2024, 1, 1), dt.date(2024, 1, 3))],
         removed=0, key="k")
def test_removing_a_customer_moves_each_measure_of_a_semi_join_within_its_sensitivity(
    query: str, os_: list[tuple[object, ...]], ls: list[tuple[object, ...]], removed: int, key: str
) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store", salt=3)
    analysis = planned.analysis
    n_keys = len(analysis.keys)
    big_orders, big_lines = _tables(os_, ls)
    gone = {o[0] for o in big_orders if o[1] == removed}
    small_orders = [o for o in big_orders if o[1] != removed]
    small_lines = [line for line in big_lines if line[0] not in gone]
    big = _store(planned.sql, big_orders, big_lines, n_keys, key)
    small = _store(planned.sql, small_orders, small_lines, n_keys, key)
    sensitivities = [1] + [m.sensitivity(analysis.table.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, analysis.max_groups, query)


# The per-query path: tables that hold their unit, bounded by per-query windows over the source itself.
VISITS = TableSchema("visits", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("page", "VARCHAR", groupable=True, public_domain=("a", "b", "c")),
    ColumnSpec("n", "INTEGER", bounds=(0, 10)),
), max_groups=2, max_rows=2)
USERS = TableSchema("users", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("plan", "VARCHAR", unit_level=True),
), one_row_per_unit=True)
PER_QUERY = Catalog((VISITS, USERS))
PER_QUERY_QUERIES = [
    "SELECT page, COUNT(*), SUM(n) FROM visits WHERE EXISTS (SELECT * FROM users WHERE users.uid = visits.uid "
    "AND plan = 'pro') GROUP BY page",
    "SELECT page, COUNT(*) FROM visits v WHERE NOT EXISTS (SELECT * FROM visits w WHERE w.uid = v.uid "
    "AND w.n > v.n) GROUP BY page",
    "SELECT page, SUM(n) FROM visits WHERE uid IN (SELECT uid FROM users WHERE plan <> 'free') GROUP BY page",
    # a CTE read twice (inlined, parse/inline_ctes.py, docs/privacy.md §12.4): the semi-join over its own rows
    "WITH v AS (SELECT uid, page, n, n + 1 AS m FROM visits WHERE n > 2) SELECT page, COUNT(*), SUM(m) FROM v "
    "WHERE NOT EXISTS (SELECT * FROM v AS w WHERE w.uid = v.uid AND w.n > v.n) GROUP BY page",
    "WITH v AS (SELECT * FROM visits WHERE page <> 'c'), u AS (SELECT uid FROM users WHERE plan = 'pro') "
    "SELECT page, SUM(n) FROM v WHERE uid IN (SELECT uid FROM u) AND uid IN (SELECT uid FROM v WHERE n > 5) "
    "GROUP BY page",
]
visits = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.sampled_from(["a", "b", "c", "d"]),
                            st.one_of(st.none(), st.integers(-5, 50))), max_size=25)
users = st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 4)), st.sampled_from(["free", "pro", None])),
                 max_size=8)


@pytest.mark.parametrize("query", PER_QUERY_QUERIES)
@settings(max_examples=oracle_db.examples(8), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(vs=visits, us=users, removed=st.integers(0, 4), salt=st.integers(0, 2**31))
@example(vs=[(0, p, 50) for p in "abcd" for _ in range(5)] + [(1, "a", 3)], us=[(0, "pro"), (1, "pro"), (None, "free")],
         removed=0, salt=1)
def test_the_per_query_path_moves_each_measure_within_its_sensitivity(
    query: str, vs: list[tuple[object, ...]], us: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    planned = plan(query, PER_QUERY, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="per_query", salt=salt)
    analysis = planned.analysis
    columns = {"visits": "uid BIGINT, page VARCHAR, n INTEGER", "users": "uid BIGINT, plan VARCHAR"}

    def run(keep: object) -> dict[tuple[object, ...], tuple[object, ...]]:
        tables = {"visits": (columns["visits"], [v for v in vs if v[0] != keep]),
                  "users": (columns["users"], [u for u in us if u[0] != keep])}
        return oracle_db.run(planned.sql, tables, len(analysis.keys), value=oracle_db.as_int)

    sensitivities = [1] + [m.sensitivity(analysis.table.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(run(object()), run(removed), sensitivities, analysis.max_groups, query)
