"""Issue #28 end to end: reachable groups only, literals outside a declared domain refused for free, and
post-processing over released values, on a real server over the demo data."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.live import spend


def _ask(client: httpx.Client, sql: str, epsilon: float = 0.5) -> httpx.Response:
    return client.post("/v1/query", json={"sql": sql, "epsilon": epsilon, "delta": 1e-6})


def _ok(client: httpx.Client, sql: str) -> dict[str, Any]:
    response = _ask(client, sql)
    assert response.status_code == 200, (sql, response.text)
    return response.json()  # type: ignore[no-any-return]


def test_a_where_releases_only_the_groups_it_reaches_at_the_same_charge(analyst: httpx.Client) -> None:
    cut = _ok(analyst, "SELECT region, COUNT(*) AS n FROM visits WHERE region IN ('south', 'north') GROUP BY region")
    assert [row[0] for row in cut["rows"]] == ["north", "south"]  # declared order, no other region
    assert cut["partitions"]["kind"] == "public"
    whole = _ok(analyst, "SELECT region, COUNT(*) AS n FROM visits WHERE age >= 0 GROUP BY region")
    assert len(whole["rows"]) == 5
    assert cut["charge"]["epsilon"] == whole["charge"]["epsilon"] and cut["charge"]["delta"] == whole["charge"]["delta"]


def test_refusals_before_the_charge_cost_nothing(analyst: httpx.Client) -> None:
    before = spend(analyst)
    for sql, code in (
        ("SELECT COUNT(*) AS n FROM visits WHERE region = 'North'", "literal_outside_domain"),
        ("SELECT region, COUNT(*) AS n FROM visits WHERE region IS NULL GROUP BY region", "no_reachable_group"),
    ):
        response = _ask(analyst, sql)
        body = response.json()
        assert response.status_code == 400 and body["code"] == code and body["charged"] is False, body
        if code == "literal_outside_domain":
            assert body["detail"]["nearest"] == ["north"] and body["detail"]["column"] == "region"
    assert spend(analyst) == before


def test_post_processing_is_answered_at_the_charge_of_the_bare_query(analyst: httpx.Client) -> None:
    bare = _ok(analyst, "SELECT category, COUNT(*) AS n, AVG(amount) AS a FROM visits GROUP BY category")
    post = _ok(analyst, "SELECT category, COUNT(*)::int AS n, ROUND(AVG(amount), 2) AS a, "
                        "CONCAT(category, ': ', COUNT(*)) AS label, COALESCE(SUM(amount), 0) AS total "
                        "FROM visits GROUP BY category HAVING COUNT(*)::int > -1000000 ORDER BY ROUND(AVG(amount), 1)")
    assert post["columns"] == ["category", "n", "a", "label", "total"]
    assert bare["charge"]["epsilon"] == post["charge"]["epsilon"] == 0.5
    rounded = [r[2] for r in post["rows"]]
    assert all(a is None or round(a, 2) == a for a in rounded)
    assert all(label == f"{c}: {n}" for c, n, _, label, _ in post["rows"])


def test_bi_date_shapes_are_answered_and_rollup_is_refused_for_free(analyst: httpx.Client) -> None:
    iso = _ok(analyst, "SELECT COUNT(*) AS n FROM visits WHERE day >= '2026-03-01T00:00:00' "
                       "AND day < DATE '2026-03-01' + INTERVAL 1 MONTH")
    relative = _ok(analyst, "SELECT COUNT(*) AS n FROM visits WHERE day >= CURRENT_DATE - INTERVAL 7 DAY")
    assert iso["charge"]["epsilon"] == relative["charge"]["epsilon"] == 0.5
    before = spend(analyst)
    response = _ask(analyst, "SELECT region, category, COUNT(*) AS n FROM visits GROUP BY ROLLUP(region, category)")
    body = response.json()
    assert (response.status_code, body["code"], body["charged"]) == (400, "unsupported", False)
    assert body["detail"]["construct"] == "ROLLUP" and "one query per level" in body["detail"]["hint"]
    assert spend(analyst) == before
