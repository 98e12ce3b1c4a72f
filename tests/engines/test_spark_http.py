"""End to end over HTTP: a live server whose dataset lives on Spark (local[2]) answers like the DuckDB one,
reports its Spark connection as ready, refuses Spark-specific attacks for free, and reports a job past the
time limit as a charged timeout with a fixed message, after which Spark runs the next job.

Two servers (a JVM each): one with a generous time limit, one whose limit no cold Spark query can meet.
(tests/engines/test_spark_engine.py cancels a job of known length in process and runs the next query.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("pyspark")

from proxy.cli.demo import DemoFiles
from tests import conftest
from tests.support.live import Server
from tests.support.spark_data import export_parquet, spark_policy

# py4j (pyspark's bridge to the JVM) leaves gateway sockets to the garbage collector
pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning")

START_S = 300.0  # a JVM's start-up on a busy machine takes more than conftest's minute
ANSWER_S = 300.0  # and so can a cold Spark query (the server's own limit is DPPROXY_QUERY_TIMEOUT_S)


def _client(server: Server, key: str | None = None) -> httpx.Client:
    client = server.client(key)
    client.timeout = httpx.Timeout(ANSWER_S)
    return client


def _start(demo: DemoFiles, directory: Path, settings: dict[str, str]) -> Server:
    parquet = export_parquet(demo.database, directory.parent / "parquet")
    policy = spark_policy(demo.policy, parquet, directory)
    policy.write_text(policy.read_text().replace("epsilon = 5.0, delta = 1e-6", "epsilon = 100.0, delta = 1e-4"))
    live = Server(directory / "server.log", {"DPPROXY_READINESS_TIMEOUT_S": "60", **settings})
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(conftest, "READY_TIMEOUT_S", START_S)
        live.start(policy)
    return live


@pytest.fixture(scope="module")
def spark_server(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    live = _start(demo, tmp_path_factory.mktemp("spark-http") / "server", {"DPPROXY_QUERY_TIMEOUT_S": "240"})
    try:
        yield live
    finally:
        live.stop()


def _spent(client: httpx.Client) -> float:
    (entry,) = [b for b in client.get("/v1/budget").json()["budgets"] if b["dataset"] == "demo"]
    return float(entry["epsilon_spent"])


def test_queries_are_answered_from_spark(spark_server: Server, demo: DemoFiles) -> None:
    with _client(spark_server, demo.analyst_key) as client:
        sql = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
        response = client.post("/v1/query", json={"sql": sql, "epsilon": 0.5})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        assert sorted(row[0] for row in body["rows"]) == ["central", "east", "north", "south", "west"]
        assert body["charge"]["epsilon"] == 0.5
    with _client(spark_server) as anyone:
        assert anyone.get("/readyz").json() == {"ok": True}  # a job ran on Spark's executors


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM parquet.`/etc/passwd`",
    "SELECT COUNT(*) FROM visits WHERE region = reflect('java.lang.System', 'getenv', 'HOME')",
    "SELECT COUNT(*) FROM read_files('/etc/passwd')",
    "CREATE TEMPORARY FUNCTION f AS 'com.example.Evil'",
])
def test_spark_specific_attacks_are_refused_for_free(spark_server: Server, demo: DemoFiles, sql: str) -> None:
    with _client(spark_server, demo.analyst_key) as client:
        before = _spent(client)
        response = client.post("/v1/query", json={"sql": sql, "dialect": "spark"})
        assert 400 <= response.status_code < 500, response.text
        body = response.json()
        assert body["charged"] is False and body["code"] and body["error"], body
        assert _spent(client) == before
    assert "Spark query failed" not in spark_server.log.read_text()  # refused before Spark saw anything


def test_a_job_past_the_time_limit_is_a_charged_timeout_and_spark_runs_the_next_job(
    demo: DemoFiles, tmp_path: Path
) -> None:
    tight = _start(demo, tmp_path / "server", {"DPPROXY_QUERY_TIMEOUT_S": "0.5"})
    try:
        with _client(tight, demo.analyst_key) as client:
            before = _spent(client)
            sql = "SELECT category, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY category"
            response = client.post("/v1/query", json={"sql": sql})  # a cold Spark query: seconds
            assert response.status_code == 504, response.text
            body = response.json()
            assert (body["code"], body["charged"]) == ("timeout", True)
            assert body["error"] == "query exceeded the time limit"  # fixed, never Spark's text
            assert _spent(client) > before  # charged, never refunded
        with _client(tight) as anyone:
            assert anyone.get("/readyz").json() == {"ok": True}  # the next job runs on the same session
    finally:
        tight.stop()
    assert "Spark query cancelled after" in tight.log.read_text()  # its job tag was cancelled
