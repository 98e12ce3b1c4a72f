"""Quantile aggregates over HTTP, end to end (a real server on loopback, the demo data, a real ledger):
shapes, grid values, the charge and its event kind, preview = query, the rank error bar, and bad input
refused with a clear error and nothing charged."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from proxy.cli.demo import REGIONS
from tests.support.live import spend

MEDIAN_BY_REGION = ("SELECT region, MEDIAN(amount) AS median, QUANTILE_CONT(amount, 0.9) AS p90, MIN(age) AS youngest, "
                    "COUNT(*) AS n FROM visits GROUP BY region")


def post(client: httpx.Client, sql: str, path: str = "/v1/query?detail=cells", **params: object) -> dict[str, Any]:
    response = client.post(path, json={"sql": sql, **params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["ok"] is True
    return body


def _kinds(event: dict[str, Any]) -> list[str]:
    if "events" in event:
        return [k for child in event["events"] for k in _kinds(child)]
    return [event["kind"]]


def test_quantiles_by_region_are_grid_values_charged_as_exponential_mechanisms(
    analyst: httpx.Client, admin: httpx.Client
) -> None:
    before = spend(analyst)
    preview = post(analyst, MEDIAN_BY_REGION, path="/v1/query/preview", epsilon=0.8)
    assert spend(analyst) == before  # the preview reports the charge and spends nothing
    body = post(analyst, MEDIAN_BY_REGION, epsilon=0.8)
    assert body["columns"] == ["region", "median", "p90", "youngest", "n"]
    assert [row[0] for row in body["rows"]] == list(REGIONS)  # public domain, in domain order
    for _, median, p90, youngest, _ in body["rows"]:
        assert 0 <= median <= 500 and 0 <= p90 <= 500
        assert (median * 2).is_integer() and (p90 * 2).is_integer()  # the [0, 500] grid in 1 000 steps
        assert isinstance(youngest, int) and 18 <= youngest <= 90  # an integer column: each integer a point
    charge = body["charge"]
    assert charge["epsilon"] == pytest.approx(0.8, rel=1e-12) and charge["epsilon"] <= 0.8
    assert charge["composition"] == "parallel"  # region is unit-level: one group per unit
    assert _kinds(charge["events"]).count("exponential") == 3 and _kinds(charge["events"]).count("laplace") == 1
    assert {k: v for k, v in charge.items() if k != "id"} == {k: v for k, v in preview["charge"].items() if k != "id"}
    assert body["noise"] == preview["noise"]
    noise = {n["column"]: n for n in body["noise"]}
    assert noise["median"]["mechanism"] == "exponential" and "ci95" not in noise["median"]
    # max_rows 20, ε/4 = 0.2 per quantile: Δ = 10, rank error (2Δ/ε)·ln(1001/0.05)
    assert noise["median"]["rank_error"] == pytest.approx(2 * 10 / 0.2 * 9.904487, rel=1e-6)
    assert noise["median"]["confidence"] == 0.95
    assert noise["n"]["mechanism"] == "laplace" and "rank_error" not in noise["n"]
    assert noise["n"]["ci"] == noise["n"]["ci95"]
    assert spend(analyst)["epsilon_spent"] == pytest.approx(before["epsilon_spent"] + charge["epsilon"], rel=1e-12)
    # the ledger stores the exponential mechanisms under their own kind and reads them back
    charges = admin.get("/v1/ledger", params={"limit": 1000}).json()["charges"]
    (stored,) = [c for c in charges if c["id"] == charge["id"]]
    assert stored["events"] == charge["events"] and stored["epsilon"] == charge["epsilon"]


def test_percentile_within_group_and_max_without_group_by(analyst: httpx.Client) -> None:
    body = post(analyst, "SELECT PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY duration_s) AS d, MAX(amount) AS top "
                         "FROM visits WHERE category = 'dining'", epsilon=0.5)
    ((d, top),) = body["rows"]
    assert isinstance(d, int | float) and 0 <= d <= 3600 and 0 <= top <= 500
    assert body["charge"]["composition"] == "sequential"


@pytest.mark.parametrize(
    ("sql", "code", "construct"),
    [
        ("SELECT QUANTILE_CONT(amount, 1.2) FROM visits", "invalid_parameter", "QUANTILE_CONT"),
        ("SELECT PERCENTILE_CONT(-0.5) WITHIN GROUP (ORDER BY amount) FROM visits", "invalid_parameter",
         "PERCENTILE_CONT"),
        ("SELECT MEDIAN(region) FROM visits", "policy", "MEDIAN"),
        ("SELECT MEDIAN(day) FROM visits", "policy", "MEDIAN"),
        ("SELECT MEDIAN(user_id) FROM visits", "policy", "MEDIAN"),  # no bounds declared
        ("SELECT QUANTILE_CONT(amount, age) FROM visits", "unsupported", "QUANTILE_CONT"),
        ("SELECT MEDIAN(nope) FROM visits", "policy", "COLUMN"),
    ],
)
def test_bad_quantiles_are_refused_with_a_clear_error_and_nothing_charged(
    analyst: httpx.Client, sql: str, code: str, construct: str
) -> None:
    before = spend(analyst)
    response = analyst.post("/v1/query?detail=cells", json={"sql": sql, "epsilon": 0.1})
    body = response.json()
    assert response.status_code == 400, body
    assert (body["code"], body["detail"].get("construct"), body["charged"]) == (code, construct, False)
    assert body["error"] and (code != "invalid_parameter" or "[0, 1]" in body["error"])
    assert spend(analyst) == before


def test_confidence_sets_every_error_bar(analyst: httpx.Client) -> None:
    sql = ("SELECT region, COUNT(*) AS n, SUM(amount) AS s, AVG(amount) AS a, MEDIAN(amount) AS m, "
           "STDDEV(amount) AS sd FROM visits GROUP BY region")
    at_95 = {n["column"]: n for n in post(analyst, sql, path="/v1/query/preview", epsilon=0.5)["noise"]}
    at_99 = {n["column"]: n for n in post(analyst, sql, path="/v1/query/preview", epsilon=0.5,
                                          confidence=0.99)["noise"]}
    assert all(n["confidence"] == 0.99 for n in at_99.values())
    assert at_99["n"]["ci"] > at_95["n"]["ci"] == at_95["n"]["ci95"] and at_99["s"]["ci"] > at_95["s"]["ci"]
    assert at_99["a"]["ci_times_count"] > at_95["a"]["ci_times_count"] > 0 and "ci" not in at_95["a"]
    assert at_99["sd"]["ci_times_count"] > at_95["sd"]["ci_times_count"] > 0
    # rank error (2Δ/ε)·ln(m/β): only β changes
    ratio = at_99["m"]["rank_error"] / at_95["m"]["rank_error"]
    assert ratio == pytest.approx(math.log(1001 / 0.01) / math.log(1001 / 0.05), rel=1e-9)
    refused = analyst.post("/v1/query/preview", json={"sql": sql, "confidence": 1.5})
    assert refused.status_code == 400 and refused.json()["code"] == "invalid_request"
