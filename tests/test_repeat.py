"""Repeats cannot average noise away: an identical request gets the first answer, byte for byte, free."""

from __future__ import annotations

from proxy.demo import DemoFiles
from tests.conftest import StartFresh, spend

SQL = "SELECT category, COUNT(*) AS n, AVG(amount) AS a FROM visits GROUP BY category"


def test_identical_request_returns_the_stored_release_without_a_charge(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server()
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        first = analyst.post("/v1/query", json={"sql": SQL, "epsilon": 0.2})
        assert first.status_code == 200 and first.headers["x-dp-repeat"] == "false"
        spent = spend(analyst)
        # same query, other spelling: keyword case and whitespace do not make a new request
        again = analyst.post("/v1/query", json={"sql": SQL.lower().replace(" ", "  "), "epsilon": 0.2})
        assert again.status_code == 200
        assert again.headers["x-dp-repeat"] == "true"
        assert again.headers["x-dp-charge-id"] == first.headers["x-dp-charge-id"] == first.json()["charge"]["id"]
        assert again.content == first.content  # byte for byte: the same noise, not fresh noise
        assert spend(analyst) == spent
        assert admin.get("/v1/ledger").json()["total"] == 1

        # other parameters are another request, charged anew with fresh noise
        other = analyst.post("/v1/query", json={"sql": SQL, "epsilon": 0.3})
        assert other.headers["x-dp-repeat"] == "false"
        assert spend(analyst)["epsilon_spent"] > spent["epsilon_spent"]
        assert admin.get("/v1/ledger").json()["total"] == 2

        # the admin asking the same query is charged on the admin's own budget: releases are per analyst
        theirs = admin.post("/v1/query", json={"sql": SQL, "epsilon": 0.2})
        assert theirs.headers["x-dp-repeat"] == "false"
        assert admin.get("/v1/ledger").json()["total"] == 3


def test_repeat_survives_a_restart(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server()
    with server.client(demo.analyst_key) as analyst:
        first = analyst.post("/v1/query", json={"sql": SQL})
        assert first.status_code == 200
    server.kill9()
    server.start(server.policy)  # type: ignore[arg-type]
    with server.client(demo.analyst_key) as analyst:
        again = analyst.post("/v1/query", json={"sql": SQL})
        assert again.headers["x-dp-repeat"] == "true" and again.content == first.content
