"""The differential tester (tests/oracle/test_differential.py, docs/privacy.md §12) over chains of joins (issue #31):
two and three public tables after the protected one, INNER and LEFT at each link, through a row-level column
(`t.c → z → dt`, with a fan-out table `dn`), through a unit-level one (`t.r → rz → za`, where `za` misses a zone so
an INNER link drops units), and a partner on the unit with a chain. Bounds cannot bind and the data keeps every
declaration, so the product's exact release must be DuckDB's own answer to the query as written, per query and on
the bounding store."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp, parse_one

from proxy.query.catalog import Catalog, ColumnSpec, PublicTable
from proxy.query.errors import EmptyScope
from tests.oracle import test_differential as base
from tests.support import differential as diff

Draw = Callable[..., object]

DT = PublicTable("dt", (ColumnSpec("dept", "VARCHAR"),
                        ColumnSpec("tier", "VARCHAR", groupable=True, public_domain=("t1", "t2"))), ("dept",), True)
DN = PublicTable("dn", (ColumnSpec("dept", "VARCHAR"),  # not unique: "food" has two notes (fan-out)
                        ColumnSpec("note", "VARCHAR", groupable=True)), ("dept",))
RZ = PublicTable("rz", (ColumnSpec("reg", "VARCHAR"),
                        ColumnSpec("zone", "VARCHAR", groupable=True, public_domain=("z1", "z2"))), ("reg",), True)
ZA = PublicTable("za", (ColumnSpec("zone", "VARCHAR"),
                        ColumnSpec("area", "VARCHAR", groupable=True, public_domain=("a1", "a2"))), ("zone",), True)
CATALOG = Catalog(base._tables(base.BIG, base.BIG), public=(base.Z, DT, DN, RZ, ZA))
PUBLIC = {"dt": ("dept VARCHAR, tier VARCHAR", [("food", "t1"), ("goods", "t2")]),
          "dn": ("dept VARCHAR, note VARCHAR", [("food", "n1"), ("food", "n2"), ("goods", "n1")]),
          "rz": ("reg VARCHAR, zone VARCHAR", [("N", "z1"), ("S", "z2"), ("E", "z1")]),
          "za": ("zone VARCHAR, area VARCHAR", [("z1", "a1")])}  # z2 has no area: INNER drops region S

# (FROM with {0}, {1}, {2} for each link's JOIN or LEFT JOIN; group keys; WHERE atoms; extra aggregates)
CHAINS: list[tuple[str, list[str], list[str], list[str]]] = [
    ("t {0} z ON t.c = z.cat {1} dt ON z.dept = dt.dept", ["dt.tier", "z.dept"], ["dt.tier = 't1'"], []),
    ("t {0} z ON t.c = z.cat {1} dn ON z.dept = dn.dept", ["dn.note"], ["dn.note = 'n2'", "dn.note IS NULL"], []),
    ("t {0} z ON t.c = z.cat {1} dt ON dt.dept = z.dept {2} dn ON dt.dept = dn.dept", ["dn.note", "dt.tier"],
     ["dt.tier = 't2'", "dn.note = 'n1'"], []),
    ("t {0} rz ON t.r = rz.reg {1} za ON rz.zone = za.zone", ["za.area", "rz.zone"],
     ["za.area = 'a1'", "rz.zone = 'z2'", "za.area IS NULL"], []),
    ("t {0} w USING (uid) {1} rz ON t.r = rz.reg {2} za USING (zone)", ["plan", "area", "rz.zone"],
     ["plan = 'pro'", "area = 'a1'", "y > 3"], ["SUM(y)", "COUNT(y)"]),
]


@st.composite
def chain_queries(draw: Draw) -> str:
    source, join_keys, join_atoms, extra = draw(st.sampled_from(CHAINS))
    source = source.format(*(draw(st.sampled_from(["JOIN", "LEFT JOIN"])) for _ in range(3)))
    keys: list[str] = []
    for _ in range(draw(st.integers(0, 2))):
        key = draw(st.sampled_from(join_keys)) if draw(st.integers(0, 2)) else draw(st.sampled_from(["r", "g", "c"]))
        if key not in keys:
            keys.append(key)
    aggregates = draw(st.lists(st.sampled_from(["COUNT(*)", "COUNT(DISTINCT uid)", "SUM(n)", "AVG(x)", "COUNT(x)",
                                                *extra]), min_size=1, max_size=3, unique=True))
    select = [f"{k} AS k{i}" for i, k in enumerate(keys)] + [f"{a} AS a{j}" for j, a in enumerate(aggregates)]
    sql = f"SELECT {', '.join(select)} FROM {source}"
    atoms = [*(a for a in base.ATOMS if "uid" not in a[0] or "w USING" in source), *map(base._same, join_atoms)]
    if draw(st.integers(0, 2)):
        sql += f" WHERE {draw(base.condition(atoms))[0]}"
    if keys:
        sql += " GROUP BY " + ", ".join(str(i + 1) for i in range(len(keys)))
    return sql


def _check(db: diff.Database, sql: str, bounding: diff.Bounding) -> None:
    try:
        planned = diff.planned(sql, "duckdb", bounding, CATALOG)
    except EmptyScope:  # its unit-level conditions contradict each other: no row can pass
        assert all(diff.empty(row, []) for row in diff.reference_rows(db, sql, "duckdb")), sql
        return
    keys = diff.key_positions(planned)
    engine = db.run(planned.sql, "store" if bounding == "store" else "src")
    ours = diff.exact_release(engine, planned)
    theirs = diff.without_null_keys(diff.reference_rows(db, sql, "duckdb"), keys, base._nullable_keys(planned))
    reached = {diff.normal_key(row, keys) for row in theirs}
    extra = [row for row in ours if diff.normal_key(row, keys) not in reached]
    assert not extra or planned.analysis.partitions == "public", (bounding, sql, "groups DuckDB lacks", extra)
    assert all(diff.empty(row, keys) for row in extra), (bounding, sql, "non-empty extra groups", extra)
    kept = [row for row in ours if diff.normal_key(row, keys) in reached]
    assert diff.rows_match(diff.sort_rows(kept), diff.sort_rows(theirs), diff.sums(planned)), (
        bounding, sql, kept, theirs)


def test_every_chain_is_answered_and_reads_its_tables() -> None:
    """Each chain shape plans (so the random test below cannot pass by refusing), and its SQL reads every table."""
    for source, *_ in CHAINS:
        sql = f"SELECT COUNT(*) FROM {source.format('JOIN', 'LEFT JOIN', 'JOIN')}"
        for bounding in ("per_query", "store"):
            planned = diff.planned(sql, "duckdb", bounding, CATALOG)  # type: ignore[arg-type]
            assert planned.analysis.source is not None
            read = {t.name for t in planned.analysis.source.find_all(exp.Table)}
            assert read == {t.name for t in parse_one(sql).find_all(exp.Table)}, sql


@settings(max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(tables=base.databases(), generated=st.lists(chain_queries(), min_size=8, max_size=8))
def test_a_chain_answers_the_query_as_written(tables: dict[str, tuple[str, list[tuple[object, ...]]]],
                                              generated: list[str]) -> None:
    db = diff.Database({**tables, **PUBLIC}, CATALOG)
    try:
        for sql in generated:
            for bounding in ("per_query", "store"):
                _check(db, sql, bounding)  # type: ignore[arg-type]
    finally:
        db.close()
