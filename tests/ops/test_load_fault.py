"""Load and faults: concurrent analysts query a live server while it is killed with SIGKILL and restarted.

Afterwards every answer a client received has its charge in the ledger (no charge lost, no uncharged
answer), the recorded spend equals the sum of the recorded charges, no analyst is over budget, and every
charge has its `admitted` audit entry and the chain verifies (`dpproxy audit-verify` exits 0), however the
kills fell between a charge's commit and its answer (issue #10: charges killed in that window used to have
no audit entry). Run on a SQLite ledger and on a PostgreSQL one. The load is bounded in count and time and
goes to 127.0.0.1 only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from accountant.audit.log import AuditFilter, open_audit
from proxy.cli.audit import audit_verify
from proxy.cli.demo import DemoFiles
from tests.support.live import StartFresh, spend, sum_up
from tests.support.pg_fixtures import fresh_schema

WORKERS = 6
REQUESTS_PER_WORKER = 25  # HTTP answers each worker waits for at least, and more until the kills are over;
# transport errors are retried
DEADLINE_S = 90
KILLS = 3
BUDGET = 1.0
QUERY_EPSILON = 0.02  # 1.0 / 0.02 = 50 queries per analyst fit; 75 are sent per analyst, so budgets run out


def _worker(base_url: str, key: str, worker: int, answers: list[dict[str, Any]], refusals: list[int],
            failures: list[str], killing: threading.Event, sent: list[int]) -> None:
    """Query until REQUESTS_PER_WORKER answers came back and the kills are over (`killing` cleared): the load
    must still run when the server dies, however fast it answers. `sent` gets how many answers came back."""
    deadline = time.monotonic() + DEADLINE_S
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30.0) as client:
        i = 0
        while (i < REQUESTS_PER_WORKER or killing.is_set()) and time.monotonic() < deadline:
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
                time.sleep(0.05)  # out of budget: keep up a modest load until the kills are over
            else:
                failures.append(f"{response.status_code} {response.text[:200]}")
        sent.append(i)


def _all_charges(admin: httpx.Client) -> list[dict[str, Any]]:
    charges: list[dict[str, Any]] = []
    while True:
        page = admin.get("/v1/ledger", params={"limit": 1000, "offset": len(charges)}).json()
        charges += page["charges"]
        if len(charges) >= page["total"]:
            return charges


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The server's DPPROXY_LEDGER: none (the policy copy's SQLite file) or a fresh PostgreSQL schema."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            yield {}
        else:
            _, url = stack.enter_context(fresh_schema())
            yield {"DPPROXY_LEDGER": url}


def test_answers_keep_their_charges_through_sigkill_and_restart(
    fresh_server: StartFresh, demo: DemoFiles, ledger_env: dict[str, str]
) -> None:
    server = fresh_server(epsilon=BUDGET, delta=1e-6, settings=ledger_env)
    answers: list[dict[str, Any]] = []
    refusals: list[int] = []
    failures: list[str] = []
    sent: list[int] = []
    killing = threading.Event()
    killing.set()
    keys = [demo.analyst_key, demo.admin_key]
    port = server.port
    threads = [
        threading.Thread(target=_worker, args=(server.base_url, keys[w % 2], w, answers, refusals, failures,
                                               killing, sent))
        for w in range(WORKERS)
    ]
    for thread in threads:
        thread.start()
    for _ in range(KILLS):
        time.sleep(1.0)
        server.kill9()
        time.sleep(0.3)  # requests meanwhile fail to connect
        server.start(server.policy, port=port)  # type: ignore[arg-type]
    killing.clear()
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
    assert len(sent) == WORKERS and min(sent) >= REQUESTS_PER_WORKER
    assert len(answers) + len(refusals) == sum(sent)
    assert refusals and failures

    # every committed charge has its admitted audit entry, written in the charge's own transaction
    assert server.policy is not None
    address = ledger_env.get("DPPROXY_LEDGER") or str(server.policy.parent / "ledger.sqlite")
    audit = open_audit(address)
    try:
        assert audit.verify().ok
        mentioned = {e.charge_id for e in audit.entries(limit=10 * (sum(sent) + len(failures)))}
        assert set(recorded) - mentioned == set()  # no charge the audit log never mentions
        covered = audit.coverage(listed=len(ledger))
        assert (covered.charges, covered.unaudited, covered.orphaned) == (len(ledger), (), ())
        admitted = audit.entries(AuditFilter(decision="admitted"), limit=len(ledger) + 1)
        assert sorted(e.charge_id or "" for e in admitted) == sorted(recorded)
        for entry in admitted:
            charge = recorded[entry.charge_id or ""]
            assert (entry.analyst, entry.sql_sha256, entry.epsilon) == (
                charge["analyst"], charge["sql_sha256"], charge["epsilon"])
    finally:
        audit.close()
    assert audit_verify(address) == 0
