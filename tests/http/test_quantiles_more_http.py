"""Quantiles over HTTP, continued (issue #15): DATE quantiles over declared date bounds, DuckDB's
QUANTILE(col, q) alias, and a repeat at another confidence (the stored answer, its error bars recomputed)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from proxy.cli.demo import REGIONS, DemoFiles
from tests.support.live import Server, policy_copy, spend


@pytest.fixture(scope="module")
def served(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, DemoFiles]]:
    """The demo (shared data) with `day` bounded to 2026, on its own server and ledger."""
    directory = tmp_path_factory.mktemp("quantiles-more")
    policy = policy_copy(demo, directory, epsilon=100.0, delta=1e-4)
    text = policy.read_text()
    bounded = text.replace('day = { type = "DATE", groupable = true }',
                           'day = { type = "DATE", groupable = true, bounds = [2026-01-01, 2026-12-31] }')
    assert bounded != text
    policy.write_text(bounded)
    live = Server(directory / "server.log").start(policy)
    try:
        yield live, demo
    finally:
        live.stop()


@pytest.fixture(scope="module")
def client(served: tuple[Server, DemoFiles]) -> Iterator[httpx.Client]:
    server, demo = served
    with server.client(demo.analyst_key) as analyst:
        yield analyst


def post(client: httpx.Client, sql: str, path: str = "/v1/query?detail=cells", **params: object) -> httpx.Response:
    response = client.post(path, json={"sql": sql, **params})
    assert response.status_code == 200, response.text
    return response


def test_date_quantiles_are_days_of_the_declared_range(client: httpx.Client) -> None:
    sql = ("SELECT region, MIN(day) AS first, MEDIAN(day) AS mid, QUANTILE_CONT(day, 0.9) AS late, MAX(day) AS last "
           "FROM visits GROUP BY region")
    preview: dict[str, Any] = post(client, sql, path="/v1/query/preview", epsilon=0.8).json()
    body: dict[str, Any] = post(client, sql, epsilon=0.8).json()
    assert [row[0] for row in body["rows"]] == list(REGIONS)
    for _, *dates in body["rows"]:
        assert all(isinstance(d, str) and "2026-01-01" <= d <= "2026-12-31" and len(d) == 10 for d in dates)
    assert body["charge"]["epsilon"] == preview["charge"]["epsilon"] == pytest.approx(0.8, rel=1e-12)
    noise = {n["column"]: n for n in body["noise"]}
    assert noise == {n["column"]: n for n in preview["noise"]}
    # four quantiles of one column: one joint release (root MEDIAN; chains MIN and p90, MAX: two levels);
    # ε = 0.8: the count 1/16, the root its share as a separate quantile (0.2: (1/2)^(2/3) : 1 : 1 would give
    # it less), the two levels (0.75 − 0.2)/2 each; the root's Δ = 10 (max_rows 20): (2Δ/0.2)·ln(365/0.05)
    assert noise["mid"]["mechanism"] == "exponential"
    assert noise["mid"]["rank_error"] == pytest.approx(2 * 10 / 0.2 * math.log(365 / 0.05), rel=1e-9)
    # MIN and MAX (Δ = 20) at 0.275 instead of 0.2: narrower than the split's (2Δ/0.2)·ln(365/0.05)
    assert noise["first"]["rank_error"] < 2 * 20 / 0.2 * math.log(365 / 0.05)
    assert all(first <= mid <= late <= last for _, first, mid, late, last in body["rows"])


def test_quantile_alias_and_a_list_of_quantiles_refused_free(client: httpx.Client) -> None:
    body = post(client, "SELECT region, QUANTILE(amount, 0.5) AS m FROM visits GROUP BY region", epsilon=0.5).json()
    assert all(0 <= m <= 500 and (2 * m).is_integer() for _, m in body["rows"])
    assert body["noise"][0]["mechanism"] == "exponential"
    before = spend(client)
    refused = client.post("/v1/query?detail=cells", json={"sql": "SELECT QUANTILE(amount, [0.1, 0.9]) FROM visits"})
    assert refused.status_code == 400
    error = refused.json()
    assert (error["code"], error["detail"]["construct"], error["charged"]) == ("unsupported", "QUANTILE", False)
    assert "list of quantiles" in error["error"] and spend(client) == before


def test_a_repeat_at_another_confidence_keeps_the_answer_and_recomputes_the_error_bars(client: httpx.Client) -> None:
    sql = ("SELECT category, COUNT(*) AS n, AVG(amount) AS a, MEDIAN(day) AS d, STDDEV(amount) AS s, "
           "COUNT(*) * 2 AS twice FROM visits GROUP BY category")
    first = post(client, sql, epsilon=0.3)
    spent = spend(client)
    again = post(client, sql, epsilon=0.3, confidence=0.99)
    assert again.headers["x-dp-repeat"] == "true" and spend(client) == spent
    assert again.headers["x-dp-charge-id"] == first.headers["x-dp-charge-id"]
    one, other = first.json(), again.json()
    recomputed = ("noise", "unreliable")  # the bars, and the flags read from them, follow the confidence
    assert {k: v for k, v in one.items() if k not in recomputed} == {
        k: v for k, v in other.items() if k not in recomputed}
    # the error bars are the preview's at 0.99: public functions of the scales, nothing new released; an AVG's
    # and a STDDEV's per-row bars (which a preview, having no released parts, cannot give) are recomputed from
    # the noisy parts the answer released: the same parts, a wider interval around the same value
    at_99 = post(client, sql, path="/v1/query/preview", epsilon=0.3, confidence=0.99).json()["noise"]
    per_row = {"ci_rows": None, "interval_rows": None, "parts_rows": None, "method": None}
    assert [{**n, **per_row} for n in other["noise"]] == [{**n, **per_row} for n in at_99]
    for before, after in zip(one["noise"], other["noise"], strict=True):
        if before.get("ci_rows") is not None:
            assert after.get("parts_rows") == before.get("parts_rows") and after["method"] == "parts"
            for b, a in zip(before["interval_rows"], after["interval_rows"], strict=True):
                assert (a is None and b is None) or (a[0] <= b[0] and b[1] <= a[1])
    barred = [n for n in other["noise"] if n.get("ci") or n.get("ci_times_count") or n.get("rank_error")]
    assert {n["confidence"] for n in barred} == {0.99}
    # back at the first confidence (the default): the stored answer, byte for byte
    assert post(client, sql, epsilon=0.3, confidence=0.95).content == first.content
    assert post(client, sql, epsilon=0.3).content == first.content


def _kinds(event: dict[str, Any]) -> list[str]:
    if "events" in event:
        return [k for child in event["events"] for k in _kinds(child)]
    return [event["kind"]]


def test_three_quantiles_of_a_column_are_released_jointly_and_monotone(client: httpx.Client) -> None:
    sql = ("SELECT region, QUANTILE_CONT(amount, 0.1) AS p10, MEDIAN(amount) AS p50, "
           "QUANTILE_CONT(amount, 0.9) AS p90, COUNT(*) AS n FROM visits GROUP BY region")
    preview: dict[str, Any] = post(client, sql, path="/v1/query/preview", epsilon=0.4).json()
    before = spend(client)
    body: dict[str, Any] = post(client, sql, epsilon=0.4).json()
    assert all(p10 <= p50 <= p90 for _, p10, p50, p90, _ in body["rows"])  # monotone by construction
    charge = body["charge"]
    # one joint release: its noisy row count, the root and one chain level; COUNT(*) its own Laplace
    assert sorted(_kinds(charge["events"])) == ["exponential", "exponential", "laplace", "laplace"]
    assert charge["epsilon"] == preview["charge"]["epsilon"] == pytest.approx(0.4, rel=1e-9)
    assert spend(client)["epsilon_spent"] == pytest.approx(before["epsilon_spent"] + charge["epsilon"], rel=1e-12)
    noise = {n["column"]: n for n in body["noise"]}
    assert noise == {n["column"]: n for n in preview["noise"]}
    assert noise["p10"]["rank_error"] == noise["p90"]["rank_error"] > noise["p50"]["rank_error"] > 0
