"""A committed charge is durable: it survives `kill -9` of the server and counts after a restart
(docs/architecture.md, step 5: the charge is recorded before any result exists; no refunds)."""

from __future__ import annotations

from typing import Any

from proxy.cli.demo import DemoFiles
from tests.support.live import StartFresh, spend, sum_up

SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


def test_charge_survives_kill9_and_restart(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server()
    with server.client(demo.analyst_key) as analyst:
        response = analyst.post("/v1/query", params={"detail": "cells"}, json={"sql": SQL, "epsilon": 0.3})
        assert response.status_code == 200, response.text
        charge: dict[str, Any] = response.json()["charge"]
        before = spend(analyst)
    assert before["epsilon_spent"] == charge["epsilon"] > 0

    server.kill9()
    assert not server.running
    assert server.policy is not None
    server.start(server.policy)  # the same policy file, so the same ledger file

    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        assert spend(analyst) == before
        ledger = admin.get("/v1/ledger").json()
        assert ledger["total"] == 1
        (entry,) = ledger["charges"]
        assert entry["id"] == charge["id"]
        assert entry["analyst"] == "analyst" and entry["dataset"] == "demo"
        assert {k: entry[k] for k in ("epsilon", "delta", "composition", "events")} == {
            k: charge[k] for k in ("epsilon", "delta", "composition", "events")
        }

        # the restarted server keeps accounting on top of the recovered spend
        again = analyst.post("/v1/query", json={"sql": SQL + " ORDER BY n", "epsilon": 0.3})
        assert again.status_code == 200, again.text
        second = again.json()["charge"]["epsilon"]
        assert spend(analyst)["epsilon_spent"] == sum_up([charge["epsilon"], second])
        assert admin.get("/v1/ledger").json()["total"] == 2
