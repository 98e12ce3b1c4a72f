"""max_rows = "auto" end to end over HTTP: one charge admitted before any data is read, the bounds reported in
the answer and the preview, the ledger's exact event, refusals that cost nothing."""

from __future__ import annotations

import math
from collections.abc import Iterator

import httpx
import pytest

from accountant import loss
from accountant.events import from_json
from mechanisms import laplace
from proxy.cli.demo import DemoFiles
from tests.support.live import Server, policy_copy, spend

FULL = "/v1/query?detail=cells"  # the answer with its full charge and per-cell budget (default: summary)

LIMIT = 200


@pytest.fixture(scope="module")
def auto_server(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("auto-bounds")
    policy = policy_copy(demo, directory, epsilon=20.0, delta=1e-5, share="0.2")
    text = policy.read_text(encoding="utf-8")
    assert text.count("max_rows = 20\n") == 1
    policy.write_text(text.replace("max_rows = 20\n", f'max_rows = "auto"\nmax_rows_limit = {LIMIT}\n')
                      .replace('bounding = "store"', 'bounding = "store"\nauto_bounds_reuse = 0'),
                      encoding="utf-8")  # each query draws: this module tests selection
    live = Server(directory / "server.log").start(policy)
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture(scope="module")
def client(auto_server: Server, demo: DemoFiles) -> Iterator[httpx.Client]:
    with auto_server.client(demo.analyst_key) as c:
        yield c


def _spent(client: httpx.Client) -> float:
    return float(spend(client)["epsilon_spent"])


@pytest.mark.parametrize("sql", [
    "SELECT category, COUNT(*), SUM(amount) FROM visits GROUP BY category",
    "SELECT region, COUNT(*) FROM visits GROUP BY region",
    "SELECT category, COUNT(*) FROM visits WHERE amount > 20 GROUP BY category",
    "SELECT region, category, AVG(amount) FROM visits GROUP BY region, category",
])
def test_an_auto_query_is_charged_once_and_reports_its_bound(client: httpx.Client, sql: str) -> None:
    before = _spent(client)
    preview = client.post("/v1/query/preview", json={"dataset": "demo", "sql": sql, "epsilon": 0.5})
    assert preview.status_code == 200, preview.text
    planned = preview.json()
    # max_rows aims at τ = √2·G/ε_count truncated cells per cell a unit keeps (bounds.cell_target), its `q`
    target = planned["bounds"]["parts"][0]["q"]
    assert planned["bounds"] == {"max_rows": None, "chosen": True, "reused": False, "note": None,
                                 "max_rows_limit": LIMIT,
                                 "epsilon": pytest.approx(0.1, rel=1e-12), "quantile": target,
                                 "parts": [{"bound": "max_rows", "column": None, "value": None, "limit": LIMIT,
                                            "epsilon": pytest.approx(0.1, rel=1e-12), "q": target}]}
    assert target > 0
    if sql == "SELECT region, COUNT(*) FROM visits GROUP BY region":  # 5 regions, the count's ε 0.5 − 0.1
        assert target == pytest.approx(math.sqrt(2) * 5 / 0.4, rel=1e-9)
    response = client.post("/v1/query?detail=cells", json={"dataset": "demo", "sql": sql, "epsilon": 0.5})
    assert response.status_code == 200, response.text
    body = response.json()
    bounds = body["bounds"]
    assert bounds["chosen"] is True and 1 <= bounds["max_rows"] <= LIMIT
    assert [(p["bound"], p["value"]) for p in bounds["parts"]] == [("max_rows", bounds["max_rows"])]
    assert bounds["epsilon"] == planned["bounds"]["epsilon"]
    charge = body["charge"]
    assert charge["events"] == planned["charge"]["events"] and charge["epsilon"] == planned["charge"]["epsilon"]
    assert charge["epsilon"] <= 0.5 and charge["events"]["kind"] == "auto_bounds"
    event = from_json(charge["events"])
    assert loss.epsilon_delta(event, 0.0)[0] == charge["epsilon"]
    # each noise is calibrated to the chosen bound: the scale of the limit's noise times k / limit (rounded up)
    for noise, limit_noise in zip(body["noise"], planned["noise"], strict=True):
        if noise.get("scale") is not None and limit_noise.get("scale") is not None:
            ratio = noise["scale"] / limit_noise["scale"]
            assert ratio == pytest.approx(bounds["max_rows"] / LIMIT, rel=1e-9)
    assert math.isclose(_spent(client), before + charge["epsilon"], rel_tol=1e-12)
    # a repeat is the stored answer, free
    again = client.post("/v1/query?detail=cells", json={"dataset": "demo", "sql": sql, "epsilon": 0.5})
    assert again.content == response.content and again.headers.get("x-dp-repeat") == "true"


def test_the_ledger_stores_the_auto_event(client: httpx.Client, demo: DemoFiles, auto_server: Server) -> None:
    sql = "SELECT day, COUNT(*) FROM visits WHERE day >= '2026-01-10' GROUP BY day"
    response = client.post("/v1/query?detail=cells", json={"dataset": "demo", "sql": sql, "epsilon": 0.25})
    assert response.status_code == 200, response.text
    with auto_server.client(demo.admin_key) as admin:
        entries = admin.get("/v1/ledger", params={"analyst": "analyst", "limit": 1000}).json()["charges"]
    (entry,) = [e for e in entries if e["id"] == response.json()["charge"]["id"]]
    event = from_json(entry["events"])
    selection = event.selection  # type: ignore[union-attr]
    assert laplace.epsilon(selection.sensitivity, selection.scale) == pytest.approx(0.05, rel=1e-12)
    assert selection.sensitivity == 4.0  # max_groups cells per unit (day is a row-level key)


@pytest.mark.parametrize(("body", "chosen", "words"), [
    ({"sql": "SELECT COUNT(*) FROM visits", "mechanism": "gaussian", "delta": 1e-7}, ["max_rows"], None),
    ({"sql": "SELECT MEDIAN(amount) FROM visits"}, ["max_rows"], None),
    ({"sql": "SELECT COUNT(*) FROM visits", "noise_multiplier": 4}, [], "noise_multiplier"),
    ({"sql": "SELECT plan, COUNT(*) FROM visits JOIN users USING (user_id) GROUP BY plan"}, ["max_rows"], None),
    ({"sql": "SELECT region, STDDEV(duration_s) FROM visits GROUP BY region"}, ["max_rows"], None),
    ({"sql": "SELECT region, SUM(amount * 2) FROM visits GROUP BY region"}, ["max_rows"], None),  # §10.10
])
def test_gaussian_and_quantiles_choose_and_other_shapes_run_at_the_limits(
    client: httpx.Client, body: dict[str, object], chosen: list[str], words: str | None
) -> None:
    """Nothing is refused: what the selection cannot read runs at the declared limits, free of selection."""
    before = _spent(client)
    response = client.post("/v1/query?detail=cells", json={"dataset": "demo", **body})
    assert response.status_code == 200, response.text
    answer = response.json()
    bounds = answer["bounds"]
    assert [p["bound"] for p in bounds["parts"]] == chosen and bounds["chosen"] is bool(chosen)
    assert (bounds["note"] is None) is (words is None) and (words is None or words in bounds["note"])
    if not chosen:
        assert (bounds["max_rows"], bounds["epsilon"]) == (LIMIT, 0.0)  # the declared limit, nothing selected
        assert answer["charge"]["events"]["kind"] != "auto_bounds"
    else:
        assert answer["charge"]["events"]["kind"] == "auto_bounds" and 1 <= bounds["max_rows"] <= LIMIT
    assert math.isclose(_spent(client), before + answer["charge"]["epsilon"], rel_tol=1e-12)


def test_fixed_tables_beside_an_auto_one_report_no_bounds(client: httpx.Client) -> None:
    sql = "SELECT plan, COUNT(*) FROM users GROUP BY plan"
    response = client.post("/v1/query?detail=cells", json={"dataset": "demo", "sql": sql})
    assert response.status_code == 200, response.text
    assert "bounds" not in response.json()  # present only where the table chooses its bound


@pytest.fixture(scope="module")
def all_auto(demo: DemoFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """The demo with every bound of visits automatic: max_rows <= 200, max_groups <= 16, amount in [0, 100000]."""
    directory = tmp_path_factory.mktemp("all-auto")
    policy = policy_copy(demo, directory, epsilon=20.0, delta=1e-5, share="0.1")
    text = policy.read_text(encoding="utf-8")
    amount = 'amount = { type = "DOUBLE", bounds = [0.0, 500.0] }'
    assert text.count("max_rows = 20\n") == text.count("max_groups = 4\n") == text.count(amount) == 1
    policy.write_text(text.replace("max_rows = 20\n", f'max_rows = "auto"\nmax_rows_limit = {LIMIT}\n')
                      .replace("max_groups = 4\n", 'max_groups = "auto"\nmax_groups_limit = 16\n')
                      .replace(amount, 'amount = { type = "DOUBLE", bounds = "auto", bounds_limit = [0, 100000] }'),
                      encoding="utf-8")
    live = Server(directory / "server.log").start(policy)
    try:
        with live.client(demo.analyst_key) as c:
            yield c
    finally:
        live.stop()


def test_every_bound_is_chosen_charged_once_and_reported(all_auto: httpx.Client) -> None:
    sql = "SELECT category, SUM(amount), AVG(amount) FROM visits GROUP BY category"
    before = _spent(all_auto)
    planned = all_auto.post("/v1/query/preview", json={"dataset": "demo", "sql": sql, "epsilon": 0.6}).json()
    parts = planned["bounds"]["parts"]
    assert [(p["bound"], p["column"], p["value"], p["limit"]) for p in parts] == [  # C <= 16 · 200 · 100000
        ("max_rows", None, None, LIMIT), ("max_groups", None, None, 16), ("total", "amount", None, 3.2e8)]
    assert parts[2]["q"] > 0  # the target t = √2·G/ε_sum: units left above C
    assert all(p["epsilon"] == pytest.approx(0.02, rel=1e-12) for p in parts)  # 10 % of 0.6, split in three
    assert planned["bounds"]["epsilon"] == pytest.approx(0.06, rel=1e-12)
    response = all_auto.post("/v1/query?detail=cells", json={"dataset": "demo", "sql": sql, "epsilon": 0.6})
    assert response.status_code == 200, response.text
    body = response.json()
    chosen = {p["bound"]: p["value"] for p in body["bounds"]["parts"]}
    assert 1 <= chosen["max_rows"] <= LIMIT and 1 <= chosen["max_groups"] <= 16 and 0 < chosen["total"] <= 3.2e8
    assert body["bounds"]["max_rows"] == chosen["max_rows"]
    # the SUM's noise is calibrated to min(C, L0·k·100000) at the ε it had at the limit, L0 = min(g, 8): a unit
    # changes at most the 8 released categories (privacy.md §1), so 8·200·100000 = 1.6e8 at the limits
    cap = min(chosen["total"], min(chosen["max_groups"], 8) * chosen["max_rows"] * 100000)
    assert body["noise"][0]["scale"] / planned["noise"][0]["scale"] == pytest.approx(cap / 1.6e8, rel=1e-6)
    event = from_json(body["charge"]["events"])
    assert event.more and len(event.more) == 2  # type: ignore[union-attr]
    assert loss.epsilon_delta(event, 0.0)[0] == body["charge"]["epsilon"] <= 0.6
    assert body["charge"]["events"] == planned["charge"]["events"]
    assert math.isclose(_spent(all_auto), before + body["charge"]["epsilon"], rel_tol=1e-12)
    counted = all_auto.post(FULL, json={"dataset": "demo", "sql": "SELECT region, COUNT(*) FROM visits "
                                               "GROUP BY region", "epsilon": 0.2}).json()
    assert [p["bound"] for p in counted["bounds"]["parts"]] == ["max_rows"]  # a unit-level key: no max_groups

