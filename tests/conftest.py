"""End-to-end fixtures: a small demo DuckDB built once, and real `python -m proxy serve` processes.

`server` is one live server for the whole session (its ledger accumulates across tests, so tests compare
spends before and after instead of assuming a start). `fresh_server` starts servers on their own copy of
the policy with an empty ledger and, optionally, other budgets, for tests that spend or exhaust budgets.
Every server is a subprocess that a fixture terminates; nothing here mocks the app, the engine or the ledger.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.cli.demo import DemoFiles, build_demo
from tests.support.live import Server, StartFresh, policy_copy

SLOW_FIRST = ("test_spark_http.py", "test_spark_store.py", "test_spark_engine.py", "test_auto_bounds.py",
              "test_fair_sharing.py", "test_load_fault.py", "test_drilldown_http.py", "test_accounting_http.py",
              "test_spark_auto.py", "test_serve_workers.py", "test_schemathesis.py", "test_redteam.py",
              "test_scope.py", "test_concurrency.py", "test_crash.py", "test_repeat.py", "test_cells.py",
              "test_cells_oracle.py", "test_quantile_utility.py", "test_discrete_gaussian_large.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow files first (`SLOW_FIRST`), every other item after them in collection order."""
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # a stable sort: files stay whole


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    return build_demo(tmp_path_factory.mktemp("e2e-demo"), users=300, rows=6000)


@pytest.fixture(scope="session")
def server(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("e2e-server")
    # a large budget, so that the tests sharing this server never exhaust it
    live = Server(directory / "server.log").start(policy_copy(demo, directory, epsilon=100.0, delta=1e-4))
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="session")
def analyst(server: Server, demo: DemoFiles) -> Iterator[httpx.Client]:
    with server.client(demo.analyst_key) as client:
        yield client


@pytest.fixture(scope="session")
def admin(server: Server, demo: DemoFiles) -> Iterator[httpx.Client]:
    with server.client(demo.admin_key) as client:
        yield client


@pytest.fixture
def fresh_server(demo: DemoFiles, tmp_path: Path) -> Iterator[StartFresh]:
    """`fresh_server(epsilon=..., delta=..., settings=...)` starts a server with its own policy copy and empty
    ledger (`directory/ledger.sqlite` beside its `policy`), and `settings` its DPPROXY_* variables."""
    started: list[Server] = []

    def start(
        *, epsilon: float | None = None, delta: float | None = None, settings: dict[str, str] | None = None
    ) -> Server:
        directory = tmp_path / f"fresh-{len(started)}"
        policy = policy_copy(demo, directory, epsilon=epsilon, delta=delta)
        fresh = Server(directory / "server.log", settings)
        started.append(fresh)
        return fresh.start(policy)

    try:
        yield start
    finally:
        for fresh in started:
            fresh.stop()

