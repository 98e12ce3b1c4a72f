"""A BI filter dropdown over two public tables, end to end on a real server: `SELECT DISTINCT n_name FROM nation
JOIN region ON … WHERE r_name = 'EUROPE'` is answered exactly and free (`public: true`, no charge, the budget
unchanged); a subquery over the protected visits inside a public query is refused, free, saying why."""

from __future__ import annotations

from collections.abc import Iterator

import duckdb
import httpx
import pytest

from proxy.cli.demo import DemoFiles, build_demo
from tests.support.live import Server, policy_copy, spend

TABLES = """
[datasets.demo.public_tables.region]
keys = ["r_regionkey"]
unique = true
[datasets.demo.public_tables.region.columns]
r_regionkey = { type = "BIGINT", groupable = true }
r_name = { type = "VARCHAR", groupable = true }

[datasets.demo.public_tables.nation]
keys = ["n_nationkey"]
unique = true
[datasets.demo.public_tables.nation.columns]
n_nationkey = { type = "BIGINT", groupable = true }
n_name = { type = "VARCHAR", groupable = true }
n_regionkey = { type = "BIGINT", groupable = true }

# One row per user."""
NATIONS = [(0, "FRANCE", 3), (1, "GERMANY", 3), (2, "JAPAN", 2), (3, "PERU", 1), (4, "ROMANIA", 3)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, DemoFiles]]:
    demo = build_demo(tmp_path_factory.mktemp("public-joins-demo"), users=40, rows=200)
    with duckdb.connect(str(demo.database)) as con:
        con.execute("CREATE TABLE region (r_regionkey BIGINT, r_name VARCHAR)")
        con.executemany("INSERT INTO region VALUES (?, ?)", [(1, "AMERICA"), (2, "ASIA"), (3, "EUROPE")])
        con.execute("CREATE TABLE nation (n_nationkey BIGINT, n_name VARCHAR, n_regionkey BIGINT)")
        con.executemany("INSERT INTO nation VALUES (?, ?, ?)", NATIONS)
    directory = tmp_path_factory.mktemp("public-joins-server")
    policy = policy_copy(demo, directory, epsilon=10.0, delta=1e-4)
    text = policy.read_text()
    assert "\n# One row per user." in text
    policy.write_text(text.replace("\n# One row per user.", TABLES, 1))
    server = Server(directory / "server.log").start(policy)
    try:
        yield server, demo
    finally:
        server.stop()


@pytest.fixture(scope="module")
def client(live: tuple[Server, DemoFiles]) -> Iterator[httpx.Client]:
    server, demo = live
    with server.client(demo.analyst_key) as c:
        yield c


def test_a_dropdown_over_a_join_of_public_tables_is_answered_exactly_and_free(client: httpx.Client) -> None:
    before = spend(client)
    response = client.post("/v1/query", json={"dataset": "demo", "sql": (
        "SELECT DISTINCT n_name FROM nation JOIN region ON n_regionkey = r_regionkey WHERE r_name = 'EUROPE' "
        "ORDER BY n_name")})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["columns"] == ["n_name"] and body["rows"] == [["FRANCE"], ["GERMANY"], ["ROMANIA"]]
    assert body["public"] is True and body["charge"] is None and body["noise"] == []
    assert spend(client) == before


def test_a_subquery_over_protected_rows_is_refused_free(client: httpx.Client) -> None:
    before = spend(client)
    response = client.post("/v1/query", json={"dataset": "demo", "sql": (
        "SELECT n_name FROM nation WHERE n_nationkey < (SELECT COUNT(*) FROM visits)")})
    error = response.json()
    assert (response.status_code, error["code"], error["detail"]["construct"]) == (400, "unsupported", "SUBQUERY")
    assert "protected table 'visits'" in error["error"] and not error["charged"]
    assert spend(client) == before
