"""A row-level WHERE on the bounding store: three ways to bound, their engine time and their bias.

For queries whose WHERE reads row-level columns, on a demo dataset and its bounding store (built first when
missing, as `serve` does), this runs the exact bounded answer (no noise) three ways, and prints DuckDB's CPU
time (all threads, p50) beside plain DuckDB on the source, and the bias: the median relative error per
group of the bounded answer against the plain, unbounded one.

* windows: the per-query windows of rewrite/per_query.py over the store (bound after the WHERE; the old store path)
* rank filter: the stored ranks filtered after the WHERE (`rewrite_ranked(..., row_where="filter")`)
* cells: one aggregation per (unit, group) cell after the WHERE (rewrite/cells.py; what runs now)

    python bench/row_where.py --dir bench/data        # a directory written by bench/query_latency.py
    python bench/row_where.py --dir bench/data --max-groups 3 --max-rows 4   # at bounds automatic bounds
                                                # could choose (default: the table's limits, 8 and 1000)

Example (the bias of one answer):
    >>> bias({("a",): 100, ("b",): 50}, {("a",): 80, ("b",): 50})
    0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proxy.app import store_dir  # noqa: E402
from proxy.policy.load import load_policy  # noqa: E402
from proxy.query.planner import plan  # noqa: E402
from proxy.query.rewrite.cells import rewrite_cells  # noqa: E402
from proxy.query.rewrite.on_store import rewrite_ranked  # noqa: E402
from proxy.query.rewrite.per_query import rewrite  # noqa: E402
from proxy.settings import Settings  # noqa: E402
from proxy.store.open import open_bounding_store  # noqa: E402

QUERIES = (
    "SELECT category, COUNT(*) FROM visits WHERE day BETWEEN DATE '2026-03-01' AND DATE '2026-05-31' GROUP BY category",
    "SELECT region, COUNT(*) FROM visits WHERE amount > 100 GROUP BY region",
    "SELECT category, SUM(amount) FROM visits WHERE duration_s < 600 GROUP BY category",
    "SELECT AVG(duration_s) FROM visits WHERE category = 'travel' AND amount > 50",
)


def bias(truth: dict[tuple[Any, ...], float], bounded: dict[tuple[Any, ...], float]) -> float:
    """Median over the groups of `truth` of |bounded − true| / |true| (a missing group counts 1)."""
    return statistics.median(abs(bounded[k] - v) / abs(v) if k in bounded else 1.0 for k, v in truth.items() if v)


def cpu_ms(run: Callable[[], object], repeat: int) -> float:
    run()
    samples = []
    for _ in range(repeat):
        started = time.process_time()
        run()
        samples.append((time.process_time() - started) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-groups", type=int, default=None, help="groups per unit (default: the planned)")
    parser.add_argument("--max-rows", type=int, default=None, help="rows per cell (default: the planned)")
    args = parser.parse_args(argv)
    settings = Settings(policy=args.dir / "policy.toml", ledger=args.dir / "row-where-ledger.sqlite")
    policy = load_policy(settings.policy)
    dataset = policy.datasets[0]
    store = open_bounding_store(dataset, store_dir(settings, policy), settings)
    path = store.path
    store.close()
    config = {"threads": settings.threads, "memory_limit": settings.memory_limit}
    source = duckdb.connect(str(dataset.path), read_only=True, config=config)
    ranked = duckdb.connect(str(path), read_only=True, config=config)
    print(f"{'query':<60}{'plain':>8}{'windows':>16}{'rank filter':>16}{'cells':>16}   (CPU ms, bias)")
    for sql in QUERIES:
        planned = plan(sql, dataset.catalog, epsilon=1.0, delta=1e-8, mechanism="laplace", bounding="store")
        analysis, keys = planned.analysis, len(planned.analysis.keys)
        if args.max_groups is not None:
            analysis = dataclasses.replace(analysis, max_groups=args.max_groups)
        if args.max_rows is not None:
            analysis = dataclasses.replace(analysis, table=dataclasses.replace(analysis.table, max_rows=args.max_rows))
        first = analysis.measures[0]
        truth = {tuple(r[:keys]): float(r[keys]) for r in source.execute(sql).fetchall()}

        def value(row: tuple[Any, ...], first: Any = first, keys: int = keys,
                  avg: bool = analysis.aggregates[0].kind == "avg") -> float:
            if avg:
                return (row[keys + 1] / row[keys + 2] + first.centre) / first.grid
            return row[keys + 1] / (first.grid if first.kind == "sum" else 1)

        cells = []
        for bounded in (rewrite(dataclasses.replace(analysis, canonical=()), 7),
                        rewrite_ranked(analysis, 7, row_where="filter"), rewrite_cells(analysis, 7)):
            rows = ranked.execute(bounded).fetchall()
            error = bias(truth, {tuple(r[:keys]): value(r) for r in rows})
            cells.append(f"{cpu_ms(lambda b=bounded: ranked.execute(b).fetchall(), args.repeat):>8.0f}"
                         f"{100 * error:>7.1f}%")
        plain_ms = cpu_ms(lambda sql=sql: source.execute(sql).fetchall(), args.repeat)
        print(f"{sql[:58]:<60}{plain_ms:>8.0f}" + "".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
