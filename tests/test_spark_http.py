"""End to end over HTTP: a live server whose datasets live on Spark (local[2]) answers like the DuckDB one,
reports its Spark connection as ready, refuses Spark-specific attacks for free, and reports a job past the
time limit as a charged timeout, after which the next query is answered.

One server (one JVM) for the module: `demo` (the e2e demo as Parquet) and `slow` (12M visits, a minute of work
per query, far past the limit).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

pytest.importorskip("pyspark")

from proxy.demo import DemoFiles
from tests import conftest
from tests.conftest import Server
from tests.spark_data import export_parquet, spark_policy

# py4j (pyspark's bridge to the JVM) leaves gateway sockets to the garbage collector
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")

TIMEOUT_S = 20  # a warm Spark answers the demo in about a second; the slow dataset needs far longer
SLOW_ROWS = 12_000_000


def _with_slow_dataset(policy: Path, parquet: Path) -> None:
    """Add dataset `slow`: the demo's declarations over `parquet` (visits only), with a budget for everyone."""
    text = policy.read_text(encoding="utf-8")
    start, end = text.index("[datasets.demo]"), text.index("[analysts.")
    block = text[start:end].replace("[datasets.demo", "[datasets.slow")
    block = re.sub(r"^users = .*\n", "", block, flags=re.MULTILINE)
    block = re.sub(r"^visits = .*$", f'visits = {{ parquet = "{parquet}" }}', block, flags=re.MULTILINE)
    block = block[:block.index("[datasets.slow.tables.users]")]
    text = text[:end] + block + "\n" + text[end:]
    text = re.sub(r"^budgets = \{ demo = (\{[^}]*\}) \}$", r"budgets = { demo = \1, slow = \1 }", text,
                  flags=re.MULTILINE)
    policy.write_text(text, encoding="utf-8")


@pytest.fixture(scope="module")
def spark_server(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("spark-http")
    parquet = export_parquet(demo.database, directory / "parquet")
    slow = directory / "slow-visits.parquet"
    with duckdb.connect() as con:
        con.execute(f"COPY (SELECT range % 100000 AS user_id, 'north' AS region, 30 AS age, "
                    f"DATE '2026-01-01' + (range % 90)::INTEGER AS day, 'books' AS category, "
                    f"(range % 500)::DOUBLE AS amount, (range % 3600)::INTEGER AS duration_s "
                    f"FROM range({SLOW_ROWS})) TO '{slow}' (FORMAT parquet)")
    policy = spark_policy(demo.policy, parquet, directory / "server")
    text = policy.read_text().replace("epsilon = 5.0, delta = 1e-6", "epsilon = 100.0, delta = 1e-4")
    policy.write_text(text)
    _with_slow_dataset(policy, slow)
    live = Server(directory / "server.log", {"DPPROXY_QUERY_TIMEOUT_S": str(TIMEOUT_S)})
    with pytest.MonkeyPatch.context() as patch:  # a JVM's start-up on a busy machine takes more than a minute
        patch.setattr(conftest, "READY_TIMEOUT_S", 300.0)
        live.start(policy)
    try:
        yield live
    finally:
        live.stop()


def _spent(client: httpx.Client, dataset: str) -> float:
    (entry,) = [b for b in client.get("/v1/budget").json()["budgets"] if b["dataset"] == dataset]
    return float(entry["epsilon_spent"])


def test_queries_are_answered_from_spark(spark_server: Server, demo: DemoFiles) -> None:
    with spark_server.client(demo.analyst_key) as client:
        response = client.post("/v1/query", json={"sql": "SELECT region, COUNT(*) AS n FROM visits GROUP BY region",
                                                  "epsilon": 0.5, "dataset": "demo"})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert [row[0] for row in body["rows"]] == ["central", "east", "north", "south", "west"]
        assert body["charge"]["epsilon"] == 0.5
    with spark_server.client() as anyone:
        assert anyone.get("/readyz").json() == {"ok": True}  # a job ran on Spark's executors


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM parquet.`/etc/passwd`",
    "SELECT COUNT(*) FROM visits WHERE region = reflect('java.lang.System', 'getenv', 'HOME')",
    "SELECT COUNT(*) FROM read_files('/etc/passwd')",
    "CREATE TEMPORARY FUNCTION f AS 'com.example.Evil'",
])
def test_spark_specific_attacks_are_refused_for_free(spark_server: Server, demo: DemoFiles, sql: str) -> None:
    with spark_server.client(demo.analyst_key) as client:
        before = _spent(client, "demo")
        response = client.post("/v1/query", json={"sql": sql, "dialect": "spark", "dataset": "demo"})
        assert 400 <= response.status_code < 500, response.text
        body = response.json()
        assert body["charged"] is False and body["code"] and body["message"], body
        assert _spent(client, "demo") == before


def test_a_job_past_the_time_limit_is_a_charged_timeout_and_the_next_query_works(
    spark_server: Server, demo: DemoFiles
) -> None:
    with spark_server.client(demo.analyst_key) as client:
        before = _spent(client, "slow")
        sql = "SELECT day, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY day"
        response = client.post("/v1/query", json={"sql": sql, "dataset": "slow"})
        assert response.status_code == 504, response.text
        body = response.json()
        assert (body["code"], body["charged"]) == ("timeout", True)
        assert body["message"] == "query exceeded the time limit"  # fixed, never Spark's text
        assert _spent(client, "slow") > before  # charged, never refunded
        after = client.post("/v1/query", json={"sql": "SELECT plan, COUNT(*) FROM users GROUP BY plan",
                                                "dataset": "demo"})
        assert after.status_code == 200, after.text
    assert "cancelled after" in spark_server.log.read_text()  # the job group was cancelled, not left running
