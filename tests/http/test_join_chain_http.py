"""Chains of joins end to end (issue #31), over HTTP on a real server reading the bounding store: visits →
departments (on its key `category`, a row-level column) → divisions (on its key `department`) answers with the
chain's groups (the public domain of `division`) for one ε; visits → regions (on `region`, unit-level) → areas
(on `area`, both unique) makes `macro` a unit-level axis, so a query on one macro region is charged to the cells of
the chain's own space and lists them by coordinate; a chain on a column that is not the next table's key is
refused, free.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from proxy.cli.demo import DemoFiles, build_demo
from tests.support import departments
from tests.support.live import Server, policy_copy, spend

DIVISIONS = """
[datasets.demo.public_tables.divisions]
keys = ["department"]
unique = true

[datasets.demo.public_tables.divisions.columns]
department = { type = "VARCHAR" }
division = { type = "VARCHAR", groupable = true, public_domain = ["retail", "services"] }

[datasets.demo.public_tables.regions]
keys = ["region"]
unique = true

[datasets.demo.public_tables.regions.columns]
region = { type = "VARCHAR" }
area = { type = "VARCHAR" }

[datasets.demo.public_tables.areas]
keys = ["area"]
unique = true

[datasets.demo.public_tables.areas.columns]
area = { type = "VARCHAR" }
macro = { type = "VARCHAR", groupable = true, public_domain = ["inland", "coast"] }

# One row per user."""
CHAIN = ("SELECT division, COUNT(*) AS n, SUM(amount) AS total FROM visits v JOIN departments d "
         "ON v.category = d.category JOIN divisions USING (department) GROUP BY division ORDER BY division")


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    files = build_demo(tmp_path_factory.mktemp("chain"), users=120, rows=1200)
    departments.create(files.database)
    with duckdb.connect(str(files.database)) as con:
        con.execute("CREATE TABLE divisions AS SELECT * FROM (VALUES ('food', 'retail'), ('goods', 'retail'), "
                    "('leisure', 'services')) t(department, division)")
        con.execute("CREATE TABLE regions AS SELECT * FROM (VALUES ('north', 'a1'), ('south', 'a2'), ('east', 'a2'), "
                    "('west', 'a3'), ('central', 'a1')) t(region, area)")
        con.execute("CREATE TABLE areas AS SELECT * FROM (VALUES ('a1', 'inland'), ('a2', 'coast'), ('a3', 'coast')) "
                    "t(area, macro)")
    files.policy.write_text(departments.declared(files.policy.read_text()).replace(
        "\n# One row per user.", DIVISIONS, 1))
    return files


@pytest.fixture(scope="module")
def server(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    policy: Path = policy_copy(demo, tmp_path_factory.mktemp("chain-policy"), epsilon=3.0, delta=1e-6)
    live = Server(policy.parent / "server.log").start(policy)
    try:
        yield live
    finally:
        live.stop()


def test_a_chain_is_answered_charged_once_and_lists_its_cells(demo: DemoFiles, server: Server) -> None:
    with server.client(demo.analyst_key) as client:
        response = client.post("/v1/query?detail=cells", json={"sql": CHAIN, "epsilon": 1.0})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["columns"] == ["division", "n", "total"]
        assert [row[0] for row in body["rows"]] == ["retail", "services"]  # the public domain, in order
        assert spend(client)["epsilon_spent"] == 1.0
        scoped = client.post("/v1/query?detail=cells", json={"sql": (
            "SELECT COUNT(*) AS n FROM visits JOIN regions r USING (region) JOIN areas a ON r.area = a.area "
            "WHERE macro = 'coast'"), "epsilon": 1.0})
        assert scoped.status_code == 200, scoped.text
        scope = scoped.json()["charge"]["scope"]
        assert scope["table"] == "visits" and scope["listed"], scope
        assert {c["macro"] for c in scope["listed"]} == {"coast"}  # the chain's own space, described
        assert scope["cells"] < scope["of"]


def test_a_chain_on_a_column_that_is_not_a_key_is_refused_free(demo: DemoFiles, server: Server) -> None:
    with server.client(demo.analyst_key) as client:
        before = spend(client)
        response = client.post("/v1/query", json={"sql": (
            "SELECT COUNT(*) FROM visits v JOIN departments d ON v.category = d.category "
            "JOIN divisions ON d.category = divisions.division"), "epsilon": 1.0})
        assert response.status_code == 400, response.text
        body = response.json()
        assert (body["code"], body["detail"]["construct"], body["charged"]) == ("policy", "JOIN ON", False)
        assert "divisions" in body["error"] and "department" in body["detail"]["hint"]
        assert spend(client) == before
