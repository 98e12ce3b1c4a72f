"""The audit's repro of issue #26, item 1, end to end: a public table `zones(region, zone)` declared unique on
`region` while `north` is listed under 30 zones, and 30 queries `… JOIN zones … WHERE zone = 'Z<i>'` at ε = 1
under a budget of ε = 1.

Their scopes are disjoint cells of the join's space, so the ledger admits all 30 for ε = 1 in all, and that is
now true: a unit's zone is one canonical value (the smallest zone of its canonical region), so each unit is
read by at most one of the 30 (it used to be read by all of them: their mean recovered the true count within
±0.5). A joined query's charge also lists its cells (item 10; the list was always empty).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest

from proxy.app import build_env
from proxy.cli.demo import DemoFiles, build_demo
from proxy.query.planner import plan
from proxy.settings import Settings
from tests.support.live import Server, policy_copy, spend

ZONES = tuple(f"Z{i}" for i in range(1, 31))
PUBLIC_TABLE = f"""
[datasets.demo.public_tables.zones]
keys = ["region"]
unique = true  # false: north is listed under 30 zones

[datasets.demo.public_tables.zones.columns]
region = {{ type = "VARCHAR", groupable = true }}
zone = {{ type = "VARCHAR", groupable = true, public_domain = [{", ".join(f'"{z}"' for z in ZONES)}] }}

# One row per user."""
QUERY = "SELECT COUNT(*) AS n FROM visits JOIN zones ON visits.region = zones.region WHERE zone = '{zone}'"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    files = build_demo(tmp_path_factory.mktemp("zones"), users=200, rows=2000)
    with duckdb.connect(str(files.database)) as con:
        con.execute("CREATE TABLE zones (region VARCHAR, zone VARCHAR)")
        con.executemany("INSERT INTO zones VALUES ('north', ?)", [(z,) for z in ZONES])
        con.execute("INSERT INTO zones VALUES ('south', 'Z2')")
    text = files.policy.read_text()
    assert "\n# One row per user." in text
    files.policy.write_text(text.replace("\n# One row per user.", PUBLIC_TABLE, 1))
    return files


@pytest.fixture(scope="module")
def policy(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return policy_copy(demo, tmp_path_factory.mktemp("zones-policy"), epsilon=1.0, delta=1e-6)


@pytest.fixture(scope="module")
def server(policy: Path) -> Iterator[Server]:
    live = Server(policy.parent / "server.log").start(policy)
    try:
        yield live
    finally:
        live.stop()


def test_thirty_disjoint_zone_queries_are_admitted_and_each_lists_its_cells(demo: DemoFiles, server: Server) -> None:
    with server.client(demo.analyst_key) as client:
        for zone in ZONES:
            response = client.post("/v1/query?detail=cells", json={"sql": QUERY.format(zone=zone), "epsilon": 1.0})
            assert response.status_code == 200, (zone, response.text)
            scope = response.json()["charge"]["scope"]
            assert scope["table"] == "visits" and scope["listed"], scope  # it used to be [] for every join
            assert {c["zone"] for c in scope["listed"]} == {zone}  # every age and region of this zone
            assert (scope["cells"], len(scope["listed"]), scope["truncated"]) == (76 * 7, 100, True)
        assert spend(client)["epsilon_spent"] == 1.0  # parallel: one ε for the 30
        budget = client.get("/v1/budget").json()["budgets"][0]
        (space,) = budget["cells"]
        assert {c["cell"]["zone"] for c in space["heaviest"]} <= set(ZONES)  # described, not numbered


def test_no_unit_is_read_by_two_of_the_thirty(demo: DemoFiles, policy: Path, tmp_path: Path) -> None:
    """Σ over the 30 queries of the units reaching aggregation (the `__units` column before noise) is at most the
    number of units whose canonical region is north or south: each is read by one query at most (it was 30 × the
    north units, every one of them read by every query)."""
    env = build_env(Settings(policy=policy, ledger=str(tmp_path / "ledger.sqlite")))
    try:
        engine = env.engine("demo")
        catalog = env.policy.dataset("demo").catalog
        read = []
        for zone in ZONES:
            planned = plan(QUERY.format(zone=zone), catalog, epsilon=1.0, delta=0.0, mechanism="laplace",
                           bounding="store")
            ((units, _),) = engine.run(planned.sql).rows
            read.append(units)
    finally:
        for _, each in env.engines:
            each.close()
    with duckdb.connect(str(demo.database), read_only=True) as con:
        north, south = con.execute(
            "SELECT COUNT(*) FILTER (WHERE r = 'north'), COUNT(*) FILTER (WHERE r = 'south') FROM "
            "(SELECT MIN(region) AS r FROM visits GROUP BY user_id)").fetchone()  # type: ignore[misc]
    assert north > 0 and read[0] > 0
    assert sum(read) <= north + south, read
