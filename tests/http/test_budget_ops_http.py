"""Budget operations end to end: the admin routes and `dpproxy budget` against real servers, on a SQLite and a
PostgreSQL ledger: exact budgets after a grant and a new period, admins only, a reason required, every
operation in the audit chain (which verifies, and fails when an operation's entry is edited)."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from accountant.ledger.admit import NEXT_STEP
from accountant.ledger.budget_ops import UNUSABLE_HINT
from proxy.cli.demo import DemoFiles
from tests.support.live import REPO, Server, StartFresh, free_port, spend
from tests.support.pg_fixtures import fresh_schema

ASKED = iter(range(18, 10**6))  # each query asks about another age: a repeat would be free




@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The server's DPPROXY_LEDGER: none (the policy copy's SQLite file) or a fresh PostgreSQL schema."""
    if request.param == "sqlite":
        yield {}
    else:
        with fresh_schema() as (_, url):
            yield {"DPPROXY_LEDGER": url}


def query(client: httpx.Client) -> httpx.Response:
    """A new count at ε = 0.1 (charged 0.1 exactly: its decimal digits)."""
    sql = f"SELECT COUNT(*) FROM users WHERE age > {next(ASKED)}"
    return client.post("/v1/query", json={"dataset": "demo", "sql": sql, "epsilon": 0.1})


def run_out(client: httpx.Client) -> int:
    """Ask until refused; how many answers were charged."""
    for n in range(50):
        answer = query(client)
        if answer.status_code == 403:
            assert answer.json()["code"] == "budget_exceeded"
            return n
        assert answer.status_code == 200, answer.text
    raise AssertionError("never refused")


def test_a_grant_and_a_new_period_change_the_budget_exactly(
    fresh_server: StartFresh, demo: DemoFiles, ledger_env: dict[str, str]
) -> None:
    server = fresh_server(epsilon=0.3, delta=1e-6, settings=ledger_env)
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        assert run_out(analyst) == 3
        refused = query(analyst).json()
        assert refused["charged"] is False and refused["detail"]["hint"] == NEXT_STEP
        preview = {"dataset": "demo", "sql": "SELECT COUNT(*) FROM users WHERE age > 17", "epsilon": 0.1}
        assert analyst.post("/v1/query/preview", json=preview).json()["admissible"] is False

        done = admin.post("/v1/admin/grants", json={"dataset": "demo", "analyst": "analyst", "epsilon": 0.2,
                                                     "reason": "ticket 7: the Q4 report"})
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["operation"]["epsilon"] == "0.2" and body["operation"]["operator"] == "admin"
        (budget,) = body["budgets"]
        assert (budget["epsilon"], budget["epsilon_spent"], budget["epsilon_remaining"]) == (0.5, 0.3, 0.2)
        now = spend(analyst)
        assert (now["epsilon"], now["epsilon_remaining"]) == (0.5, 0.2)  # exact: 0.3 + 0.2 - 3 × 0.1
        assert analyst.post("/v1/query/preview", json=preview).json()["admissible"] is True  # the same check
        assert run_out(analyst) == 2  # the admit reads the grant: exactly 0.2 more

        period = admin.post("/v1/admin/periods", json={"dataset": "demo", "analyst": "analyst",
                                                       "reason": "new quarter"})
        assert period.status_code == 200, period.text
        now = spend(analyst)
        assert (now["epsilon"], now["epsilon_spent"], now["epsilon_remaining"]) == (0.3, 0.0, 0.3)  # grant lapsed
        assert run_out(analyst) == 3

        listed = admin.get("/v1/admin/operations", params={"dataset": "demo"}).json()["operations"]
        assert [(o["kind"], o["analyst"], o["reason"]) for o in listed] == [
            ("grant", "analyst", "ticket 7: the Q4 report"), ("period", "analyst", "new quarter")]
        verified = admin.get("/v1/audit/verify")
        assert verified.status_code == 200 and verified.json()["ok"] is True, verified.text
        entries = admin.get("/v1/audit", params={"decision": "granted"}).json()["entries"]
        assert [e["charge_id"] for e in entries] == [listed[0]["id"]]


def test_budget_operations_are_for_admins_and_need_a_reason(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server(epsilon=0.3, delta=1e-6)
    grant = {"dataset": "demo", "analyst": "analyst", "epsilon": 0.2, "reason": "why"}
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        for path, body in (("/v1/admin/grants", grant), ("/v1/admin/periods", {"dataset": "demo", "reason": "x"}),
                           ("/v1/admin/dataset-grants", {"dataset": "demo", "epsilon": 1, "reason": "x"})):
            answer = analyst.post(path, json=body)
            assert (answer.status_code, answer.json()["code"]) == (403, "forbidden")
        assert analyst.get("/v1/admin/operations").status_code == 403
        for bad, field in (({"reason": None}, "reason"), ({"reason": "  "}, "reason"), ({"epsilon": -1}, "epsilon"),
                           ({"epsilon": 0}, "epsilon"), ({"analyst": "nobody"}, "analyst"),
                           ({"dataset": "nowhere"}, "dataset"), ({"delta": 1}, "delta")):
            answer = admin.post("/v1/admin/grants", json={**grant, **bad})
            assert answer.status_code == 422, (bad, answer.text)
            assert (answer.json()["code"], answer.json()["detail"]["field"]) == ("invalid_budget_operation", field)
        no_reason = {k: v for k, v in grant.items() if k != "reason"}
        assert admin.post("/v1/admin/grants", json=no_reason).json()["code"] == "invalid_budget_operation"
        # the demo dataset has no shared budget: there is none to raise
        answer = admin.post("/v1/admin/dataset-grants", json={"dataset": "demo", "epsilon": 1, "reason": "x"})
        assert (answer.status_code, answer.json()["code"]) == (422, "invalid_budget_operation")
        assert admin.get("/v1/admin/operations").json() == {"operations": []}  # nothing was written
        assert spend(analyst)["epsilon"] == 0.3


def _cli(server: Server, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPPROXY_")}
    env.update(DPPROXY_ADMIN_KEY=key, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "proxy", "budget", "--url", server.base_url, *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_the_cli_grants_and_starts_periods_and_a_changed_entry_fails_the_chain(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    server = fresh_server(epsilon=0.3, delta=1e-6)
    with server.client(demo.analyst_key) as analyst:
        assert run_out(analyst) == 3
        done = _cli(server, demo.admin_key, "grant", "--dataset", "demo", "--analyst", "analyst", "--epsilon", "0.1",
                    "--reason", "one more count")
        assert done.returncode == 0, done.stderr
        assert spend(analyst)["epsilon_remaining"] == 0.1
        assert run_out(analyst) == 1

        refused = _cli(server, demo.admin_key, "grant", "--dataset", "demo", "--analyst", "analyst", "--epsilon", "1")
        assert refused.returncode == 1 and '"invalid_budget_operation"' in refused.stderr
        forbidden = _cli(server, demo.analyst_key, "new-period", "--dataset", "demo", "--all", "--reason", "x")
        assert forbidden.returncode == 1 and '"forbidden"' in forbidden.stderr

        started = _cli(server, demo.admin_key, "new-period", "--dataset", "demo", "--all", "--reason", "January")
        assert started.returncode == 0, started.stderr
        assert spend(analyst)["epsilon_remaining"] == 0.3
        listed = _cli(server, demo.admin_key, "list")
        assert listed.returncode == 0 and '"January"' in listed.stdout

    ledger = server.policy.parent / "ledger.sqlite" if server.policy else Path()
    verify = [sys.executable, "-m", "proxy", "audit-verify", str(ledger)]
    assert subprocess.run(verify, cwd=REPO, capture_output=True, timeout=60).returncode == 0
    with sqlite3.connect(ledger) as conn:
        conn.execute("UPDATE audit_log SET sql = REPLACE(sql, 'January', 'February') WHERE decision = 'period'")
    assert subprocess.run(verify, cwd=REPO, capture_output=True, timeout=60).returncode == 1


def test_metrics_and_the_dashboard_show_the_granted_budget(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server(epsilon=0.3, delta=1e-6)
    with server.client(demo.admin_key) as admin:
        assert admin.post("/v1/admin/grants", json={"dataset": "demo", "analyst": "analyst", "epsilon": "0.7",
                                                    "reason": "pilot"}).status_code == 200
        data: dict[str, Any] = admin.get("/dashboard/data").json()
        (row,) = [b for b in data["budgets"] if b["analyst"] == "analyst"]
        assert row["epsilon"] == 1.0 and row["epsilon_remaining"] == 1.0
        assert [(g["analyst"], g["epsilon"], g["reason"]) for g in data["operations"]] == [("analyst", "0.7", "pilot")]
        metrics = admin.get("/metrics").text
        assert 'dpproxy_budget_granted_epsilon{analyst="analyst",dataset="demo"} 0.7' in metrics
        assert 'dpproxy_budget_epsilon{analyst="analyst",dataset="demo"} 1.0' in metrics
        assert 'dpproxy_budget_operations_total{dataset="demo",kind="grant"} 1.0' in metrics


GAUSSIAN_DELTA = 1e-7  # what each δ-spending query below is charged: a Gaussian count


def _gaussian(client: httpx.Client, path: str = "/v1/query") -> httpx.Response:
    sql = f"SELECT COUNT(*) AS n FROM users WHERE age > {next(ASKED)}"
    return client.post(path, json={"dataset": "demo", "sql": sql, "epsilon": 0.1, "delta": GAUSSIAN_DELTA,
                                   "mechanism": "gaussian"})


def _restart_with_delta(server: Server, delta: str) -> int:
    """Stop the server, set every analyst's policy δ on demo to `delta`, start it again (on a new PostgreSQL
    port); the port."""
    assert server.policy is not None
    server.stop()
    text, found = re.subn(r"^(budgets = \{ demo = \{ epsilon = [^,]+, delta = )[^ ]+( \} \})$",
                          lambda m: f"{m[1]}{delta}{m[2]}", server.policy.read_text(), flags=re.MULTILINE)
    assert found == 2, "the policy copy changed shape"
    server.policy.write_text(text)
    server.settings["DPPROXY_PG_PORT"] = str(port := free_port())
    server.start(server.policy)
    return port


def _wire_refusal(port: int, key: str, sql: str) -> psycopg.Error:
    dsn = f"postgresql://analyst:{key}@127.0.0.1:{port}/demo?sslmode=disable&connect_timeout=20"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SET dp.mechanism = gaussian")
        conn.execute(f"SET dp.delta = {GAUSSIAN_DELTA}")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute(sql)
        assert conn.execute("SELECT 1").fetchone() == (1,)  # the connection is kept, as PostgreSQL's
    return refused.value


def test_a_policy_delta_changed_after_a_grant_refuses_cleanly_over_http_and_the_wire(
    fresh_server: StartFresh, demo: DemoFiles
) -> None:
    """The policy's δ lowered under what was spent (a grant then covers less), or raised until it and the
    grants reach δ = 1 (no guarantee left): each query is refused free, a 403 `budget_exceeded` with a hint over
    HTTP and 53400 with the stable code and the same hint over the wire, never a 422 or a 500, and the budget
    stays readable (GET /v1/budget, SHOW dp.budget, the dashboard)."""
    server = fresh_server(epsilon=1.0, delta=1e-6, settings={"DPPROXY_PG_PORT": str(free_port()),
                                                             "DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK": "true"})
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        for _ in range(2):
            assert _gaussian(analyst).status_code == 200
        grant = {"dataset": "demo", "analyst": "analyst", "epsilon": 1, "delta": "0.0000001", "reason": "pilot"}
        assert admin.post("/v1/admin/grants", json=grant).status_code == 200
    charged = server.policy.parent / "ledger.sqlite" if server.policy else Path()

    def charges() -> int:
        with sqlite3.connect(charged) as conn:
            (n,) = conn.execute("SELECT COUNT(*) FROM charges").fetchone()
        return int(n)

    # lowered: δ 0 in the policy, so the budget is the grant's 1e-7, below the 2e-7 spent
    port = _restart_with_delta(server, "0.0")
    with server.client(demo.analyst_key) as analyst:
        refused = _gaussian(analyst)
        assert refused.status_code == 403, refused.text
        body = refused.json()
        assert (body["code"], body["charged"], body["detail"]["hint"]) == ("budget_exceeded", False, NEXT_STEP)
        now = spend(analyst)
        assert (now["delta"], now["delta_spent"], now["delta_remaining"]) == (1e-7, 2e-7, 0.0)
    error = _wire_refusal(port, demo.analyst_key, f"SELECT COUNT(*) AS n FROM users WHERE age > {next(ASKED)}")
    assert error.sqlstate == "53400" and str(error.diag.message_primary).startswith("budget_exceeded: ")
    assert error.diag.message_hint == NEXT_STEP and "charged=false" in str(error.diag.message_detail)
    with server.client(demo.admin_key) as admin:  # a grant of 0.5 more still fits under 1: answered again
        assert admin.post("/v1/admin/grants", json={**grant, "delta": "0.5"}).status_code == 200
    with server.client(demo.analyst_key) as analyst:
        assert _gaussian(analyst).status_code == 200
    before = charges()

    # raised: δ 0.5 in the policy, and with the 0.5000001 granted the budget's δ would be 1 or more
    port = _restart_with_delta(server, "0.5")
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        for path in ("/v1/query", "/v1/query/preview"):
            refused = _gaussian(analyst, path)
            if path == "/v1/query":
                assert refused.status_code == 403, refused.text
                body = refused.json()
                assert (body["code"], body["charged"], body["detail"]["hint"]) == (
                    "budget_exceeded", False, UNUSABLE_HINT)
            else:  # the preview answers, and says the admit would refuse it
                assert refused.status_code == 200 and refused.json()["admissible"] is False, refused.text
        shown = spend(analyst)  # readable: the policy's figures, nothing left, and why
        assert (shown["delta"], shown["epsilon_remaining"], shown["delta_remaining"]) == (0.5, 0.0, 0.0)
        assert shown["display"].startswith("unusable: ") and UNUSABLE_HINT in shown["display"]
        assert admin.get("/dashboard/data").status_code == 200 and admin.get("/metrics").status_code == 200
        error = _wire_refusal(port, demo.analyst_key, f"SELECT COUNT(*) AS n FROM users WHERE age > {next(ASKED)}")
        assert error.sqlstate == "53400" and str(error.diag.message_primary).startswith("budget_exceeded: ")
        assert error.diag.message_hint == UNUSABLE_HINT and "charged=false" in str(error.diag.message_detail)
        assert charges() == before  # nothing charged for any refusal
        # the hint's way out: a new period lapses the grants, and the policy's δ 0.5 is the budget again
        period = admin.post("/v1/admin/periods", json={"dataset": "demo", "analyst": "analyst", "reason": "fix"})
        assert period.status_code == 200, period.text
        assert _gaussian(analyst).status_code == 200
