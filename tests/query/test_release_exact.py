"""The release reads the engine's rows column by column (issue #32): the same exact values per group as the
row-by-row reading it replaced, on random rows of every key type, NULLs, duplicates and values past 2^62."""

from __future__ import annotations

import datetime as dt
import random
from decimal import Decimal

import pytest

from mechanisms.sampling import FixedSampler
from proxy.query import types
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.release.publish import _exact, clip, release

TABLE = TableSchema("t", "uid", (
    ColumnSpec("uid", "BIGINT"),
    ColumnSpec("d", "DATE", groupable=True),
    ColumnSpec("f", "DOUBLE", groupable=True),
    ColumnSpec("s", "VARCHAR", groupable=True),
    ColumnSpec("m", "DECIMAL(10, 2)", groupable=True),
    ColumnSpec("x", "DOUBLE", bounds=(0, 10)),
), max_groups=4, max_rows=5)
SQL = {
    "four keys": "SELECT d, f, s, m, COUNT(*) AS n, SUM(x) AS total FROM t GROUP BY d, f, s, m",
    "one key": "SELECT d, AVG(x) AS mean FROM t GROUP BY d",
    "no key": "SELECT COUNT(*) AS n, SUM(x) AS total FROM t",
}


def _row_by_row(rows, analysis):  # type: ignore[no-untyped-def]
    """The reading the release did before: one dict entry per row, keys read and measures clipped per value."""
    n_keys = len(analysis.keys)
    read = [types.reader(analysis.table.column(k).type) for k in analysis.keys]
    histogram = [False] + [m.kind == "histogram" for m in analysis.measures]
    return {
        tuple(r(v) for r, v in zip(read, row[:n_keys], strict=True)): tuple(
            v if h else clip(v) for h, v in zip(histogram, row[n_keys:], strict=True))
        for row in rows
    }


def _key(rng: random.Random, type_name: str) -> object:
    if rng.random() < 0.1:
        return None
    match type_name:
        case "DATE":
            return dt.date(2026, 1, 1) + dt.timedelta(days=rng.randrange(5))
        case "DOUBLE":
            return rng.choice([0.0, -0.0, 1.5, -2.25, 1e300])
        case "VARCHAR":
            return rng.choice(["a", "b", "", "é"])
    return Decimal(rng.choice(["1.00", "2.50", "-0.01"]))


def _measure(rng: random.Random) -> object:
    return rng.choice([None, 0, 7, -3, 2**62, -(2**70), 2**62 - 1, rng.randrange(-10**6, 10**6)])


@pytest.mark.parametrize("shape", sorted(SQL))
def test_column_by_column_reads_what_row_by_row_read(shape: str) -> None:
    analysis = plan(SQL[shape], Catalog((TABLE,)), epsilon=1.0, delta=1e-6, mechanism="laplace").analysis
    types_of = [TABLE.column(k).type for k in analysis.keys]  # type: ignore[union-attr]
    rng = random.Random(32)
    for _ in range(200):
        rows = [tuple(_key(rng, t) for t in types_of) + tuple(_measure(rng) for _ in range(1 + len(analysis.measures)))
                for _ in range(rng.randrange(0, 30))]
        got, want = _exact(rows, analysis), _row_by_row(rows, analysis)
        assert got == want
        assert [type(v) for k in got for v in k] == [type(v) for k in want for v in k]  # -0.0 and dates alike


def test_a_row_of_the_wrong_width_is_refused() -> None:
    analysis = plan(SQL["one key"], Catalog((TABLE,)), epsilon=1.0, delta=1e-6, mechanism="laplace").analysis
    width = 1 + 1 + len(analysis.measures)
    with pytest.raises(ValueError):
        _exact([(dt.date(2026, 1, 1),) + (1,) * width], analysis)
    with pytest.raises(ValueError):
        _exact([(dt.date(2026, 1, 1),) + (1,) * (width - 1), (dt.date(2026, 1, 2),) + (1,) * width], analysis)


def test_the_release_of_random_rows_is_unchanged_in_shape() -> None:
    """End to end on the no-key shape: the released row is the post-processed clipped sums."""
    p = plan(SQL["no key"], Catalog((TABLE,)), epsilon=1.0, delta=1e-6, mechanism="laplace")
    grid = p.analysis.measures[1].grid
    out = release([(3, 4, 2**70)], p.analysis, p.price, FixedSampler((0,)))
    assert out.rows == ((4, (2**62 - 1) / grid),)
