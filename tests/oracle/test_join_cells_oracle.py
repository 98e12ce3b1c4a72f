"""Joins × per-cell accounting (issue #26, items 1 and 2): a neighbouring-dataset oracle over pairs of queries that
the ledger charges as disjoint.

Every join kind the product accepts (a public table declared unique joined through a unit-level column and
through the unit, a public table that is not unique, a protected table on the unit, INNER and LEFT, and the
protected table on either side), each under both bounding modes, over data that breaks every declaration:
the "unique" public tables repeat their keys, the unit-level columns vary between a unit's rows, a table
declared one row per unit has several (per query; the store refuses to build it, so the store gets one). Each
query is planned as the proxy plans it; a unit is *read* by a query when the query's output moves when the
unit is removed from every protected table (the public tables are the same in both neighbours; on the store,
the store is built again from the smaller source). Two queries whose scopes lie in one cell space and share no
cell are charged in parallel by the ledger (accountant/cells.py), so no unit may be read by both.

Before the fix, the public columns of a join through a unit-level column were cell axes read row by row (a
unit meets every zone its region is listed under: `WHERE zone = 'z1'` and `'z2'` both read it), and per query a
unit's canonical region was its MIN over the rows the join kept (`p JOIN pub … WHERE r = 'S'` read a unit that
`p WHERE r = 'N'` also read).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from accountant.cell_scope import CellScope
from proxy.http.views.budget import scope_out
from proxy.policy.dataset import DatasetPolicy
from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.planner import plan
from proxy.query.rewrite import store_layout
from tests.support import oracle_db, scratch_db

P = TableSchema("p", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True, public_domain=("N", "S")),
    ColumnSpec("k", "INTEGER", groupable=True), ColumnSpec("x", "DOUBLE", bounds=(0.0, 10.0)),
), max_groups=2, max_rows=3)
Q = TableSchema("q", "uid", (
    ColumnSpec("uid", "BIGINT"),
    ColumnSpec("plan", "VARCHAR", unit_level=True, groupable=True, public_domain=("free", "pro")),
), max_groups=1, max_rows=1, one_row_per_unit=True)
Z = PublicTable("z", (ColumnSpec("r", "VARCHAR", groupable=True),  # declared unique on r: it is not
                      ColumnSpec("zone", "VARCHAR", groupable=True, public_domain=("z1", "z2", "z3"))), ("r",), True)
Z2 = PublicTable("z2", Z.columns, ("r",), True)  # the same columns, other rows: its space must not be z's
Z2_ROWS = [("N", "z3"), ("S", "z1"), ("S", "z2")]
U = PublicTable("u", (ColumnSpec("uid", "BIGINT"),  # keyed by the unit itself, declared unique: it is not
                      ColumnSpec("tier", "VARCHAR", groupable=True, public_domain=("t1", "t2"))), ("uid",), True)
PUB = PublicTable("pub", (ColumnSpec("k", "INTEGER", groupable=True),  # not unique: its columns are row-level
                          ColumnSpec("label", "VARCHAR", groupable=True, public_domain=("a", "b"))), ("k",))
ZT = PublicTable("zt", (ColumnSpec("zone", "VARCHAR"),  # a chain's second link, declared unique: it is not
                        ColumnSpec("band", "VARCHAR", groupable=True, public_domain=("b1", "b2"))), ("zone",), True)
ZB = PublicTable("zb", (ColumnSpec("band", "VARCHAR"),  # its third
                        ColumnSpec("area", "VARCHAR", groupable=True, public_domain=("a1", "a2"))), ("band",), True)
ZB_ROWS = [("b1", "a1"), ("b1", "a2"), ("b2", "a2")]
CATALOG = Catalog((P, Q), public=(Z, Z2, U, PUB, ZT, ZB))
COLUMNS = {"p": "uid BIGINT, r VARCHAR, k INTEGER, x DOUBLE", "q": "uid BIGINT, plan VARCHAR",
           "z": "r VARCHAR, zone VARCHAR", "z2": "r VARCHAR, zone VARCHAR",
           "u": "uid BIGINT, tier VARCHAR", "pub": "k INTEGER, label VARCHAR", "zt": "zone VARCHAR, band VARCHAR",
           "zb": "band VARCHAR, area VARCHAR"}
PUB_ROWS = [(0, "a"), (0, "b"), (1, "a"), (2, "b")]  # key 0 fans out, key 3 is missing: INNER drops its rows

# (FROM …, predicates on the axes of its cell space): every pair in one space is checked
SOURCES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("p", "p JOIN pub ON p.k = pub.k", "p LEFT JOIN pub USING (k)"),  # p's own space
     ("r = 'N'", "r = 'S'", "r NOT IN ('N', 'S')", "r IS NULL", "r = 'N' AND x > 1", "r = 'S' AND x > 5")),
    (("p JOIN z ON p.r = z.r", "p LEFT JOIN z ON p.r = z.r", "p JOIN z2 ON p.r = z2.r"),
     ("zone = 'z1'", "zone = 'z2'", "zone = 'z3'", "zone IS NULL", "p.r = 'N'", "p.r = 'S'",
      "zone = 'z2' AND x > 1")),
    (("p JOIN u ON p.uid = u.uid", "p LEFT JOIN u ON p.uid = u.uid"), ("tier = 't1'", "tier = 't2'", "tier IS NULL",
                                                                      "r = 'N'")),
    (("p JOIN q USING (uid)", "p LEFT JOIN q ON p.uid = q.uid"),
     ("plan = 'free'", "plan = 'pro'", "plan IS NULL", "r = 'N'", "r = 'S'", "plan = 'pro' AND x > 1")),
    (("q JOIN p USING (uid)",), ("plan = 'free'", "plan = 'pro'", "r = 'N'", "r = 'S' AND x > 1")),
    # chains (issue #31): a unit whose regions meet several zones, each meeting several bands, stays in one cell;
    # INNER and LEFT chains are spaces of their own (an INNER link drops the zones it does not match)
    (("p JOIN z ON p.r = z.r JOIN zt ON z.zone = zt.zone", "p LEFT JOIN z ON p.r = z.r LEFT JOIN zt USING (zone)",
      "p JOIN z ON p.r = z.r LEFT JOIN zt ON zt.zone = z.zone"),
     ("band = 'b1'", "band = 'b2'", "band IS NULL", "z.zone = 'z1'", "z.zone = 'z2'", "z.zone = 'z2' AND band = 'b2'",
      "p.r = 'N'", "p.r = 'N' AND band = 'b2'", "p.r = 'S' AND band = 'b1'", "band = 'b2' AND x > 1")),
    (("p JOIN z ON p.r = z.r JOIN zt ON z.zone = zt.zone JOIN zb ON zt.band = zb.band",),
     ("area = 'a1'", "area = 'a2'", "zt.band = 'b1' AND area = 'a2'", "z.zone = 'z2'", "p.r = 'N'")),
    (("p JOIN z ON p.r = z.r JOIN pub ON p.k = pub.k",),  # a star: pub, joined row by row, drops some of its rows
     ("z.zone = 'z1'", "z.zone = 'z2'", "z.zone = 'z3'", "p.r = 'S'")),
    (("p JOIN q USING (uid) JOIN z ON p.r = z.r JOIN zt ON z.zone = zt.zone",),
     ("plan = 'free'", "plan = 'pro' AND band = 'b1'", "band = 'b2'", "z.zone = 'z1'")),
)
UNLISTED = ("z.r JOIN pub ON p.k", "JOIN q USING (uid) JOIN z")  # shapes joins_of does not enumerate
QUERIES = tuple(f"SELECT COUNT(*) FROM {source} WHERE {where}"
                for sources, predicates in SOURCES for source in sources for where in predicates)
UNITS = range(4)

p_rows = st.lists(st.tuples(st.sampled_from(UNITS), st.sampled_from(["N", "S", "E", None]),
                            st.sampled_from([0, 1, 2, 3, None]), st.floats(0, 10)), max_size=14)
q_rows = st.lists(st.tuples(st.sampled_from(UNITS), st.sampled_from(["free", "pro", "x", None])), max_size=8)
z_rows = st.lists(st.tuples(st.sampled_from(["N", "S", "E"]), st.sampled_from(["z1", "z2", "z3", "zz"])), max_size=6)
u_rows = st.lists(st.tuples(st.sampled_from(UNITS), st.sampled_from(["t1", "t2", "tt"])), max_size=6)
zt_rows = st.lists(st.tuples(st.sampled_from(["z1", "z2", "z3", "zz"]), st.sampled_from(["b1", "b2", "bb"])),
                   max_size=6)

Rows = Sequence[tuple[object, ...]]


def _one_per_unit(rows: Rows) -> list[tuple[object, ...]]:
    """The first row of each unit: what a table declared one row per unit must hold for the store to build."""
    seen: set[object] = set()
    return [r for r in rows if not (r[0] in seen or seen.add(r[0]))]  # type: ignore[func-returns-value]


def _answers(sqls: Sequence[str], tables: dict[str, Rows], store: bool) -> list[list[tuple[object, ...]]]:
    """Every query's rows over `tables` (on the store built from them when `store`), in one database."""
    con = scratch_db.connect()
    try:
        prefix = "src." if store else ""
        if store:
            con.execute("ATTACH ':memory:' AS src")
        for name, rows in tables.items():
            con.execute(f"CREATE TABLE {prefix}{name} ({COLUMNS[name]})")
            if rows:
                con.executemany(f"INSERT INTO {prefix}{name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        if store:
            for table in CATALOG.tables:
                con.execute(store_layout.build_sql(table, "k"))
            for public in CATALOG.public:
                con.execute(store_layout.copy_public_sql(public))
        # one statement for all: every query returns (__units, __m0), and DuckDB plans one union faster than 56
        union = " UNION ALL ".join(f"SELECT {i} AS __q, * FROM ({sql}) AS __a{i}" for i, sql in enumerate(sqls))
        out: list[list[tuple[object, ...]]] = [[] for _ in sqls]
        for row in con.execute(union).fetchall():
            out[row[0]].append(row[1:])
        return [sorted(rows, key=repr) for rows in out]
    finally:
        con.close()


def _disjoint(a: CellScope | None, b: CellScope | None) -> bool:
    """Whether the ledger charges these two scopes in parallel: one space, no cell in common."""
    return a is not None and b is not None and a.key == b.key and not bool(np.any(a.mask() & b.mask()))


PLANS = {bounding: [plan(q, CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace", salt=3, bounding=bounding)
                    for q in QUERIES] for bounding in ("per_query", "store")}
PAIRS = [(i, j) for i, j in itertools.combinations(range(len(QUERIES)), 2)
         if _disjoint(PLANS["store"][i].scope, PLANS["store"][j].scope)]


def test_the_oracle_checks_pairs_in_every_space() -> None:
    """Each join kind's space holds disjoint pairs, the non-unique join shares the base table's space, and two
    public tables with the same columns have a space each (the space names its join)."""
    spaces = {PLANS["store"][i].scope.key for pair in PAIRS for i in pair}  # type: ignore[union-attr]
    assert len(spaces) == 12 and len(PAIRS) > 250
    assert PLANS["store"][0].scope.key == PLANS["store"][6].scope.key  # p and p JOIN pub: one space
    assert [p.scope for p in PLANS["per_query"]] == [p.scope for p in PLANS["store"]]


@pytest.mark.parametrize("bounding", ["per_query", "store"])
@settings(max_examples=oracle_db.examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ps=p_rows, qs=q_rows, zs=z_rows, us=u_rows, zts=zt_rows)
@example(  # the audit's two shapes: unit 0's region varies, one of its rows has no `pub` match; "N" has two zones;
    # and a chain's: z1 meets no band (an INNER chain drops it), z2 meets two
    ps=[(0, "N", 3, 1.0), (0, "S", 0, 2.0), (1, "N", 1, 5.0), (2, "S", 2, 5.0), (3, "E", None, 9.0)],
    qs=[(0, "free"), (0, "pro"), (1, "pro"), (2, None)], zs=[("N", "z1"), ("N", "z2"), ("S", "z2"), ("S", "z3")],
    us=[(0, "t1"), (0, "t2"), (1, "t2")], zts=[("z2", "b2"), ("z2", "b1"), ("z3", "b1")])
@example(  # unit 0's regions lead to different bands: only its canonical region's (N → z2 → b2) may place it
    ps=[(0, "N", 0, 1.0), (0, "S", 0, 2.0), (1, "S", 1, 1.0)], qs=[], zs=[("N", "z2"), ("S", "z3")], us=[],
    zts=[("z2", "b2"), ("z3", "b1")])
def test_no_unit_is_read_by_two_queries_charged_as_disjoint(
    bounding: str, ps: Rows, qs: Rows, zs: Rows, us: Rows, zts: Rows
) -> None:
    store = bounding == "store"
    qs = _one_per_unit(qs) if store else qs  # the store refuses to build a false one_row_per_unit (duckdb_store.py)
    plans = PLANS[bounding]
    sqls = [p.sql for p in plans]
    publics: dict[str, Rows] = {"z": zs, "z2": Z2_ROWS, "u": us, "pub": PUB_ROWS, "zt": zts, "zb": ZB_ROWS}
    full = _answers(sqls, {"p": ps, "q": qs, **publics}, store)
    read: list[set[int]] = [set() for _ in sqls]
    for unit in UNITS:
        without = _answers(sqls, {"p": [r for r in ps if r[0] != unit], "q": [r for r in qs if r[0] != unit],
                                  **publics}, store)
        for i, (a, b) in enumerate(zip(full, without, strict=True)):
            if a != b:
                read[i].add(unit)
    for i, j in PAIRS:
        both = read[i] & read[j]
        assert not both, (bounding, QUERIES[i], QUERIES[j], sorted(both))


def test_every_joined_charge_lists_its_cells() -> None:
    """The describer finds every space a join can be charged in (item 10: it looked up the base table's space by
    the joined space's fingerprint, so a joined charge listed no cell)."""
    dataset = DatasetPolicy("d", Path("d.duckdb"), CATALOG)
    for query, planned in zip(QUERIES, PLANS["store"], strict=True):
        assert planned.scope is not None, query
        if any(shape in query for shape in UNLISTED):
            assert not scope_out(planned.scope, dataset).listed  # charged per cell; the cells are not listed
            continue
        out = scope_out(planned.scope, dataset)
        assert len(out.listed) == min(out.cells, 100) and out.listed, query
        column = query.split(" WHERE ")[1].split(" ")[0].split(".")[-1]  # the first atom's column
        assert len({c[column] for c in out.listed}) == 1, query  # one value of it, in every listed cell
