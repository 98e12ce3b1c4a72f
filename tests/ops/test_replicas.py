"""Two live proxy processes share one PostgreSQL ledger (DPPROXY_LEDGER=postgresql://…) under concurrent load.

Worker threads send distinct queries to both replicas at once, for two analysts, until both budgets run
out. Afterwards: answers × charge equals each analyst's recorded spend, no analyst is over budget, every
answer's charge is in the ledger, and the replicas' shared audit chain verifies with one entry per
request and one `admitted` entry per charge. The load is bounded (WORKERS × REQUESTS requests) and goes
to 127.0.0.1 only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from accountant.audit.log import AuditFilter, PostgresAudit
from accountant.filter import Spend
from accountant.ledger.postgres import PostgresLedger
from proxy.cli.demo import DemoFiles
from tests.support.live import REPO, free_port, policy_copy, spend, sum_up
from tests.support.pg_fixtures import execute, fresh_schema

WORKERS = 8
REQUESTS = 12  # per worker: 96 in all, 48 per analyst
BUDGET = 1.0
QUERY_EPSILON = 0.0625  # exact in binary: 16 queries fill each budget exactly
READY_TIMEOUT_S = 60
WIRING = ("proxy/app.py must open DPPROXY_LEDGER with accountant.ledger.stores.open_ledger (and Settings.ledger "
          "must be str | None so that it can hold a URL)")


class Replica:
    """One `python -m proxy serve` process with DPPROXY_LEDGER set (tests/support/live.py's Server clears DPPROXY_*)."""

    def __init__(self, policy: Path, ledger_url: str, log: Path) -> None:
        self.port = free_port()
        self.log = log
        env = {k: v for k, v in os.environ.items() if not k.startswith("DPPROXY_")}
        env |= {"DPPROXY_LEDGER": ledger_url, "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), env.get("PYTHONPATH"))))}
        argv = [sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port", str(self.port)]
        with log.open("ab") as out:
            self.proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-15:])
                pytest.fail(f"a replica exited at start-up; {WIRING}.\n{tail}", pytrace=False)
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        pytest.fail(f"a replica was not ready within {READY_TIMEOUT_S} s", pytrace=False)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Load:
    url: str  # the ledger both replicas share
    replicas: list[Replica]
    keys: dict[str, str]  # analyst name -> API key
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {"analyst": [], "admin": []})
    served_by: set[int] = field(default_factory=set)
    refusals: int = 0
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _worker(load: Load, worker: int) -> None:
    name = ("analyst", "admin")[worker % 2]
    clients = [httpx.Client(base_url=r.base_url, headers={"Authorization": f"Bearer {load.keys[name]}"},
                            timeout=60.0) for r in load.replicas]
    try:
        for i in range(REQUESTS):
            replica = (worker + i) % len(clients)  # every worker alternates between the replicas
            sql = f"SELECT region, COUNT(*) AS n_{worker}_{i} FROM visits GROUP BY region"  # distinct: no repeats
            response = clients[replica].post("/v1/query", json={"sql": sql, "epsilon": QUERY_EPSILON})
            with load.lock:
                if response.status_code == 200:
                    load.answers[name].append(response.json()["charge"])
                    load.served_by.add(replica)
                elif response.status_code == 403 and response.json()["code"] == "budget_exceeded":
                    load.refusals += 1
                else:
                    load.failures.append(f"{response.status_code} {response.text[:200]}")
    finally:
        for client in clients:
            client.close()


@pytest.fixture(scope="module")
def load(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Load]:
    directory = tmp_path_factory.mktemp("replicas")
    policy = policy_copy(demo, directory, epsilon=BUDGET, delta=1e-6)
    with fresh_schema() as (_, url):
        replicas = [Replica(policy, url, directory / f"replica-{i}.log") for i in range(2)]
        try:
            for replica in replicas:
                replica.wait_ready()
            if execute(url, "SELECT to_regclass('charges') IS NOT NULL") != [(True,)]:
                pytest.fail(f"the replicas started but did not open the PostgreSQL ledger; {WIRING}", pytrace=False)
            running = Load(url, replicas, {"analyst": demo.analyst_key, "admin": demo.admin_key})
            threads = [threading.Thread(target=_worker, args=(running, w)) for w in range(WORKERS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            assert not any(thread.is_alive() for thread in threads), "the load did not finish in time"
            yield running
        finally:
            for replica in replicas:
                replica.stop()


def test_replicas_sharing_a_ledger_never_overspend(load: Load) -> None:
    assert load.failures == []
    assert load.served_by == {0, 1}, "both replicas must have answered"
    ledger = PostgresLedger(load.url)
    try:
        for name, answers in load.answers.items():
            assert len(answers) == 16, name  # 1.0 / 0.0625: the budget is filled exactly, never passed
            recorded = ledger.spent(name, "demo")
            assert recorded == Spend(sum_up(a["epsilon"] for a in answers), sum_up(a["delta"] for a in answers))
            assert Fraction(recorded.epsilon) <= Fraction(BUDGET)
            charges = ledger.charges(analyst=name, dataset="demo", limit=1000)
            assert sorted(c.id for c in charges) == sorted(a["id"] for a in answers)  # no charge without answer
            for replica in load.replicas:  # both replicas report the one shared spend
                key = load.keys[name]
                with httpx.Client(base_url=replica.base_url, headers={"Authorization": f"Bearer {key}"},
                                  timeout=60.0) as client:
                    assert spend(client)["epsilon_spent"] == recorded.epsilon
        assert load.refusals == WORKERS * REQUESTS - 32
    finally:
        ledger.close()


def test_replicas_share_one_audit_chain(load: Load) -> None:
    if execute(load.url, "SELECT to_regclass('audit_log') IS NOT NULL") != [(True,)]:
        pytest.fail("the replicas keep no audit log: proxy/app.py must set app.state.audit = open_audit(...) and "
                    "install proxy.http.middleware.audit_trail.AuditTrail and proxy.http.audit_routes.router",
                    pytrace=False)
    audit = PostgresAudit(load.url)
    try:
        result = audit.verify()
        charged = sum(len(answers) for answers in load.answers.values())
        # one chain: one entry per request, and one admitted entry per charge (written with the charge)
        assert (result.ok, result.checked) == (True, WORKERS * REQUESTS + charged), result
        for name, answers in load.answers.items():
            for decision in ("admitted", "answered"):
                entries = audit.entries(AuditFilter(analyst=name, decision=decision), limit=1000)
                assert sorted(e.charge_id or "" for e in entries) == sorted(a["id"] for a in answers)
        covered = audit.coverage()
        assert (covered.ok, covered.charges) == (True, charged)
        assert audit.count(AuditFilter(decision="rejected")) == load.refusals
    finally:
        audit.close()
