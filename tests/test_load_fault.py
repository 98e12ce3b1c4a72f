"""Load and faults: concurrent analysts query a live server while it is killed with SIGKILL and restarted.

Afterwards every answer a client received has its charge in the ledger (no charge lost, no uncharged
answer), the recorded spend equals the sum of the recorded charges, and no analyst is over budget.
The load is bounded in count and time and goes to 127.0.0.1 only.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx

from proxy.demo import DemoFiles
from tests.conftest import StartFresh, spend, sum_up

WORKERS = 6
REQUESTS_PER_WORKER = 25  # HTTP answers each worker waits for; transport errors are retried
DEADLINE_S = 90
KILLS = 3
BUDGET = 1.0
QUERY_EPSILON = 0.02  # 1.0 / 0.02 = 50 queries per analyst fit; 75 are sent per analyst, so budgets run out


def _worker(base_url: str, key: str, worker: int, answers: list[dict[str, Any]], refusals: list[int],
            failures: list[str]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30.0) as client:
        i = 0
        while i < REQUESTS_PER_WORKER and time.monotonic() < deadline:
            sql = f"SELECT region, COUNT(*) AS n_{worker}_{i} FROM visits GROUP BY region"  # distinct: no repeats
            try:
                response = client.post("/v1/query", json={"sql": sql, "epsilon": QUERY_EPSILON})
            except httpx.TransportError as err:  # the server was killed under this request: retry later
                failures.append(type(err).__name__)
                time.sleep(0.2)
                continue
            i += 1
            if response.status_code == 200:
                answers.append(response.json()["charge"])
            elif response.status_code == 403 and response.json()["code"] == "budget_exceeded":
                refusals.append(1)
            else:
                failures.append(f"{response.status_code} {response.text[:200]}")


def _all_charges(admin: httpx.Client) -> list[dict[str, Any]]:
    charges: list[dict[str, Any]] = []
    while True:
        page = admin.get("/v1/ledger", params={"limit": 1000, "offset": len(charges)}).json()
        charges += page["charges"]
        if len(charges) >= page["total"]:
            return charges


def test_answers_keep_their_charges_through_sigkill_and_restart(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server(epsilon=BUDGET, delta=1e-6)
    answers: list[dict[str, Any]] = []
    refusals: list[int] = []
    failures: list[str] = []
    keys = [demo.analyst_key, demo.admin_key]
    port = server.port
    threads = [
        threading.Thread(target=_worker, args=(server.base_url, keys[w % 2], w, answers, refusals, failures))
        for w in range(WORKERS)
    ]
    for thread in threads:
        thread.start()
    for _ in range(KILLS):
        time.sleep(1.0)
        server.kill9()
        time.sleep(0.3)  # requests meanwhile fail to connect
        server.start(server.policy, port=port)  # type: ignore[arg-type]
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)

    unexpected = [f for f in failures if f[0].isdigit()]
    assert unexpected == []  # every HTTP answer was a 200 or a budget refusal: no 5xx
    assert answers, "no query was answered"
    with server.client(demo.admin_key) as admin, server.client(demo.analyst_key) as analyst:
        ledger = _all_charges(admin)
        recorded = {c["id"]: c for c in ledger}
        # no charge lost: every answer that reached a client is in the ledger with the same charge
        for charge in answers:
            assert charge["id"] in recorded
            assert recorded[charge["id"]]["epsilon"] == charge["epsilon"]
        # charges may exceed answers (killed between admit and reply), never the reverse
        assert len(recorded) >= len(answers)
        for client, name in ((analyst, "analyst"), (admin, "admin")):
            mine = [c["epsilon"] for c in ledger if c["analyst"] == name]
            spent = spend(client)
            assert spent["epsilon_spent"] == sum_up(mine)
            assert spent["epsilon_spent"] <= BUDGET
    # the load really ran into the faults and the budgets: some requests died with the server, some were refused
    assert len(answers) + len(refusals) == WORKERS * REQUESTS_PER_WORKER
    assert refusals and failures
