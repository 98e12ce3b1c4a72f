"""`dpproxy serve --workers N`: N processes on one port share the SQLite ledger, its audit chain and the
bounding store, so together they never overspend a budget, and the store is built once, before they start.

Eight client threads send distinct queries until the budget runs out; afterwards the ledger holds exactly
the answered charges, they fill the budget exactly, and the audit chain verifies with one entry per request.
The load is bounded (THREADS × REQUESTS requests) and goes to 127.0.0.1 only.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections import Counter
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

from accountant.audit.log import open_audit
from accountant.ledger.sqlite import SqliteLedger
from proxy.cli.demo import DemoFiles
from tests.engines.test_spark_policy import GOOD_SPARK
from tests.engines.test_spark_policy import _policy as spark_policy
from tests.support.live import REPO, StartFresh, policy_copy

THREADS = 8
REQUESTS = 5  # per thread: 40 in all
BUDGET = 1.0
QUERY_EPSILON = 0.0625  # exact in binary: 16 queries fill the budget exactly


def _load(base_url: str, key: str) -> tuple[list[str], Counter[str]]:
    """Every thread's distinct queries: the charge ids answered, and the codes of everything else."""
    answered: list[str] = []
    codes: Counter[str] = Counter()
    lock = threading.Lock()

    def worker(t: int) -> None:
        with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
            for i in range(REQUESTS):
                sql = f"SELECT region, COUNT(*) AS n_{t}_{i} FROM visits GROUP BY region"
                response = client.post("/v1/query", json={"sql": sql, "epsilon": QUERY_EPSILON})
                with lock:
                    if response.status_code == 200:
                        answered.append(response.json()["charge"]["id"])
                    else:
                        codes[f"{response.status_code} {response.json().get('code')}"] += 1

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "the load did not finish in time"
    return answered, codes


def test_worker_processes_share_one_budget_and_one_audit_chain(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server(epsilon=BUDGET, delta=1e-6, settings={"DPPROXY_WORKERS": "2"})
    answered, codes = _load(server.base_url, demo.analyst_key)
    log = server.log.read_text()
    server.stop()  # every process drained and closed its ledger
    started = set(re.findall(r"Started server process \[(\d+)\]", log))
    assert len(started) == 2, log[-3000:]
    assert log.count("bounding store of demo built") == 1  # by the parent, before the workers started
    assert len(answered) == 16 and codes == Counter({"403 budget_exceeded": THREADS * REQUESTS - 16})
    assert server.policy is not None
    ledger_file = server.policy.parent / "ledger.sqlite"
    ledger = SqliteLedger(ledger_file)
    try:
        charges = ledger.charges(analyst="analyst", dataset="demo", limit=1000)
        assert sorted(c.id for c in charges) == sorted(answered)  # no charge without its answer, and back
        assert sum(Fraction(c.epsilon) for c in charges) == Fraction(BUDGET)
    finally:
        ledger.close()
    audit = open_audit(str(ledger_file))
    try:
        result = audit.verify()
        assert (result.ok, result.checked) == (True, THREADS * REQUESTS + 16)  # every request, every admit
    finally:
        audit.close()


def test_workers_refuse_a_spark_dataset_before_starting(tmp_path: Path) -> None:
    policy = spark_policy(tmp_path, 'engine = "spark"', GOOD_SPARK)  # a valid policy: only --workers is refused
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--workers", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "dataset big runs on Spark" in done.stderr and "one worker" in done.stderr


@pytest.mark.parametrize("workers", ["0", "65"])
def test_workers_out_of_range_are_refused(demo: DemoFiles, tmp_path: Path, workers: str) -> None:
    done = subprocess.run([sys.executable, "-m", "proxy", "serve", "--policy", str(policy_copy(demo, tmp_path)),
                           "--workers", workers], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "workers" in done.stderr
