"""Per-cell accounting (docs/privacy.md §7): how many drill-down queries fit, and what admit costs.

    /work/venv/bin/python bench/drilldown.py [--epsilon 0.1] [--budget 1.0] [--admits 200] [--postgres URL]
                                             [--engine-rows 1000000] [--repeat 10]

1. Queries that fit. The drill-down workload is one query per region × age band on `visits` of the demo
   policy: 5 regions × 8 bands, ε each. It is repeated in rounds until nothing more is admitted. Then a
   mixed workload interleaves region-only, band-only and row-level-only queries. Each query is planned
   exactly as the proxy plans it (`proxy.query.planner.plan`) and admitted by a SQLite ledger, with cell
   accounting on (per cell) and off (sequential: every charge covers every unit).
2. Admit latency with 1k and 10k charges already recorded, for one analyst. The charges are scoped like
   the drill-down, over two tables: `visits`, 2 axes and 532 cells; `users`, 3 axes and 3 192 cells. Both
   have many repeated scopes and a share of unscoped charges. The first admit reads and sums the whole
   history (cold: after a start); later ones read only what is new since (the ledger's memo). A scoped
   and an unscoped admit are then timed one call at a time. "distinct" repeats that with every charge on
   its own random scope, the worst case for the per-cell sum. Timing covers SQLite and, with --postgres,
   PostgreSQL in a fresh schema.
3. What the canonical values cost in the engine (with --engine-rows N > 0): a drill-down query on a demo
   dataset of N visits (N/20 users), run as plain DuckDB (not private; on the engine's own hardened
   connection, so with the same settings), rewritten without cell accounting
   (sequential) and rewritten with it (canonical MIN per unit). Each is the median of --repeat runs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accountant.cell_scope import CellScope
from accountant.errors import BudgetExceeded
from accountant.events import LaplaceEvent
from accountant.filter import Budget
from accountant.ledger.admit import _Admitting
from accountant.ledger.charges import Charge
from accountant.ledger.postgres import PostgresLedger
from accountant.ledger.sqlite import SqliteLedger
from proxy.cli.demo import REGIONS, build_demo
from proxy.engines.duckdb_engine import Engine
from proxy.policy.load import load_policy
from proxy.query.analyse.cell_space import cell_space
from proxy.query.catalog import Catalog
from proxy.query.planner import QueryPlan, plan

BANDS = ((18, 24), (25, 34), (35, 44), (45, 54), (55, 64), (65, 74), (75, 84), (85, 90))


def drill_down() -> list[str]:
    return [
        f"SELECT COUNT(*), AVG(amount) FROM visits WHERE region = '{r}' AND age BETWEEN {lo} AND {hi}"
        for r in REGIONS for lo, hi in BANDS
    ]


def mixed() -> list[str]:
    queries = []
    for i, r in enumerate(REGIONS):
        queries.append(f"SELECT category, COUNT(*) FROM visits WHERE region = '{r}' GROUP BY category")
        lo, hi = BANDS[i % len(BANDS)]
        queries.append(f"SELECT SUM(amount) FROM visits WHERE age >= {lo} AND age <= {hi}")
        queries.append(f"SELECT COUNT(*) FROM visits WHERE amount > {10 * i}")  # row-level: every unit
    return queries


def fits(catalog: Catalog, queries: list[str], *, epsilon: float, budget: float, cells: bool) -> int:
    """How many queries are admitted, repeating the workload in rounds until a round admits none."""
    with tempfile.TemporaryDirectory() as tmp:
        ledger = SqliteLedger(Path(tmp) / "ledger.sqlite")
        admitted, round_ = 0, 0
        try:
            while True:
                round_ += 1
                before = admitted
                for sql in queries:
                    p = plan(f"{sql} -- {round_}", catalog, epsilon=epsilon, delta=0.0, mechanism="laplace",
                             cells=cells)
                    try:
                        _admit(ledger, p, Budget(budget, 0.0))
                        admitted += 1
                    except BudgetExceeded:
                        pass
                if admitted == before:
                    return admitted
        finally:
            ledger.close()


def _admit(ledger: _Admitting, p: QueryPlan, budget: Budget) -> Charge:
    return ledger.admit(analyst="ana", dataset="demo", sql_sha256=p.sql_sha256, event=p.price.event,
                        epsilon=p.price.epsilon, delta=p.price.delta, composition=p.price.composition,
                        budget=budget, scope=p.scope)


def scopes(catalog: Catalog, *, distinct: bool, count: int, rng: random.Random) -> list[CellScope | None]:
    """`count` charge scopes: drill-down shapes on both tables (or each a random subset), 10 % unscoped."""
    spaces = [cell_space(t) for t in catalog.tables if t.name in ("visits", "users")]
    shapes: list[CellScope | None] = []
    for sql in drill_down():
        shapes.append(plan(sql, catalog, epsilon=0.1, delta=0.0, mechanism="laplace").scope)
        users = sql.replace("visits", "users").replace("COUNT(*), AVG(amount)", "COUNT(*)")
        for tier in ("free", "pro"):
            shapes.append(plan(f"{users} AND plan = '{tier}'", catalog, epsilon=0.1, delta=0.0,
                               mechanism="laplace").scope)
    out: list[CellScope | None] = []
    for _ in range(count):
        if rng.random() < 0.1:
            out.append(None)
        elif distinct:
            space = rng.choice(spaces)
            picked = rng.sample(range(space.size), rng.randint(1, space.size // 4))
            out.append(CellScope.of(space.table, space.fingerprint, space.size, picked))
        else:
            out.append(rng.choice(shapes))
    return out


def prefill(ledger: _Admitting, charged: list[CellScope | None]) -> None:
    """Insert charges through the ledger's own storage hook, in one transaction (admit would take O(n²))."""
    now = datetime.now(UTC)
    event = LaplaceEvent(1.0, 10_000.0)
    with ledger._write():
        for scope in charged:
            ledger._insert(Charge(uuid.uuid4().hex, "ana", "demo", now, "ab" * 32, event, 1e-4, 0.0, "parallel",
                                  scope))


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.99 * len(samples)))]


def latency(catalog: Catalog, opener: Callable[[], _Admitting], *, charges: int, distinct: bool,
            admits: int) -> dict[str, tuple[float, float]]:
    rng = random.Random(charges + distinct)
    ledger = opener()
    try:
        prefill(ledger, scopes(catalog, distinct=distinct, count=charges, rng=rng))
        scoped = plan("SELECT COUNT(*) FROM visits WHERE region = 'north' AND age < 30", catalog, epsilon=1e-4,
                      delta=0.0, mechanism="laplace")
        unscoped = plan("SELECT COUNT(*) FROM visits", catalog, epsilon=1e-4, delta=0.0, mechanism="laplace")
        big = Budget(1e9, 0.5)
        cold = timed(lambda: _admit(ledger, scoped, big), 1)  # reads and sums the whole history once
        return {
            "cold": cold,
            "scoped": timed(lambda: _admit(ledger, scoped, big), admits),
            "unscoped": timed(lambda: _admit(ledger, unscoped, big), admits),
        }
    finally:
        ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epsilon", type=float, default=0.1)
    parser.add_argument("--budget", type=float, default=1.0)
    parser.add_argument("--admits", type=int, default=200)
    parser.add_argument("--postgres", help="also time a PostgreSQL ledger at this URL (a fresh schema)")
    parser.add_argument("--engine-rows", type=int, default=1_000_000, help="0 skips the engine measurement")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    if args.engine_rows > 0:
        engine_cost(args.engine_rows, args.repeat)

    with tempfile.TemporaryDirectory() as tmp:
        demo = build_demo(Path(tmp), users=50, rows=100)  # the policy is what matters here, not the data
        policy = load_policy(demo.policy)
        dataset = policy.dataset("demo")
        assert dataset is not None
        catalog = dataset.catalog

        print(f"## queries admitted, ε = {args.epsilon} each, budget ε = {args.budget}, basic composition\n")
        print("| workload | queries per round | sequential | per cell | ratio |")
        print("|---|---|---|---|---|")
        for name, queries in (("region × age band", drill_down()), ("mixed (region, band, row-level)", mixed())):
            seq = fits(catalog, queries, epsilon=args.epsilon, budget=args.budget, cells=False)
            per = fits(catalog, queries, epsilon=args.epsilon, budget=args.budget, cells=True)
            print(f"| {name} | {len(queries)} | {seq} | {per} | ×{per / seq:.1f} |")

        print(f"\n## admit latency, ms (p50 / p99 of {args.admits} admits)\n")
        print("| store | charges | scopes | first admit (cold) | scoped admit | unscoped admit |")
        print("|---|---|---|---|---|---|")
        openers: list[tuple[str, Callable[[], _Admitting]]] = [
            ("SQLite", lambda: SqliteLedger(Path(tempfile.mkdtemp()) / "ledger.sqlite")),
        ]
        if args.postgres:
            schema = f"bench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(args.postgres, autocommit=True) as conn:
                conn.execute(f"CREATE SCHEMA {schema}")
            url = f"{args.postgres}{'&' if '?' in args.postgres else '?'}options=-csearch_path%3D{schema}"
            openers.append(("PostgreSQL", lambda: PostgresLedger(url)))
        try:
            for store, opener in openers:
                for charges in (1000, 10_000):
                    for distinct in (False, True):
                        got = latency(catalog, opener, charges=charges, distinct=distinct, admits=args.admits)
                        if store == "PostgreSQL":  # one schema: start each run empty
                            with psycopg.connect(args.postgres, autocommit=True) as conn:
                                conn.execute(f"TRUNCATE {schema}.releases, {schema}.charges")
                        kind = "all distinct (worst case)" if distinct else "drill-down (repeated)"
                        print(f"| {store} | {charges} | {kind} | {got['cold'][0]:.1f}"
                              f" | {got['scoped'][0]:.1f} / {got['scoped'][1]:.1f}"
                              f" | {got['unscoped'][0]:.1f} / {got['unscoped'][1]:.1f} |")
        finally:
            if args.postgres:
                with psycopg.connect(args.postgres, autocommit=True) as conn:
                    conn.execute(f"DROP SCHEMA {schema} CASCADE")


def engine_cost(rows: int, repeat: int) -> None:
    """Median engine time of drill-down queries: plain DuckDB, rewritten sequential, rewritten per cell."""
    with tempfile.TemporaryDirectory() as tmp:
        demo = build_demo(Path(tmp), users=max(1, rows // 20), rows=rows)
        dataset = load_policy(demo.policy).dataset("demo")
        assert dataset is not None
        engine = Engine(demo.database)
        print(f"## engine time, ms (median of {repeat}), {rows} visits of {max(1, rows // 20)} users\n")
        print("| query | plain DuckDB | sequential (no canonical) | per cell (canonical) | per cell / sequential |")
        print("|---|---|---|---|---|")
        queries = [
            "SELECT COUNT(*), AVG(amount) FROM visits WHERE region = 'north' AND age BETWEEN 25 AND 34",
            "SELECT category, SUM(amount) FROM visits WHERE age >= 65 GROUP BY category",
            "SELECT COUNT(*) FROM users WHERE plan = 'pro' AND region = 'east'",
        ]
        try:
            for sql in queries:
                times = [timed(lambda sql=sql: engine.run(sql), repeat)[0]]  # the analyst's SQL as is
                for cells in (False, True):
                    p = plan(sql, dataset.catalog, epsilon=1.0, delta=1e-8, mechanism="laplace", cells=cells)
                    times.append(timed(lambda p=p: engine.run(p.sql), repeat)[0])
                print(f"| `{sql}` | {times[0]:.1f} | {times[1]:.1f} | {times[2]:.1f} | ×{times[2] / times[1]:.2f} |")
        finally:
            engine.close()
        print()


if __name__ == "__main__":
    main()
