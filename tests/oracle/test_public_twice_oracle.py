"""The neighbouring-dataset oracle for a public table joined twice under two aliases (TPC-H Q7, Q8's nation n1 and
n2; docs/privacy.md §12.3), written directly and as the subquery BI tools and TPC-H wrap around it: `pub` is joined
once from a row-level column and once from a unit-level one, alone and with a chain to `zone` behind either alias,
INNER and LEFT. `pub` is declared unique and is not (key 0 fans out to two rows), so a unit's row meets up to four
pairs of public rows. D′ is D without one unit's rows; the public tables are the same in both. No measure may move by
more than the planned sensitivity, in more than the planned number of cells."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.query.analyse.joins import join
from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from tests.support import oracle_db

P = TableSchema("p", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("k", "INTEGER", groupable=True),
    ColumnSpec("r", "INTEGER", unit_level=True, groupable=True), ColumnSpec("x", "DOUBLE", bounds=(-3.0, 5.5)),
), max_groups=2, max_rows=3)
PUB = PublicTable("pub", (ColumnSpec("k", "INTEGER", groupable=True),
                          ColumnSpec("label", "VARCHAR", groupable=True, public_domain=("a", "b")),
                          ColumnSpec("zone", "INTEGER", groupable=True, bounds=(0, 1))),  # key 3's zone is 2
                ("k",), unique=True)  # it is not
ZONE = PublicTable("zone", (ColumnSpec("zone", "INTEGER", groupable=True),
                            ColumnSpec("zname", "VARCHAR", groupable=True)), ("zone",), unique=True)
CATALOG = Catalog((P,), public=(PUB, ZONE))
PUB_ROWS = [(0, "a", 0), (0, "b", 1), (1, "a", 1), (2, "b", 0), (3, "z", 2)]  # key 0 fans out
ZONE_ROWS = [(0, "east"), (1, "west"), (1, "north")]  # zone 1 fans out again

QUERIES = [
    "SELECT a.label, b.label, COUNT(*), SUM(x), COUNT(DISTINCT uid) FROM p JOIN pub a ON p.k = a.k "
    "JOIN pub b ON p.r = b.k GROUP BY a.label, b.label",
    "SELECT b.label, COUNT(*), SUM(CASE WHEN a.label = 'a' THEN x ELSE 0 END) FROM p, pub a, pub b "
    "WHERE p.k = a.k AND p.r = b.k GROUP BY b.label",
    "SELECT z.zname, COUNT(*), SUM(x) FROM p LEFT JOIN pub a ON p.k = a.k JOIN pub b ON p.r = b.k "
    "JOIN zone z ON a.zone = z.zone GROUP BY z.zname",
    "SELECT z.zname, a.label, COUNT(*) FROM p JOIN pub a ON p.k = a.k LEFT JOIN pub b ON p.r = b.k "
    "LEFT JOIN zone z ON b.zone = z.zone GROUP BY z.zname, a.label",
    # Q9's shapes: a public column in a measure (clamped to its declared bounds, which the data breaks), and an
    # equality between a public and a protected column left in WHERE after a fan-out
    "SELECT b.label, COUNT(*), SUM(x * a.zone - b.zone) FROM p, pub a, pub b WHERE p.k = a.k AND p.r = b.k "
    "GROUP BY b.label",
    "SELECT a.label, COUNT(*), SUM(x) FROM p JOIN pub a ON p.k = a.k JOIN pub b ON p.r = b.k "
    "WHERE a.zone = p.r AND b.zone = a.zone GROUP BY a.label",
    # TPC-H Q7's and Q8's wrappers, flattened (proxy/query/parse/flatten_joins.py)
    "SELECT sl, cl, SUM(v) AS s, COUNT(*) AS n FROM (SELECT a.label AS sl, b.label AS cl, x * 2 AS v "
    "FROM pub a, p, pub b WHERE p.k = a.k AND p.r = b.k AND ((a.label = 'a' AND b.label = 'b') "
    "OR (a.label = 'b' AND b.label = 'a'))) AS q GROUP BY sl, cl",
    "WITH q AS (SELECT x AS v, b.label AS nation, z.zname AS area FROM pub a, zone z, p, pub b "
    "WHERE a.k = p.k AND a.zone = z.zone AND p.r = b.k AND z.zname = 'west') "
    "SELECT nation, SUM(CASE WHEN area = 'west' THEN v ELSE 0 END) AS w, SUM(v) AS s FROM q GROUP BY nation",
]

values = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.floats(-1e6, 1e6))
keys = st.one_of(st.none(), st.integers(0, 4))
p_rows = st.lists(st.tuples(st.integers(0, 4), keys, keys, values), max_size=30)


def _run(sql: str, ps: list[tuple[object, ...]], n_keys: int) -> dict[tuple[object, ...], tuple[object, ...]]:
    tables = {"p": ("uid BIGINT, k INTEGER, r INTEGER, x DOUBLE", ps),
              "pub": ("k INTEGER, label VARCHAR, zone INTEGER", PUB_ROWS),
              "zone": ("zone INTEGER, zname VARCHAR", ZONE_ROWS)}
    return oracle_db.run(sql, tables, n_keys, value=oracle_db.as_int)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ps=p_rows, removed=st.integers(0, 4), salt=st.integers(0, 2**62))
# one unit with many rows on every fanned-out key, at the bound's extremes, its unit-level column not constant
@example(ps=[(0, k, r, x) for k in (0, 1, 3) for r in (0, 3) for x in (5.5, -3.0, 1e6) for _ in range(2)],
         removed=0, salt=1)
def test_removing_a_unit_moves_each_measure_within_its_sensitivity(
    query: str, ps: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=salt)
    analysis = planned.analysis
    n_keys = len(analysis.keys)
    big = _run(planned.sql, ps, n_keys)
    small = _run(planned.sql, [r for r in ps if r[0] != removed], n_keys)
    sensitivities = [1] + [m.sensitivity(analysis.table.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, analysis.max_groups, query)


def test_the_two_aliases_are_two_parts_of_the_join_with_their_own_columns_and_links() -> None:
    """`b`'s columns are not `a`'s: grouping by each gives each its own value (a join that merged the two aliases
    would answer with one label twice), and the cell space names both links."""
    planned = plan(QUERIES[0], CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    got = _run(planned.sql, [(0, 0, 1, 1.0), (1, 2, 1, 2.0)], len(planned.analysis.keys))
    # (units, COUNT(*), SUM(x) on the fixed-point grid, COUNT(DISTINCT uid)): unit 0's k = 0 meets both "a" and "b"
    assert {k: (v[0], v[1], v[3]) for k, v in got.items()} == {("a", "a"): (1, 1, 1), ("b", "a"): (2, 2, 2)}
    assert got[("b", "a")][2] == 3 * got[("a", "a")][2]  # x = 1 in (a, a); 1 + 2 in (b, a)
    joined = join(parse(QUERIES[2]), CATALOG)  # the LEFT JOIN chain behind alias a
    assert joined.via == "LEFT JOIN pub a.k = p.k; JOIN pub b.k = p.r; JOIN zone.zone = pub a.zone"
    assert [c.name for c in joined.table.columns if c.name.endswith("label")] == ["label", "pub.label"]
