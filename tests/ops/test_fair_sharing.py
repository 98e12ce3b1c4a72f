"""One analyst cannot slow everyone (issue #11, finding 6), on live servers over a 100k-visit demo:

- per-analyst limits from the policy (`max_concurrent_queries`, `queries_per_minute`) answer 429
  `rate_limited` with `Retry-After`, and charge nothing;
- a query's post-admit work (execute, release, render) is held to its time limit: past it, a charged
  `timeout` whose answer is never released, not even to a repeat;
- queries run on their own bounded pool: /healthz, /readyz and another analyst's /v1/budget answer while
  more queries are in flight than the server has threads for them;
- fairness: another analyst's small queries and /readyz are neither refused nor failed while eight clients
  of one analyst send heavy queries (bench/fairness.py prints the latencies; no timing is asserted here).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.cli.demo import DemoFiles, build_demo
from tests.support.live import Server, policy_copy

HEAVY = ("SELECT day, age, category, region, COUNT(*) AS n{tag}, SUM(amount) AS s FROM visits "
         "GROUP BY day, age, category, region")  # ~30k private groups: execute ~0.1 s, release ~0.25 s
SMALL = "SELECT region, COUNT(*) AS n{tag} FROM users GROUP BY region"


@dataclass(frozen=True)
class Setup:
    demo: DemoFiles
    keys: dict[str, str]  # analyst name -> API key, for the analysts added to the demo policy


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    return build_demo(tmp_path_factory.mktemp("fair-demo"), users=3000, rows=100_000)


def start(big: DemoFiles, directory: Path, analysts: dict[str, str], **settings: str) -> tuple[Server, dict[str, str]]:
    """A server on `big` whose policy adds `analysts` (name -> extra TOML lines), each with its own key
    and a budget no test exhausts; returns it and the keys."""
    policy = policy_copy(big, directory, epsilon=1e9, delta=0.5)
    keys = {name: secrets.token_urlsafe(24) for name in analysts}
    with policy.open("a", encoding="utf-8") as out:
        for name, extra in analysts.items():
            out.write(f'\n[analysts.{name}]\nrole = "analyst"\n'
                      f'key_sha256 = "{hashlib.sha256(keys[name].encode()).hexdigest()}"\n'
                      f"budgets = {{ demo = {{ epsilon = 1e9, delta = 0.5 }} }}\n{extra}\n")
    server = Server(directory / "server.log", settings={f"DPPROXY_{k.upper()}": v for k, v in settings.items()})
    return server.start(policy), keys


@pytest.fixture
def servers(big: DemoFiles, tmp_path: Path) -> Iterator[Any]:
    started: list[Server] = []

    def make(analysts: dict[str, str], **settings: str) -> tuple[Server, dict[str, str]]:
        server, keys = start(big, tmp_path / f"server-{len(started)}", analysts, **settings)
        started.append(server)
        return server, keys

    try:
        yield make
    finally:
        for server in started:
            server.stop()


def post(server: Server, key: str, sql: str, path: str = "/v1/query", **extra: Any) -> httpx.Response:
    with server.client(key) as client:
        return client.post(path, json={"sql": sql, **extra})


def charges_of(server: Server, admin_key: str, analyst: str) -> list[dict[str, Any]]:
    with server.client(admin_key) as admin:
        page = admin.get("/v1/ledger", params={"analyst": analyst, "limit": 1000})
    assert page.status_code == 200, page.text
    charges: list[dict[str, Any]] = page.json()["charges"]
    return charges


def assert_rate_limited(response: httpx.Response, limit: str) -> None:
    assert response.status_code == 429, response.text
    body = response.json()
    assert set(body) == {"ok", "status", "code", "error", "detail", "charged"}
    assert (body["ok"], body["status"], body["code"], body["charged"]) == (False, 429, "rate_limited", False)
    assert body["detail"]["limit"] == limit
    retry_after = int(response.headers["retry-after"])
    assert 1 <= retry_after <= 60 and body["detail"]["retry_after_s"] == retry_after


# --- limits --------------------------------------------------------------------------------------------


def test_queries_per_minute_refuses_with_429_and_charges_nothing(servers: Any, big: DemoFiles) -> None:
    server, keys = servers({"paced": "queries_per_minute = 2"})
    paced = keys["paced"]
    assert [post(server, paced, SMALL.format(tag=i)).status_code for i in range(2)] == [200, 200]
    assert_rate_limited(post(server, paced, SMALL.format(tag=2)), "queries_per_minute")
    assert_rate_limited(post(server, paced, SMALL.format(tag=3), "/v1/query/preview"), "queries_per_minute")
    assert len(charges_of(server, big.admin_key, "paced")) == 2  # the refused ones charged nothing
    assert post(server, big.analyst_key, SMALL.format(tag=4)).status_code == 200  # others are not limited
    with server.client(paced) as client:
        assert client.get("/v1/budget").status_code == 200  # only the query routes are


def test_max_concurrent_queries_refuses_the_excess(servers: Any, big: DemoFiles) -> None:
    server, keys = servers({"single": "max_concurrent_queries = 1"})
    go = threading.Barrier(6)

    def one(i: int) -> httpx.Response:
        with server.client(keys["single"]) as client:
            go.wait(timeout=60)
            return client.post("/v1/query", json={"sql": HEAVY.format(tag=i)})

    with ThreadPoolExecutor(6) as pool:
        responses = list(pool.map(one, range(6)))
    refused = [r for r in responses if r.status_code != 200]
    assert refused, "six heavy queries at once all ran, with max_concurrent_queries = 1"
    for response in refused:
        assert_rate_limited(response, "max_concurrent_queries")
    assert len(charges_of(server, big.admin_key, "single")) == 6 - len(refused)


# --- the post-admit deadline ---------------------------------------------------------------------------


def test_a_query_past_its_deadline_is_a_charged_timeout_and_is_never_released(servers: Any, big: DemoFiles) -> None:
    # the heavy query's DuckDB part alone fits in the limit; with its release (~2x longer) it does not
    server, _ = servers({}, query_timeout_s="0.12")
    sql = HEAVY.format(tag="late")
    first = post(server, big.analyst_key, sql)
    assert first.status_code == 504, first.text
    body = first.json()
    assert (body["code"], body["charged"]) == ("timeout", True)
    charge_id = body["detail"]["charge_id"]
    assert [c["id"] for c in charges_of(server, big.admin_key, "analyst")] == [charge_id]  # charged, kept
    again = post(server, big.analyst_key, sql)  # an identical request: no stored answer to give back
    assert again.status_code == 504 and again.headers.get("x-dp-repeat") != "true", again.text
    assert again.json()["detail"]["charge_id"] != charge_id
    assert len(charges_of(server, big.admin_key, "analyst")) == 2
    assert "never retrieved" not in server.log.read_text()  # the abandoned work's own timeout is consumed


# --- a bounded query pool ------------------------------------------------------------------------------


def test_probes_and_another_budget_answer_while_queries_overfill_the_threads(servers: Any, big: DemoFiles) -> None:
    """42 heavy queries in flight (Starlette's thread pool has 40 threads) do not hold up /healthz, /readyz
    or a fourth analyst's /v1/budget: each answers while nearly all the heavy queries are still waiting (an
    ordering, not a latency: the 42 run two at a time, so most answer seconds later)."""
    server, keys = servers({"h1": "", "h2": "", "h3": "", "reader": ""})
    heavy_keys = [keys["h1"], keys["h2"], keys["h3"]] * 14
    answered: list[int] = []
    go = threading.Barrier(len(heavy_keys) + 1)

    def heavy(i: int) -> int:
        with server.client(heavy_keys[i]) as client:
            go.wait(timeout=60)
            status = client.post("/v1/query", json={"sql": HEAVY.format(tag=i)}).status_code
            answered.append(i)
            return status

    with ThreadPoolExecutor(len(heavy_keys)) as pool:
        statuses = pool.map(heavy, range(len(heavy_keys)))
        go.wait(timeout=60)
        threading.Event().wait(0.3)  # let the heavy requests reach the server first
        probes = {}
        with server.client(keys["reader"]) as reader:
            for path in ("/healthz", "/readyz", "/v1/budget"):
                probes[path] = (reader.get(path).status_code, len(answered))
        assert list(statuses) == [200] * len(heavy_keys)
    assert all(status == 200 for status, _ in probes.values()), probes
    assert all(done <= len(heavy_keys) // 4 for _, done in probes.values()), probes


# --- fairness ------------------------------------------------------------------------------------------


def test_another_analyst_is_served_while_one_analyst_floods_heavy_queries(servers: Any, big: DemoFiles) -> None:
    server, keys = servers({"flood": "", "small": ""})
    stop = threading.Event()
    flood_statuses: list[int] = []

    def flood(client_number: int) -> None:
        with server.client(keys["flood"]) as client:
            i = 0
            while not stop.is_set():
                sql = HEAVY.format(tag=f"{client_number}_{i}")
                flood_statuses.append(client.post("/v1/query", json={"sql": sql}).status_code)
                i += 1

    failures: list[str] = []
    with ThreadPoolExecutor(8) as pool:
        flooding = [pool.submit(flood, c) for c in range(8)]
        try:
            with server.client(keys["small"]) as small, server.client() as probe:
                for i in range(12):
                    answer = small.post("/v1/query", json={"sql": SMALL.format(tag=i), "epsilon": 0.5})
                    if answer.status_code != 200:
                        failures.append(f"query {i}: {answer.status_code} {answer.text[:200]}")
                    ready = probe.get("/readyz")
                    if ready.status_code != 200:
                        failures.append(f"readyz {i}: {ready.status_code} {ready.text[:200]}")
        finally:
            stop.set()
            for future in flooding:
                future.result()
    assert not failures, failures
    assert flood_statuses and set(flood_statuses) <= {200, 429}
