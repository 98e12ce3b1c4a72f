"""What the release stage costs per cell: noise for every cell of a large GROUP BY, then post-processing.

    python bench/release_speed.py [--cells 100000]
    python bench/release_speed.py --answers 2000
    python bench/release_speed.py --engine-rows DIR [--rows 200000 --users 10000]

Prints, for a public-domain GROUP BY of `--cells` cells (two measures), the same with ORDER BY/LIMIT (the
per-row evaluation path), and a private GROUP BY of as many candidate groups: median seconds over 3 runs,
and the exact sampler's own cost per value (OpenDP, OS CSPRNG) for comparison.

With `--answers N` (issue #32) it prints instead the CPU per answer (`time.process_time`, mean of N, the
shapes alternated, median of 5 rounds) of `release(...)` on rows shaped as the engine returns them for the
workload's small answers, and then the sampler's own pieces against OpenDP's own calls measured alternately in
the same run: one draw through the sampler's direct invocation against `Measurement.__call__`, and a new
scale's measurement built on the shared domain and metric against one built from scratch. The answers part
only uses `release` and `plan`, so the same command run from an older checkout gives the before figures.
With `--engine-rows DIR` it times `release(...)` (CPU per answer, mean of 300) on the rows the engine returns
for every query of bench/query_latency.py's workload, on the demo dataset in DIR (built if missing, bounding
store), the product's own sampler; again only `release`, `prepare` and the engine, for before figures alike.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout this script is in

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


def _cpu_us(fn: object, count: int) -> float:
    start = time.process_time()
    for _ in range(count):
        fn()  # type: ignore[operator]
    return (time.process_time() - start) / count * 1e6


def _small_answers() -> list[tuple[str, object, list[tuple[object, ...]]]]:
    """The workload's small answers on a catalog shaped like the demo's: (name, plan, engine rows)."""
    days = tuple(range(365))  # the demo's `day` has 365 values (an integer key here: no data needed)
    regions = ("north", "south", "east", "west", "central")
    categories = ("groceries", "dining", "electronics", "clothing", "travel", "health", "books", "entertainment")
    table = TableSchema("visits", "uid", (
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("plan", "VARCHAR", groupable=True, public_domain=("free", "basic", "pro", "enterprise")),
        ColumnSpec("region", "VARCHAR", groupable=True, public_domain=regions),
        ColumnSpec("category", "VARCHAR", groupable=True, public_domain=categories),
        ColumnSpec("day", "INTEGER", groupable=True, public_domain=days),
        ColumnSpec("amount", "DOUBLE", bounds=(0, 500)),
    ), max_groups=4, max_rows=5)
    shapes = (
        ("users_by_plan", "SELECT plan, COUNT(*) AS n FROM visits GROUP BY plan"),
        ("category_sum_avg", "SELECT category, SUM(amount) AS total, AVG(amount) AS mean FROM visits "
                             "GROUP BY category"),
        ("count_sum_total", "SELECT COUNT(*) AS n, SUM(amount) AS total FROM visits"),
        ("region_category", "SELECT region, category, COUNT(*) AS n, SUM(amount) AS total FROM visits "
                            "GROUP BY region, category"),
        ("day_distinct_users", "SELECT day, COUNT(DISTINCT uid) AS users FROM visits GROUP BY day"),
    )
    out = []
    for name, sql in shapes:
        planned = plan(sql, Catalog((table,)), epsilon=1.0, delta=1e-6, mechanism="laplace")
        keys = list(itertools.product(*planned.analysis.domains)) if planned.analysis.keys else [()]
        width = 1 + len(planned.analysis.measures)
        out.append((name, planned, [(*key, *(1000 + i,) * width) for i, key in enumerate(keys)]))
    return out


def answers(count: int) -> None:
    """CPU per small answer of `release`, then the sampler's pieces against OpenDP's own calls."""
    sampler = SecureSampler()
    shapes = _small_answers()
    rounds: dict[str, list[float]] = {name: [] for name, _, _ in shapes}
    for _ in range(5):
        for name, planned, rows in shapes:
            analysis, price = planned.analysis, planned.price  # type: ignore[attr-defined]
            rounds[name].append(_cpu_us(lambda r=rows, a=analysis, p=price: release(r, a, p, sampler), count))
    for name, planned, rows in shapes:
        noise = len(planned.price.noise)  # type: ignore[attr-defined]
        print(f"release {name:20s} {len(rows):4d} cells {noise} noise  {statistics.median(rounds[name]):8.1f} µs CPU")
    try:
        from mechanisms import sampling
        direct = sampling._invoke
    except (ImportError, AttributeError):  # an older checkout: the answers above are its figures
        return
    import opendp.prelude as dp

    measurement = sampling._laplace_measurement(20.0)
    for n in (1, 4, 365):
        values = [5] * n
        times: dict[str, list[float]] = {"direct": [], "OpenDP __call__": []}
        for _ in range(5):
            times["direct"].append(_cpu_us(lambda v=values: direct(measurement, v), max(20, count // n)))
            times["OpenDP __call__"].append(_cpu_us(lambda v=values: measurement(v), max(20, count // n)))
        mine, theirs = (statistics.median(t) for t in times.values())
        print(f"one draw of {n:3d} values: direct {mine:8.1f} µs, OpenDP's call {theirs:8.1f} µs"
              f"  (× {mine / theirs:.2f})")

    def fresh(scale: float) -> object:
        dp.enable_features("contrib")
        space = dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64)
        return dp.m.make_laplace(*space, scale=scale)

    scales = iter(1.0 + i / 2**20 for i in range(10**7))  # a new scale every time: the memo never hits
    shared = _cpu_us(lambda: sampling._laplace_measurement(next(scales)), 300)
    scratch = _cpu_us(lambda: fresh(next(scales)), 300)
    shared2 = _cpu_us(lambda: sampling._laplace_measurement(next(scales)), 300)
    scratch2 = _cpu_us(lambda: fresh(next(scales)), 300)
    mine, theirs = (shared + shared2) / 2, (scratch + scratch2) / 2
    print(f"a new scale's measurement: shared space {mine:.1f} µs, from scratch {theirs:.1f} µs"
          f"  (× {mine / theirs:.2f})")


def engine_rows(directory: Path, rows: int, users: int) -> None:
    """CPU per answer of `release` on the engine's rows for each workload query (see the docstring)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from query_latency import DATASET, WORKLOAD, ensure_dataset, in_process, prepare, set_bounding

    from proxy import pipeline
    from proxy.schemas import QueryRequest

    _, key = ensure_dataset(directory, rows=rows, users=users)
    set_bounding(directory / "policy.toml", "store")
    env, analyst = in_process(directory / "policy.toml", directory, key)
    engine = env.engine(DATASET)
    for workload in WORKLOAD:
        planned = prepare(QueryRequest(sql=workload.sql), analyst, env).plan
        result = engine.run(pipeline.engine_sql(planned, engine)).rows
        work = lambda p=planned, r=result: release(r, p.analysis, p.price, env.sampler)  # noqa: E731
        work()
        print(f"release {workload.name:22s} {len(result):4d} engine rows {planned.analysis.partitions:7s} "
              f"{len(planned.price.noise)} noise  {_cpu_us(work, 300):8.1f} µs CPU")
    env.ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=100_000)
    parser.add_argument("--answers", type=int, default=0, help="CPU per small answer instead (issue #32)")
    parser.add_argument("--engine-rows", type=Path, help="a demo directory: release on the engine's rows instead")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=10_000)
    args = parser.parse_args()
    if args.engine_rows:
        print(f"checkout {Path(release.__code__.co_filename).parents[3]}; load {os.getloadavg()[0]:.1f}")
        engine_rows(args.engine_rows.resolve(), args.rows, args.users)
        print(f"load {os.getloadavg()[0]:.1f}")
        return
    if args.answers:
        root = Path(release.__code__.co_filename).parents[3]
        print(f"checkout {root}; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        answers(args.answers)
        print(f"load {os.getloadavg()[0]:.1f}")
        return
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
