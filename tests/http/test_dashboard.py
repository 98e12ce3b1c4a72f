"""The operator dashboard in a real browser: Debian's chromium driven by Playwright (no browser download).

A fresh server gets charges from real queries (analyst and admin), one rejection and one grant; the page,
opened with the admin key, must show each analyst's spent ε as GET /v1/budget reports it, the newest charge id
with its query text and a link to its audit entry, the largest spenders by query shape, the rejection and the
grant. The data endpoint itself is admin-only.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from accountant.events import LaplaceEvent
from accountant.filter import Spend
from accountant.ledger.charges import Charge
from proxy.cli.demo import DemoFiles
from proxy.http import dashboard
from tests.support.live import Server, StartFresh, spend, sum_up

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install chromium`; .ci/run does). "
                    "Never `playwright install`: the tests use the system browser.")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


def seed(server: Server, demo: DemoFiles) -> dict[str, Any]:
    """Charges by real queries for both analysts, one rejection; returns what the API says about them."""
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        ids = []
        for client, epsilon in ((analyst, 0.3), (admin, 0.25), (analyst, 0.45)):
            response = client.post("/v1/query", json={"sql": SQL, "epsilon": epsilon})
            assert response.status_code == 200, response.text
            ids.append(response.json()["charge"]["id"])
        rejected = analyst.post("/v1/query", json={"sql": "SELECT user_id FROM visits"})
        assert rejected.status_code == 400, rejected.text
        granted = admin.post("/v1/admin/grants", json={"dataset": "demo", "analyst": "analyst", "epsilon": 0.5,
                                                       "reason": "ticket 9"})
        assert granted.status_code == 200, granted.text
        charged = [c["epsilon"] for c in admin.get("/v1/ledger").json()["charges"]]
        audited = admin.get("/v1/audit", params={"decision": "admitted"}).json()["entries"]
        return {"ids": ids, "rejected": rejected.json()["code"], "charged": charged,
                "entry": {e["charge_id"]: e for e in audited}[ids[-1]],
                "spent": {"analyst": spend(analyst)["epsilon_spent"], "admin": spend(admin)["epsilon_spent"]}}


def test_dashboard_shows_budgets_charges_and_rejections(
    fresh_server: StartFresh, demo: DemoFiles, browser: Any, tmp_path: Path
) -> None:
    server = fresh_server()
    seeded = seed(server, demo)
    # 0.3 + 0.45 written in decimal, each charged at most as written (proxy/schemas.py): Σ <= 0.75
    assert seeded["spent"]["admin"] == 0.25 and 0.75 - 1e-15 <= seeded["spent"]["analyst"] <= 0.75

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{server.base_url}/dashboard")
    assert page.is_visible("#login") and not page.is_visible("#board")

    page.fill("#key", demo.admin_key)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#budgets tbody tr[data-analyst]")

    for name, spent in seeded["spent"].items():
        cell = page.locator(f'#budgets tr[data-analyst="{name}"][data-dataset="demo"] td.spent')
        assert float(cell.get_attribute("data-value") or "nan") == spent  # the exact figure of GET /v1/budget
        assert float(cell.inner_text()) == pytest.approx(spent, rel=1e-3)  # as displayed
    # the f-DP trade-off curves of each budget (history and whole budget), drawn as inline SVG paths
    for name in seeded["spent"]:
        curve = page.locator(f'#tradeoffs svg[data-analyst="{name}"][data-dataset="demo"]')
        assert curve.count() == 1
        assert curve.locator('path[data-curve="history"]').count() == 1
        assert curve.locator('path[data-curve="budget"]').count() == 1
    newest = page.locator("#charges tbody tr").first
    assert newest.get_attribute("data-charge") == seeded["ids"][-1]
    assert seeded["ids"][-1] in newest.inner_text()
    assert page.locator("#charges tbody tr[data-charge]").count() == 3
    rejection = page.locator("#rejections tbody tr").first
    assert rejection.get_attribute("data-code") == seeded["rejected"]
    assert "analyst" in rejection.inner_text() and "/v1/query" in rejection.inner_text()
    assert page.locator("#spend svg path[data-series]").count() == 2  # one line per analyst and dataset
    assert page.inner_text("#t-charges") == "3"
    # each charge with its query text from the audit trail, linked to its audit entry
    entry = seeded["entry"]
    assert newest.locator("td.sql").inner_text() == entry["sql"]
    assert "COUNT(*)" in entry["sql"]
    newest.locator("a[data-audit]").click()
    target = page.locator("#audit tbody tr:target")
    assert target.get_attribute("data-seq") == str(entry["seq"]) and entry["hash"][:16] in target.inner_text()
    # one query shape spent everything: the Σε of the three charges, rounded up
    (shape,) = page.locator("#spenders tbody tr[data-shape]").all()
    assert shape.get_attribute("data-shape") == entry["sql"]  # no literals in this query
    assert float(shape.locator("td.num").first.get_attribute("data-value") or "nan") == sum_up(seeded["charged"])
    grant = page.locator("#operations tbody tr[data-kind=grant]")
    assert grant.count() == 1 and "ticket 9" in grant.inner_text() and "analyst" in grant.inner_text()

    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000, shot.stat().st_size  # a rendered page, not a blank one
    assert problems == []  # no script errors and no Content-Security-Policy violations

    page.click("#forget")  # the key leaves the tab
    assert page.is_visible("#login")
    assert page.evaluate("sessionStorage.length") == 0
    page.close()


def test_the_trade_off_curve_renders_per_rule(
    fresh_server: StartFresh, demo: DemoFiles, browser: Any, tmp_path: Path
) -> None:
    # GET /v1/budget carries the curves (history below the budget's, pairs at the budget's δ) and the dashboard
    # draws them: a screenshot is kept as a test artefact (printed; copied to $DPPROXY_TEST_ARTEFACTS if set)
    server = fresh_server(epsilon=2.0, delta=1e-6)
    seed(server, demo)
    with server.client(demo.analyst_key) as analyst:
        response = analyst.get("/v1/budget").json()
    (budget,), (reports,) = response["budgets"], response["reports"]
    tradeoff = reports["tradeoff"]
    assert tradeoff["accounting"] == budget["accounting"] and len(tradeoff["alpha"]) == len(tradeoff["history"]["beta"])
    assert all(h >= b - 1e-12 for h, b in zip(tradeoff["history"]["beta"], tradeoff["budget"]["beta"], strict=True))
    assert all(0 <= v <= 1 for v in tradeoff["history"]["beta"])
    assert reports["dataset"] == budget["dataset"] == "demo"
    assert reports["history_report"]["method"] == "pld" and "not a budget rule" in reports["history_report"]["note"]
    assert reports["history_report"]["epsilon"] <= budget["epsilon_spent"] + 1e-9  # never worse than basic here

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.goto(f"{server.base_url}/dashboard")
    page.fill("#key", demo.admin_key)
    page.click("#login button[type=submit]")
    page.wait_for_selector("#tradeoffs svg.tradeoff-curve")
    curve = page.locator('#tradeoffs svg[data-analyst="analyst"]')
    d = curve.locator('path[data-curve="history"]').get_attribute("d") or ""
    assert d.startswith("M") and d.count("L") == len(tradeoff["alpha"]) - 1
    card = page.locator("#tradeoffs .tradeoff").first
    assert "δ" in card.inner_text() and "ε spent" in card.inner_text()
    shot = tmp_path / "tradeoff.png"
    page.locator("#tradeoffs").screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5_000
    keep = os.environ.get("DPPROXY_TEST_ARTEFACTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "tradeoff.png")
    print(f"trade-off screenshot: {shot}")
    assert problems == []  # no script errors and no Content-Security-Policy violations
    page.close()


def test_a_non_admin_key_is_refused_and_forgotten(fresh_server: StartFresh, demo: DemoFiles, browser: Any) -> None:
    server = fresh_server()
    page = browser.new_page()
    page.goto(f"{server.base_url}/dashboard")
    page.fill("#key", demo.analyst_key)
    page.click("#login button[type=submit]")
    # a selector, not wait_for_function: a string predicate is evaluated with eval, which the page's CSP
    # forbids (it failed once in CI: 'unsafe-eval' is not an allowed source of script)
    page.wait_for_selector("#login-error:not(:empty)")
    assert "admins only" in page.inner_text("#login-error")
    assert page.evaluate("sessionStorage.length") == 0 and not page.is_visible("#board")
    page.close()


@pytest.mark.parametrize(("key", "status"), [(None, 401), ("analyst", 403), ("admin", 200)])
def test_the_data_endpoint_is_for_admins(server: Server, demo: DemoFiles, key: str | None, status: int) -> None:
    token = {None: None, "analyst": demo.analyst_key, "admin": demo.admin_key}[key]
    with server.client(token) as client:
        response = client.get("/dashboard/data")
    assert response.status_code == status, response.text
    if status == 200:
        assert response.headers["cache-control"] == "no-store"
        body = response.json()
        assert {"budgets", "spend", "recent_charges", "recent_rejections", "audit_entries", "spenders",
                "operations"} <= set(body)


def test_the_page_carries_no_data_and_a_strict_content_security_policy(server: Server) -> None:
    response = httpx.get(f"{server.base_url}/dashboard")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
    policy = response.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'sha256-" in policy and "unsafe" not in policy
    assert "connect-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "<script src" not in response.text and "http://" not in response.text.replace(
        "http://www.w3.org/2000/svg", "")  # nothing loaded from elsewhere


def charge(n: int, epsilon: float, analyst: str = "ana") -> Charge:
    at = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(minutes=n)
    return Charge(f"c{n}", analyst, "demo", at, "0" * 64, LaplaceEvent(1.0, 1 / epsilon), epsilon, 0.0, "basic")


@dataclass
class SpentOnly:
    """The one ledger method the spend series uses when its window is truncated."""

    spent_by: dict[str, float]

    def spent(self, analyst: str, dataset: str) -> Spend:
        return Spend(self.spent_by[analyst], 0.0)


@pytest.mark.parametrize("truncated", [False, True])
def test_spend_series_end_at_the_ledgers_spend(truncated: bool) -> None:
    history = [charge(1, 0.1), charge(2, 0.2, "bo"), charge(3, 0.2), charge(4, 0.3)]  # oldest first
    window = tuple(reversed(history[1:] if truncated else history))  # newest first, as the ledger returns
    env = SimpleNamespace(ledger=SpentOnly({"ana": sum_up([0.1, 0.2, 0.3]), "bo": 0.2}))
    series = {s.analyst: s.points for s in dashboard._spend_series(env, window, truncated)}  # type: ignore[arg-type]
    ana = [value for _, value in series["ana"]]
    assert ana[-1] == sum_up([0.1, 0.2, 0.3])  # rounded up exactly as the ledger's spend
    # truncated: the window's first point starts from the level the older charges left (display precision)
    assert ana[:-1] == (pytest.approx([0.3]) if truncated else [0.1, sum_up([0.1, 0.2])])
    assert series["bo"] == [(history[1].at.isoformat(), 0.2)]
