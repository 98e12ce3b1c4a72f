"""The neighbouring-dataset sensitivity oracle (tests/oracle/test_sensitivity.py) over computed group keys and filters,
on data that violates every declaration: `n` and `r` are declared unit-level but vary within a unit, values
fall outside bounds and public domains, and arithmetic overflows or divides by zero."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.query.analyse.analysis import analyse
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.rewrite.per_query import rewrite
from tests.oracle.test_sensitivity import _run, rows
from tests.support import oracle_db

TABLE = TableSchema(
    name="t",
    privacy_unit="uid",
    columns=(
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("g", "VARCHAR", groupable=True),
        ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True),
        ColumnSpec("p", "VARCHAR", groupable=True, public_domain=("a", "b")),
        ColumnSpec("x", "DOUBLE", bounds=(-3.0, 5.5), groupable=True),
        ColumnSpec("n", "INTEGER", bounds=(0, 10), unit_level=True, groupable=True),
    ),
    max_groups=2,
    max_rows=3,
)
CATALOG = Catalog((TABLE,))

QUERIES = [
    "SELECT CAST(FLOOR(n / 3) * 3 AS INTEGER) AS b, COUNT(*), SUM(x) FROM t GROUP BY b",
    "SELECT LOWER(r) AS lr, COUNT(*), AVG(n), COUNT(DISTINCT uid) FROM t GROUP BY lr",
    "SELECT CASE WHEN x > 1 THEN 'hi' WHEN x IS NULL THEN 'none' ELSE 'lo' END AS h, COUNT(*), SUM(n) "
    "FROM t GROUP BY h",
    "SELECT FLOOR(x / 2) AS f, g, COUNT(*), COUNT(DISTINCT uid) FROM t WHERE n * 2 > 5 OR x / 0 > 1 GROUP BY f, g",
    "SELECT UPPER(p) AS up, COUNT(*), SUM(x) FROM t WHERE LOWER(g) IN ('a', 'b') GROUP BY up",
    "SELECT x > 0 AS pos, n % 4 AS m, COUNT(*), SUM(x) FROM t GROUP BY 1, 2",
    "SELECT n * 999999999999999999 * 100 AS o, COUNT(*) FROM t WHERE CAST(g AS INTEGER) IS NULL GROUP BY o",
]


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(20), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 5), salt=st.integers(0, 2**62))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1)
@example(data=[(0, "a", "N", p, x, n) for p in "ab" for x in (-1e308, 2.0, 5.5) for n in (0, 3, 7, 10)],
         removed=0, salt=3)
def test_neighbour_moves_each_measure_within_its_sensitivity(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    sql = rewrite(analysis, salt)
    n_keys = len(analysis.keys)
    big = _run(sql, data, n_keys)
    small = _run(sql, [row for row in data if row[0] != removed], n_keys)
    l0 = analysis.max_groups
    cells = set(big) | set(small)
    sensitivities = [1] + [m.sensitivity(TABLE.max_rows) for m in analysis.measures]
    oracle_db.assert_moves_within(big, small, sensitivities, l0, query)
    if analysis.partitions == "public":  # nothing outside the derived public domain is computed
        allowed = set(itertools.product(*analysis.domains))
        assert all(_key(c) in allowed for c in cells), (cells, allowed)


def _key(cell: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(float(v) if isinstance(v, float) else v for v in cell)


def test_unit_level_computed_keys_are_parallel_and_others_are_not() -> None:
    assert [analyse(parse(q), CATALOG).max_groups for q in QUERIES] == [1, 1, 2, 2, 2, 2, 1]
