"""Two-level aggregation over units end to end (docs/privacy.md §14), on a real server over the demo (visits bounded
at 20 rows per user): "how many users have k visits" is one charge at sensitivity 1, released over the public domain
0..20 (a user with more visits counts at 20), each count near the exact clamped answer; the LEFT JOIN from users
keeps users with no visit; a per-unit query grouped by anything but the unit is refused, free."""

from __future__ import annotations

from typing import Any

import duckdb
import httpx

from proxy.cli.demo import DemoFiles
from tests.support.live import spend

HOW_MANY = ("SELECT visits, COUNT(*) AS users FROM (SELECT user_id, COUNT(*) AS visits FROM visits GROUP BY user_id) "
            "AS per GROUP BY visits ORDER BY visits")
FROM_USERS = ("SELECT visits, COUNT(*) AS users FROM (SELECT u.user_id, COUNT(v.day) AS visits FROM users u LEFT JOIN "
              "visits v ON u.user_id = v.user_id AND v.category = 'travel' GROUP BY u.user_id) AS per GROUP BY visits "
              "ORDER BY visits")


def _ok(client: httpx.Client, sql: str, epsilon: float = 1.0) -> dict[str, Any]:
    response = client.post("/v1/query", json={"sql": sql, "epsilon": epsilon, "delta": 1e-6})
    assert response.status_code == 200, (sql, response.text)
    return response.json()  # type: ignore[no-any-return]


def _exact(demo: DemoFiles, sql: str) -> dict[int, int]:
    with duckdb.connect(str(demo.database), read_only=True) as con:
        return dict(con.execute(sql).fetchall())  # type: ignore[arg-type]


def test_how_many_users_have_k_visits_is_one_charge_over_the_domain_0_to_max_rows(
    analyst: httpx.Client, demo: DemoFiles
) -> None:
    before = spend(analyst)
    body = _ok(analyst, HOW_MANY)
    assert body["columns"] == ["visits", "users"]
    assert [row[0] for row in body["rows"]] == list(range(21))  # every count 0..20, empty ones too
    assert body["partitions"]["kind"] == "public"
    assert 1.0 - 1e-12 < body["charge"]["epsilon"] <= 1.0 and body["charge"]["delta"] == 0.0
    (noise,) = body["noise"]
    assert noise["scale"] == 1.0  # COUNT(*) over units: sensitivity 1 (one user, one row, one cell), ε = 1
    exact = _exact(demo, "SELECT LEAST(n, 20), COUNT(*) FROM (SELECT COUNT(*) AS n FROM visits WHERE user_id IS "
                         "NOT NULL GROUP BY user_id) GROUP BY 1")
    for k, users in body["rows"]:
        assert abs(users - exact.get(k, 0)) <= 25, (k, users, exact)  # P(|Laplace(1)| > 25) = e^-25
    assert after_minus(before, spend(analyst)) <= 1.0 + 1e-9


def test_a_left_join_from_users_counts_the_users_without_a_matching_visit_at_zero(
    analyst: httpx.Client, demo: DemoFiles
) -> None:
    body = _ok(analyst, FROM_USERS)
    exact = _exact(demo, "SELECT LEAST(n, 20), COUNT(*) FROM (SELECT u.user_id, COUNT(v.day) AS n FROM users u LEFT "
                         "JOIN visits v ON u.user_id = v.user_id AND v.category = 'travel' GROUP BY u.user_id) "
                         "GROUP BY 1")
    assert exact.get(0, 0) > 0  # some users have no travel visit: the LEFT JOIN keeps them
    released = dict(body["rows"])
    assert set(released) == set(range(21))
    for k, users in exact.items():
        assert abs(released[k] - users) <= 25, (k, released[k], users)


def test_a_per_unit_query_grouped_by_anything_but_the_unit_is_refused_free(analyst: httpx.Client) -> None:
    before = spend(analyst)
    response = analyst.post("/v1/query", json={"sql": "SELECT n, COUNT(*) FROM (SELECT region, COUNT(*) AS n FROM "
                                                      "visits GROUP BY region) AS q GROUP BY n", "epsilon": 1.0})
    body = response.json()
    assert response.status_code == 400 and body["code"] == "policy" and body["charged"] is False, body
    assert "group by the privacy unit" in body["error"] and body["detail"]["construct"] == "GROUP BY"
    assert spend(analyst) == before


def after_minus(before: dict[str, Any], after: dict[str, Any]) -> float:
    return float(after["epsilon_spent"]) - float(before["epsilon_spent"])
