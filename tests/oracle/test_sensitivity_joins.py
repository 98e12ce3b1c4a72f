"""The neighbouring-dataset sensitivity oracle over joins (tests/oracle/test_sensitivity.py): a protected table joined
to another of the same unit (declared one row per unit, but the data has many) and to chains of one, two and three
public tables whose keys repeat at every link (one-to-many fan-out, `top` declared unique and not). Removing a
unit removes its rows from both protected tables; the public tables are the same in both neighbours. No measure
may move by more than the planned sensitivity, under the bounds of the virtual table the join becomes."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.query.analyse.analysis import analyse
from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import QueryError
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.rewrite.per_query import rewrite
from tests.support import oracle_db, scratch_db

P = TableSchema("p", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
    ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True), ColumnSpec("x", "DOUBLE", bounds=(-3.0, 5.5)),
    ColumnSpec("k", "INTEGER", groupable=True),
), max_groups=2, max_rows=3)
Q = TableSchema("q", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("plan", "VARCHAR", unit_level=True, groupable=True,
                                            public_domain=("free", "pro")),
    ColumnSpec("y", "INTEGER", bounds=(0, 7)),
), max_groups=1, max_rows=1, one_row_per_unit=True)
PUB = PublicTable("pub", (ColumnSpec("k", "INTEGER", groupable=True),
                          ColumnSpec("label", "VARCHAR", groupable=True, public_domain=("a", "b"))), ("k",))
DIM = PublicTable("dim", (ColumnSpec("label", "VARCHAR", groupable=True),
                          ColumnSpec("grp", "VARCHAR", groupable=True, public_domain=("g1", "g2"))), ("label",))
TOP = PublicTable("top", (ColumnSpec("grp", "VARCHAR"), ColumnSpec("area", "VARCHAR", groupable=True)), ("grp",),
                  unique=True)  # declared unique: it is not
R = TableSchema("r", "cid", (ColumnSpec("cid", "BIGINT"), ColumnSpec("uid", "BIGINT"), ColumnSpec("w", "INTEGER")))
CATALOG = Catalog((P, Q, R), public=(PUB, DIM, TOP))
PUBLIC_ROWS = [(0, "a"), (0, "b"), (1, "a"), (1, "a"), (2, "b"), (3, "z")]  # key 0 and 1 fan out
DIM_ROWS = [("a", "g1"), ("a", "g2"), ("b", "g2"), ("z", None), ("y", "g1")]  # "a" fans out again
TOP_ROWS = [("g1", "east"), ("g2", "west"), ("g2", "east")]

QUERIES = [
    "SELECT q.plan, COUNT(*), SUM(p.x) FROM p JOIN q USING (uid) GROUP BY q.plan",
    "SELECT plan, COUNT(*), AVG(y) FROM p LEFT JOIN q USING (uid) GROUP BY plan",
    "SELECT pub.label, COUNT(*), SUM(x), COUNT(DISTINCT uid) FROM p JOIN pub ON p.k = pub.k GROUP BY pub.label",
    "SELECT label, g, COUNT(*) FROM p LEFT JOIN pub USING (k) WHERE label IS NOT NULL GROUP BY label, g",
    "SELECT COUNT(*), SUM(y), SUM(x) FROM q JOIN p ON q.uid = p.uid",
    "SELECT UPPER(q.plan) AS up, COUNT(*) FROM p JOIN q USING (uid) WHERE p.x * 2 > 1 GROUP BY up",
    "SELECT p.r, COUNT(*) FROM pub JOIN p ON pub.k = p.k WHERE pub.label = 'a' GROUP BY p.r",
    # chains: every link may fan out, so a unit's row meets up to 2 · 2 · 2 public rows
    "SELECT dim.grp, COUNT(*), SUM(x) FROM p JOIN pub ON p.k = pub.k JOIN dim ON pub.label = dim.label "
    "GROUP BY dim.grp",
    "SELECT area, COUNT(*), COUNT(DISTINCT uid), AVG(x) FROM p LEFT JOIN pub USING (k) LEFT JOIN dim "
    "ON pub.label = dim.label JOIN top ON dim.grp = top.grp GROUP BY area",
    "SELECT plan, grp, COUNT(*), SUM(y) FROM p JOIN q USING (uid) JOIN pub ON p.k = pub.k JOIN dim USING (label) "
    "GROUP BY plan, grp",
    "SELECT COUNT(*), SUM(x) FROM pub JOIN p ON pub.k = p.k JOIN dim ON dim.label = pub.label WHERE dim.grp = 'g1'",
    "SELECT g, area, COUNT(*) FROM p JOIN pub ON p.k = pub.k JOIN dim ON p.g = dim.label LEFT JOIN top "
    "ON dim.grp = top.grp GROUP BY g, area",
]

values = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e6, 1e6))
p_rows = st.lists(st.tuples(st.integers(0, 4), st.sampled_from("abc"), st.sampled_from("NS"), values,
                            st.one_of(st.none(), st.integers(0, 4))), max_size=30)
q_rows = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["free", "pro", "other", None]),
                            st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))), max_size=12)


def _run(sql: str, ps: list[tuple[object, ...]], qs: list[tuple[object, ...]], n_keys: int) -> dict[
        tuple[object, ...], tuple[int, ...]]:
    tables = {"p": ("uid BIGINT, g VARCHAR, r VARCHAR, x DOUBLE, k INTEGER", ps),
              "q": ("uid BIGINT, plan VARCHAR, y INTEGER", qs), "pub": ("k INTEGER, label VARCHAR", PUBLIC_ROWS),
              "dim": ("label VARCHAR, grp VARCHAR", DIM_ROWS), "top": ("grp VARCHAR, area VARCHAR", TOP_ROWS)}
    return oracle_db.run(sql, tables, n_keys, value=oracle_db.as_int)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ps=p_rows, qs=q_rows, removed=st.integers(0, 4), salt=st.integers(0, 2**62))
@example(ps=[(0, g, r, 5.5, k) for g in "abc" for r in "NS" for k in (0, 1) for _ in range(3)],
         qs=[(0, "free", 7), (0, "pro", 2**31 - 1), (0, "free", 1)], removed=0, salt=1)
def test_neighbour_moves_each_measure_within_its_sensitivity(
    query: str, ps: list[tuple[object, ...]], qs: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    sql = rewrite(analysis, salt)
    n_keys = len(analysis.keys)
    big = _run(sql, ps, qs, n_keys)
    small = _run(sql, [r for r in ps if r[0] != removed], [r for r in qs if r[0] != removed], n_keys)
    l0 = analysis.max_groups
    cells = set(big) | set(small)
    zero = (0,) * (1 + len(analysis.measures))
    sensitivities = [1] + [m.sensitivity(analysis.table.max_rows) for m in analysis.measures]
    for column, per_group in enumerate(sensitivities):
        moves = [abs(big.get(c, zero)[column] - small.get(c, zero)[column]) for c in cells]
        assert all(m <= per_group for m in moves), (query, column)
        assert sum(moves) <= l0 * per_group
        assert math.sqrt(sum(m * m for m in moves)) <= math.sqrt(l0) * per_group + 1e-9
        assert sum(1 for m in moves if m) <= l0


def test_bounds_and_composition_of_joins() -> None:
    shapes = [(a.table.max_rows, a.max_groups, a.partitions) for a in (
        analyse(parse(q), CATALOG) for q in QUERIES)]
    assert shapes == [(3, 1, "public"), (3, 1, "public"), (3, 2, "public"), (3, 2, "private"), (3, 1, "none"),
                      (3, 1, "public"), (3, 1, "private"), (3, 2, "public"), (3, 2, "private"), (3, 2, "public"),
                      (3, 1, "none"), (3, 2, "private")]


@pytest.mark.parametrize(("query", "construct"), [
    ("SELECT COUNT(*) FROM p JOIN q ON p.r = q.plan", "JOIN ON"),  # two protected tables, not on the unit
    ("SELECT COUNT(*) FROM p JOIN pub ON p.k = pub.label", "JOIN ON"),  # not the declared key... and types
    ("SELECT COUNT(*) FROM p JOIN pub ON p.g = pub.label", "JOIN ON"),  # not the declared key
    ("SELECT COUNT(*) FROM p JOIN pub USING (k) JOIN dim ON pub.label = dim.grp", "JOIN ON"),  # not dim's key
    ("SELECT COUNT(*) FROM p JOIN pub USING (k) JOIN dim ON p.k = pub.k", "JOIN ON"),  # dim not in its ON
    ("SELECT COUNT(*) FROM p JOIN pub USING (k) CROSS JOIN dim", "CROSS JOIN"),
    ("SELECT COUNT(*) FROM p JOIN pub USING (k), dim", "CROSS JOIN"),
    # a public table twice (test_public_twice_oracle.py), but USING (k) names no one table before pub2
    ("SELECT COUNT(*) FROM p JOIN pub USING (k) JOIN pub AS pub2 USING (k)", "USING"),
    ("SELECT COUNT(*) FROM p JOIN r ON p.uid = r.uid", "JOIN ON"),  # two units: r's is cid
    ("SELECT COUNT(*) FROM p JOIN q USING (uid) JOIN r ON q.y = r.cid", "JOIN ON"),  # a third, not on the unit
    ("SELECT COUNT(*) FROM pub JOIN dim USING (label) JOIN p USING (k)", "JOIN"),  # public tables first
    ("SELECT COUNT(*) FROM p JOIN pub USING (k) JOIN dim USING (k)", "USING"),  # dim has no k
    ("SELECT COUNT(*) FROM p CROSS JOIN pub", "CROSS JOIN"),
    ("SELECT COUNT(*) FROM p NATURAL JOIN q", "NATURAL JOIN"),
    ("SELECT COUNT(*) FROM p, q", "CROSS JOIN"),  # a comma join no equality connects
    ("SELECT COUNT(*) FROM pub LEFT JOIN p USING (k)", "LEFT JOIN"),
    ("SELECT COUNT(*) FROM p JOIN p AS p2 USING (uid)", "JOIN"),
    ("SELECT COUNT(*) FROM p JOIN (SELECT * FROM q) AS s USING (uid)", "JOIN"),
    ("SELECT COUNT(*) FROM p JOIN q ON p.uid = q.uid OR TRUE", "JOIN ON"),
    ("SELECT COUNT(*) FROM p JOIN secret USING (uid)", "TABLE"),
    ("SELECT q.uid, COUNT(*) FROM p JOIN q USING (uid) GROUP BY q.uid", "GROUP BY"),  # the unit, renamed
    ("SELECT COUNT(*) FROM p JOIN q USING (uid) GROUP BY CAST(q.uid AS VARCHAR)", "GROUP BY"),
    ("SELECT r, COUNT(*) FROM p JOIN q USING (uid) GROUP BY g, plan, uid", "GROUP BY"),
    ("SELECT COUNT(*) FROM pub", "TABLE"),
])
def test_join_refusals_name_the_construct(query: str, construct: str) -> None:
    with pytest.raises(QueryError) as caught:
        analyse(parse(query), CATALOG)
    assert caught.value.detail.get("construct") == construct, caught.value.message


@pytest.mark.parametrize("query", [*QUERIES, "SELECT UPPER(SUBSTR(g, 1, 1)) AS f, COUNT(*) FROM p GROUP BY f"])
def test_joins_and_computed_keys_run_on_the_bounding_store(query: str) -> None:
    """They run on the store's tables (rank filters where the join keeps the base table's rows, tests/
    test_store_oracle.py; else per-query windows); a public table is copied into the store as declared."""
    from proxy.query.rewrite import store_layout

    con = scratch_db.connect()
    try:
        con.execute("ATTACH ':memory:' AS src")
        con.execute("CREATE TABLE src.p (uid BIGINT, g VARCHAR, r VARCHAR, x DOUBLE, k INTEGER)")
        con.execute("CREATE TABLE src.q (uid BIGINT, plan VARCHAR, y INTEGER)")
        con.execute("CREATE TABLE src.r (cid BIGINT, uid BIGINT, w INTEGER)")
        con.executemany("INSERT INTO src.p VALUES (?, ?, ?, ?, ?)", [(1, "a", "N", 2.5, 0), (1, "b", "S", None, 1)])
        con.executemany("INSERT INTO src.q VALUES (?, ?, ?)", [(1, "pro", 3)])
        for name, columns, rows in (("pub", "k INTEGER, label VARCHAR", PUBLIC_ROWS),
                                    ("dim", "label VARCHAR, grp VARCHAR", DIM_ROWS),
                                    ("top", "grp VARCHAR, area VARCHAR", TOP_ROWS)):
            con.execute(f"CREATE TABLE src.{name} ({columns})")
            con.executemany(f"INSERT INTO src.{name} VALUES (?, ?)", rows)
        for table in CATALOG.tables:
            con.execute(store_layout.build_sql(table, "k"))
        for public in CATALOG.public:
            con.execute(store_layout.copy_public_sql(public))
        sql = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", bounding="store").sql
        assert con.execute(sql).fetchall()
    finally:
        con.close()
