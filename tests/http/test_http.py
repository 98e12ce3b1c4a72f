"""The HTTP contract, end to end: a real server, a real DuckDB, a real SQLite ledger (docs/architecture.md).

Noisy values are random, so these tests assert what is exact: shapes, group keys, types, charges, noise
scales, spends and ledger entries.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from fractions import Fraction
from typing import Any

import httpx
import pytest

from proxy.cli.demo import CATEGORIES, REGIONS, DemoFiles
from tests.support.live import StartFresh, difference_down, spend, sum_up

QUERY_KEYS = {"ok", "dataset", "columns", "rows", "charge", "budget", "noise", "partitions",
              "unreliable"}  # unreliable: the reliability flag (issue #29)
# accounting/costs/accounts/reported/shared: added with tighter accounting (docs/privacy.md §5)
# scope/cells: added with per-cell accounting (docs/privacy.md §7)
CHARGE_KEYS = {"id", "epsilon", "delta", "mechanism", "composition", "events", "accounting", "costs", "scope"}
BUDGET_KEYS = {
    "dataset", "epsilon", "delta", "epsilon_spent", "delta_spent", "epsilon_remaining", "delta_remaining",
    "accounting", "accounts", "reported", "shared", "cells", "display",
}
NOISE_KEYS = {"column", "mechanism", "scale", "ci95", "confidence", "ci", "method"}  # a COUNT's: the fields it has
# confidence/ci/ci_times_count/rank_error: error bars for every aggregate (issue #15); method, interval_rows,
# parts_rows: AVG/VAR/STDDEV bars from the released noisy parts (issue #29); a field without a value is left out
# (issue #30: ci_times_count, rank_error, ci_rows, interval_rows and parts_rows have none for a COUNT)


def post(client: httpx.Client, sql: str, path: str = "/v1/query?detail=cells", **params: object) -> dict[str, Any]:
    response = client.post(path, json={"sql": sql, **params})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body["ok"] is True
    return body


def without_id(charge: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in charge.items() if k != "id"}


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def visits_bounds(client: httpx.Client) -> tuple[int, int]:
    """(max_groups, max_rows) of the visits table, as GET /v1/datasets reports them."""
    (dataset,) = client.get("/v1/datasets").json()["datasets"]
    (visits,) = [t for t in dataset["tables"] if t["name"] == "visits"]
    return visits["max_groups"], visits["max_rows"]


# --- POST /v1/query -------------------------------------------------------------------------------------


def test_query_returns_rows_charge_budget_noise_and_partitions(analyst: httpx.Client) -> None:
    before = spend(analyst)
    body = post(analyst, "SELECT COUNT(*) AS n FROM visits", epsilon=0.1)
    after = spend(analyst)

    assert set(body) == QUERY_KEYS
    assert body["dataset"] == "demo"
    assert body["columns"] == ["n"]
    assert len(body["rows"]) == 1 and len(body["rows"][0]) == 1 and is_int(body["rows"][0][0])

    charge = body["charge"]
    assert set(charge) == CHARGE_KEYS
    assert re.fullmatch(r"[0-9a-f]{32}", charge["id"])
    assert (charge["mechanism"], charge["composition"], charge["delta"]) == ("laplace", "sequential", 0.0)
    assert 0.1 - 1e-12 < charge["epsilon"] <= 0.1  # never more than asked, at most a rounding hair less
    (event,) = charge["events"]["events"]
    assert charge["events"] == {"kind": "composed", "events": [event]}
    assert event["kind"] == "laplace" and event["sensitivity"] == 20  # COUNT(*): max_rows = 20 per unit
    assert event["sensitivity"] / event["scale"] <= 0.1

    (noise,) = body["noise"]
    assert set(noise) == NOISE_KEYS
    assert (noise["column"], noise["mechanism"], noise["scale"]) == ("n", "laplace", event["scale"])
    assert abs(noise["ci95"] - event["scale"] * math.log(20)) <= 1  # P(|Laplace(b)| > b·ln 20) = 5%
    assert body["partitions"] == {"kind": "none", "threshold": None, "note": None}

    assert set(body["budget"]) == BUDGET_KEYS
    assert body["budget"] == after  # the response reports the budget as GET /v1/budget then sees it
    # The spend is the exact sum of all charges rounded up; `before` is itself rounded up by < 1 ulp.
    was, cost = before["epsilon_spent"], charge["epsilon"]
    low = Fraction(was) - Fraction(math.ulp(was)) + Fraction(cost)
    assert low <= Fraction(after["epsilon_spent"]) <= Fraction(sum_up([was, cost]))
    assert after["delta_spent"] == before["delta_spent"]


def test_spend_rises_by_exactly_each_charge(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server()
    charges: list[dict[str, Any]] = []
    with server.client(demo.analyst_key) as client:
        start = spend(client)
        assert (start["epsilon_spent"], start["delta_spent"]) == (0.0, 0.0)
        assert (start["epsilon_remaining"], start["delta_remaining"]) == (5.0, 1e-6)
        for epsilon, sql in [
            (0.1, "SELECT COUNT(*) AS n FROM visits"),
            (0.25, "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"),
            (0.3, "SELECT category, SUM(amount) AS s FROM visits GROUP BY category"),
            (0.7, "SELECT COUNT(*) AS n FROM users"),
        ]:
            body = post(client, sql, epsilon=epsilon)
            charges.append(body["charge"])
            now = spend(client)
            if len(charges) == 1:
                assert (now["epsilon_spent"], now["delta_spent"]) == (body["charge"]["epsilon"], 0.0)
            assert now["epsilon_spent"] == sum_up(c["epsilon"] for c in charges)
            assert now["delta_spent"] == sum_up(c["delta"] for c in charges)
            assert now["epsilon_remaining"] == difference_down(5.0, now["epsilon_spent"])
            assert body["budget"] == now


def test_group_by_unit_level_key_composes_in_parallel(analyst: httpx.Client) -> None:
    grouped = post(analyst, "SELECT region, COUNT(*) AS n FROM visits GROUP BY region", epsilon=0.3)
    single = post(analyst, "SELECT COUNT(*) AS n FROM visits", epsilon=0.3)

    assert grouped["columns"] == ["region", "n"]
    assert sorted(row[0] for row in grouped["rows"]) == sorted(REGIONS)  # exactly the public domain
    assert all(is_int(row[1]) for row in grouped["rows"])
    assert grouped["partitions"] == {"kind": "public", "threshold": None, "note": None}

    g, s = grouped["charge"], single["charge"]
    assert (g["composition"], s["composition"]) == ("parallel", "sequential")
    # k disjoint groups cost what one group costs (docs/privacy.md §4): the same ε, δ and per-group mechanism
    assert (g["epsilon"], g["delta"]) == (s["epsilon"], s["delta"])
    assert g["events"] == {"kind": "parallel", "events": [s["events"]]}
    assert [n["scale"] for n in grouped["noise"]] == [n["scale"] for n in single["noise"]]


def test_group_by_row_level_key_composes_sequentially(analyst: httpx.Client) -> None:
    max_groups, max_rows = visits_bounds(analyst)
    assert (max_groups, max_rows) == (4, 20)
    by_category = post(analyst, "SELECT category, COUNT(*) AS n FROM visits GROUP BY category", epsilon=0.2)
    by_region = post(analyst, "SELECT region, COUNT(*) AS n FROM visits GROUP BY region", epsilon=0.2)

    assert sorted(row[0] for row in by_category["rows"]) == sorted(CATEGORIES)
    assert all(is_int(row[1]) for row in by_category["rows"])
    charge = by_category["charge"]
    assert charge["composition"] == "sequential"
    (event,) = charge["events"]["events"]
    assert charge["events"]["kind"] == "composed"
    assert event["kind"] == "laplace"
    assert event["sensitivity"] == max_groups * max_rows  # a unit reaches up to 4 groups: Δ1 = L0 · max_rows
    assert event["sensitivity"] / event["scale"] <= 0.2 and 0.2 - 1e-12 < charge["epsilon"] <= 0.2
    assert by_category["noise"][0]["scale"] == event["scale"]
    # four times the noise of the disjoint grouping at the same ε
    assert event["scale"] == pytest.approx(max_groups * by_region["noise"][0]["scale"], rel=1e-12)


def test_count_results_are_integers(analyst: httpx.Client) -> None:
    body = post(
        analyst,
        "SELECT region, COUNT(*) AS n, COUNT(amount) AS k, COUNT(DISTINCT user_id) AS u, SUM(amount) AS s "
        "FROM visits GROUP BY region",
        epsilon=0.4,
    )
    assert body["columns"] == ["region", "n", "k", "u", "s"]
    assert len(body["rows"]) == len(REGIONS)
    for _, n, k, u, s in body["rows"]:
        assert is_int(n) and is_int(k) and is_int(u), (n, k, u)
        assert isinstance(s, int | float) and not isinstance(s, bool)
    assert [n["column"] for n in body["noise"]] == ["n", "k", "u", "s"]
    assert len(body["charge"]["events"]["events"][0]["events"]) == 4  # one noisy measure per aggregate


def test_mechanism_gaussian_reports_delta(analyst: httpx.Client) -> None:
    body = post(
        analyst, "SELECT region, COUNT(*) AS n FROM visits GROUP BY region",
        epsilon=0.2, delta=1e-7, mechanism="gaussian",
    )
    charge = body["charge"]
    assert (charge["mechanism"], charge["composition"]) == ("gaussian", "parallel")
    assert 0 < charge["delta"] <= Fraction(1, 10**7)  # never above the δ written in the request
    assert 0 < charge["epsilon"] <= 0.2
    (composed,) = charge["events"]["events"]
    (event,) = composed["events"]
    assert event["kind"] == "gaussian" and event["sensitivity"] == pytest.approx(20, rel=1e-12)
    (noise,) = body["noise"]
    assert (noise["column"], noise["mechanism"], noise["scale"]) == ("n", "gaussian", event["sigma"])
    assert abs(noise["ci95"] - 1.959964 * event["sigma"]) <= 1
    assert all(is_int(row[1]) for row in body["rows"])

    default_delta = post(analyst, "SELECT COUNT(*) AS n FROM visits", mechanism="gaussian")
    assert default_delta["charge"]["mechanism"] == "gaussian"
    assert default_delta["charge"]["delta"] == 9.999999999999999e-09  # the dataset's 1e-8, at most as written


# --- POST /v1/query/preview -----------------------------------------------------------------------------


def test_preview_returns_the_plan_and_spends_nothing(analyst: httpx.Client) -> None:
    sql = "SELECT category, COUNT(*) AS n FROM visits GROUP BY category"
    before = spend(analyst)
    preview = post(analyst, sql, path="/v1/query/preview", epsilon=0.2)
    assert spend(analyst) == before

    assert set(preview) == {
        "ok", "dataset", "sql", "columns", "charge", "budget", "budget_after", "admissible", "refusal", "noise",
        "partitions",
    }
    assert preview["charge"]["id"] is None
    assert preview["budget"] == before
    assert preview["admissible"] is True
    assert preview["columns"] == ["category", "n"]
    rewritten = preview["sql"]
    assert rewritten.startswith("SELECT ")  # the demo reads its bounding store: bounding is a filter
    assert 'FROM "visits"' in rewritten
    # a count reads each kept cell's rank-1 row, at most 20 rows a cell (on_store.counts_from_first_rows)
    assert "__row_rank__category = 1" in rewritten and "__group_rank__category <= 4" in rewritten
    assert "LEAST(__cell_rows__category, 20)" in rewritten
    assert "'groceries', 'dining'" in rewritten  # the public domain filter
    assert sql not in rewritten

    ran = post(analyst, sql, epsilon=0.2)
    assert without_id(ran["charge"]) == without_id(preview["charge"])
    assert ran["noise"] == preview["noise"]
    assert ran["partitions"] == preview["partitions"]
    assert ran["columns"] == preview["columns"]


def test_preview_budget_after_is_the_spend_after_the_query(fresh_server: StartFresh, demo: DemoFiles) -> None:
    # Regression: budget_after was spent + ε in plain float arithmetic, 1 ulp below the real spend. It is now
    # rounded up: never below the spend the query will cause, and at most one rounding step above it.
    server = fresh_server()
    mismatches = []
    with server.client(demo.analyst_key) as client:
        for i, epsilon in enumerate((0.1, 0.25, 0.3, 0.1, 0.7, 0.2)):
            sql = f"SELECT COUNT(*) AS n{i} FROM visits"  # distinct queries: an identical one is a free repeat
            preview = post(client, sql, path="/v1/query/preview", epsilon=epsilon)
            post(client, sql, epsilon=epsilon)
            actual, promised = spend(client), preview["budget_after"]
            for key in ("epsilon_spent", "delta_spent"):
                exact = promised[key] == actual[key]
                one_step_up = promised[key] == math.nextafter(actual[key], math.inf)
                if not (exact or one_step_up):
                    mismatches.append((epsilon, key, promised[key], actual[key]))
    assert mismatches == []


def test_preview_keys_each_query_with_a_fresh_salt(analyst: httpx.Client) -> None:
    # Regression: pipeline.prepare never passed `salt` to query.plan, so every query was bounded with salt 0.
    # Two row-level keys have no stored rank: their groups per unit are chosen per query (rewrite/cells.py).
    sql = "SELECT day, category, COUNT(*) AS n FROM visits GROUP BY day, category"
    salts = set()
    for _ in range(3):
        rewritten = post(analyst, sql, path="/v1/query/preview")["sql"]
        # the keyed hash of each cell starts its two 32-bit lanes at the salt's halves (keyed_hash.py)
        lanes = re.findall(r"XOR\(CAST\((\d+) AS BIGINT\)", rewritten)
        assert len(lanes) == 2, rewritten
        salts.add(tuple(lanes))
    assert len(salts) == 3


# --- GET /v1/ledger ---------------------------------------------------------------------------------------


def test_ledger_is_for_admins_and_filters(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server()
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        refused = analyst.get("/v1/ledger")
        assert refused.status_code == 403 and refused.json()["code"] == "forbidden"

        ran = [
            post(analyst, "SELECT COUNT(*) AS n FROM visits", epsilon=0.1),
            post(admin, "SELECT region, COUNT(*) AS n FROM visits GROUP BY region", epsilon=0.2),
            post(analyst, "select   count(*) as n\n from visits", epsilon=0.3),
        ]
        ids = [r["charge"]["id"] for r in ran]
        assert len(set(ids)) == 3

        everything = admin.get("/v1/ledger").json()
        assert {k: everything[k] for k in ("ok", "total", "limit", "offset")} == {
            "ok": True, "total": 3, "limit": 100, "offset": 0,
        }
        entries = everything["charges"]
        assert [e["id"] for e in entries] == ids[::-1]  # newest first
        for entry, r in zip(entries[::-1], ran, strict=True):
            assert set(entry) == {
                "id", "analyst", "dataset", "at", "sql_sha256", "epsilon", "delta", "composition", "events", "scope",
            }
            assert entry["dataset"] == "demo"
            assert {k: entry[k] for k in ("epsilon", "delta", "composition", "events")} == {
                k: r["charge"][k] for k in ("epsilon", "delta", "composition", "events")
            }
            assert dt.datetime.fromisoformat(entry["at"]).utcoffset() == dt.timedelta(0)
            assert re.fullmatch(r"[0-9a-f]{64}", entry["sql_sha256"])
        assert [e["analyst"] for e in entries] == ["analyst", "admin", "analyst"]
        # the same query up to keyword case and spacing has the same identity; a different one does not
        assert entries[0]["sql_sha256"] == entries[2]["sql_sha256"] != entries[1]["sql_sha256"]
        times = [dt.datetime.fromisoformat(e["at"]) for e in entries]
        assert times == sorted(times, reverse=True)

        def ledger(**params: object) -> dict[str, Any]:
            response = admin.get("/v1/ledger", params=params)
            assert response.status_code == 200, response.text
            body: dict[str, Any] = response.json()
            return body

        def listed(**params: object) -> tuple[int, list[str]]:
            body = ledger(**params)
            return body["total"], [e["id"] for e in body["charges"]]

        assert listed(analyst="analyst") == (2, [ids[2], ids[0]])
        assert listed(analyst="admin") == (1, [ids[1]])
        assert listed(analyst="nobody") == (0, [])
        assert listed(dataset="demo") == (3, ids[::-1])
        assert listed(dataset="other") == (0, [])
        middle = entries[1]["at"]
        assert listed(since=middle) == (2, [ids[2], ids[1]])  # since is inclusive
        assert listed(until=middle) == (1, [ids[0]])  # until is exclusive
        assert listed(since="2000-01-01T00:00:00Z") == (3, ids[::-1])
        assert listed(since="2999-01-01T00:00:00+00:00") == (0, [])
        assert listed(analyst="analyst", since=middle) == (1, [ids[2]])
        page = ledger(limit=1, offset=1)
        assert (page["total"], page["limit"], page["offset"]) == (3, 1, 1)
        assert [e["id"] for e in page["charges"]] == [ids[1]]
        assert listed(limit=2) == (3, [ids[2], ids[1]])
        assert listed(offset=3) == (3, [])


# --- GET /v1/datasets, /docs, /openapi.json -----------------------------------------------------------------


def test_datasets_lists_tables_and_columns(analyst: httpx.Client) -> None:
    response = analyst.get("/v1/datasets")
    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    (dataset,) = body["datasets"]
    assert {k: v for k, v in dataset.items() if k != "tables"} == {
        # 0.1 and 1e-8 as written in the policy, as the largest floats at or below them
        "name": "demo", "mechanism": "laplace", "epsilon": 0.09999999999999999, "delta": 9.999999999999999e-09,
        "max_epsilon": 1.0,
    }
    tables = {t["name"]: t for t in dataset["tables"]}
    assert list(tables) == ["visits", "users"]
    visits, users = tables["visits"], tables["users"]
    assert (visits["privacy_unit"], visits["max_groups"], visits["max_rows"]) == ("user_id", 4, 20)
    assert (users["privacy_unit"], users["max_groups"], users["max_rows"]) == ("user_id", 1, 1)
    columns = {c["name"]: c for c in visits["columns"]}
    assert list(columns) == ["user_id", "region", "age", "day", "category", "amount", "duration_s"]
    assert [c["name"] for c in users["columns"]] == ["user_id", "region", "age", "plan"]
    assert columns["region"] == {
        "name": "region", "type": "VARCHAR", "bounds": None, "unit_level": True, "groupable": True,
        "public_domain": list(REGIONS),
    }
    assert columns["amount"] == {
        "name": "amount", "type": "DOUBLE", "bounds": [0.0, 500.0], "unit_level": False, "groupable": False,
        "public_domain": None,
    }
    assert columns["user_id"]["groupable"] is False
    assert columns["category"]["public_domain"] == list(CATEGORIES)
    assert columns["category"]["unit_level"] is False


def test_openapi_is_served_and_the_interactive_docs_are_off(analyst: httpx.Client) -> None:
    # /docs and /redoc run CDN scripts on this origin: opt-in (tests/http/test_http_hardening.py)
    assert analyst.get("/docs").status_code == 404
    assert analyst.get("/redoc").status_code == 404

    spec = analyst.get("/openapi.json")
    assert spec.status_code == 200
    body = spec.json()
    assert body["info"]["title"] == "dp-proxy"
    assert set(body["paths"]) >= {
        "/healthz", "/v1/query", "/v1/query/preview", "/v1/budget", "/v1/ledger", "/v1/datasets",
    }
    assert set(body["paths"]["/v1/query"]) == {"post"}
    schemas = body["components"]["schemas"]
    assert {"QueryRequest", "QueryResponse", "PreviewResponse", "ErrorResponse"} <= set(schemas)
    error_keys = {"ok", "status", "code", "error", "detail", "charged"}
    assert set(schemas["ErrorResponse"]["properties"]) == error_keys
