"""Scopes: which cells of the unit-attribute space a query can touch, and the proof that disjoint scopes
touch disjoint units even when the data breaks the unit-level declaration."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterator

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.query.analyse.analysis import analyse
from proxy.query.analyse.cell_space import cell_space
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import LiteralOutsideDomain
from proxy.query.parse.statement import parse
from proxy.query.rewrite.per_query import rewrite
from tests.support import oracle_db, scratch_db

TABLE = TableSchema(
    "t", "uid",
    (
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True, public_domain=("N", "S", "E")),
        ColumnSpec("age", "INTEGER", unit_level=True, groupable=True, bounds=(20, 23)),
        ColumnSpec("x", "DOUBLE", bounds=(0.0, 10.0)),
        ColumnSpec("g", "VARCHAR", groupable=True),
    ),
    max_groups=2, max_rows=3,
)
CATALOG = Catalog((TABLE,))
SPACE = cell_space(TABLE)  # axes: age (20..23, BELOW, ABOVE, NULL) × r (N, S, E, OTHER, NULL) = 7 × 5 cells


def cells(where: str) -> set[tuple[object, object]] | None:
    """The scope of `SELECT COUNT(*) FROM t WHERE <where>` as (age, r) pairs; None for every cell."""
    sql = "SELECT COUNT(*) FROM t" + (f" WHERE {where}" if where else "")
    found = analyse(parse(sql), CATALOG).scope.cells
    if found is None:
        return None
    return {(d["age"], d["r"]) for d in map(SPACE.describe, found)}


AGES: tuple[object, ...] = (20, 21, 22, 23, "<below>", "<above>", None)
REGIONS: tuple[object, ...] = ("N", "S", "E", "<other>", None)


def every(ages: tuple[object, ...] = AGES, regions: tuple[object, ...] = REGIONS) -> set[tuple[object, object]]:
    return {(a, r) for a in ages for r in regions}


@pytest.mark.parametrize(("where", "expected"), [
    ("", None),
    ("r = 'N'", every(regions=("N",))),
    ("r IN ('N', 'S')", every(regions=("N", "S"))),
    ("NOT r IN ('N', 'S', 'E')", every(regions=("<other>",))),  # only an undeclared value (`r = 'Z'` is refused)
    ("r <> 'N'", every(regions=("S", "E", "<other>"))),  # NULL <> 'N' is NULL, never TRUE
    ("NOT r = 'N'", every(regions=("S", "E", "<other>"))),
    ("r IS NULL", every(regions=(None,))),
    ("NOT r IS NULL", every(regions=("N", "S", "E", "<other>"))),
    ("age < 22", every(ages=(20, 21, "<below>"))),  # an age below the bounds is below 22 too
    ("age < 19", every(ages=("<below>",))),
    ("age <= 40", every(ages=(20, 21, 22, 23, "<below>", "<above>"))),  # ages 24..40 lie ABOVE
    ("age > 23", every(ages=("<above>",))),
    ("age BETWEEN 21 AND 22", every(ages=(21, 22))),
    ("age BETWEEN 0 AND 20", every(ages=(20, "<below>"))),
    ("age = 50", every(ages=("<above>",))),
    ("age IN (1, 21)", every(ages=(21, "<below>"))),
    ("age <> 21", every(ages=(20, 22, 23, "<below>", "<above>"))),
    ("NOT age < 22", every(ages=(22, 23, "<above>"))),  # BELOW is certainly below 22
    ("NOT age < 10", every(ages=(20, 21, 22, 23, "<below>", "<above>"))),  # BELOW may be 10..19
    ("age >= 22 AND r = 'S'", every(ages=(22, 23, "<above>"), regions=("S",))),
    ("age = 20 OR r = 'E'", every(ages=(20,)) | every(regions=("E",))),
    ("x > 3", None),  # row-level predicates never narrow a scope
    ("x > 3 AND r = 'N'", every(regions=("N",))),
    ("x > 3 OR r = 'N'", None),
    ("NOT (x > 3)", None),
    ("NOT (x > 3 AND r = 'N')", None),
    ("g = 'a' AND NOT (r = 'N' OR r = 'S')", every(regions=("E", "<other>"))),
])
def test_scope_of_where(where: str, expected: set[tuple[object, object]] | None) -> None:
    assert cells(where) == expected


def test_disjoint_ranges_are_disjoint() -> None:
    young, old = cells("age < 22"), cells("age >= 22")
    assert young is not None and old is not None
    assert not young & old  # ages outside the bounds are BELOW or ABOVE, never both
    teens, twenties = cells("age < 20"), cells("age BETWEEN 19 AND 21")
    assert teens is not None and twenties is not None
    assert teens & twenties == every(ages=("<below>",))  # age 19 could satisfy both: overlap kept


units = st.integers(0, 5)
rows = st.lists(
    st.tuples(units, st.sampled_from(["N", "S", "E", "Z", None]), st.sampled_from([19, 20, 21, 22, 23, None]),
              st.floats(0, 10), st.sampled_from(["a", "b"])),
    max_size=30,
)


def _run(sql: str, data: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    con = scratch_db.connect()
    con.execute("CREATE TABLE t (uid BIGINT, r VARCHAR, age INTEGER, x DOUBLE, g VARCHAR)")
    if data:
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?)", data)
    out = con.execute(sql).fetchall()
    con.close()
    return sorted(out, key=repr)


PAIRS = [
    ("r = 'N'", "r = 'S'"),
    ("age < 22", "age >= 22 AND age <= 23"),
    ("r IN ('N', 'E') AND x > 1", "r = 'S' OR r IS NULL"),
]


@pytest.mark.parametrize(("first", "second"), PAIRS)
@settings(max_examples=oracle_db.examples(15), deadline=None)
@given(data=rows)
def test_disjoint_scopes_touch_disjoint_units(first: str, second: str, data: list[tuple[object, ...]]) -> None:
    # the data deliberately breaks the declaration: a unit's region and age vary between its rows
    a = analyse(parse(f"SELECT g, COUNT(*), SUM(x) FROM t WHERE {first} GROUP BY g"), CATALOG, canonical_units=True)
    b = analyse(parse(f"SELECT r, COUNT(*) FROM t WHERE {second} GROUP BY r"), CATALOG, canonical_units=True)
    assert a.scope.cells is not None and b.scope.cells is not None
    if a.scope.cells & b.scope.cells:
        return  # not provably disjoint (e.g. OTHER ages): nothing to check
    sql_a, sql_b = rewrite(a, 1), rewrite(b, 1)
    full_a, full_b = _run(sql_a, data), _run(sql_b, data)
    for unit in {row[0] for row in data}:
        rest = [row for row in data if row[0] != unit]
        moved_a = _run(sql_a, rest) != full_a
        moved_b = _run(sql_b, rest) != full_b
        assert not (moved_a and moved_b), f"unit {unit} reaches both scopes"


# --- every cell a WHERE can hold in DuckDB is in its scope -------------------------------------------------

TYPED = TableSchema(
    "u", "uid",
    (
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("d", "DATE", unit_level=True, public_domain=(dt.date(2024, 1, 1), dt.date(2024, 1, 2))),
        ColumnSpec("f", "DOUBLE", unit_level=True, public_domain=(0.1, 0.25)),
        ColumnSpec("n", "INTEGER", unit_level=True, bounds=(10, 12)),
        ColumnSpec("s", "VARCHAR", unit_level=True, public_domain=("a", "b")),
        ColumnSpec("x", "DOUBLE", bounds=(0.0, 1.0)),
    ),
)
TYPED_SPACE = cell_space(TYPED)
# per axis, a value of each coordinate (domain values, the extras, NULL) as DuckDB would hold it
REPRESENTATIVES: dict[str, list[object]] = {
    "d": [dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2030, 5, 5), None],
    "f": [0.1, 0.25, 0.3, None],
    "n": [10, 11, 12, -7, 9_007_199_254_740_993, None],
    "s": ["a", "b", "zz", None],
}
TYPED_ATOMS = (
    "d = '2024-01-01'", "d = DATE '2024-01-02'", "d < '2024-01-02'", "d IN ('2024-01-01', '2030-05-05')",
    "f = 0.1", "f <> 0.25", "f > 0.2", "f IN (0.3, 0.1)",
    "n = 11", "n < 11", "n >= 12", "n BETWEEN 11 AND 20", "n = 9007199254740993", "n > 9007199254740992",
    "n <= -7", "n IN (-7, 10)", "n <> 12", "n = -7",
    "s = 'a'", "NOT s IN ('a', 'b')", "s <> 'a'", "s > 'a'", "s LIKE 'a%'", "s IS NULL",
    "x > 0.5",
)


def where_clauses(atoms: tuple[str, ...]) -> st.SearchStrategy[str]:
    """WHERE clauses of up to three atoms combined with AND, OR and NOT."""
    return st.recursive(
        st.sampled_from(atoms),
        lambda inner: st.one_of(
            st.tuples(inner, inner).map(lambda p: f"({p[0]}) AND ({p[1]})"),
            st.tuples(inner, inner).map(lambda p: f"({p[0]}) OR ({p[1]})"),
            inner.map(lambda p: f"NOT ({p})"),
        ),
        max_leaves=3,
    )


typed_predicates = where_clauses(TYPED_ATOMS)


@pytest.fixture(scope="module")
def every_cell() -> Iterator[duckdb.DuckDBPyConnection]:
    """One unit per cell of TYPED_SPACE (uid = the cell's index), each with two rows (x = 0 and x = 1)."""
    con = scratch_db.connect()
    con.execute("CREATE TABLE u (uid BIGINT, d DATE, f DOUBLE, n BIGINT, s VARCHAR, x DOUBLE)")
    axes = [a.column for a in TYPED_SPACE.axes]
    rows = []
    for uid, values in enumerate(itertools.product(*(REPRESENTATIVES[c] for c in axes))):
        by_name = dict(zip(axes, values, strict=True))
        rows += [(uid, *(by_name[c] for c in "dfns"), x) for x in (0.0, 1.0)]
    con.execute("INSERT INTO u SELECT * FROM (VALUES " + ", ".join(["(?, ?, ?, ?, ?, ?)"] * len(rows)) + ")",
                [v for row in rows for v in row])
    yield con
    con.close()


@settings(max_examples=oracle_db.examples(80), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(where=typed_predicates)
def test_every_cell_where_duckdb_finds_the_predicate_true_is_in_the_scope(
    every_cell: duckdb.DuckDBPyConnection, where: str
) -> None:
    # DuckDB casts a string literal to DATE, a decimal literal to DOUBLE, and reads 2**53 + 1 exactly:
    # the scope must follow its semantics, not Python's, or a unit would be charged outside its cell.
    try:
        analysis = analyse(parse(f"SELECT COUNT(*) FROM u WHERE {where}"), Catalog((TYPED,)))
    except LiteralOutsideDomain:  # e.g. `n = -7`, no declared value: refused for free (issue #28)
        return
    assert analysis.where is not None
    sql = f"SELECT DISTINCT uid FROM u WHERE {analysis.where.sql(dialect='duckdb')}"
    for (uid,) in every_cell.execute(sql).fetchall():
        assert analysis.scope.cells is None or uid in analysis.scope.cells, (where, TYPED_SPACE.describe(uid))
