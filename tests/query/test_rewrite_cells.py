"""Bounding per cell on the store (proxy/query/rewrite/cells.py): exact answers on hand-computed data.

A cell of n rows contributes LEAST(n, k) rows and its totals times min(1, k/n), rounded, clamped to k rows'
worth; light cells (at most k rows in the store) are summed directly and give the same answer.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from random import Random

import pytest

from proxy.query.analyse.analysis import analyse
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.rewrite import cells as cells_sql
from proxy.query.rewrite import store_layout
from proxy.query.rewrite.cells import rewrite_cells
from proxy.query.rewrite.on_store import rewrite_ranked, uses_rank_filter
from tests.support import scratch_db


def _table(public: bool, max_groups: int = 2) -> TableSchema:
    return TableSchema("t", "uid", (
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("g", "VARCHAR", groupable=True, public_domain=("a", "b", "c") if public else None),
        ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True),
        ColumnSpec("n", "INTEGER", bounds=(0, 10)),
    ), max_groups=max_groups, max_rows=3)


# unit 1: a heavy cell (5 rows of 'a', n = 10, 8, 8, 8, 6) and one 'b' row; unit 2: a light cell of 'a'
ROWS = [(1, "a", "N", 10), (1, "a", "N", 8), (1, "a", "N", 8), (1, "a", "N", 8), (1, "a", "N", 6), (1, "b", "N", 2),
        (2, "a", "S", 4), (2, "a", "S", 6), (2, "b", "S", None)]


def _run(sql: str, table: TableSchema, rows: list[tuple[object, ...]] = ROWS) -> list[tuple[object, ...]]:
    con = scratch_db.connect()
    con.execute("ATTACH ':memory:' AS src")
    con.execute("CREATE TABLE src.t (uid BIGINT, g VARCHAR, r VARCHAR, n INTEGER)")
    con.executemany("INSERT INTO src.t VALUES (?, ?, ?, ?)", rows)
    con.execute(store_layout.build_sql(table, "key"))
    try:
        answer = [tuple(v if v is None or isinstance(v, str) else int(v) for v in row)
                  for row in con.execute(sql).fetchall()]
        return sorted(answer, key=str)
    finally:
        con.close()


@pytest.mark.parametrize("public", [False, True])  # every cell aggregated: under a WHERE the groups are re-ranked
def test_counts_and_sums_are_the_closed_form_per_cell(public: bool) -> None:
    table = _table(public)
    analysis = analyse(parse("SELECT g, COUNT(*), SUM(n), COUNT(n) FROM t WHERE n > 1 OR n IS NULL GROUP BY g"),
                       Catalog((table,)))
    assert not uses_rank_filter(analysis)  # a WHERE on a row-level column bounds after it
    sql = rewrite_ranked(analysis, 5)
    # light cells are added up directly (public partitions) only in units that need no re-rank: the window
    # re-ranking a unit's groups after the WHERE sees all that unit's cells (`__uncertain`)
    assert ("WHEN __unit IS NULL" in sql) == public == ("__uncertain" in sql) and "__row_rank" not in sql
    # 'a': unit 1 keeps LEAST(5, 3) = 3 rows and 40 · 3/5 = 24 (within 3 · 10); unit 2 its 2 rows, 4 + 6
    # 'b': unit 1's row (2), unit 2's NULL row (counted, adds nothing to SUM nor COUNT(n))
    units = 2 if not public else 0  # counted only where partition selection reads it
    assert _run(sql, table) == [("a", units, 5, 34, 5), ("b", units, 2, 2, 1)]


def test_avg_keeps_a_heavy_units_mean() -> None:
    table = _table(public=True)
    analysis = analyse(parse("SELECT g, AVG(n) FROM t WHERE n >= 6 GROUP BY g"), Catalog((table,)))
    [(key, _, centred, count)] = _run(rewrite_cells(analysis, 1), table)
    # unit 1: 10, 8, 8, 8, 6 (centre 5: centred total 15) scaled by 3/5 -> 9 over 3 rows; unit 2: 6 -> 1 over 1
    assert (key, centred, count) == ("a", 10, 4)
    assert centred / count + 5 == pytest.approx(7.5)  # the mean of unit 1 (8) and unit 2 (6) weighted 3:1


def test_a_cell_total_never_exceeds_k_rows_worth() -> None:
    heavy = [(1, "a", "N", 10)] * 7 + [(1, "a", "N", None)] * 3  # 7 values of 10 in 10 rows
    table = _table(public=False)
    analysis = analyse(parse("SELECT g, SUM(n), COUNT(n), COUNT(*) FROM t WHERE n IS NULL OR n > 0 GROUP BY g"),
                       Catalog((table,)))
    # SUM: 70 · 3/10 = 21 (NULLs take their share of the k rows, as when k rows are sampled); COUNT(n) 7 · 3/10
    assert _run(rewrite_cells(analysis, 1), table, heavy) == [("a", 1, 21, 2, 3)]


def test_stored_group_rank_bounds_groups_per_unit() -> None:
    rows = [(1, g, "N", 5) for g in "abc"]
    table = _table(public=True, max_groups=2)
    analysis = analyse(parse("SELECT g, COUNT(*) FROM t WHERE n > 0 GROUP BY g"), Catalog((table,)))
    answer = _run(rewrite_cells(analysis, 1), table, rows)
    assert sum(count for _, _, count in answer) == 2  # the unit reaches two of its three groups


def test_two_row_level_keys_keep_max_groups_cells_per_unit() -> None:
    table = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
                                     ColumnSpec("r", "VARCHAR", groupable=True), ColumnSpec("n", "INTEGER")),
                        max_groups=2, max_rows=3)
    rows = [(1, g, r, 1) for g in "ab" for r in "NS"]
    analysis = analyse(parse("SELECT g, r, COUNT(*) FROM t GROUP BY g, r"), Catalog((table,)))
    assert not uses_rank_filter(analysis)
    for salt in range(5):
        answer = _run(rewrite_ranked(analysis, salt), table, rows)
        assert sum(count for *_, count in answer) == 2


def _half_up(x: Fraction) -> int:
    """DuckDB's ROUND of a non-negative DOUBLE: half away from zero (exact here: small integers over small n)."""
    return int(x + Fraction(1, 2)) if x >= 0 else -int(-x + Fraction(1, 2))


def _by_definition(rows: list[tuple[int, str, int]], ranks: dict[tuple[int, str], int], keep: Callable[[int], bool],
                   max_groups: int, k: int) -> list[tuple[object, ...]]:
    """COUNT(*) and SUM(n) per g, bounded after the WHERE `keep(n)` by the definition, in Python: each unit's
    cells that pass, in stored group-rank order, the first `max_groups`; each cell LEAST(n, k) rows and its sum
    times min(1, k / n), rounded, clamped to k rows' worth."""
    cells: dict[tuple[int, str], list[int]] = {}
    for uid, g, n in rows:
        if keep(n) and g in "abc":  # the public domain: d is dropped before ranking, as per query
            cells.setdefault((uid, g), []).append(n)
    totals: dict[str, list[int]] = {}
    for uid in {u for u, _ in cells}:
        mine = sorted((g for u, g in cells if u == uid), key=lambda g: ranks[uid, g])[:max_groups]
        for g in mine:
            values = cells[uid, g]
            total = sum(values) if len(values) <= k else _half_up(Fraction(sum(values) * k, len(values)))
            entry = totals.setdefault(g, [0, 0])
            entry[0] += min(len(values), k)
            entry[1] += min(max(total, 0), 10 * k)
    return sorted(((g, 0, c, s) for g, (c, s) in totals.items()), key=str)


@pytest.mark.parametrize("max_groups", [1, 2, 3, 4])
def test_reranking_only_the_units_that_need_it_gives_the_definition(max_groups: int) -> None:
    # 40 units with 1 to 4 of the groups a-d, 1 to 5 rows per cell (k = 3: light and heavy cells), values 0-9;
    # WHERE n >= 3 drops some cells whole and thins others, so some units need a re-rank and some do not; d is
    # outside the public domain (a-c) and takes none of a unit's groups
    random = Random(32)
    rows = [(uid, g, random.randrange(10)) for uid in range(40) for g in random.sample("abcd", random.randint(1, 4))
            for _ in range(random.randint(1, 5))]
    table = _table(public=True, max_groups=max_groups)
    analysis = analyse(parse("SELECT g, COUNT(*), SUM(n) FROM t WHERE n >= 3 GROUP BY g"), Catalog((table,)))
    sql = rewrite_cells(analysis, 1)
    assert "WHEN __unit IS NULL" in sql  # the light cells are added up directly
    # at max_groups >= 3 (the domain's size) no unit can lose a cell: nothing is re-ranked (`groups_cannot_bind`)
    assert ("__uncertain" in sql) == ("__group_rank" in sql) == (max_groups < 3)
    expected, answer = _definition_and_answer(rows, table, sql, max_groups)
    assert answer == expected


def _definition_and_answer(rows: list[tuple[int, str, int]], table: TableSchema, sql: str, max_groups: int
                           ) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The answer by the definition (ranks read from the store built over `rows`) and `sql`'s answer."""
    con = scratch_db.connect()
    con.execute("ATTACH ':memory:' AS src")
    con.execute("CREATE TABLE src.t (uid BIGINT, g VARCHAR, r VARCHAR, n INTEGER)")
    con.executemany("INSERT INTO src.t VALUES (?, ?, NULL, ?)", rows)
    con.execute(store_layout.build_sql(table, "key"))
    ranks = {(u, g): r for u, g, r in con.execute("SELECT DISTINCT uid, g, __group_rank__g FROM t").fetchall()}
    con.close()
    assert max(ranks.values()) > max_groups or max_groups == 4  # the stored ranks alone would not bound it
    expected = _by_definition(rows, ranks, lambda n: n >= 3, max_groups, 3)
    padded = [(u, g, "N", n) for u, g, n in rows]
    return expected, _run(sql, table, padded)


def test_the_definition_catches_a_rewrite_that_skips_a_binding_rerank(monkeypatch: pytest.MonkeyPatch) -> None:
    # The planted wrong rewrite: the unranked form at max_groups 2, below the domain's 3 values, keeps cells the
    # re-rank drops. The definition above must see it (else the test of the real form proves nothing).
    random = Random(32)
    rows = [(uid, g, random.randrange(10)) for uid in range(40) for g in random.sample("abcd", random.randint(1, 4))
            for _ in range(random.randint(1, 5))]
    table = _table(public=True, max_groups=2)
    analysis = analyse(parse("SELECT g, COUNT(*), SUM(n) FROM t WHERE n >= 3 GROUP BY g"), Catalog((table,)))
    monkeypatch.setattr(cells_sql, "groups_cannot_bind", lambda analysis, key: True)
    wrong = rewrite_cells(analysis, 1)
    assert "__group_rank" not in wrong
    expected, answer = _definition_and_answer(rows, table, wrong, 2)
    assert answer != expected
