"""The bounding store on Spark (proxy/store/spark_store.py), in-process on local[2]: built by the proxy's start-up
from the demo's Parquet, it holds the same rows and ranks as the store DuckDB builds (proxy/store.py; both order by
the explicit keyed hash); every workload query on the store path gives the same rows before noise on both engines;
the proxy answers from it, refusing before the charge what Spark cannot compute alike; a changed source is
rebuilt and swapped; and the neighbouring-dataset oracle holds on it.

One Spark session serves the whole test run (proxy.engines.spark_engine.session is per process).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pytest

pytest.importorskip("pyspark")

from proxy import pipeline
from proxy.app import build_env
from proxy.cli.demo import build_demo
from proxy.engines.spark_config import SparkSource, SparkTable
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import QueryError
from proxy.query.planner import plan
from proxy.query.rewrite.render import render_text
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from proxy.store.duckdb_store import StoreEngine
from proxy.store.spark_store import SparkStoreEngine
from tests.support import oracle_db
from tests.support.spark_data import MASTER, beside_duckdb, export_parquet, spark_policy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from query_latency import WORKLOAD

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")

QUERIES = (
    *(w.sql for w in WORKLOAD),
    "SELECT plan, region, COUNT(*) AS n FROM users WHERE age >= 30 GROUP BY plan, region",
    "SELECT day, SUM(duration_s) FROM visits WHERE category LIKE 'tr%' AND region <> 'east' GROUP BY day",
    "SELECT age, COUNT(DISTINCT user_id) FROM users WHERE region IN ('north', 'south') GROUP BY age",
    # two row-level keys: a window over each unit's cells, ranked by the keyed hash under the salt on both engines
    "SELECT category, day, COUNT(*), SUM(duration_s) FROM visits GROUP BY category, day",
    # scoped joins on the store's canonical values: the rank filter, and per cell after a row-level WHERE
    "SELECT COUNT(*), SUM(v.amount) FROM visits v JOIN users u USING (user_id) WHERE u.plan = 'pro' "
    "AND v.region = 'north'",
    "SELECT v.category, COUNT(*) FROM visits v LEFT JOIN users u ON v.user_id = u.user_id WHERE u.plan = 'free' "
    "AND v.amount > 10 GROUP BY v.category",
)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, SparkStoreEngine, StoreEngine]]:
    """The demo (200 users, 3000 visits) served from its Spark store, built by the proxy's start-up, and the
    DuckDB store proxy/store/duckdb_store.py builds from the same rows with the same key."""
    directory = tmp_path_factory.mktemp("spark-store")
    demo = build_demo(directory / "demo", users=200, rows=3000)
    policy = spark_policy(demo.policy, export_parquet(demo.database, directory / "parquet"), directory / "spark",
                          bounding="store")
    env = build_env(Settings(policy=policy, ledger=str(directory / "ledger.sqlite"), query_timeout_s=600))
    assert isinstance(env.engine("demo"), SparkStoreEngine)
    with beside_duckdb(env, demo.database) as served:
        yield served


def test_the_spark_store_holds_the_same_rows_and_ranks_as_duckdbs(stores: Any) -> None:
    env, spark, duck = stores
    assert oct(spark.path.stat().st_mode & 0o777) == "0o555"  # never writable after its build
    for table in env.policy.dataset("demo").catalog.tables:
        columns = ", ".join(f'"{c}"' for c in duck.columns(table.name))
        assert "__row_rank" in columns
        on_duckdb = sorted(duck.run(f'SELECT {columns} FROM "{table.name}"').rows, key=repr)
        on_spark = sorted(spark.run(render_text(f'SELECT {columns} FROM "{table.name}"', spark.target)).rows, key=repr)
        assert on_spark == on_duckdb and len(on_spark) in (200, 3000), table.name


@pytest.mark.parametrize("sql", QUERIES)
def test_every_workload_query_on_the_store_gives_the_same_rows_on_both_engines(stores: Any, sql: str) -> None:
    env, spark, duck = stores
    planned = plan(sql, env.policy.dataset("demo").catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=7,
                   bounding="store")
    on_spark = spark.run(render_text(planned.sql, spark.target)).rows
    assert on_spark, sql
    assert sorted(on_spark, key=repr) == sorted(duck.run(planned.sql).rows, key=repr), sql


def test_the_proxy_answers_a_spark_dataset_from_its_store(stores: Any) -> None:
    env = stores[0]
    analyst = next(a for a in env.policy.analysts if a.role == "analyst")
    request = QueryRequest(sql="SELECT category, COUNT(*) AS n FROM visits GROUP BY category", epsilon=Decimal("0.5"))
    prepared = pipeline.prepare(request, analyst, env.policy, 11)
    assert prepared.plan.tree is None  # the store's rank filter, not per-query windows
    answer = pipeline.answer(prepared, analyst, env, lambda charge: None)
    assert len(answer.release.rows) == 8
    # rendered for Spark before the charge: what Spark cannot compute alike is refused for free
    modulo = pipeline.prepare(QueryRequest(sql="SELECT COUNT(*) FROM visits WHERE duration_s % 2 = 0"), analyst,
                              env.policy, 12)
    with pytest.raises(QueryError, match="Mod in a computed value is not rendered for Spark"):
        pipeline.engine_sql(modulo.plan, env.engine("demo"))


# --- a changed source is rebuilt and swapped; the oracle on the Spark store -----------------------------------

E = TableSchema("e", "uid", (
    ColumnSpec("uid", "BIGINT"), ColumnSpec("s", "VARCHAR", groupable=True),
    ColumnSpec("f", "DOUBLE", groupable=True, bounds=(-2.5, 3.25)),
    ColumnSpec("u", "VARCHAR", unit_level=True, groupable=True), ColumnSpec("n", "INTEGER", bounds=(0, 10)),
), max_groups=2, max_rows=2)
ORACLE_QUERIES = (  # a rank filter by unit and by a row-level key; per cell after a row-level WHERE; two keys
    "SELECT u, COUNT(*), SUM(f), COUNT(DISTINCT uid) FROM e GROUP BY u",
    "SELECT s, COUNT(*), SUM(n), AVG(f) FROM e GROUP BY s",
    "SELECT s, COUNT(*), SUM(f) FROM e WHERE n > 2 GROUP BY s",
    "SELECT s, f, COUNT(*), SUM(n) FROM e GROUP BY s, f",
)
HEAVY = [(0, s, 1e300, "p", 10) for s in "abcde" for _ in range(3)]  # unit 0: extreme values in every group
OTHERS = [(uid, "abc"[(uid * i) % 3], (i % 7) - 3.5, "pq"[i % 2], i % 12) for uid in range(1, 9) for i in range(5)]


def _write(path: Path, rows: list[tuple[object, ...]]) -> None:
    with duckdb.connect() as con:
        con.execute("CREATE TABLE e (uid BIGINT, s VARCHAR, f DOUBLE, u VARCHAR, n INTEGER)")
        con.executemany("INSERT INTO e VALUES (?, ?, ?, ?, ?)", rows)
        con.execute(f"COPY e TO '{path}.tmp' (FORMAT parquet)")
    os.replace(f"{path}.tmp", path)


def test_a_changed_source_is_rebuilt_and_the_oracle_holds_on_the_spark_store(tmp_path: Path) -> None:
    path = tmp_path / "e.parquet"
    _write(path, HEAVY + OTHERS)
    plans = [plan(q, Catalog((E,)), epsilon=1.0, delta=1e-6, mechanism="laplace", salt=3, bounding="store")
             for q in ORACLE_QUERIES]
    store = SparkStoreEngine("oracle", SparkSource(MASTER, (SparkTable("e", "parquet", str(path)),)),
                             Catalog((E,)), tmp_path, timeout_s=600)
    try:
        def results() -> list[dict[tuple[object, ...], tuple[int, ...]]]:
            keys = [len(p.analysis.keys) for p in plans]
            rows = [store.run(render_text(p.sql, store.target)).rows for p in plans]
            return [{tuple(r[:k]): tuple(oracle_db.as_int(v) for v in r[k:]) for r in found}
                    for found, k in zip(rows, keys, strict=True)]

        first, big = store.path, results()
        _write(path, OTHERS)  # D′: the heavy unit removed
        store.refresh()
        assert store.path != first and not first.exists()  # rebuilt, swapped, the old store removed
        small = results()
    finally:
        store.close()
    for planned, b, s in zip(plans, big, small, strict=True):
        analysis = planned.analysis
        sensitivities = [1] + [m.sensitivity(analysis.table.max_rows) for m in analysis.measures]
        assert any(v for row in b.values() for v in row)
        oracle_db.assert_moves_within(b, s, sensitivities, analysis.max_groups, planned.source_sql)
