"""The neighbouring-dataset oracles' shared set-up: small tables in a fresh in-memory DuckDB, optionally built
into the bounding store as proxy/store/duckdb_store.py builds it, one query run, its rows keyed by their group keys.

Example:
    >>> run("SELECT g, COUNT(*) FROM t GROUP BY g ORDER BY g", {"t": ("u BIGINT, g VARCHAR", [(1, "a"), (2, "a")])}, 1)
    {('a',): (2,)}
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence

from proxy.query.catalog import TableSchema
from proxy.query.rewrite import store_layout
from tests.support import scratch_db

Rows = Sequence[tuple[object, ...]]

DEPTH = int(os.environ.get("DPPROXY_ORACLE_DEPTH", "1"))


def examples(n: int) -> int:
    """How many random datasets an oracle draws: `n` on every run (CI's time budget), `n · DPPROXY_ORACLE_DEPTH`
    on a deep run (e.g. `DPPROXY_ORACLE_DEPTH=4 scripts/test tests/oracle/test_sensitivity.py`). The explicit
    worst-case `@example`s run either way.

    Example:
        >>> examples(30) == 30 * DEPTH
        True
    """
    return n * DEPTH


def as_int(value: object) -> int:
    """A measure as the oracles compare it: NULL (an empty SUM) is 0."""
    return int(value or 0)  # type: ignore[call-overload]


def run(sql: str, tables: Mapping[str, tuple[str, Rows]], n_keys: int, *,
        value: Callable[[object], object] = lambda v: v, store: Sequence[TableSchema] = (),
        key: str = "") -> dict[tuple[object, ...], tuple[object, ...]]:
    """`sql` over `tables` (name -> (column declarations, rows)); with `store`, the tables are the source (schema
    `src`) and `sql` runs on the store built from them under `key`. Rows shorter than their table are padded with
    NULLs (a column the query never reads)."""
    con = scratch_db.connect()
    prefix = ""
    if store:
        con.execute("ATTACH ':memory:' AS src")
        prefix = "src."
    for name, (columns, rows) in tables.items():
        con.execute(f"CREATE TABLE {prefix}{name} ({columns})")
        if rows:
            width = len(con.execute(f"SELECT * FROM {prefix}{name} LIMIT 0").description)
            marks = ", ".join(["?"] * len(rows[0]) + ["NULL"] * (width - len(rows[0])))
            con.executemany(f"INSERT INTO {prefix}{name} VALUES ({marks})", rows)
    for table in store:
        con.execute(store_layout.build_sql(table, key))
    result = con.execute(sql).fetchall()
    con.close()
    return {tuple(row[:n_keys]): tuple(value(v) for v in row[n_keys:]) for row in result}


def assert_moves_within(big: Mapping[tuple[object, ...], tuple[object, ...]],
                        small: Mapping[tuple[object, ...], tuple[object, ...]],
                        sensitivities: Sequence[float], l0: int, label: object = None) -> None:
    """Every measure column moves between neighbours `big` and `small` by at most its per-group sensitivity, in at
    most `l0` groups, and so by at most l0·s in L1 and √l0·s in L2 (a group missing from one side counts as 0).

    Example:
        >>> assert_moves_within({("a",): (1, 3)}, {}, [1, 3], 1)
        >>> try:
        ...     assert_moves_within({("a",): (1, 4)}, {}, [1, 3], 1)
        ... except AssertionError:
        ...     print("moved too far")
        moved too far
    """
    cells = set(big) | set(small)
    zero = (0,) * len(sensitivities)
    for column, per_group in enumerate(sensitivities):
        moves = [abs(big.get(c, zero)[column] - small.get(c, zero)[column]) for c in cells]  # type: ignore[operator]
        assert all(m <= per_group for m in moves), (label, column)
        assert sum(moves) <= l0 * per_group, (label, column, "L1")
        assert math.sqrt(sum(m * m for m in moves)) <= math.sqrt(l0) * per_group + 1e-9, (label, column, "L2")
        assert sum(1 for m in moves if m) <= l0, (label, column, "L0")
