"""Admit latency of the SQLite and PostgreSQL ledgers with 10k charges already recorded.

    /work/venv/bin/python bench/ledger_latency.py [--charges 10000] [--admits 300] [--postgres URL]

Two layouts of the existing charges: all of them the admitting analyst's own ("own": admit reads and sums
every one), or spread over 100 analysts ("spread": admit reads 100). `admit` is timed one call at a
time, then from 8 threads at once on the same analyst (two ledger objects, as two processes would be;
they queue on the analyst's lock). `total()` alone on as many charges shows how much of an admit is the
exact sum, which both stores share. PostgreSQL runs in a fresh schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg

from accountant.events import LaplaceEvent
from accountant.filter import Budget, total
from accountant.ledger.admit import _Admitting
from accountant.ledger.charges import Charge
from accountant.ledger.postgres import PostgresLedger
from accountant.ledger.sqlite import SqliteLedger

BUDGET = Budget(1e9, 0.5)
EPSILON = 0.001
EVENT = LaplaceEvent(1.0, 1000.0)
THREADS = 8


def _prefill(ledger: _Admitting, charges: int, owners: int) -> None:
    """Insert `charges` through the ledger's own storage hook, in one transaction (admit would take O(n²))."""
    now = datetime.now(UTC)
    with ledger._write():
        for i in range(charges):
            ledger._insert(Charge(uuid.uuid4().hex, f"a{i % owners}", "bench", now, "ab" * 32, EVENT, EPSILON, 0.0,
                                  "basic"))


def _admit(ledger: _Admitting) -> float:
    start = time.perf_counter()
    ledger.admit(analyst="a0", dataset="bench", sql_sha256="cd" * 32, event=EVENT, epsilon=EPSILON, delta=0.0,
                 composition="basic", budget=BUDGET)
    return time.perf_counter() - start


def _percentiles(seconds: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(seconds, n=100, method="inclusive")
    return cuts[49] * 1000, cuts[98] * 1000


def _measure(open_ledger: Callable[[], _Admitting], charges: int, owners: int, admits: int) -> list[str]:
    first, second = open_ledger(), open_ledger()
    try:
        _prefill(first, charges, owners)
        for _ in range(10):  # warm the caches and the connection pools
            _admit(first)
        serial = [_admit(first) for _ in range(admits)]
        barrier = threading.Barrier(THREADS)

        def worker(i: int) -> list[float]:
            barrier.wait()
            return [_admit((first, second)[i % 2]) for _ in range(admits // THREADS)]

        with ThreadPoolExecutor(THREADS) as pool:
            concurrent = [s for f in [pool.submit(worker, i) for i in range(THREADS)] for s in f.result()]
    finally:
        first.close()
        second.close()
    rows = []
    for threads, seconds in ((1, serial), (THREADS, concurrent)):
        p50, p99 = _percentiles(seconds)
        rows.append(f"{charges // owners:>9}  {threads:>7}  {len(seconds):>6}  {p50:>7.2f}  {p99:>7.2f}")
    return rows


@contextmanager
def pg_schema(url: str) -> Iterator[str]:
    """`url` in a fresh PostgreSQL schema, dropped afterwards."""
    schema = f"bench_{uuid.uuid4().hex}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        separator = "&" if "?" in url else "?"
        yield f"{url}{separator}options=-csearch_path%3D{schema}"
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--charges", type=int, default=10_000)
    parser.add_argument("--admits", type=int, default=300)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    print(f"admit latency in ms with {args.charges:,} charges recorded (python {sys.version.split()[0]})")
    print(f"{'store':<10}  {'layout':<6}  {'own rows':>9}  {'threads':>7}  {'admits':>6}  {'p50':>7}  {'p99':>7}")
    for layout, owners in (("own", 1), ("spread", 100)):
        with tempfile.TemporaryDirectory() as directory:
            path = Path(directory) / "ledger.sqlite"
            for row in _measure(partial(SqliteLedger, path), args.charges, owners, args.admits):
                print(f"{'sqlite':<10}  {layout:<6}  {row}")
        with pg_schema(args.postgres) as url:
            for row in _measure(partial(PostgresLedger, url), args.charges, owners, args.admits):
                print(f"{'postgresql':<10}  {layout:<6}  {row}")
    pairs = [(EPSILON, 0.0)] * args.charges
    runs = []
    for _ in range(20):
        start = time.perf_counter()
        total(pairs)
        runs.append(time.perf_counter() - start)
    print(f"total() alone on {args.charges:,} charges: {statistics.median(runs) * 1000:.2f} ms (median of 20)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
