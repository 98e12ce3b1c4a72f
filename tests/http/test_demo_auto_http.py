"""The demo as shipped (proxy/cli/demo.py: visits with every bound "auto") over HTTP: the README's example, a
Gaussian count, a median, a join, a spread, and an expression read at its chosen clamp; each one
charge, nothing refused."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from accountant import loss
from accountant.events import from_json
from mechanisms import laplace
from proxy.cli.demo import CATEGORIES, MAX_GROUPS_LIMIT, DemoFiles
from proxy.query.analyse.measures import fixed_point
from proxy.query.catalog import ColumnSpec
from tests.support.live import Server, policy_copy, spend

FULL = "/v1/query?detail=cells"  # the answer with its full charge and per-cell budget (default: summary)

README = "SELECT region, COUNT(*) AS visits, AVG(amount) AS avg_amount FROM visits GROUP BY region"


@pytest.fixture(scope="module")
def client(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    directory = tmp_path_factory.mktemp("demo-auto")
    live = Server(directory / "server.log").start(policy_copy(demo, directory, epsilon=20.0, delta=1e-5, auto=True))
    try:
        with live.client(demo.analyst_key) as c:
            yield c
    finally:
        live.stop()


def _ask(client: httpx.Client, path: str, **body: object) -> dict[str, object]:
    response = client.post(path, json={"dataset": "demo", **body})
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_the_readme_example_chooses_rows_and_the_amount_cap_within_the_demos_share_limits(
        client: httpx.Client) -> None:
    planned = _ask(client, "/v1/query/preview", sql=README, epsilon=0.5)
    # The demo's auto_bounds_share = [0.1, 0.5] (privacy.md §10.9): one cap among n = 2 bounds at ε = 0.5 gives
    # a = 0.1·1/2 = 0.05, √B = √(2/(100·0.5)) = 0.2, s = ⌊1000·0.25/1.2⌋/1000 = 0.208: ε_sel = 0.104, of which
    # max_rows keeps low·ε/n = 0.025 and the cap the rest, 0.079; the query runs on 0.396, a third per measure
    counted = 0.396 / 3  # the count of AVG's share (and the COUNT's): τ = √2·G/ε_count users beyond k
    target = math.sqrt(2) * 5 / counted
    assert planned["bounds"] == {
        "max_rows": None, "chosen": True, "note": None, "max_rows_limit": 1000,
        "epsilon": pytest.approx(0.104, rel=1e-12), "quantile": pytest.approx(target, rel=1e-9),
        "parts": [{"bound": "max_rows", "column": None, "value": None, "limit": 1000,
                   "epsilon": pytest.approx(0.025, rel=1e-12), "q": pytest.approx(target, rel=1e-9)},
                  # AVG caps each user's total amount at a chosen C <= 1000 rows · 100000 (auto/total.py), aiming
                  # at t = √2·G/ε_sum users above it: 5 regions, ε_sum = 0.396 / 3 measures
                  {"bound": "total", "column": "amount", "value": None, "limit": 1000 * 100000,
                   "epsilon": pytest.approx(0.079, rel=1e-12),
                   "q": pytest.approx(target, rel=1e-9)}],  # region is unit-level: no max_groups
        "reused": False}  # a preview draws nothing; a query of a shape answered before may reuse (§10.8)
    before = float(spend(client)["epsilon_spent"])
    answer = _ask(client, "/v1/query?detail=cells", sql=README, epsilon=0.5)
    bounds, charge = answer["bounds"], answer["charge"]
    assert isinstance(bounds, dict) and isinstance(charge, dict)
    k, cap = (p["value"] for p in bounds["parts"])
    assert bounds["max_rows"] == k and 1 <= k <= 1000 and 0 < cap <= 1000 * 100000 and bounds["chosen"] is True
    assert charge["events"] == planned["charge"]["events"] and charge["events"]["kind"] == "auto_bounds"
    assert loss.epsilon_delta(from_json(charge["events"]), 0.0)[0] == charge["epsilon"]
    assert charge["epsilon"] == pytest.approx(0.5, rel=1e-12) and charge["epsilon"] <= 0.5
    assert math.isclose(float(spend(client)["epsilon_spent"]), before + charge["epsilon"], rel_tol=1e-12)
    # the count's noise is calibrated to k: the limit's scale times k / 1000
    (count, _), (count_at_limit, _) = answer["noise"], planned["noise"]  # type: ignore[misc]
    assert count["scale"] == pytest.approx(count_at_limit["scale"] * k / 1000, rel=1e-9)


def test_a_later_query_of_the_shape_reuses_its_bounds_and_says_so(client: httpx.Client) -> None:
    """Chosen bounds are a release (docs/privacy.md §10.8): the same shape at another ε runs at them, paying no
    selection (its event is the query's alone, its ε the request's), and its `bounds` says `reused`."""
    sql = "SELECT category, SUM(amount) AS total FROM visits WHERE age > 40 GROUP BY category"
    first = _ask(client, FULL, sql=sql, epsilon=0.5)
    again = _ask(client, FULL, sql=sql.replace("AS total", "AS t"), epsilon=0.25)
    one, two = first["bounds"], again["bounds"]
    assert isinstance(one, dict) and isinstance(two, dict)
    assert one["reused"] is False and one["epsilon"] > 0 and first["charge"]["events"]["kind"] == "auto_bounds"  # type: ignore[index]
    assert two["reused"] is True and two["epsilon"] == 0 and all(p["epsilon"] == 0 for p in two["parts"])
    assert [p["value"] for p in two["parts"]] == [p["value"] for p in one["parts"]]
    charge = again["charge"]
    assert isinstance(charge, dict) and charge["epsilon"] == 0.25 and "auto_bounds" not in str(charge["events"])
    # a repeat at another confidence: the bars at the kept bounds' noise, the query on the whole ε
    other = _ask(client, FULL, sql=sql.replace("AS total", "AS t"), epsilon=0.25, confidence=0.99)
    assert other["rows"] == again["rows"] and other["bounds"] == two
    (before,), (after,) = again["noise"], other["noise"]  # type: ignore[misc]
    grid = fixed_point(ColumnSpec("amount", "DOUBLE", bounds=(0.0, 100000.0)))[0]  # the demo's declared amount
    assert after["scale"] == before["scale"] and after["ci"] == pytest.approx(
        laplace.ci_halfwidth(before["scale"] * grid, 0.99) / grid, rel=1e-12) and after["ci"] > before["ci"]


def test_a_gaussian_grouped_count_chooses_its_bounds(client: httpx.Client) -> None:
    sql = "SELECT category, COUNT(*) FROM visits GROUP BY category"
    answer = _ask(client, "/v1/query?detail=cells", sql=sql, epsilon=0.5, mechanism="gaussian", delta=1e-7)
    bounds = answer["bounds"]
    assert isinstance(bounds, dict) and [p["bound"] for p in bounds["parts"]] == ["max_rows", "max_groups"]
    g = bounds["parts"][1]["value"]
    assert 1 <= g <= len(CATEGORIES) and bounds["parts"][1]["limit"] == MAX_GROUPS_LIMIT  # g: at most the domain
    (noise,) = answer["noise"]  # type: ignore[misc]
    assert noise["mechanism"] == "gaussian"
    charge = answer["charge"]
    assert isinstance(charge, dict) and charge["epsilon"] <= 0.5 and charge["delta"] <= 1e-7


def test_a_median_chooses_rows_and_its_grid(client: httpx.Client) -> None:
    answer = _ask(client, "/v1/query?detail=cells", sql="SELECT category, MEDIAN(amount) FROM visits GROUP BY category",
                  epsilon=0.5)
    bounds = answer["bounds"]
    assert isinstance(bounds, dict)
    # no max_groups: a quantile's per-group ε does not depend on g (privacy.md §10.4), so groups run at the limit
    assert [(p["bound"], p["column"]) for p in bounds["parts"]] == [("max_rows", None), ("upper", "amount")]
    assert bounds["parts"][0]["q"] == 0.5  # quantiles alone: half the cells above max_rows (targets.rows_share)
    upper = bounds["parts"][1]["value"]
    assert all(0 <= row[1] <= upper for row in answer["rows"] if row[1] is not None)  # type: ignore[index, union-attr]


def test_a_sum_and_a_median_of_one_column_choose_its_cap_and_its_clamp(client: httpx.Client) -> None:
    answer = _ask(client, "/v1/query?detail=cells", sql="SELECT category, SUM(amount), MEDIAN(amount) FROM visits "
                  "GROUP BY category", epsilon=0.5)
    bounds = answer["bounds"]
    assert isinstance(bounds, dict)
    assert [(p["bound"], p["column"]) for p in bounds["parts"]] == [("max_rows", None), ("max_groups", None),
                                                                    ("total", "amount"), ("upper", "amount")]
    upper = bounds["parts"][3]["value"]
    assert all(0 <= row[2] <= upper for row in answer["rows"] if row[2] is not None)  # type: ignore[index, union-attr]


def test_a_join_chooses_its_bound_from_the_joined_rows(client: httpx.Client) -> None:
    answer = _ask(client, "/v1/query?detail=cells", sql="SELECT plan, COUNT(*) FROM visits JOIN users USING (user_id) "
                  "WHERE plan <> 'free' GROUP BY plan", epsilon=0.5)
    bounds = answer["bounds"]
    assert isinstance(bounds, dict) and [p["bound"] for p in bounds["parts"]] == ["max_rows"]  # plan: unit-level
    assert answer["charge"]["events"]["kind"] == "auto_bounds"  # type: ignore[index]


def test_a_spread_chooses_rows_and_its_clamp(client: httpx.Client) -> None:
    answer = _ask(client, "/v1/query?detail=cells", sql="SELECT region, STDDEV(duration_s) FROM visits GROUP BY region",
                  epsilon=0.5)
    bounds = answer["bounds"]
    assert isinstance(bounds, dict)
    assert [(p["bound"], p["column"]) for p in bounds["parts"]] == [("max_rows", None), ("upper", "duration_s")]


def test_an_expression_reads_its_column_at_a_chosen_clamp(client: httpx.Client) -> None:
    """AVG(duration_s / 60) chooses max_rows and duration_s's clamp (docs/privacy.md §10.10), not the limits (a WHERE
    no other test asks: a shape of its own, not one whose bounds are kept, §10.8)."""
    answer = _ask(client, FULL, sql="SELECT region, AVG(duration_s / 60) FROM visits WHERE age > 21 GROUP BY region",
                  epsilon=0.5)
    bounds = answer["bounds"]
    assert isinstance(bounds, dict)
    assert bounds["chosen"] is True and bounds["note"] is None and 1 <= bounds["max_rows"] <= 1000
    assert [(p["bound"], p["column"]) for p in bounds["parts"]] == [("max_rows", None), ("upper", "duration_s")]
    assert 0 <= bounds["parts"][1]["value"] <= 86400  # region is unit-level: no max_groups
    assert answer["charge"]["events"]["kind"] == "auto_bounds"  # type: ignore[index]
    assert answer["charge"]["epsilon"] == pytest.approx(0.5, rel=1e-12)  # type: ignore[index]


def test_a_repeat_at_another_confidence_keeps_every_chosen_bounds_noise(client: httpx.Client) -> None:
    # rows, groups, the amount's cap and its clamp all chosen: the repeat's error bars are the stored answer's
    # scales at the new confidence, not the scales at the declared limits of the bounds other than max_rows
    sql = ("SELECT category, COUNT(*) AS n, SUM(amount) AS total, AVG(amount) AS mean, MEDIAN(amount) AS mid "
           "FROM visits GROUP BY category")
    first = _ask(client, "/v1/query?detail=cells", sql=sql, epsilon=0.4)
    spent = spend(client)
    again = _ask(client, "/v1/query?detail=cells", sql=sql, epsilon=0.4, confidence=0.99)
    assert spend(client) == spent and again["rows"] == first["rows"] and again["bounds"] == first["bounds"]
    bounds = first["bounds"]
    assert isinstance(bounds, dict)
    assert {p["bound"] for p in bounds["parts"]} == {"max_rows", "max_groups", "total", "upper"}
    one, other = first["noise"], again["noise"]
    assert isinstance(one, list) and isinstance(other, list) and len(one) == len(other) == 4
    for a, b in zip(one, other, strict=True):
        bars = ("ci", "ci_times_count", "rank_error", "confidence", "ci_rows", "interval_rows")
        assert {k: v for k, v in a.items() if k not in bars} == {k: v for k, v in b.items() if k not in bars}
        assert (a["confidence"], b["confidence"]) == (0.95, 0.99)
    # the discrete Laplace count's interval at each confidence, at the scale the answer was released with
    assert one[0]["column"] == "n" and one[0]["mechanism"] == "laplace"
    assert one[0]["ci"] == laplace.ci_halfwidth(one[0]["scale"], 0.95) < other[0]["ci"]
    assert other[0]["ci"] == laplace.ci_halfwidth(one[0]["scale"], 0.99)


def test_daily_and_weekly_series_have_a_public_domain(client: httpx.Client) -> None:
    """The demo declares day's bounds (2026): a daily series releases all 365 days and a weekly one all 53
    weeks, with no threshold and no δ; each is noised for min(g, d) groups per user (g chosen, at most 32)."""
    daily = _ask(client, "/v1/query?detail=cells", sql="SELECT day, COUNT(*) AS n FROM visits GROUP BY day")
    assert len(daily["rows"]) == 365 and daily["partitions"] == {"kind": "public", "threshold": None, "note": None}
    assert daily["charge"]["delta"] == 0.0  # type: ignore[index]
    weekly = _ask(client, FULL, sql="SELECT date_trunc('week', day) AS week, COUNT(*) AS n FROM visits "
                                           "GROUP BY 1 ORDER BY 1")
    weeks = [row[0] for row in weekly["rows"]]  # type: ignore[union-attr]
    assert len(weeks) == 53 and weeks[0] == "2025-12-29" and weeks == sorted(weeks)
    assert weekly["partitions"]["kind"] == "public"  # type: ignore[index]
