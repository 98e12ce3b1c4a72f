"""Faults between replicas and between a charge and its answer, against real servers (issue 26, items 11, 12).

- A replica frozen inside an admit (SIGSTOP just after taking its locks) stalled every other replica's
  queries for ~50 s, `/readyz` said 200 throughout, and admitted queries became charged 504s. Here a
  PostgreSQL session holds the locks such an admit holds, inside a transaction, with the product's session
  limits, as the frozen replica's session would: the server refuses within the bound (503 `ledger_busy`,
  `Retry-After`, nothing charged), answers other analysts, says not ready, and answers again once
  PostgreSQL ended the frozen session.
- A SIGKILL between a charge's commit and its answer left a charge no client received, and an identical
  retry paid again. Here the server kills itself at each step of a request with an `Idempotency-Key`
  (proxy/run/faults.py), and the retry after a restart is answered under the one charge, with one release.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest

from accountant.ledger.postgres import lock_key
from proxy.cli.audit import audit_verify
from proxy.cli.demo import DemoFiles
from tests.support.live import StartFresh, spend
from tests.support.pg_fixtures import fresh_schema

SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
KEY = "0b6c1f6e-3f0a-4c2e-9d51-7a8e2b4c9f10"
LOCK_S, IDLE_S = 1.0, 4.0
BOUNDED = {"DPPROXY_LEDGER_LOCK_TIMEOUT_S": str(LOCK_S), "DPPROXY_LEDGER_IDLE_TIMEOUT_S": str(IDLE_S),
           "DPPROXY_READINESS_TIMEOUT_S": "1"}


@pytest.fixture
def pg_ledger() -> Iterator[str]:
    with fresh_schema() as (_, url):
        yield url


def _query(client: httpx.Client, sql: str = SQL, key: str | None = KEY) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return client.post("/v1/query", json={"sql": sql, "epsilon": 0.25}, headers=headers)


def _charges(admin: httpx.Client) -> list[dict[str, Any]]:
    charges: list[dict[str, Any]] = admin.get("/v1/ledger", params={"limit": 1000}).json()["charges"]
    return charges


# --- item 11: a frozen replica ---------------------------------------------------------------------------


def test_a_session_frozen_inside_an_admit_stalls_nobody_past_the_bound(
    fresh_server: StartFresh, demo: DemoFiles, pg_ledger: str
) -> None:
    server = fresh_server(epsilon=5.0, settings={"DPPROXY_LEDGER": pg_ledger, **BOUNDED})
    frozen = psycopg.connect(pg_ledger, autocommit=True)  # closed, not exited: the server ends its session
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin, \
            contextlib.closing(frozen):
        assert _query(analyst, key=None).status_code == 200
        before = spend(analyst)
        # the session of a replica stopped inside an admit: the product's idle limit, the locks an admit holds
        frozen.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                       (str(int(IDLE_S * 1000)),))
        frozen.execute("BEGIN")
        frozen.execute("SELECT pg_advisory_xact_lock(%s), pg_advisory_xact_lock(%s)",
                       (lock_key("ledger", "pair", "analyst", "demo"), lock_key("ledger", "dataset", "demo")))
        frozen_at = time.monotonic()

        started = time.monotonic()
        refused = _query(analyst, "SELECT region, COUNT(*) AS m FROM visits GROUP BY region", key=None)
        waited = time.monotonic() - started
        assert refused.status_code == 503, refused.text
        body = refused.json()
        assert (body["code"], body["charged"]) == ("ledger_busy", False)
        assert int(refused.headers["Retry-After"]) >= IDLE_S
        assert waited < LOCK_S + 2.0  # was ~50 s (PostgreSQL's 60 s idle limit), and then a 500
        assert spend(analyst) == before  # nothing charged

        other = _query(admin, "SELECT region, COUNT(*) AS k FROM visits GROUP BY region", key=None)
        assert other.status_code == 200, other.text  # another analyst's admits take other locks: answered

        ready = httpx.get(f"{server.base_url}/readyz", timeout=10)
        assert ready.status_code == 503 and ready.json()["detail"]["failed"] == ["ledger"]

        time.sleep(max(0.0, IDLE_S + 1.0 - (time.monotonic() - frozen_at)))  # the server ends the session
        assert httpx.get(f"{server.base_url}/readyz", timeout=10).status_code == 200
        again = _query(analyst, "SELECT region, COUNT(*) AS m FROM visits GROUP BY region", key=None)
        assert again.status_code == 200, again.text
        assert len(_charges(admin)) == 3  # the first query, the other analyst's, and this one: no other


# --- item 12: kills between a charge and its answer ---------------------------------------------------------


def _ledger_file(server: Any) -> sqlite3.Connection:
    return sqlite3.connect(server.policy.parent / "ledger.sqlite")


@pytest.mark.parametrize("point", ["admitted", "rendered", "stored"])
def test_a_retry_after_a_kill_is_answered_under_the_one_charge(
    fresh_server: StartFresh, demo: DemoFiles, point: str
) -> None:
    server = fresh_server(epsilon=5.0, settings={"DPPROXY_TEST_KILL_AT": point})
    with server.client(demo.analyst_key) as analyst, pytest.raises(httpx.TransportError):
        _query(analyst)  # the server dies at `point` of this request
    server.kill9()  # reap it
    del server.settings["DPPROXY_TEST_KILL_AT"]
    assert server.policy is not None
    server.start(server.policy)

    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        (paid,) = _charges(admin)  # the charge committed before the kill (at every point)
        retry = _query(analyst)
        assert retry.status_code == 200, retry.text
        assert retry.headers["X-DP-Charge-Id"] == paid["id"]
        # the release was durable before it would have been sent: "stored" gets it back as it was
        assert retry.headers["X-DP-Repeat"] == ("true" if point == "stored" else "false")
        assert [c["id"] for c in _charges(admin)] == [paid["id"]]  # no second charge
        assert spend(analyst)["epsilon_spent"] == paid["epsilon"]
        again = _query(analyst)
        assert again.headers["X-DP-Repeat"] == "true" and again.json()["rows"] == retry.json()["rows"]

        other = _query(analyst, "SELECT region, COUNT(*) AS other FROM visits GROUP BY region")
        assert other.status_code == 422 and other.json()["code"] == "idempotency_key_reused"
        assert not other.json()["charged"] and len(_charges(admin)) == 1

    with _ledger_file(server) as db:
        assert db.execute("SELECT charge_id, count(*) FROM releases GROUP BY charge_id").fetchall() == [(paid["id"], 1)]
        assert db.execute("SELECT charge_id, outcome FROM idempotency_keys").fetchall() == [(paid["id"], "answered")]
    db.close()
    assert audit_verify(str(server.policy.parent / "ledger.sqlite")) == 0


def test_concurrent_retries_with_one_key_make_one_charge_and_one_answer(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server(epsilon=5.0, settings={"DPPROXY_QUERY_WORKERS": "8"})  # 7 at once per analyst
    threads = 6
    barrier = threading.Barrier(threads, timeout=30)
    answers: list[tuple[int, str, str]] = []

    def retry() -> None:
        with server.client(demo.analyst_key) as client:
            barrier.wait()
            for _ in range(20):  # a retry refused for the analyst's concurrency limit is sent again
                response = _query(client)
                if response.status_code != 429:
                    break
                time.sleep(0.05)
            rows = json.dumps(response.json().get("rows"))
            answers.append((response.status_code, response.headers.get("X-DP-Charge-Id", ""), rows))

    workers = [threading.Thread(target=retry) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert [status for status, _, _ in answers] == [200] * threads
    assert len({charge for _, charge, _ in answers}) == 1  # one charge
    assert len({rows for _, _, rows in answers}) == 1  # one release: every retry got the same noisy rows
    with server.client(demo.admin_key) as admin:
        assert len(_charges(admin)) == 1


def test_a_malformed_key_is_a_free_400(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server(epsilon=5.0)
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        for key in ("", "has space", "x" * 129, "caf\u00e9", "a/b", "a,b"):
            refused = analyst.post("/v1/query", json={"sql": SQL}, headers={"Idempotency-Key": key.encode()})
            assert refused.status_code == 400, (key, refused.text)
            assert refused.json()["code"] == "invalid_parameter" and not refused.json()["charged"]
            assert refused.json()["detail"]["parameter"] == "Idempotency-Key"
        assert _charges(admin) == []
