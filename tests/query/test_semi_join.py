"""Semi-joins in WHERE (proxy/query/analyse/subqueries/): answered exactly as DuckDB answers the text when no bound
binds, on the store and per-query paths, with NULLs where SQL's three-valued logic matters; refused, naming the
construct, wherever other units' rows would decide a row's filter, and never reachable outside a WHERE."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema, UnitHop
from proxy.query.errors import QueryError
from proxy.query.planner import plan, plan_public
from proxy.query.rewrite import store_layout, unit_paths
from tests.support import scratch_db

ORDERS = TableSchema("orders", "o_custkey", (
    ColumnSpec("o_orderkey", "BIGINT"), ColumnSpec("o_custkey", "BIGINT"),
    ColumnSpec("o_prio", "VARCHAR", groupable=True, public_domain=("1-URGENT", "2-HIGH", "3-LOW")),
    ColumnSpec("o_total", "DECIMAL(15,2)", bounds=(0, 100)),
), max_groups=100, max_rows=1000)
LINEITEM = TableSchema("lineitem", "o_custkey", (
    ColumnSpec("l_orderkey", "BIGINT"), ColumnSpec("l_supp", "BIGINT"),
    ColumnSpec("l_mode", "VARCHAR", groupable=True, public_domain=("MAIL", "SHIP")),
    ColumnSpec("l_qty", "DECIMAL(15,2)", bounds=(0, 50)), ColumnSpec("l_tax", "DECIMAL(15,2)", bounds=(0, 50)),
    ColumnSpec("l_commit", "DATE"), ColumnSpec("l_receipt", "DATE"), ColumnSpec("o_custkey", "BIGINT"),
), max_groups=100, max_rows=1000, unit_via=(UnitHop("l_orderkey", "orders", "o_orderkey"),))
CUSTOMER = TableSchema("customer", "c_custkey", (
    ColumnSpec("c_custkey", "BIGINT"),
    ColumnSpec("c_seg", "VARCHAR", unit_level=True, groupable=True, public_domain=("A", "B")),
), one_row_per_unit=True)
SUPP = PublicTable("supp", (ColumnSpec("s_suppkey", "BIGINT"), ColumnSpec("s_nation", "VARCHAR")), ("s_suppkey",),
                   unique=True)
CATALOG = Catalog((ORDERS, LINEITEM, CUSTOMER), public=(SUPP,))

D = dt.date(2024, 1, 1)
ORDER_ROWS = [(0, 1, "1-URGENT", 10), (1, 1, "2-HIGH", 90), (2, 2, "3-LOW", None), (3, 3, "1-URGENT", 60),
              (4, 2, "2-HIGH", 5), (5, 4, "3-LOW", 70)]
LINE_ROWS = [
    (0, 0, "MAIL", 5, 6, D, D + dt.timedelta(1)), (0, 1, "SHIP", 20, 1, D, D), (1, None, "MAIL", 1, 1, None, D),
    (1, 1, "MAIL", 30, 2, D + dt.timedelta(2), D), (2, 2, "SHIP", None, 3, D, D + dt.timedelta(3)),
    (3, 3, "SHIP", 7, 7, D, D), (3, 3, "MAIL", 8, 9, D, D + dt.timedelta(1)), (4, 0, "SHIP", 2, 1, D, None),
]
CUSTOMER_ROWS = [(1, "A"), (2, "B"), (3, "A"), (4, "B")]
SUPP_ROWS = [(0, "X"), (1, None), (2, "X"), (3, "Y")]

ANSWERED = [
    "SELECT o_prio, COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey "
    "AND l_commit < l_receipt) GROUP BY o_prio",
    "SELECT o_prio, COUNT(*) FROM orders WHERE NOT EXISTS (SELECT 1 FROM lineitem WHERE lineitem.l_orderkey = "
    "orders.o_orderkey AND l_qty < l_tax) GROUP BY o_prio",  # DECIMAL columns compared
    "SELECT l_mode, COUNT(*) FROM lineitem l1 WHERE EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_orderkey = "
    "l1.l_orderkey AND l2.l_supp <> l1.l_supp) AND NOT EXISTS (SELECT * FROM lineitem l3 WHERE l3.l_orderkey = "
    "l1.l_orderkey AND l3.l_supp <> l1.l_supp AND l3.l_receipt > l3.l_commit) GROUP BY l_mode",
    "SELECT o_prio, COUNT(*) FROM orders WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem WHERE l_mode = 'MAIL') "
    "OR o_total > 65 GROUP BY o_prio",
    "SELECT o_prio, COUNT(*) FROM orders WHERE NOT EXISTS (SELECT * FROM customer WHERE c_custkey = o_custkey "
    "AND c_seg = 'A') GROUP BY o_prio",
    "SELECT l_mode, COUNT(*) FROM lineitem WHERE EXISTS (SELECT * FROM orders WHERE o_orderkey = l_orderkey "
    "AND o_prio = '1-URGENT') GROUP BY l_mode",
    # NOT IN over a public table whose column holds a NULL: NULL for every row whose supplier is not 0, 2 or 3
    "SELECT l_mode, COUNT(*) FROM lineitem WHERE l_supp NOT IN (SELECT s_suppkey FROM supp WHERE s_nation = 'X' "
    "OR s_nation IS NULL) GROUP BY l_mode",
    "SELECT l_mode, COUNT(*) FROM lineitem WHERE l_supp IN (SELECT s_suppkey FROM supp WHERE s_nation = 'X') "
    "GROUP BY l_mode",
    "SELECT l_mode, COUNT(*) FROM lineitem WHERE EXISTS (SELECT * FROM supp WHERE s_suppkey = l_supp "
    "AND s_nation IS NULL) GROUP BY l_mode",
    "SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey "
    "AND o_total > 50 AND l_mode = 'SHIP')",  # a condition on the outer row alone inside the subquery
    "SELECT o_prio, COUNT(*) FROM orders JOIN lineitem ON o_orderkey = l_orderkey WHERE NOT EXISTS (SELECT * "
    "FROM lineitem l2 WHERE l2.l_orderkey = lineitem.l_orderkey AND l2.l_qty > lineitem.l_qty) GROUP BY o_prio",
    # TPC-H Q22's own semi-join, on a table of one row per unit (the store's rank filter, nothing to bound)
    "SELECT c_seg, COUNT(*) FROM customer WHERE NOT EXISTS (SELECT * FROM orders WHERE o_custkey = c_custkey "
    "AND o_prio = '3-LOW') GROUP BY c_seg",
]


def _source(con: scratch_db.Scratch, schema: str) -> None:
    con.execute(f"CREATE TABLE {schema}orders (o_orderkey BIGINT, o_custkey BIGINT, o_prio VARCHAR, "
                "o_total DECIMAL(15,2))")
    con.execute(f"CREATE TABLE {schema}lineitem (l_orderkey BIGINT, l_supp BIGINT, l_mode VARCHAR, "
                "l_qty DECIMAL(15,2), l_tax DECIMAL(15,2), l_commit DATE, l_receipt DATE)")
    con.execute(f"CREATE TABLE {schema}customer (c_custkey BIGINT, c_seg VARCHAR)")
    con.execute(f"CREATE TABLE {schema}supp (s_suppkey BIGINT, s_nation VARCHAR)")
    for name, rows in (("orders", ORDER_ROWS), ("lineitem", LINE_ROWS), ("customer", CUSTOMER_ROWS),
                       ("supp", SUPP_ROWS)):
        con.executemany(f"INSERT INTO {schema}{name} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def _nonzero(rows: list[tuple[object, ...]]) -> dict[tuple[object, ...], int]:
    return {tuple(r[:-1]): int(r[-1]) for r in rows if r[-1]}


@pytest.mark.parametrize("query", ANSWERED)
def test_the_store_answer_before_noise_is_duckdbs_answer_to_the_text(query: str) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store", salt=5)
    n_keys = len(planned.analysis.keys)
    with scratch_db.connect() as con:
        _source(con, "")
        expected = _nonzero(con.execute(query).fetchall())
        con.execute("ATTACH ':memory:' AS src")
        _source(con, "src.")
        con.execute("DROP TABLE orders; DROP TABLE lineitem; DROP TABLE customer")
        for check in unit_paths.unresolved_sql(LINEITEM):
            assert con.execute(check).fetchone()[0] == 0
        con.execute(store_layout.build_sql(ORDERS, "k"))
        con.execute(store_layout.build_sql(CUSTOMER, "k"))
        con.execute(f'CREATE TABLE "lineitem" AS '
                    f'{store_layout.select_sql(LINEITEM, "k", unit_paths.source_sql(LINEITEM))}')
        rows = con.execute(planned.sql).fetchall()
    got = _nonzero([(*r[:n_keys], r[n_keys + 1]) for r in rows])  # keys, __units, __m0 = COUNT(*)
    assert got == expected and expected, query


VISITS = TableSchema("visits", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("page", "VARCHAR", groupable=True, public_domain=("a", "b")),
    ColumnSpec("n", "INTEGER", bounds=(0, 10)), ColumnSpec("m", "INTEGER", bounds=(0, 10)),
), max_groups=10, max_rows=100)
USERS = TableSchema("users", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("plan", "VARCHAR", unit_level=True)),
                    one_row_per_unit=True)


@pytest.mark.parametrize("query", [
    "SELECT page, COUNT(*) FROM visits v WHERE EXISTS (SELECT * FROM users u WHERE u.uid = v.uid AND plan = 'pro') "
    "GROUP BY page",
    "SELECT page, COUNT(*) FROM visits v WHERE NOT EXISTS (SELECT * FROM visits w WHERE w.uid = v.uid AND w.n > v.m) "
    "GROUP BY page",
    "SELECT page, COUNT(*) FROM visits WHERE uid IN (SELECT uid FROM users WHERE plan <> 'free') GROUP BY page",
])
def test_the_per_query_answer_before_noise_is_duckdbs_answer_to_the_text(query: str) -> None:
    planned = plan(query, Catalog((VISITS, USERS)), epsilon=1.0, delta=1e-6, mechanism="laplace",
                   bounding="per_query", salt=5)
    with scratch_db.connect() as con:
        con.execute("CREATE TABLE visits (uid BIGINT, page VARCHAR, n INTEGER, m INTEGER)")
        con.execute("CREATE TABLE users (uid BIGINT, plan VARCHAR)")
        con.executemany("INSERT INTO visits VALUES (?, ?, ?, ?)", [
            (1, "a", 1, 2), (1, "b", 5, 1), (2, "a", None, 3), (2, "a", 2, 2), (3, "b", 9, 9), (None, "a", 1, 1)])
        con.executemany("INSERT INTO users VALUES (?, ?)", [(1, "pro"), (2, "free"), (3, None), (None, "pro")])
        # rows of no unit are nobody's: the rewrite drops them, so the reference does too
        expected = _nonzero(con.execute(query.replace("GROUP BY", "AND uid IS NOT NULL GROUP BY")
                                        if " v " not in query else query.replace("GROUP BY", "AND v.uid IS NOT NULL "
                                                                                 "GROUP BY")).fetchall())
        rows = con.execute(planned.sql).fetchall()
    assert _nonzero([(r[0], r[2]) for r in rows]) == expected and expected, query


def _refusal(query: str, catalog: Catalog = CATALOG) -> QueryError:
    with pytest.raises(QueryError) as err:
        plan(query, catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store")
    return err.value


@pytest.mark.parametrize(("query", "code", "construct", "says"), [
    # correlated on a column that does not determine the unit: other customers' lines decide this order's filter
    ("SELECT COUNT(*) FROM lineitem l1 WHERE EXISTS (SELECT * FROM lineitem l2 WHERE l2.l_supp = l1.l_supp)",
     "policy", "SUBQUERY", "release inside the WHERE"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey > o_orderkey)",
     "policy", "SUBQUERY", "pins its rows"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_mode = 'MAIL')",
     "policy", "SUBQUERY", "release inside the WHERE"),
    ("SELECT COUNT(*) FROM orders o WHERE EXISTS (SELECT * FROM orders p WHERE p.o_orderkey = o.o_orderkey)",
     "policy", "SUBQUERY", "pins"),  # a parent key is unique only where a line reaches it
    ("SELECT COUNT(*) FROM orders WHERE o_orderkey NOT IN (SELECT l_orderkey FROM lineitem WHERE l_mode = 'MAIL')",
     "policy", "NOT IN SUBQUERY", "NOT EXISTS"),
    ("SELECT COUNT(*) FROM lineitem WHERE l_qty < (SELECT 0.2 * AVG(l_qty) FROM lineitem l2 "
     "WHERE l2.l_supp = lineitem.l_supp)", "policy", "SCALAR SUBQUERY", "scalar subquery over the protected table"),
    # TPC-H Q20's shape: the scalar subquery inside an IN over a public table
    ("SELECT COUNT(*) FROM lineitem WHERE l_supp IN (SELECT s_suppkey FROM supp WHERE s_nation = 'X' AND s_suppkey > "
     "(SELECT 0.5 * SUM(l_qty) FROM lineitem l2 WHERE l2.l_supp = s_suppkey))", "policy", "SCALAR SUBQUERY",
     "exact statistic of every unit's rows"),
    ("SELECT COUNT(*) FROM orders WHERE o_total > (SELECT MAX(s_suppkey) FROM supp)", "unsupported",
     "SCALAR SUBQUERY", "scalar subquery"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT l_orderkey FROM lineitem WHERE l_orderkey = o_orderkey "
     "GROUP BY l_orderkey HAVING SUM(l_qty) > 3)", "unsupported", "SUBQUERY", "GROUP"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT SUM(l_qty) FROM lineitem WHERE l_orderkey = o_orderkey)",
     "policy", "SUBQUERY", "aggregate"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey AND "
     "EXISTS (SELECT * FROM supp WHERE s_suppkey = l_supp))", "unsupported", "SUBQUERY", "inside it"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem JOIN supp ON l_supp = s_suppkey "
     "WHERE l_orderkey = o_orderkey)", "unsupported", "SUBQUERY", "JOINS"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM read_csv('/etc/passwd'))", "unsupported", "SUBQUERY",
     "one declared table"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey "
     "AND l_secret = 1)", "policy", "COLUMN", "l_secret"),
    ("SELECT COUNT(*) FROM orders WHERE o_total IN (SELECT l_orderkey FROM lineitem WHERE l_mode = 'MAIL')",
     "unsupported", "SUBQUERY", "DECIMALs of two types"),
    ("SELECT COUNT(*) FROM orders WHERE o_prio IN (SELECT l_orderkey FROM lineitem)", "policy", "SUBQUERY",
     "one kind"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM nosuch WHERE k = o_orderkey)", "policy", "TABLE",
     "nosuch"),
    ("SELECT COUNT(*) FROM orders WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey OR "
     "l_mode = 'MAIL')", "unsupported", "SUBQUERY", "AND-ed"),
    # a subquery where a condition is a value (CASE WHEN), not the WHERE's own condition
    ("SELECT SUM(CASE WHEN EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey) THEN 1 ELSE 0 END) "
     "FROM orders", "unsupported", "SUBQUERY", "only in the WHERE"),
    ("SELECT COUNT(*) FILTER (WHERE EXISTS (SELECT * FROM lineitem WHERE l_orderkey = o_orderkey)) FROM orders",
     "unsupported", "SUBQUERY", "only in the WHERE"),
])
def test_refusals_name_the_construct_and_why(query: str, code: str, construct: str, says: str) -> None:
    err = _refusal(query)
    assert (err.code, err.detail.get("construct")) == (code, construct), err.message
    assert err.detail.get("hint"), err.message
    assert says in f"{err.message} {err.detail['hint']}", err.message


def test_a_query_over_public_tables_alone_may_not_read_protected_rows_in_a_subquery() -> None:
    query = "SELECT COUNT(*) FROM supp WHERE EXISTS (SELECT * FROM lineitem WHERE l_supp = s_suppkey)"
    with pytest.raises(QueryError) as err:
        plan_public(query, CATALOG, max_rows=10)
    assert err.value.detail.get("construct") == "SUBQUERY" and "protected table 'lineitem'" in err.value.message


def test_tpch_q20s_shape_over_a_public_table_names_its_scalar_subquery_over_protected_rows() -> None:
    query = ("SELECT s_nation FROM supp WHERE s_suppkey IN (SELECT s_suppkey FROM supp s2 WHERE s2.s_nation = 'X' "
             "AND s2.s_suppkey > (SELECT 0.5 * SUM(l_qty) FROM lineitem WHERE l_supp = s2.s_suppkey))")
    with pytest.raises(QueryError) as err:
        plan_public(query, CATALOG, max_rows=10)
    # the public rules refuse it first (proxy/query/public/protected.py), naming the table and why
    assert (err.value.code, err.value.detail.get("construct")) == ("unsupported", "SUBQUERY"), err.value.message
    assert "'lineitem'" in err.value.message, err.value.message
    assert "a correlated aggregate over protected rows would be a release inside the WHERE" in err.value.message


def test_an_in_subquery_restricts_no_cell_of_the_charge() -> None:
    """A unit-level key IN (a subquery) is no list of literals: the scope rules must charge every cell for it
    (analyse/cell_space.py reads `col IN (…)` as literals; the rendering keeps the operand in parentheses)."""
    catalog = dataclasses.replace(CATALOG, public=(*CATALOG.public, PublicTable(
        "segs", (ColumnSpec("s_seg", "VARCHAR"),), ("s_seg",), unique=True)))
    for where in ("c_seg IN (SELECT s_seg FROM segs)", "NOT c_seg IN (SELECT s_seg FROM segs)",
                  "c_seg = 'A' OR c_seg IN (SELECT s_seg FROM segs)"):
        planned = plan(f"SELECT COUNT(*) FROM customer WHERE {where}", catalog, epsilon=1.0, delta=1e-6,
                       mechanism="laplace", bounding="store")
        assert planned.analysis.scope.cells is None, where
        assert planned.scope is None or planned.scope.cells is None, where


def test_the_rendering_reads_renamed_columns_so_no_outer_name_is_captured() -> None:
    planned = plan(ANSWERED[2], CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store")
    sql = planned.sql
    assert 'FROM (SELECT "l_orderkey" AS "__s0", "l_supp" AS "__s1" FROM "lineitem") AS "__semi"' in sql
    assert '"__semi"."__s0" = "l_orderkey" AND "__semi"."__s1" <> "l_supp"' in sql
    assert "l2" not in sql and "l3" not in sql  # nothing of the analyst's text: declared names only
