"""A CancelRequest interrupts the engine (issue #30): psycopg's cancel of a long data query over the wire ends it
at once (57014, charged), the DuckDB query is interrupted, so the one query thread is free again and the next
query is answered, and the ledger keeps the charge (no refunds).

The long query is real: a dataset whose table is a DuckDB view that scans 10^13 generated rows for a hash that
almost never matches (hours of work, streamed: no memory), bounded per query (a bounding store would scan it at
start-up). The server has one query thread and a 600 s time limit, and the HTTP client waits at most 60 s: had
the engine run on after the cancel, the next query would have waited for the thread until that limit, and the
client would have given up first."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import psycopg
import pytest

from proxy.cli.demo import DemoFiles
from tests.support.live import Server, policy_copy
from tests.wire.test_clients import Wire, start_wire

WAIT_S = 60.0
SLOW = "SELECT COUNT(*) AS n FROM spin"


def _slow_policy(demo: DemoFiles, directory: Path) -> Path:
    """The demo policy (its own ledger) plus the dataset `slow`, which both analysts may query."""
    database = directory / "slow.duckdb"
    with duckdb.connect(str(database)) as conn:
        conn.execute("CREATE VIEW spin AS SELECT range AS u FROM range(10000000000000) WHERE hash(range) = 42")
    policy = policy_copy(demo, directory, epsilon=50.0, delta=1e-4)
    text, found = re.subn(r"^budgets = \{ demo = (\{[^}]*\}) \}$",
                          r"budgets = { demo = \1, slow = { epsilon = 5.0, delta = 1e-6 } }", policy.read_text(),
                          flags=re.MULTILINE)
    assert found == 2, "the demo policy changed shape"
    text += (f'\n[datasets.slow]\npath = {json.dumps(str(database))}\nmechanism = "laplace"\nepsilon = 0.1\n'
             'delta = 1e-8\nmax_epsilon = 1.0\nbounding = "per_query"\n\n'
             '[datasets.slow.tables.spin]\nprivacy_unit = "u"\nmax_groups = 1\nmax_rows = 1\n\n'
             '[datasets.slow.tables.spin.columns]\nu = { type = "BIGINT" }\n')
    policy.write_text(text)
    return policy


@pytest.fixture(scope="module")
def slow(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Wire]:
    directory = tmp_path_factory.mktemp("wire-interrupt")
    server = Server(directory / "server.log")
    live = start_wire(server, _slow_policy(demo, directory), demo,
                      {"DPPROXY_QUERY_WORKERS": "1", "DPPROXY_QUERY_TIMEOUT_S": "600"})
    try:
        yield live
    finally:
        server.stop()


def _charges(wire: Wire, dataset: str) -> list[dict[str, Any]]:
    with wire.server.client(wire.admin_key) as admin:
        response = admin.get("/v1/ledger", params={"analyst": "analyst", "dataset": dataset})
    assert response.status_code == 200, response.text
    charges: list[dict[str, Any]] = response.json()["charges"]
    return charges


def test_a_cancel_interrupts_the_engine_frees_the_thread_and_keeps_the_charge(slow: Wire) -> None:
    ended: list[BaseException] = []
    conn = psycopg.connect(slow.dsn(database="slow"), autocommit=True)

    def ask() -> None:
        try:
            conn.execute(SLOW)
        except BaseException as err:  # what the client got: the test reads it below
            ended.append(err)

    try:
        asking = threading.Thread(target=ask)
        asking.start()
        admitted = threading.Event()
        while not admitted.wait(0.05) and asking.is_alive():  # the charge is committed before the engine runs
            if _charges(slow, "slow"):
                admitted.set()
        assert admitted.is_set(), ended
        conn.cancel()  # psycopg's CancelRequest, on a connection of its own
        asking.join(WAIT_S)
        assert not asking.is_alive()
        (error,) = ended
        assert isinstance(error, psycopg.errors.QueryCanceled), error
        assert error.diag.message_primary and error.diag.message_primary.startswith("timeout: canceling statement")
        assert "charged=true" in (error.diag.message_detail or "")
        # the only query thread is free again: the next query is answered (over HTTP, a client that gives up
        # after 60 s, ten times sooner than the time limit that would have freed the thread otherwise)
        with slow.http() as http:
            answer = http.post("/v1/query", json={"sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": 0.1,
                                                     "dataset": "demo"},
                               timeout=WAIT_S)
        assert answer.status_code == 200 and answer.json()["columns"] == ["n"], answer.text
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the cancelled connection is kept, as PostgreSQL's
    finally:
        conn.close()
    (charge,) = _charges(slow, "slow")  # the charge stays: no refund for a cancelled query
    assert charge["dataset"] == "slow" and 0 < charge["epsilon"] <= 0.1
