"""Automatic bounds (docs/privacy.md §10) and a public table on a Spark dataset, in-process on local[2]: the demo's
auto policy over Parquet copies of its tables, with a public table `departments`, bounded per query and by the
store Spark builds. Before noise, each selection histogram and the query at the bounds drawn from it are the
same rows on Spark as on DuckDB, exactly; the proxy answers such a query end to end on Spark, with one charge.

One Spark session serves the whole test run (proxy.engines.spark_engine.session is per process).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mechanisms.sampling import FixedSampler
from proxy import pipeline
from proxy.app import build_env
from proxy.cli.demo import build_demo
from proxy.engines.spark_engine import SparkEngine
from proxy.query import auto_release
from proxy.query.errors import QueryError
from proxy.query.planner import plan
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from proxy.store.spark_store import SparkStoreEngine
from tests.support import departments
from tests.support.spark_data import TABLES, beside_duckdb, export_parquet, spark_policy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from query_latency import WORKLOAD

pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")

BY_NAME = {w.name: w.sql for w in WORKLOAD}
QUERIES = (  # every chosen bound but a clamp (quantiles are not rendered for Spark); a row-level WHERE; a join
    BY_NAME["category_sum_avg"],  # max_rows, max_groups, the total cap of amount
    BY_NAME["filtered_avg"],  # row-level WHERE: max_rows, the total cap of duration_s
    BY_NAME["day_distinct_users"],  # max_rows, max_groups for COUNT(DISTINCT)
    BY_NAME["plan_join"],  # max_rows over a join with users
    # a join to the public table (copied into the store as declared), filtered by its column
    "SELECT v.region, COUNT(*) AS n FROM visits v INNER JOIN departments d ON v.category = d.category "
    "WHERE d.department = 'food' GROUP BY v.region",
)


CASES = (  # the store (the demo's bounding) on every query; per query, the two with a chosen total cap
    *(("store", sql) for sql in QUERIES), ("per_query", QUERIES[0]), ("per_query", QUERIES[1]),
    ("per_query", QUERIES[-1]),
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Any]]:
    yield from served(tmp_path_factory, "store")


@pytest.fixture(scope="module")
def per_query(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Any]]:
    yield from served(tmp_path_factory, "per_query")


def served(tmp_path_factory: pytest.TempPathFactory, bounding: str) -> Iterator[tuple[Any, Any, Any]]:
    """The demo (200 users, 3000 visits) with its automatic bounds, served from Parquet on Spark (bounded per query,
    or by the store Spark builds at start-up), and the same rows on DuckDB bounded alike."""
    directory = tmp_path_factory.mktemp(f"spark-auto-{bounding}")
    demo = build_demo(directory / "demo", users=200, rows=3000)
    departments.create(demo.database)
    demo.policy.write_text(departments.declared(demo.policy.read_text()))
    parquet = export_parquet(demo.database, directory / "parquet", (*TABLES, "departments"))
    policy = spark_policy(demo.policy, parquet, directory / "spark", bounding=bounding, auto=True)
    env = build_env(Settings(policy=policy, ledger=str(directory / "ledger.sqlite"), query_timeout_s=600))
    spark = env.engine("demo")
    assert isinstance(spark, SparkStoreEngine if bounding == "store" else SparkEngine)
    with beside_duckdb(env, demo.database) as served:
        yield served


@pytest.mark.parametrize(("bounding", "sql"), CASES)
def test_the_selection_and_the_query_at_the_chosen_bounds_give_the_same_rows_on_both_engines(
    request: pytest.FixtureRequest, bounding: str, sql: str
) -> None:
    env, spark, duck = request.getfixturevalue(bounding)
    planned = plan(sql, env.policy.dataset("demo").catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=7,
                   bounding=bounding)
    assert planned.auto is not None and planned.auto.parts, sql
    histograms = spark.run(auto_release.selection_text(planned, spark.target)).rows
    on_duckdb = duck.run(auto_release.selection_text(planned, duck.target)).rows
    assert histograms and sorted(histograms) == sorted(on_duckdb), sql
    chosen = auto_release.draw(planned.analysis, planned.auto, histograms, FixedSampler())
    assert all(part.value is not None for part in chosen.parts)
    at = auto_release.plan_at(planned, chosen)
    on_spark = spark.run(pipeline.engine_sql(at, spark)).rows
    assert on_spark and sorted(on_spark, key=repr) == sorted(duck.run(pipeline.engine_sql(at, duck)).rows, key=repr)


@pytest.mark.parametrize("bounding", ["store", "per_query"])
def test_the_proxy_answers_with_automatic_bounds_on_spark(request: pytest.FixtureRequest, bounding: str) -> None:
    env = request.getfixturevalue(bounding)[0]
    analyst = next(a for a in env.policy.analysts if a.role == "analyst")
    request = QueryRequest(sql=BY_NAME["category_sum_avg"], epsilon=Decimal("0.5"))
    prepared = pipeline.prepare(request, analyst, env.policy, 11)
    charges: list[object] = []
    answer = pipeline.answer(prepared, analyst, env, charges.append)
    assert len(charges) == 1 and answer.bounds is not None
    assert all(part.value is not None for part in answer.bounds.parts)  # drawn from the data
    assert len(answer.release.rows) == 8  # the demo's eight categories
    # a quantile (its clamp chosen from a histogram) is not rendered for Spark: refused before the charge
    median = pipeline.prepare(QueryRequest(sql="SELECT region, MEDIAN(amount) FROM visits GROUP BY region"),
                              analyst, env.policy, 12)
    with pytest.raises(QueryError, match="Spark runs only generated SQL"):
        pipeline.answer(median, analyst, env, charges.append)
    assert len(charges) == 1
