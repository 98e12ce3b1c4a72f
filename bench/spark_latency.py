"""Spark against DuckDB and plain Spark SQL on the benchmark's workload (issue #16), from Parquet.

    python bench/spark_latency.py [--rows 1000000] [--users 50000] [--repeat 5] [--master local[2]]

The demo dataset of bench/query_latency.py (built or reused in --dir), its tables also written as Parquet,
and for every workload query (bench/query_latency.py WORKLOAD), one warm-up then --repeat timed runs of:

    spark plain    the analyst's SQL as is (non-private) on Spark over the Parquet views
    spark engine   the rewritten (bounded, clamped) SQL rendered for Spark, through SparkEngine.run
    spark store    the store's SQL (bounding = "store": rank filters, no window per query) on the bounding store
                   Spark built (proxy/store/spark_store.py), through SparkStoreEngine.run
    spark proxy    proxy.pipeline.answer in process on the Spark dataset: plan, admit (SQLite), Spark, release
                   (bounded by its store, or per query with --proxy-bounding per_query)
    duckdb plain   the analyst's SQL on DuckDB (the demo file, same threads)
    duckdb engine  the rewritten SQL on DuckDB, through the DuckDB engine

It reports p50/p95 latency per cell and the median CPU time per run of this process and Spark's JVM together
(`cpu_ms`: less inflated than wall time when other processes share the cores), the ratios engine/plain,
store/plain and proxy/plain, whether both engines returned identical rows before noise (same salt; the store
path against DuckDB's store built with the same keyed hash), and the median relative error of the Spark
release against the true answer (plain), over every released numeric cell. Once per run it times the one-off
store builds: Spark's, DuckDB's with the explicit keyed hash, and DuckDB's with its HASH
(proxy/store/duckdb_store.py's).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import numpy as np  # noqa: E402
from query_latency import WORKLOAD, ensure_dataset, fresh_ledger  # noqa: E402

from proxy import pipeline  # noqa: E402
from proxy.app import build_env  # noqa: E402
from proxy.engines.duckdb_engine import Engine  # noqa: E402
from proxy.engines.spark_engine import SparkEngine, session  # noqa: E402
from proxy.policy.load import load_policy  # noqa: E402
from proxy.query.planner import plan  # noqa: E402
from proxy.query.rewrite import store_layout  # noqa: E402
from proxy.query.rewrite.render import render, render_text  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402
from proxy.settings import Settings  # noqa: E402
from proxy.store.spark_store import SparkStoreEngine, _remove  # noqa: E402
from tests.support.spark_data import export_parquet, spark_policy  # noqa: E402

_UNIQUE = itertools.count(1)


def unique_request(sql: str) -> QueryRequest:
    """A request never a repeat of an earlier one (ε differs in the 9th decimal), so the ledger's stored
    release is never the answer."""
    return QueryRequest(sql=sql, epsilon=Decimal("0.1") + next(_UNIQUE) * Decimal("1e-9"))


_JVM_PID: int | None = None  # Spark's driver JVM (local[N]: the executors too), a child of this process


def cpu_s() -> float:
    """CPU seconds used so far by this process and Spark's JVM (from /proc; the JVM's threads are not ours)."""
    total = time.process_time()
    if _JVM_PID is not None:
        with open(f"/proc/{_JVM_PID}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


def timed(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    fn()  # warm-up
    samples, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), cpu_s()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
        cpu.append((cpu_s() - c0) * 1000)
    a = np.asarray(samples)
    return {"p50_ms": round(float(np.percentile(a, 50)), 1), "p95_ms": round(float(np.percentile(a, 95)), 1),
            "cpu_ms": round(float(np.median(cpu)), 1), "n": len(samples)}


def duckdb_store_builds(database: Path, catalog: Any, key: str) -> dict[str, float]:
    """Seconds to build every table's store in DuckDB (2 threads, in memory) with its HASH and with the keyed hash."""
    import duckdb

    out = {}
    for hash_name in ("duckdb", "keyed"):
        con = duckdb.connect(config={"threads": 2})
        con.execute(f"ATTACH '{database}' AS src (READ_ONLY)")
        t0 = time.perf_counter()
        for table in catalog.tables:
            con.execute(f'CREATE TABLE "{table.name}" AS '
                        f'{store_layout.select_sql(table, key, f"src.{table.name}", hash_name)}')  # type: ignore[arg-type]
        out[hash_name] = round(time.perf_counter() - t0, 1)
        con.close()
    return out


def relative_errors(released: tuple[tuple[Any, ...], ...], truth: list[tuple[Any, ...]], keys: int) -> list[float]:
    """|noisy − true| / |true| for every numeric cell of a released group present in the true answer."""
    true_by_key = {tuple(row[:keys]): row[keys:] for row in truth}
    errors = []
    for row in released:
        expected = true_by_key.get(tuple(row[:keys]))
        if expected is None:
            continue
        for noisy, exact in zip(row[keys:], expected, strict=False):
            if isinstance(noisy, int | float) and isinstance(exact, int | float) and exact:
                errors.append(abs(float(noisy) - float(exact)) / abs(float(exact)))
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--queries", default=None, help="comma-separated workload names (default: all)")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-spark")
    parser.add_argument("--proxy-bounding", choices=("store", "per_query"), default="store",
                        help="how the dataset the in-process proxy answers is bounded (spark proxy)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "spark_latency.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    directory = args.dir / f"{args.rows}"
    meta, _ = ensure_dataset(directory, rows=args.rows, users=args.users)
    parquet = export_parquet(directory / "demo.duckdb", directory / "parquet")
    policy_path = spark_policy(directory / "policy.toml", parquet, directory / "spark", master=args.master,
                               bounding=args.proxy_bounding)
    dataset = load_policy(policy_path).dataset("demo")
    assert dataset is not None and dataset.spark is not None
    started = time.perf_counter()
    spark = session(args.master)
    spark_start_s = time.perf_counter() - started
    global _JVM_PID
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    _JVM_PID = proc.pid if proc is not None else None
    results: dict[str, Any] = {"rows": args.rows, "users": args.users, "master": args.master,
                               "spark_session_start_s": round(spark_start_s, 1), "dataset": meta,
                               "proxy_bounding": args.proxy_bounding,
                               "loadavg_1min_start": round(os.getloadavg()[0], 2), "queries": {}}
    # the one-off store builds: Spark's from scratch (earlier stores removed), then DuckDB's two hashes
    store_dir = directory / "spark" / "store"
    store_dir.mkdir(parents=True, exist_ok=True)
    for stale in store_dir.glob("demo.spark-store-*"):
        _remove(stale)
    started, cpu0 = time.perf_counter(), cpu_s()
    SparkStoreEngine("demo", dataset.spark, dataset.catalog, store_dir, timeout_s=600).close()
    results["spark_store_build_s"] = round(time.perf_counter() - started, 1)
    results["spark_store_build_cpu_s"] = round(cpu_s() - cpu0, 1)
    key = (store_dir / "bounding.key").read_text().strip()
    results["duckdb_store_build_s"] = duckdb_store_builds(directory / "demo.duckdb", dataset.catalog, key)
    print(f"store build: Spark {results['spark_store_build_s']} s (CPU {results['spark_store_build_cpu_s']} s); "
          f"DuckDB {results['duckdb_store_build_s']} s", flush=True)
    # the proxy serves from the store just built (same directory and key: opened, not rebuilt)
    spark_env = build_env(Settings(policy=policy_path, ledger=str(fresh_ledger(directory / "spark")),
                                   query_timeout_s=600, threads=2, store_dir=store_dir))
    spark_store = SparkStoreEngine("demo", dataset.spark, dataset.catalog, store_dir, timeout_s=600)
    spark_engine = SparkEngine("demo_bench", dataset.spark, timeout_s=600)  # plain and per-query SQL
    analyst = next(a for a in spark_env.policy.analysts if a.role == "analyst")
    duck_engine = Engine(directory / "demo.duckdb", threads=2, memory_limit="4GB", timeout_s=600)
    import duckdb

    keyed_store = duckdb.connect(config={"threads": 2})  # DuckDB's store with the keyed hash: Spark's rows
    keyed_store.execute(f"ATTACH '{directory / 'demo.duckdb'}' AS src (READ_ONLY)")
    for table in dataset.catalog.tables:
        keyed_store.execute(f'CREATE TABLE "{table.name}" AS '
                            f'{store_layout.select_sql(table, key, f"src.{table.name}", "keyed")}')
    all_errors: list[float] = []
    chosen = None if args.queries is None else set(args.queries.split(","))
    for w in (w for w in WORKLOAD if chosen is None or w.name in chosen):
        planned = plan(w.sql, dataset.catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=42)
        assert planned.tree is not None
        spark_sql = render(planned.tree, spark_engine.target)  # type: ignore[union-attr]
        plain_spark_sql = w.sql
        for table, view in spark_engine.target.tables:  # type: ignore[union-attr]
            plain_spark_sql = re.sub(rf"\b(FROM|JOIN) {table}\b", rf"\1 {view}", plain_spark_sql)
        cell: dict[str, Any] = {"what": w.what}
        cell["spark_plain"] = timed(lambda s=plain_spark_sql: spark.sql(s).collect(), args.repeat)
        cell["spark_engine"] = timed(lambda s=spark_sql: spark_engine.run(s), args.repeat)
        stored = plan(w.sql, dataset.catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=42, bounding="store")
        store_sql = render_text(stored.sql, spark_store.target)
        cell["spark_store"] = timed(lambda s=store_sql: spark_store.run(s), args.repeat)
        cell["store_identical_before_noise"] = sorted(spark_store.run(store_sql).rows, key=repr) == sorted(
            keyed_store.execute(stored.sql).fetchall(), key=repr)
        cell["spark_proxy"] = timed(
            lambda w=w: pipeline.answer(pipeline.prepare(unique_request(w.sql), analyst, spark_env.policy,
                                                         spark_env.sampler.salt()), analyst, spark_env,
                                        lambda charge: None), args.repeat)
        cell["duckdb_plain"] = timed(lambda w=w: duck_engine.run(w.sql), args.repeat)
        cell["duckdb_engine"] = timed(lambda p=planned: duck_engine.run(p.sql), args.repeat)
        same = sorted(spark_engine.run(spark_sql).rows, key=repr) == sorted(duck_engine.run(planned.sql).rows, key=repr)
        cell["identical_before_noise"] = same
        for engine in ("spark", "duckdb"):
            plain = cell[f"{engine}_plain"]["p50_ms"]
            cell[f"{engine}_engine_over_plain"] = round(cell[f"{engine}_engine"]["p50_ms"] / plain, 2)
        for way in ("engine", "store"):
            plain_cpu = max(cell["spark_plain"]["cpu_ms"], 0.1)
            cell[f"spark_{way}_over_plain_cpu"] = round(cell[f"spark_{way}"]["cpu_ms"] / plain_cpu, 2)
        cell["spark_store_over_plain"] = round(cell["spark_store"]["p50_ms"] / cell["spark_plain"]["p50_ms"], 2)
        cell["spark_proxy_over_plain"] = round(cell["spark_proxy"]["p50_ms"] / cell["spark_plain"]["p50_ms"], 2)
        cell["spark_over_duckdb_engine"] = round(cell["spark_engine"]["p50_ms"] / cell["duckdb_engine"]["p50_ms"], 2)
        answer = pipeline.answer(pipeline.prepare(unique_request(w.sql), analyst, spark_env.policy,
                                                  spark_env.sampler.salt()), analyst, spark_env, lambda charge: None)
        errors = relative_errors(answer.release.rows, list(duck_engine.run(w.sql).rows), len(planned.analysis.keys))
        all_errors += errors
        cell["median_relative_error"] = round(float(np.median(errors)), 4) if errors else None
        results["queries"][w.name] = cell
        print(f"{w.name:20s} spark plain {cell['spark_plain']['p50_ms']:8.1f}"
              f" engine {cell['spark_engine']['p50_ms']:8.1f}"
              f" (x{cell['spark_engine_over_plain']:.2f}, cpu x{cell['spark_engine_over_plain_cpu']:.2f})"
              f" store {cell['spark_store']['p50_ms']:8.1f} (x{cell['spark_store_over_plain']:.2f},"
              f" cpu x{cell['spark_store_over_plain_cpu']:.2f}, identical {cell['store_identical_before_noise']})"
              f" proxy {cell['spark_proxy']['p50_ms']:8.1f}"
              f" | duckdb plain {cell['duckdb_plain']['p50_ms']:7.1f} engine {cell['duckdb_engine']['p50_ms']:7.1f}"
              f" (x{cell['duckdb_engine_over_plain']:.2f}) | identical {same} | median rel err"
              f" {cell['median_relative_error']}", flush=True)
    results["median_relative_error_all"] = round(float(np.median(all_errors)), 4) if all_errors else None
    results["loadavg_1min_end"] = round(os.getloadavg()[0], 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"session start {spark_start_s:.1f} s; median relative error (all cells) "
          f"{results['median_relative_error_all']}; written to {args.out}")
    duck_engine.close()
    keyed_store.close()
    spark_store.close()
    spark_engine.close()
    for _, engine in spark_env.engines:
        engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
