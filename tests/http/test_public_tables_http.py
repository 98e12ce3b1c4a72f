"""Queries over a public table alone, end to end on a real server (issue #31): answered exactly, free (the
budget unchanged, no charge in the ledger), audited as a free `answered` entry, in the answer's own shape
(`charge` null, no noise, `public: true`); more rows than `max_release_cells` refused, free; a public table
joined to a protected one is still a DP query."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.cli.demo import DemoFiles, build_demo
from tests.support import departments
from tests.support.live import Server, policy_copy, spend

MAX_ROWS = 5  # the dataset's max_release_cells: departments has 8 rows


@pytest.fixture(scope="module", params=["store", "per_query"])
def live(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, DemoFiles]]:
    """The demo with `departments` declared public, read from the bounding store or from the source itself."""
    demo = build_demo(tmp_path_factory.mktemp("public-demo"), users=60, rows=600)
    departments.create(demo.database)
    directory = tmp_path_factory.mktemp("public-server")
    policy = policy_copy(demo, directory, epsilon=10.0, delta=1e-4)
    text = departments.declared(policy.read_text())
    assert text.count('bounding = "store"') == 1
    bounding = f'bounding = "{request.param}"\nmax_release_cells = {MAX_ROWS}'
    policy.write_text(text.replace('bounding = "store"', bounding))
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


def _audit(live: tuple[Server, DemoFiles]) -> list[dict[str, Any]]:
    server, demo = live
    with server.client(demo.admin_key) as admin:
        page = admin.get("/v1/audit", params={"limit": 1000})
        assert page.status_code == 200, page.text
        return list(page.json()["entries"])


def _charges(live: tuple[Server, DemoFiles]) -> int:
    server, demo = live
    with server.client(demo.admin_key) as admin:
        return int(admin.get("/v1/ledger").json()["total"])


def test_a_filter_dropdown_is_answered_exactly_and_free(live: tuple[Server, DemoFiles], client: httpx.Client) -> None:
    before, charges = spend(client), _charges(live)
    response = client.post("/v1/query", json={
        "dataset": "demo", "sql": "SELECT DISTINCT department FROM departments ORDER BY department"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["columns"] == ["department"] and body["rows"] == [["food"], ["goods"], ["leisure"]]
    assert body["public"] is True and body["charge"] is None and body["noise"] == []
    assert body["partitions"]["kind"] == "public" and "bounds" not in body
    assert response.headers["x-dp-repeat"] == "false" and "x-dp-charge-id" not in response.headers
    assert spend(client) == before and body["budget"]["epsilon_spent"] == before["epsilon_spent"]
    assert _charges(live) == charges
    entry = _audit(live)[0]  # newest first
    assert (entry["decision"], entry["charge_id"], entry["epsilon"], entry["delta"]) == ("answered", None, 0.0, 0.0)
    assert "departments" in entry["sql"] and entry["analyst"] == "analyst"


def test_counts_per_group_are_exact(client: httpx.Client) -> None:
    response = client.post("/v1/query", json={
        "dataset": "demo",
        "sql": "SELECT department, COUNT(*) AS n FROM main.departments GROUP BY department ORDER BY n DESC, 1"})
    assert response.status_code == 200, response.text
    expected: dict[str, int] = {}
    for _, department in departments.DEPARTMENTS:
        expected[department] = expected.get(department, 0) + 1
    assert response.json()["rows"] == sorted(([d, n] for d, n in expected.items()), key=lambda r: (-r[1], r[0]))


def test_more_rows_than_the_dataset_releases_are_refused_free(client: httpx.Client) -> None:
    before = spend(client)
    response = client.post("/v1/query", json={"dataset": "demo", "sql": "SELECT * FROM departments"})
    assert response.status_code == 400, response.text
    error = response.json()
    assert error["code"] == "policy" and error["detail"]["construct"] == "ROWS" and not error["charged"]
    assert error["detail"]["max_release_cells"] == MAX_ROWS
    assert spend(client) == before
    limited = client.post("/v1/query", json={"dataset": "demo", "sql": "SELECT * FROM departments LIMIT 5"})
    assert limited.status_code == 200 and len(limited.json()["rows"]) == MAX_ROWS


def test_a_public_table_joined_to_a_protected_one_is_still_charged(client: httpx.Client) -> None:
    response = client.post("/v1/query", json={
        "dataset": "demo", "sql": "SELECT COUNT(*) FROM visits v, departments d WHERE v.category = d.category",
        "epsilon": 0.5})
    assert response.status_code == 200, response.text
    assert response.json()["charge"]["epsilon"] == 0.5 and "public" not in response.json()


@pytest.mark.parametrize(("sql", "code", "construct"), [
    ("SELECT COUNT(*) FROM departments d JOIN departments e USING (category)", "unsupported", "JOIN"),
    ("SELECT department, RANDOM() FROM departments", "unsupported", "RAND()"),
    ("SELECT secret FROM departments", "policy", "COLUMN"),
])
def test_what_a_public_query_may_not_do_is_refused_free(client: httpx.Client, sql: str, code: str,
                                                         construct: str) -> None:
    before = spend(client)
    response = client.post("/v1/query", json={"dataset": "demo", "sql": sql})
    error = response.json()
    assert (response.status_code, error["code"], error["detail"]["construct"]) == (400, code, construct), error
    assert spend(client) == before


def test_csv_and_preview(client: httpx.Client) -> None:
    sql = "SELECT DISTINCT department FROM departments ORDER BY 1"
    csv = client.post("/v1/query", json={"dataset": "demo", "sql": sql}, headers={"Accept": "text/csv"})
    assert csv.status_code == 200 and csv.text.splitlines() == ["department", "food", "goods", "leisure"]
    assert csv.headers["x-dp-public"] == "true"
    arrow = client.post("/v1/query", json={"dataset": "demo", "sql": sql},
                        headers={"Accept": "application/vnd.apache.arrow.stream"})
    assert arrow.status_code == 200, arrow.text
    preview = client.post("/v1/query/preview", json={"dataset": "demo", "sql": sql})  # nothing to charge or preview
    error = preview.json()
    assert (preview.status_code, error["code"], error["detail"]["construct"]) == (400, "policy", "TABLE")
    assert "public table" in error["error"] and "free" in error["error"]


def test_a_scalar_subquery_over_a_public_table_filters_a_dp_query(live: tuple[Server, DemoFiles],
                                                                  client: httpx.Client) -> None:
    """Issue #31, item 5 (docs/privacy.md §3.2): the subquery's value is computed before the charge, folded in as a
    literal (MIN(category) is 'books'), audited beside the analyst's text, and the preview folds it alike."""
    sql = ("SELECT region, COUNT(*) AS n FROM visits WHERE category = (SELECT MIN(category) FROM departments) "
           "GROUP BY region")
    same = "SELECT region, COUNT(*) AS n FROM visits WHERE category = 'books' GROUP BY region"
    preview = client.post("/v1/query/preview", json={"dataset": "demo", "sql": sql, "epsilon": 0.5})
    direct = client.post("/v1/query/preview", json={"dataset": "demo", "sql": same, "epsilon": 0.5})
    assert preview.status_code == 200 and direct.status_code == 200, (preview.text, direct.text)
    assert "'books'" in preview.json()["sql"] and preview.json()["charge"] == direct.json()["charge"]
    response = client.post("/v1/query", json={"dataset": "demo", "sql": sql, "epsilon": 0.5})
    assert response.status_code == 200, response.text
    assert response.json()["charge"]["epsilon"] == 0.5 and "public" not in response.json()
    entry = _audit(live)[0]
    assert entry["sql"].startswith("SELECT region") and "/* public values: CAST('books' AS TEXT) */" in entry["sql"]


def test_a_scalar_subquery_with_more_than_one_row_is_refused_free(client: httpx.Client) -> None:
    before = spend(client)
    response = client.post("/v1/query", json={
        "dataset": "demo", "sql": "SELECT COUNT(*) FROM visits WHERE category = (SELECT category FROM departments)"})
    error = response.json()
    assert (response.status_code, error["code"], error["detail"]["construct"]) == (400, "policy", "SCALAR SUBQUERY")
    assert "more than one row" in error["error"] and error["charged"] is False
    assert spend(client) == before
