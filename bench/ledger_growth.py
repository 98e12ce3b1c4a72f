"""Admit and tallied latency as the ledger's history grows: 1k, 10k, 100k, 1M earlier charges.

    python bench/ledger_growth.py [--sizes 1000,10000,100000,1000000] [--calls 200]
        [--stores sqlite,postgresql] [--postgres URL]

The history is on one dataset, spread over 100 analysts, and written behind the ledger's back in one
statement per size (as earlier processes would have: the memo of this process is warm, the rows are new to
it, so it reads them once, before the timed calls). Each size then times, one call at a time after 10
warm-ups: `admit` by one analyst with a dataset budget (reads the analyst's and everyone's history, as the
server does), `tallied` of everyone's history (the answer's budget view) and of the analyst's. Figures: p50
of this process's CPU time (`time.thread_time`) and of wall time, in ms. PostgreSQL's own CPU is not in the
CPU column (it is in the wall one). PostgreSQL runs in a fresh schema, dropped afterwards.

Before (main at c728f09: the memo's check counted the history) and after (branch ledgerflat: the check reads
the history's tally, accountant/ledger/tallies.py), run back to back on one machine, `--calls 100`, p50 ms cpu/wall:

    store       charges   admit+dataset before -> after   tallied(all) before -> after   tallied(a0)
    sqlite        1,000    0.45 / 0.67 -> 0.46 / 0.73     0.09 / 0.09 -> 0.06 / 0.06     0.05 -> 0.04
    sqlite      100,000    5.36 / 5.59 -> 0.37 / 0.50     4.73 / 4.73 -> 0.06 / 0.06     0.12 -> 0.05
    sqlite    1,000,000   57.3 / 57.8  -> 0.41 / 0.60    53.2 / 53.2  -> 0.06 / 0.06     0.69 -> 0.05
    postgresql    1,000    0.69 / 1.41 -> 0.78 / 1.67     0.30 / 0.68 -> 0.33 / 0.65     0.44 -> 0.46 wall
    postgresql  100,000    1.33 / 16.5 -> 0.80 / 1.81     0.71 / 14.2 -> 0.33 / 0.65     1.27 -> 0.64 wall
    postgresql 1,000,000   1.52 / 100  -> 0.78 / 1.69     1.01 / 124  -> 0.32 / 0.64     14.0 -> 0.64 wall
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from ledger_latency import pg_schema

from accountant.events import LaplaceEvent
from accountant.filter import Budget
from accountant.ledger.admit import _Admitting
from accountant.ledger.charges import Charge
from accountant.ledger.postgres import PostgresLedger
from accountant.ledger.sql_rows import charge_row
from accountant.ledger.sqlite import SqliteLedger

BUDGET = Budget(1e9, 0.5)
EPSILON = 0.001
EVENT = LaplaceEvent(1.0, 1000.0)
ANALYSTS = 100
WARM_UP = 10


def _event_text() -> str:
    return str(charge_row(Charge("x", "a", "d", datetime.now(UTC), "ab", EVENT, EPSILON, 0.0, "basic"), 0)[5])


_SQLITE_FILL = (
    "INSERT INTO charges (id, analyst, dataset, at_us, sql_sha256, event, epsilon, delta, composition, scope)"
    " WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
    " SELECT 'fill' || i, 'a' || (i % ?), 'bench', 0, 'ab', ?, ?, 0.0, 'basic', NULL FROM n"
)
_POSTGRES_FILL = (
    "INSERT INTO charges (id, analyst, dataset, at, sql_sha256, event, epsilon, delta, composition, scope)"
    " SELECT 'fill' || i, 'a' || (i %% %s), 'bench', now(), 'ab', %s, %s, 0.0, 'basic', NULL"
    " FROM generate_series(%s::bigint, %s::bigint) AS i"
)


def _fill_sqlite(path: Path, first: int, last: int) -> None:
    import sqlite3

    conn = sqlite3.connect(path, timeout=60)
    with conn:
        conn.execute(_SQLITE_FILL, (first, last, ANALYSTS, _event_text(), EPSILON))
    conn.close()


def _fill_postgres(url: str, first: int, last: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(_POSTGRES_FILL, (ANALYSTS, _event_text(), EPSILON, first, last))
        conn.execute("ANALYZE charges")  # as autovacuum would, soon after a bulk load


def _timed(call: Callable[[], object], calls: int) -> tuple[float, float]:
    cpu, wall = [], []
    for _ in range(WARM_UP):
        call()
    for _ in range(calls):
        c0, w0 = time.thread_time(), time.perf_counter()
        call()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu) * 1000, statistics.median(wall) * 1000


def _measure(ledger: _Admitting, fill: Callable[[int, int], None], sizes: list[int], calls: int) -> Iterator[str]:
    def admit() -> None:
        ledger.admit(analyst="a0", dataset="bench", sql_sha256="cd" * 32, event=EVENT, epsilon=EPSILON, delta=0.0,
                     composition="basic", budget=BUDGET, dataset_budget=BUDGET)

    done = 0
    for size in sizes:
        fill(done + 1, size)
        done = size
        ledger.tallied(dataset="bench")  # the rows new to this process's memo: read once, untimed
        ledger.tallied(dataset="bench", analyst="a0")
        figures = [
            _timed(admit, calls),
            _timed(lambda: ledger.tallied(dataset="bench"), calls),
            _timed(lambda: ledger.tallied(dataset="bench", analyst="a0"), calls),
        ]
        done += calls + WARM_UP  # the admits add charges too
        yield f"{size:>9,}  " + "  ".join(f"{cpu:>7.3f} {wall:>7.3f}" for cpu, wall in figures)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]

    print(f"p50 ms (cpu wall) with n earlier charges on one dataset, {ANALYSTS} analysts, {args.calls} calls each")
    print(f"{'store':<10}  {'charges':>9}  {'admit+dataset':>15}  {'tallied(all)':>15}  {'tallied(a0)':>15}")
    stores = args.stores.split(",")
    if "sqlite" in stores:
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "ledger.sqlite"
            ledger = SqliteLedger(path)
            try:
                for row in _measure(ledger, lambda first, last: _fill_sqlite(path, first, last), sizes, args.calls):
                    print(f"{'sqlite':<10}  {row}", flush=True)
            finally:
                ledger.close()
    if "postgresql" in stores:
        with pg_schema(args.postgres) as url:
            pg = PostgresLedger(url, pool_size=2)
            try:
                for row in _measure(pg, lambda first, last: _fill_postgres(url, first, last), sizes, args.calls):
                    print(f"{'postgresql':<10}  {row}", flush=True)
            finally:
                pg.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
