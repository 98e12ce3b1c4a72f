"""Spark against DuckDB and plain Spark SQL on the benchmark's workload (issue #16), from Parquet.

    python bench/spark_latency.py [--rows 1000000] [--users 50000] [--repeat 5] [--master local[2]]

The demo dataset of bench/query_latency.py (built or reused in --dir), its tables also written as Parquet,
and for every workload query (bench/query_latency.py WORKLOAD), one warm-up then --repeat timed runs of:

    spark plain    the analyst's SQL as is (non-private) on Spark over the Parquet views
    spark engine   the rewritten (bounded, clamped) SQL rendered for Spark, through SparkEngine.run
    spark proxy    proxy.pipeline.answer in process on the Spark dataset: plan, admit (SQLite), Spark, release
    duckdb plain   the analyst's SQL on DuckDB (the demo file, same threads)
    duckdb engine  the rewritten SQL on DuckDB, through the DuckDB engine

It reports p50/p95 latency per cell, the ratios engine/plain and proxy/plain on each engine, whether both
engines returned identical rows before noise (same salt), and the median relative error of the Spark
release against the true answer (plain), over every released numeric cell.
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
from proxy.policy import load_policy  # noqa: E402
from proxy.query import plan  # noqa: E402
from proxy.query.render import render  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402
from proxy.settings import Settings  # noqa: E402
from tests.spark_data import export_parquet, spark_policy  # noqa: E402

_UNIQUE = itertools.count(1)


def unique_request(sql: str) -> QueryRequest:
    """A request never a repeat of an earlier one (ε differs in the 9th decimal), so the ledger's stored
    release is never the answer."""
    return QueryRequest(sql=sql, epsilon=Decimal("0.1") + next(_UNIQUE) * Decimal("1e-9"))


def timed(fn: Callable[[], object], repeat: int) -> dict[str, float]:
    fn()  # warm-up
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    a = np.asarray(samples)
    return {"p50_ms": round(float(np.percentile(a, 50)), 1), "p95_ms": round(float(np.percentile(a, 95)), 1),
            "n": len(samples)}


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
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "spark_latency.json")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    directory = args.dir / f"{args.rows}"
    meta, _ = ensure_dataset(directory, rows=args.rows, users=args.users)
    parquet = export_parquet(directory / "demo.duckdb", directory / "parquet")
    policy_path = spark_policy(directory / "policy.toml", parquet, directory / "spark", master=args.master)
    started = time.perf_counter()
    spark_env = build_env(Settings(policy=policy_path, ledger=str(fresh_ledger(directory / "spark")),
                                   query_timeout_s=600, threads=2))
    spark_start_s = time.perf_counter() - started
    duck_policy = load_policy(directory / "policy.toml").dataset("demo")
    assert duck_policy is not None
    dataset = spark_env.policy.dataset("demo")
    assert dataset is not None
    spark_engine = spark_env.engine("demo")
    analyst = next(a for a in spark_env.policy.analysts if a.role == "analyst")
    duck_engine = Engine(directory / "demo.duckdb", threads=2, memory_limit="4GB", timeout_s=600)
    spark = spark_engine._spark  # type: ignore[union-attr]
    results: dict[str, Any] = {"rows": args.rows, "users": args.users, "master": args.master,
                               "spark_session_start_s": round(spark_start_s, 1), "dataset": meta,
                               "loadavg_1min_start": round(os.getloadavg()[0], 2), "queries": {}}
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
              f" (x{cell['spark_engine_over_plain']:.2f}) proxy {cell['spark_proxy']['p50_ms']:8.1f}"
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
    spark_engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
