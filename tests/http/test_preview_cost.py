"""A preview costs the same however many charges came before (issue #12: nothing per query that grows with the
number of earlier queries): its budget after the charge adds the charge to the sums the ledger keeps
(accountant/cells.py `plus`) instead of reading and summing the whole history again. So do the trade-off curves
the dashboard draws per budget (and GET /v1/budget shows): they read the same sums.

The cost is measured as work, never as time: the SQLite virtual machine's instructions while the preview runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from accountant.cells import ledgered
from accountant.ledger.sqlite import SqliteLedger
from proxy.app import build_env
from proxy.cli.demo import DemoFiles
from proxy.http import dashboard, routes
from proxy.http.views import budget_curves
from proxy.http.views.budget import budget_now
from proxy.pipeline import Env
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from tests.support.ledger_rows import insert_charges, instructions
from tests.support.live import policy_copy

EVENT_TEXT = '{"kind":"laplace","sensitivity":1,"scale":1000.0}'  # ε = 0.001
SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


@pytest.fixture
def env(demo: DemoFiles, tmp_path: Path) -> Iterator[Env]:
    built = build_env(Settings(policy=policy_copy(demo, tmp_path, epsilon=1e6, delta=1e-6)))
    try:
        yield built
    finally:
        built.ledger.close()
        for _, engine in built.engines:
            engine.close()


def _instructions(env: Env) -> tuple[int, dict[str, object]]:
    """The SQLite instructions one preview executes, and its budget after the charge."""
    ledger = env.ledger
    assert isinstance(ledger, SqliteLedger)
    analyst = next(a for a in env.policy.analysts if a.name == "analyst")
    work, preview = instructions(ledger._conn, lambda: routes._preview(QueryRequest(sql=SQL, epsilon=0.5), analyst,
                                                                      env))
    return work, preview.budget_after.model_dump()


def test_a_preview_reads_no_more_at_20k_earlier_charges_than_at_2k(env: Env) -> None:
    ledger = env.ledger
    assert isinstance(ledger, SqliteLedger)
    path = Path(ledger._conn.execute("PRAGMA database_list").fetchone()[2])
    measured = []
    for first, last in ((1, 2_000), (2_001, 20_000)):
        insert_charges(path, first, last, dataset="demo", event=EVENT_TEXT, epsilon=0.001, analyst="analyst",
                       composition="parallel")
        _instructions(env)  # the ledger's memo reads the new charges once
        work, after = _instructions(env)
        measured.append(work)
        assert after["epsilon_spent"] == pytest.approx(0.001 * last + 0.5, rel=1e-12)  # the history and this charge
    assert measured[0] == measured[1]  # summing the history afresh read every earlier charge: 10x the work


def test_the_dashboards_curves_read_no_more_at_20k_earlier_charges_than_at_2k(env: Env) -> None:
    """The curves of one budget from the ledger's kept sums: as much SQLite work at 20k charges as at 2k, and the
    same curves as summing every charge afresh."""
    ledger = env.ledger
    assert isinstance(ledger, SqliteLedger)
    path = Path(ledger._conn.execute("PRAGMA database_list").fetchone()[2])
    analyst = next(a for a in env.policy.analysts if a.name == "analyst")
    (name, allowed), = [(n, b) for n, b in analyst.budgets if n == "demo"]
    dataset = env.policy.dataset(name)
    assert dataset is not None
    measured = []
    for first, last in ((1, 2_000), (2_001, 20_000)):
        insert_charges(path, first, last, dataset="demo", event=EVENT_TEXT, epsilon=0.001, analyst="analyst")
        figures = budget_now(env, "analyst", dataset, allowed)
        work, curves = instructions(ledger._conn, lambda f=figures: dashboard._tradeoff(env, "analyst", f))
        measured.append(work)
        fresh = ledgered(ledger.entries(dataset="demo", analyst="analyst"), dataset.accounting.rule)
        assert curves is not None and curves == budget_curves.curves(lambda rule, h=fresh: h, dataset, allowed)
    assert measured[0] == measured[1]  # reading the charges to sum them read every one: 10x the work
