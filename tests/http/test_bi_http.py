"""The SQL analysts and BI tools send, end to end over HTTP (issue #14): the nine-query workload, the age
histogram, joins to a public table and between protected tables of one unit, date buckets over declared DATE
bounds, and what private partition selection says before anything is charged."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.cli.demo import DemoFiles, build_demo
from tests.support import departments
from tests.support.live import Server, policy_copy, spend

WORKLOAD = (  # bench/query_latency.py's nine queries
    "SELECT region, COUNT(*) AS n FROM visits GROUP BY region",
    "SELECT category, SUM(amount) AS total, AVG(amount) AS mean FROM visits GROUP BY category",
    "SELECT day, COUNT(DISTINCT user_id) AS users FROM visits GROUP BY day",
    "SELECT AVG(duration_s) AS mean_duration FROM visits WHERE category = 'travel' AND amount > 50",
    "SELECT plan, COUNT(*) AS n FROM users GROUP BY plan",
    "SELECT region, category, COUNT(*) AS n, SUM(amount) AS total FROM visits GROUP BY region, category",
    "SELECT category, COUNT(*) AS n FROM visits WHERE day BETWEEN DATE '2026-03-01' AND DATE '2026-05-31' "
    "GROUP BY category",
    "SELECT category, COUNT(*) AS n FROM visits WHERE region = 'north' AND age BETWEEN 30 AND 39 GROUP BY category",
    "SELECT COUNT(*) AS n, SUM(amount) AS total FROM visits",
)
COLUMN_COMPARISON = "SELECT region, COUNT(*) AS n FROM visits WHERE age < duration_s AND day <= day GROUP BY region"
AGE_HISTOGRAM = ("SELECT CAST(FLOOR(age / 10) * 10 AS INTEGER) AS age_group, COUNT(*) AS n FROM visits "
                 "GROUP BY CAST(FLOOR(age / 10) * 10 AS INTEGER)")
PLAN_JOIN = "SELECT u.plan, COUNT(*) AS n FROM visits v JOIN users u USING (user_id) GROUP BY u.plan"


@pytest.fixture(scope="module")
def bi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, DemoFiles]]:
    """The demo with a public table `departments` and `day` bounded to 2026 (its days a public domain)."""
    demo = build_demo(tmp_path_factory.mktemp("bi-demo"), users=300, rows=6000)
    departments.create(demo.database)
    directory = tmp_path_factory.mktemp("bi-server")
    policy = policy_copy(demo, directory, epsilon=100.0, delta=1e-4)
    text = policy.read_text()
    text = text.replace('day = { type = "DATE", groupable = true }',
                        'day = { type = "DATE", groupable = true, bounds = [2026-01-01, 2026-12-31] }')
    policy.write_text(departments.declared(text))
    live = Server(directory / "server.log").start(policy)
    try:
        yield live, demo
    finally:
        live.stop()


@pytest.fixture(scope="module")
def client(bi: tuple[Server, DemoFiles]) -> Iterator[httpx.Client]:
    server, demo = bi
    with server.client(demo.analyst_key) as c:
        yield c


def _ask(client: httpx.Client, sql: str, path: str = "/v1/query", **extra: object) -> dict[str, Any]:
    response = client.post(path, json={"dataset": "demo", "sql": sql, "epsilon": 0.5, "delta": 1e-6, **extra})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


@pytest.mark.parametrize("sql", [*WORKLOAD, AGE_HISTOGRAM, PLAN_JOIN, COLUMN_COMPARISON])
def test_the_workload_answers(client: httpx.Client, sql: str) -> None:
    assert _ask(client, sql)["rows"]


def test_age_histogram_is_a_public_parallel_release_of_every_bucket(client: httpx.Client) -> None:
    body = _ask(client, AGE_HISTOGRAM)
    assert body["columns"] == ["age_group", "n"]
    assert [row[0] for row in body["rows"]] == [10, 20, 30, 40, 50, 60, 70, 80, 90]  # bounds [18, 90] by 10
    assert body["partitions"]["kind"] == "public" and body["charge"]["composition"] == "parallel"


def test_join_on_the_unit_groups_by_a_unit_level_column_of_the_other_table(client: httpx.Client) -> None:
    body = _ask(client, PLAN_JOIN)
    assert [row[0] for row in body["rows"]] == ["free", "basic", "pro", "enterprise"]
    assert body["charge"]["composition"] == "parallel"
    left = _ask(client, "SELECT plan, SUM(amount) AS s FROM visits LEFT JOIN users USING (user_id) "
                        "WHERE users.region = 'north' GROUP BY plan")
    assert len(left["rows"]) == 4


def test_join_to_a_public_table_adds_its_columns_as_keys(client: httpx.Client) -> None:
    body = _ask(client, "SELECT d.department, COUNT(*) AS n, SUM(v.amount) AS total FROM main.visits AS v "
                        "INNER JOIN departments d ON v.category = d.category GROUP BY d.department")
    assert [row[0] for row in body["rows"]] == ["food", "goods", "leisure"]
    assert body["partitions"]["kind"] == "public" and body["charge"]["composition"] == "sequential"


def test_date_buckets_over_declared_date_bounds_are_public(client: httpx.Client) -> None:
    months = _ask(client, "SELECT date_trunc('month', day) AS month, COUNT(*) AS n FROM visits GROUP BY 1 "
                          "ORDER BY 1")
    assert [row[0] for row in months["rows"]] == [f"2026-{m:02d}-01" for m in range(1, 13)]
    days = _ask(client, "SELECT day, COUNT(*) AS n FROM visits GROUP BY day")
    assert len(days["rows"]) == 365 and days["partitions"]["kind"] == "public"


def test_bi_shapes(client: httpx.Client) -> None:
    metabase = ('SELECT "source"."region" AS "region", count(*) AS "count" FROM (SELECT "main"."visits"."region" '
                'AS "region" FROM "main"."visits") AS "source" GROUP BY "source"."region" ORDER BY "source"."region"'
                ' ASC')
    assert len(_ask(client, metabase)["rows"]) == 5
    superset = ("SELECT strftime(day, '%Y-%m') AS __timestamp, COUNT(*) AS count FROM visits "
                "WHERE EXTRACT(month FROM day) <= 6 GROUP BY strftime(day, '%Y-%m') ORDER BY count DESC LIMIT 10000")
    assert len(_ask(client, superset)["rows"]) == 12
    postgres = ("SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'senior' END AS band, "
                "COUNT(*) FROM visits WHERE amount * 2 > duration_s / 60 GROUP BY 1")
    assert len(_ask(client, postgres, dialect="postgres")["rows"]) == 3


@pytest.mark.parametrize(("sql", "code", "construct"), [
    ("SELECT COUNT(*) FROM visits v JOIN users u ON v.region = u.region", "policy", "JOIN ON"),
    ("SELECT COUNT(*) FROM visits v FULL JOIN users u USING (user_id)", "unsupported", "FULL JOIN"),
    ("SELECT COUNT(*) FROM visits v JOIN departments d ON v.region = d.department", "policy", "JOIN ON"),
    ("SELECT COUNT(*) FROM departments d JOIN departments e USING (category)", "unsupported", "JOIN"),
    ("SELECT COUNT(*) FROM visits GROUP BY user_id % 2", "policy", "GROUP BY"),
    ("SELECT COUNT(*) FROM visits WHERE random() < 0.5", "unsupported", "RAND()"),
])
def test_refusals_are_free_and_name_the_construct(client: httpx.Client, sql: str, code: str, construct: str) -> None:
    before = spend(client)
    response = client.post("/v1/query", json={"dataset": "demo", "sql": sql, "epsilon": 0.5, "delta": 1e-6})
    assert response.status_code in (400, 403, 422), response.text
    error = response.json()
    assert error["code"] == code and error["detail"]["construct"] == construct and not error["charged"], error
    assert spend(client) == before


def test_private_partitions_say_what_they_can_hide_before_any_charge(analyst: httpx.Client) -> None:
    before = spend(analyst)
    preview = analyst.post("/v1/query/preview", json={
        "dataset": "demo", "sql": "SELECT day, COUNT(*) AS n FROM visits GROUP BY day", "epsilon": 0.1,
    }).json()
    assert spend(analyst) == before
    partitions = preview["partitions"]
    assert partitions["kind"] == "private" and partitions["threshold"] > 0
    assert f"reaches {partitions['threshold']}" in partitions["note"] and "day" in partitions["note"]
    assert "bounds" in partitions["note"]


def test_public_tables_load_from_the_policy(bi: tuple[Server, DemoFiles]) -> None:
    from proxy.policy.load import load_policy

    server, _ = bi
    assert server.policy is not None
    catalog = next(d for d in load_policy(server.policy).datasets if d.name == "demo").catalog
    public = catalog.public_table("departments")
    assert public is not None and public.keys == ("category",) and public.unique
    day = catalog.table("visits").column("day")  # type: ignore[union-attr]
    assert day is not None and day.date_bounds == ("2026-01-01", "2026-12-31")


def test_csv_and_arrow_carry_the_same_numbers_and_the_charge(client: httpx.Client) -> None:
    import csv
    import io
    import json

    import pyarrow as pa

    sql = "SELECT region, COUNT(*) AS n, AVG(amount) AS mean FROM visits GROUP BY region"
    body = {"dataset": "demo", "sql": sql, "epsilon": 0.5}
    answer = client.post("/v1/query", json=body)
    assert answer.status_code == 200
    before = spend(client)
    as_csv = client.post("/v1/query", json=body, headers={"Accept": "text/csv"})  # a repeat: free, same numbers
    assert as_csv.status_code == 200 and as_csv.headers["content-type"].startswith("text/csv")
    assert as_csv.headers["x-dp-repeat"] == "true" and spend(client) == before
    rows = list(csv.reader(io.StringIO(as_csv.text)))
    assert rows[0] == ["region", "n", "mean"]
    expected = answer.json()
    assert [[r[0], int(r[1]), float(r[2]) if r[2] else None] for r in rows[1:]] == expected["rows"]
    assert json.loads(as_csv.headers["x-dp-charge"]) == expected["charge"]
    # the header has no per-row bars (`ci_rows`, `interval_rows`, `parts_rows`: JSON and Arrow only), so its
    # size does not grow with the rows
    per_row = ("ci_rows", "interval_rows", "parts_rows")
    assert json.loads(as_csv.headers["x-dp-noise"]) == [  # and no null field
        {k: v for k, v in n.items() if v is not None and k not in per_row} for n in expected["noise"]]
    as_arrow = client.post("/v1/query", json=body, headers={"Accept": "application/vnd.apache.arrow.stream"})
    assert as_arrow.headers["content-type"] == "application/vnd.apache.arrow.stream"
    table = pa.ipc.open_stream(as_arrow.content).read_all()
    assert table.column_names == ["region", "n", "mean"]
    assert [list(r.values()) for r in table.to_pylist()] == expected["rows"]
    assert json.loads(table.schema.metadata[b"dp.charge"]) == expected["charge"]
    fresh = client.post("/v1/query", json={**body, "epsilon": 0.25}, headers={"Accept": "text/csv"})
    assert fresh.status_code == 200 and fresh.headers["x-dp-repeat"] == "false"
    error = client.post("/v1/query", json={**body, "sql": "SELECT * FROM visits"}, headers={"Accept": "text/csv"})
    assert error.status_code == 400 and error.json()["code"] == "unsupported"  # errors stay JSON


def test_a_public_table_missing_from_the_database_stops_the_start(demo: DemoFiles,
                                                                  tmp_path_factory: pytest.TempPathFactory) -> None:
    directory = tmp_path_factory.mktemp("bi-missing")
    policy = policy_copy(demo, directory)
    policy.write_text(departments.declared(policy.read_text()))
    server = Server(directory / "server.log")
    with pytest.raises(RuntimeError):
        server.start(policy)
    assert "public table departments: not found in the database" in server.log_tail()
