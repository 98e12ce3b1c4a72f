"""Issue #28: a row-level WHERE is applied before bounding, on every path. A unit's `max_groups` groups are
picked among the groups that pass the WHERE, so `WHERE g = 'b' GROUP BY g` counts every unit that has a `b`
row (up to `max_rows` of its rows), however many other groups the unit has."""

from __future__ import annotations

import pytest

from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from tests.support import oracle_db

T = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
                             ColumnSpec("n", "INTEGER", bounds=(0, 10))), max_groups=1, max_rows=2)
COLUMNS = "uid BIGINT, g VARCHAR, n INTEGER"
# 20 units, each with 3 rows in each of four groups: g = 1 and k = 2 both bind
ROWS = [(u, g, 3) for u in range(20) for g in "abcd" for _ in range(3)]


def _answer(sql: str, bounding: str) -> dict[tuple[object, ...], tuple[object, ...]]:
    planned = plan(sql, Catalog((T,)), epsilon=1.0, delta=1e-6, mechanism="laplace", bounding=bounding, salt=3)
    return oracle_db.run(planned.sql, {"t": (COLUMNS, ROWS)}, 1, value=oracle_db.as_int,
                         store=(T,) if bounding == "store" else (), key="k")


@pytest.mark.parametrize("bounding", ["per_query", "store"])
def test_groups_are_bounded_after_a_row_level_where(bounding: str) -> None:
    # before the fix the store's per-cell path filtered the stored group rank first: 5 of the 20 units' `b` rows
    answer = _answer("SELECT g, COUNT(*), COUNT(DISTINCT uid), SUM(n) FROM t WHERE g = 'b' GROUP BY g", bounding)
    assert answer == {("b",): (20, 40, 20, 120)}  # every unit: its `b` group, 2 of its 3 rows


@pytest.mark.parametrize("bounding", ["per_query", "store"])
def test_an_in_list_keeps_max_groups_of_the_groups_it_admits(bounding: str) -> None:
    answer = _answer("SELECT g, COUNT(*) FROM t WHERE g IN ('a', 'c') GROUP BY g", bounding)
    # each unit keeps one of its two admitted groups: 20 units' groups, 2 rows each, none spent on b or d
    assert set(answer) <= {("a",), ("c",)} and sum(rows for _, rows in answer.values()) == 40


def test_a_unit_level_where_still_reads_the_stored_ranks() -> None:
    planned = plan("SELECT g, COUNT(*) FROM t WHERE uid > 3 GROUP BY g", Catalog((T,)), epsilon=1.0, delta=1e-6,
                   mechanism="laplace", bounding="store")
    assert "__group_rank__g <= 1" in planned.sql and "OVER" not in planned.sql  # it keeps or drops whole units
