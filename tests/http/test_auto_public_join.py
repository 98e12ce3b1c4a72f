"""Automatic bounds on a join to a public table grouped by the public table's column (issue #12): the bounding
store holds no ranks for that column, so the selection reads what the query reads (the per-query windows over
the store), not the stored ranks. It used to read `__row_rank__department` and fail after the charge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from proxy.app import build_env
from proxy.cli.demo import DemoFiles, build_demo
from proxy.query import auto_release
from proxy.query.planner import plan
from proxy.settings import Settings
from tests.support import departments
from tests.support.live import Server, spend

# one category without a department: the join drops its rows
WITHOUT_ENTERTAINMENT = tuple(row for row in departments.DEPARTMENTS if row[0] != "entertainment")
BY_DEPARTMENT = ("SELECT d.department, COUNT(*) AS n FROM visits v JOIN departments d ON v.category = d.category "
                 "GROUP BY d.department")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    files = build_demo(tmp_path_factory.mktemp("auto-public-join"), users=200, rows=3000)  # visits: all "auto"
    departments.create(files.database, WITHOUT_ENTERTAINMENT)
    files.policy.write_text(departments.declared(files.policy.read_text()))
    return files


def _histograms(policy: Path, ledger: Path, bounding: str) -> list[tuple[object, ...]]:
    """The selection histograms of BY_DEPARTMENT as the dataset's engine reads them."""
    text = policy.read_text()
    copy = policy.parent / f"policy-{bounding}.toml"  # beside the original: it names the database relatively
    copy.write_text(text.replace('bounding = "store"', f'bounding = "{bounding}"', 1))
    env = build_env(Settings(policy=copy, ledger=str(ledger)))
    try:
        engine = env.engine("demo")
        planned = plan(BY_DEPARTMENT, env.policy.dataset("demo").catalog, epsilon=1.0, delta=1e-6,
                       mechanism="laplace", salt=7, bounding=bounding)  # type: ignore[arg-type]
        assert planned.auto is not None and [p.bound for p in planned.auto.parts] == ["max_rows", "max_groups"]
        return sorted(engine.run(auto_release.selection_text(planned, engine.target)).rows)
    finally:
        for _, engine in env.engines:
            engine.close()


def test_the_store_reads_the_same_selection_histograms_as_the_source(demo: DemoFiles, tmp_path: Path) -> None:
    assert 'bounding = "store"' in demo.policy.read_text()
    stored = _histograms(demo.policy, tmp_path / "store.sqlite", "store")
    assert stored and stored == _histograms(demo.policy, tmp_path / "source.sqlite", "per_query")


@pytest.fixture(scope="module")
def client(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    live = Server(tmp_path_factory.mktemp("auto-public-join-server") / "server.log").start(demo.policy)
    try:
        with live.client(demo.analyst_key) as c:
            yield c
    finally:
        live.stop()


def test_a_join_grouped_by_a_public_column_chooses_its_bounds_and_answers(client: httpx.Client) -> None:
    before = float(spend(client)["epsilon_spent"])
    response = client.post("/v1/query?detail=cells", json={"dataset": "demo", "sql": BY_DEPARTMENT, "epsilon": 0.5})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [row[0] for row in body["rows"]] == ["food", "goods", "leisure"]
    assert [p["bound"] for p in body["bounds"]["parts"]] == ["max_rows", "max_groups"] and body["bounds"]["chosen"]
    assert body["charge"]["events"]["kind"] == "auto_bounds"
    assert float(spend(client)["epsilon_spent"]) == pytest.approx(before + body["charge"]["epsilon"], rel=1e-12)
