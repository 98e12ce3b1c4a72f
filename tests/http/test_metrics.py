"""GET /metrics on a live server after real queries: request counters by outcome code, stage and route
histograms, and budget gauges that equal what GET /v1/budget reports."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.cli.demo import DemoFiles
from tests.support.live import Server, StartFresh, policy_copy, spend

SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


@dataclass(frozen=True)
class Scrape:
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float]

    def get(self, name: str, **labels: str) -> float:
        return self.samples[(name, frozenset(labels.items()))]

    def names(self) -> set[str]:
        return {name for name, _ in self.samples}


def scrape(client: httpx.Client) -> Scrape:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    return Scrape(samples)


@pytest.fixture(scope="module")
def seeded(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Scrape]]:
    """A fresh server that answered: 2 queries and 1 repeat (analyst), 1 query (admin), 1 unsupported query,
    1 unauthenticated request, 1 budget read; then one scrape."""
    directory = tmp_path_factory.mktemp("metrics")
    server = Server(directory / "server.log").start(policy_copy(demo, directory))
    try:
        with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin, \
                server.client() as stranger:
            for epsilon in (0.3, 0.2, 0.2):  # the third is a repeat of the second: served, not charged
                assert analyst.post("/v1/query", json={"sql": SQL, "epsilon": epsilon}).status_code == 200
            assert admin.post("/v1/query", json={"sql": SQL, "epsilon": 0.25}).status_code == 200
            assert analyst.post("/v1/query", json={"sql": "SELECT * FROM visits"}).json()["code"] == "unsupported"
            assert stranger.post("/v1/query", json={"sql": SQL}).status_code == 401
            assert analyst.get("/v1/budget").status_code == 200
            yield server, scrape(admin)
    finally:
        server.stop()


def test_requests_are_counted_by_route_and_outcome_code(seeded: tuple[Server, Scrape]) -> None:
    _, m = seeded
    query = {"route": "/v1/query", "method": "POST"}
    assert m.get("dpproxy_requests_total", **query, code="ok") == 4
    assert m.get("dpproxy_requests_total", **query, code="unsupported") == 1
    assert m.get("dpproxy_requests_total", **query, code="unauthenticated") == 1
    assert m.get("dpproxy_requests_total", route="/v1/budget", method="GET", code="ok") == 1
    assert m.get("dpproxy_request_duration_seconds_count", **query) == 6
    assert m.get("dpproxy_request_duration_seconds_sum", **query) > 0
    assert m.get("dpproxy_request_duration_seconds_bucket", **query, le="+Inf") == 6


def test_stage_histograms_count_each_stage(seeded: tuple[Server, Scrape]) -> None:
    _, m = seeded
    # plan: every authenticated query (the repeat and the refused one too); the rest: the 3 charged ones
    counts = {s: m.get("dpproxy_stage_duration_seconds_count", stage=s) for s in ("plan", "admit", "execute",
                                                                                   "release")}
    assert counts == {"plan": 5, "admit": 3, "execute": 3, "release": 3}
    for stage in counts:
        assert m.get("dpproxy_stage_duration_seconds_sum", stage=stage) > 0


def test_budget_gauges_equal_get_v1_budget(seeded: tuple[Server, Scrape], demo: DemoFiles) -> None:
    server, m = seeded
    assert m.get("dpproxy_ledger_up") == 1
    for name, key, charges in (("analyst", demo.analyst_key, 2), ("admin", demo.admin_key, 1)):
        with server.client(key) as client:
            budget = spend(client)
        labels = {"analyst": name, "dataset": "demo"}
        for field in ("epsilon", "epsilon_spent", "epsilon_remaining", "delta", "delta_spent", "delta_remaining"):
            assert m.get(f"dpproxy_budget_{field}", **labels) == budget[field], (name, field)  # exactly
        assert m.get("dpproxy_ledger_charges_total", **labels) == charges
    assert m.get("dpproxy_budget_epsilon_spent", analyst="analyst", dataset="demo") == 0.5


def test_gauges_are_read_at_scrape_time_so_replicas_agree(fresh_server: StartFresh, demo: DemoFiles) -> None:
    """Two servers on one ledger file: a charge made through one shows in the other's scrape."""
    first = fresh_server()
    assert first.policy is not None
    second = Server(first.policy.parent / "second.log").start(first.policy)
    try:
        with first.client(demo.analyst_key) as analyst:
            assert analyst.post("/v1/query", json={"sql": SQL, "epsilon": 0.4}).status_code == 200
        with second.client(demo.admin_key) as admin:
            m = scrape(admin)
        # ε = 0.4 as written, charged as the largest float at or below it (proxy/schemas.py)
        assert m.get("dpproxy_budget_epsilon_spent", analyst="analyst", dataset="demo") == 0.39999999999999997
        assert ("dpproxy_requests_total", frozenset({("route", "/v1/query"), ("method", "POST"),
                                                     ("code", "ok")})) not in m.samples  # counters: per process
    finally:
        second.stop()


@pytest.mark.parametrize(("key", "status", "code"), [(None, 401, "unauthenticated"), ("analyst", 403, "forbidden")])
def test_metrics_need_an_admin_key_or_the_metrics_token(
    server: Server, demo: DemoFiles, key: str | None, status: int, code: str
) -> None:
    with server.client(None if key is None else demo.analyst_key) as client:
        response = client.get("/metrics")
    assert response.status_code == status
    assert response.json()["code"] == code


@pytest.mark.parametrize("rule", ["zcdp", "gdp"])
def test_budget_gauges_follow_the_datasets_accounting_rule(
    demo: DemoFiles, tmp_path: Path, rule: str
) -> None:
    """Under zCDP or GDP accounting, ε remaining is not budget − Σε: the gauges still equal GET /v1/budget."""
    policy = policy_copy(demo, tmp_path)
    text = policy.read_text()
    policy.write_text(text.replace('mechanism = "laplace"\n', f'mechanism = "laplace"\naccounting = "{rule}"\n', 1))
    server = Server(tmp_path / "server.log").start(policy)
    try:
        with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
            for epsilon in (0.5, 0.4):
                assert analyst.post("/v1/query", json={"sql": SQL, "epsilon": epsilon}).status_code == 200
            budget = spend(analyst)
            m = scrape(admin)
        assert budget["accounting"] == rule
        labels = {"analyst": "analyst", "dataset": "demo"}
        for field in ("epsilon", "epsilon_spent", "epsilon_remaining", "delta", "delta_spent", "delta_remaining"):
            assert m.get(f"dpproxy_budget_{field}", **labels) == budget[field], field
        assert budget["epsilon_remaining"] != budget["epsilon"] - budget["epsilon_spent"]  # the rule matters
    finally:
        server.stop()


def test_labelled_children_are_looked_up_once_and_count_exactly() -> None:
    """`Metrics` keeps the labelled children it looked up: the same label set counts into the same series,
    a new one gets its own, and the stage histograms count every `timed` block (proxy/http/metrics.py)."""
    from proxy.http.metrics import Metrics

    metrics = Metrics(lambda: None)
    for code in ("ok", "ok", "unsupported"):
        metrics.request_done("/v1/query", "POST", code, 0.004)
    metrics.request_done("/v1/budget", "GET", "ok", 0.002)
    for _ in range(3):
        with metrics.timed("admit"):
            pass
    samples = {(s.name, frozenset(s.labels.items())): s.value
               for family in metrics.registry.collect() for s in family.samples}
    query = {("route", "/v1/query"), ("method", "POST")}
    assert samples[("dpproxy_requests_total", frozenset(query | {("code", "ok")}))] == 2
    assert samples[("dpproxy_requests_total", frozenset(query | {("code", "unsupported")}))] == 1
    assert samples[("dpproxy_request_duration_seconds_count", frozenset(query))] == 3
    assert samples[("dpproxy_request_duration_seconds_sum", frozenset(query))] == pytest.approx(0.012)
    assert samples[("dpproxy_request_duration_seconds_count", frozenset({("route", "/v1/budget"),
                                                                        ("method", "GET")}))] == 1
    assert samples[("dpproxy_stage_duration_seconds_count", frozenset({("stage", "admit")}))] == 3
    assert samples[("dpproxy_stage_duration_seconds_count", frozenset({("stage", "plan")}))] == 0
