"""The empirical sensitivity oracle: run the *rewritten* SQL on D and on D minus one unit, and check that
no measure moves by more than the planner's sensitivity, per group and in L1 and L2 over groups.

The bounding is keyed by a hash of each unit's own rows, so with the same salt every other unit keeps the
same rows on D and D′: the difference is exactly the removed unit's contribution, which the enforced bounds
must cap for *any* data — including data that breaks the unit-level declaration and extreme values.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.query.analyse.analysis import analyse
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.rewrite.on_store import rewrite_ranked
from proxy.query.rewrite.per_query import rewrite
from tests.support import oracle_db

TABLE = TableSchema(
    name="t",
    privacy_unit="uid",
    columns=(
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("g", "VARCHAR", groupable=True),
        ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True),
        ColumnSpec("p", "VARCHAR", groupable=True, public_domain=("a", "b")),
        ColumnSpec("x", "DOUBLE", bounds=(-3.0, 5.5)),
        ColumnSpec("n", "INTEGER", bounds=(0, 10)),
    ),
    max_groups=2,
    max_rows=3,
)
CATALOG = Catalog((TABLE,))

QUERIES = [
    "SELECT COUNT(*) FROM t",
    "SELECT COUNT(x), SUM(x), AVG(x) FROM t WHERE n > 2",
    "SELECT g, COUNT(*), SUM(n), COUNT(DISTINCT uid) FROM t GROUP BY g",
    "SELECT r, COUNT(*), SUM(x), AVG(n) FROM t GROUP BY r",
    "SELECT g, r, COUNT(*), SUM(x) FROM t GROUP BY g, r",
    "SELECT p, COUNT(*), SUM(x) FROM t GROUP BY p",
    "SELECT g, AVG(x), COUNT(n) FROM t WHERE x > 0 OR n IS NULL GROUP BY g",
]

values = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.floats(min_value=-1e6, max_value=1e6),
)
rows = st.lists(
    st.tuples(
        st.integers(0, 5),  # uid
        st.sampled_from(["a", "b", "c", "d"]),  # g
        st.sampled_from(["N", "S", "E"]),  # r: deliberately NOT constant per unit
        st.sampled_from(["a", "b", "z", None]),  # p: includes values outside the public domain
        values,  # x
        st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1)),  # n
    ),
    max_size=40,
)


COLUMNS = "uid BIGINT, g VARCHAR, r VARCHAR, p VARCHAR, x DOUBLE, n INTEGER"


def _run(sql: str, data: list[tuple[object, ...]], n_keys: int) -> dict[tuple[object, ...], tuple[object, ...]]:
    return oracle_db.run(sql, {"t": (COLUMNS, data)}, n_keys, value=oracle_db.as_int)


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(30), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 5), salt=st.integers(0, 2**62))
# a heavy unit: many rows in every group, extreme values — the bounds must bite
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1)
@example(data=[(0, "a", "N", "a", 5.5, 10)] * 9 + [(1, "a", "N", "a", -3.0, 0)] * 9, removed=1, salt=2)
def test_neighbour_moves_each_measure_within_its_sensitivity(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    analysis = analyse(parse(query), CATALOG)
    sql = rewrite(analysis, salt)
    n_keys = len(analysis.keys)
    big = _run(sql, data, n_keys)
    small = _run(sql, [row for row in data if row[0] != removed], n_keys)
    l0 = analysis.max_groups
    cells = set(big) | set(small)
    # column 0 is the distinct-unit count used for partition selection: sensitivity 1 per group, L0 groups
    sensitivities = [1] + [m.sensitivity(TABLE.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, l0, query)
    assert all(len(c) == n_keys for c in cells)
    if analysis.partitions == "public":
        assert all(c[0] in ("a", "b") for c in cells)  # nothing outside the public domain is computed


# --- the bounding store (docs/privacy.md §11): the same oracle, the store rebuilt for D and for D′ -------------

STORE_QUERIES = [
    *QUERIES,
    "SELECT r, COUNT(*), COUNT(DISTINCT uid) FROM t WHERE r = 'N' OR uid > 3 GROUP BY r",  # unit-level WHERE
    "SELECT g, p, COUNT(*), SUM(x) FROM t GROUP BY g, p",  # two row-level keys: per-query windows on the store
    "SELECT p, r, COUNT(DISTINCT uid), SUM(n), AVG(x) FROM t WHERE r IN ('N', 'S') GROUP BY p, r",
    "SELECT COUNT(*), SUM(x), AVG(n), COUNT(DISTINCT uid) FROM t",
    "SELECT p, COUNT(*), SUM(x), AVG(n), COUNT(x) FROM t WHERE n > 2 GROUP BY p",  # per cell, light cells summed
    "SELECT g, p, COUNT(*), SUM(n) FROM t WHERE x > 0 GROUP BY g, p",  # per cell, window over cells
]


def _run_on_store(
    sql: str, data: list[tuple[object, ...]], n_keys: int, key: str, table: TableSchema = TABLE
) -> dict[tuple[object, ...], tuple[object, ...]]:
    """Build the store of `data` (store_layout.build_sql, as duckdb_store.py runs it) and run `sql` on it."""
    return oracle_db.run(sql, {"t": (COLUMNS, data)}, n_keys, value=oracle_db.as_int, store=(table,), key=key)


@pytest.mark.parametrize("query", STORE_QUERIES)
@settings(max_examples=oracle_db.examples(20), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 5), salt=st.integers(0, 2**62), key=st.text("0123456789abcdef", min_size=1))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1,
         key="k")
@example(data=[(0, "a", "N", "a", 5.5, 10)] * 9 + [(1, "a", "N", "a", -3.0, 0)] * 9, removed=1, salt=2, key="k")
def test_store_path_moves_each_measure_within_its_sensitivity(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int, key: str
) -> None:
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    sql = rewrite_ranked(analysis, salt)
    n_keys = len(analysis.keys)
    big = _run_on_store(sql, data, n_keys, key)
    small = _run_on_store(sql, [row for row in data if row[0] != removed], n_keys, key)
    l0 = analysis.max_groups
    cells = set(big) | set(small)
    sensitivities = [1] + [m.sensitivity(TABLE.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, l0, query)
    if analysis.partitions == "public":
        assert all(c[0] in ("a", "b") for c in cells)


ONE_ROW = TableSchema("t", "uid", TABLE.columns, max_groups=2, max_rows=3, one_row_per_unit=True)


@pytest.mark.parametrize("query", STORE_QUERIES)
@settings(max_examples=oracle_db.examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.tuples(
    st.integers(0, 5), st.sampled_from(["a", "b", "c", "d"]), st.sampled_from(["N", "S", "E"]),
    st.sampled_from(["a", "b", "z", None]), values, st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1))),
    max_size=6, unique_by=lambda r: r[0]), removed=st.integers(0, 5))
def test_one_row_per_unit_store_path_moves_each_measure_within_its_sensitivity(
    query: str, data: list[tuple[object, ...]], removed: int
) -> None:
    """A table that passed the one-row-per-unit check at build time: its queries skip the rank filters."""
    catalog = Catalog((ONE_ROW,))
    analysis = analyse(parse(query), catalog, canonical_units=True)
    sql = rewrite_ranked(analysis, 1)
    n_keys = len(analysis.keys)
    big = _run_on_store(sql, data, n_keys, "k", ONE_ROW)
    small = _run_on_store(sql, [row for row in data if row[0] != removed], n_keys, "k", ONE_ROW)
    zero = (0,) * (1 + len(analysis.measures))
    sensitivities = [1] + [m.sensitivity(ONE_ROW.max_rows) for m in analysis.measures]
    for column, per_group in enumerate(sensitivities):
        moves = [abs(big.get(c, zero)[column] - small.get(c, zero)[column]) for c in set(big) | set(small)]
        assert all(m <= per_group for m in moves) and sum(moves) <= analysis.max_groups * per_group
