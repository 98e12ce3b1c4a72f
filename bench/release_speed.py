"""What the release stage costs per cell: noise for every cell of a large GROUP BY, then post-processing.

    python bench/release_speed.py [--cells 100000]

Prints, for a public-domain GROUP BY of `--cells` cells (two measures), the same with ORDER BY/LIMIT (the
per-row evaluation path), and a private GROUP BY of as many candidate groups: median seconds over 3 runs,
and the exact sampler's own cost per value (OpenDP, OS CSPRNG) for comparison.
"""

from __future__ import annotations

import argparse
import statistics
import time

from mechanisms.sampling import SecureSampler
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.release.publish import release


def _median_s(fn: object, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=100_000)
    args = parser.parse_args()
    width = 1000
    height = max(1, args.cells // width)
    table = TableSchema("t", "uid", (
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("a", "INTEGER", groupable=True, public_domain=tuple(range(height))),
        ColumnSpec("b", "INTEGER", groupable=True, public_domain=tuple(range(width))),
        ColumnSpec("c", "VARCHAR", groupable=True),
        ColumnSpec("x", "DOUBLE", bounds=(0, 10)),
    ), max_groups=4, max_rows=5)
    sampler = SecureSampler()
    cases = (
        ("public, no ORDER BY", "SELECT a, b, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY a, b"),
        ("public, ORDER BY + LIMIT", "SELECT a, b, COUNT(*) AS n, AVG(x) AS s FROM t GROUP BY a, b "
                                     "ORDER BY n DESC LIMIT 10"),
        ("private candidates", "SELECT a, c, COUNT(*) AS n FROM t GROUP BY a, c"),
    )
    for label, sql in cases:
        planned = plan(sql, Catalog((table,)), epsilon=1.0, delta=1e-6, mechanism="laplace")
        n_measures = len(planned.analysis.measures)
        rows = [(i % height, i // height if "b" in planned.analysis.keys else f"k{i}", 3, *(7,) * n_measures)
                for i in range(height * width)]
        seconds = _median_s(lambda p=planned, r=rows: release(r, p.analysis, p.price, sampler))
        print(f"{label:28s} {len(rows):>8d} cells  {seconds:7.3f} s  ({seconds / len(rows) * 1e6:.1f} µs/cell)")
    values = [5] * (height * width)
    for name, draw in (("laplace", sampler.laplace), ("gaussian", sampler.gaussian)):
        seconds = _median_s(lambda d=draw: d(values, 20.0))
        print(f"sampler alone: {name:9s} {len(values):>8d} values {seconds:7.3f} s  "
              f"({seconds / len(values) * 1e6:.1f} µs/value)")


if __name__ == "__main__":
    main()
