"""Tighter accounting end to end: real servers on policies with accounting = zcdp/gdp and a shared dataset
budget; what POST /v1/query, /v1/query/preview and GET /v1/budget report; and `dpproxy recommend`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.__main__ import main
from proxy.cli.demo import DemoFiles
from tests.support.live import Server, fixed_bounds, policy_copy


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Server]]:
    servers: list[Server] = []
    yield servers
    for server in servers:
        server.stop()


def _serve(demo: DemoFiles, directory: Path, servers: list[Server], lines: str, **budget: float) -> Server:
    """A server on a copy of the demo policy with `lines` added to [datasets.demo]."""
    policy = policy_copy(demo, directory, **budget)
    text, found = re.subn(r"^(max_epsilon = .*)$", lambda m: m.group(1) + "\n" + lines, policy.read_text(),
                          count=1, flags=re.MULTILINE)
    assert found == 1
    policy.write_text(text)
    server = Server(directory / "server.log")
    servers.append(server)
    return server.start(policy)


def _query(client: httpx.Client, sql: str, path: str = "/v1/query?detail=cells", **params: object) -> httpx.Response:
    return client.post(path, json={"sql": sql, **params})


def _budget(client: httpx.Client) -> dict[str, Any]:
    (entry,) = client.get("/v1/budget").json()["budgets"]
    return entry  # type: ignore[no-any-return]


def test_zcdp_admits_four_laplace_tenths_and_reports_rho(
    demo: DemoFiles, tmp_path: Path, started: list[Server]
) -> None:
    server = _serve(demo, tmp_path, started, 'accounting = "zcdp"\nselection_delta_share = 0.0',
                    epsilon=1.0, delta=1e-6)
    with server.client(demo.analyst_key) as client:
        fresh = _budget(client)
        assert fresh["accounting"] == "zcdp" and fresh["epsilon_spent"] == 0.0
        assert 0.999 <= fresh["epsilon_remaining"] <= 1.0  # ε at the budget's δ of the whole ρ budget
        (basic, zcdp) = fresh["accounts"]
        assert (basic["accounting"], zcdp["accounting"]) == ("basic", "zcdp")
        assert zcdp["capacity"] == pytest.approx(0.024356, rel=1e-4) and zcdp["selection_delta_capacity"] == 0.0

        codes = [_query(client, f"SELECT COUNT(*) AS n{i} FROM visits", epsilon=0.1).status_code for i in range(4)]
        assert codes == [200] * 4
        preview = _query(client, "SELECT COUNT(*) AS n4 FROM visits", "/v1/query/preview", epsilon=0.1).json()
        assert preview["admissible"] is False and preview["refusal"].startswith("query needs ρ=0.005")
        costs = {c["accounting"]: c for c in preview["charge"]["costs"]}
        assert costs["zcdp"]["rho"] == pytest.approx(0.005) and costs["gdp"]["mu"] == pytest.approx(0.125309, rel=1e-5)
        refused = _query(client, "SELECT COUNT(*) AS n4 FROM visits", epsilon=0.1)
        assert refused.status_code == 403
        body = refused.json()
        assert body["code"] == "budget_exceeded" and body["charged"] is False
        assert body["detail"]["accounting"] == "zcdp" and body["detail"]["rho_requested"] == pytest.approx(0.005)

        after = _budget(client)
        assert after["epsilon_spent"] == pytest.approx(0.4)  # basic composition of the four charges
        zcdp_after = after["accounts"][1]
        assert zcdp_after["spent"] == pytest.approx(0.02)
        assert zcdp_after["epsilon_spent"] == pytest.approx(0.89994, abs=1e-4)  # ρ = 0.02 at δ = 1e-6 (CKS20)
        assert 0 < after["epsilon_remaining"] < 0.5
        assert after["reported"]["accounting"] == "basic" and after["reported"]["epsilon"] == pytest.approx(0.4)


def test_a_small_gaussian_query_costs_little_rho(demo: DemoFiles, tmp_path: Path, started: list[Server]) -> None:
    server = _serve(demo, tmp_path, started, 'accounting = "zcdp"', epsilon=1.0, delta=1e-6)
    with server.client(demo.analyst_key) as client:
        answer = _query(client, "SELECT COUNT(*) AS n FROM visits", epsilon=0.05, delta=1e-9, mechanism="gaussian")
        assert answer.status_code == 200, answer.text
        charge = answer.json()["charge"]
        assert charge["accounting"] == "zcdp"
        # σ ≈ 2600 grid units: since docs/privacy.md §8.7 it has a proven μ too, just above Δ2/σ
        assert [c["accounting"] for c in charge["costs"]] == ["basic", "zcdp", "gdp"]
        assert charge["costs"][1]["rho"] < 1e-4
        (event,) = charge["events"]["events"]
        assert 1 < charge["costs"][2]["mu"] * event["sigma"] / event["sensitivity"] < 1.0002
        # the ρ left (0.02294 − 5e-5) still converts to ε > 0.99 at δ_conv: under basic 0.95 would be left
        assert answer.json()["budget"]["epsilon_remaining"] > 0.99


def test_gdp_refuses_gaussian_noise_before_charging(demo: DemoFiles, tmp_path: Path, started: list[Server]) -> None:
    server = _serve(demo, tmp_path, started, 'accounting = "gdp"', epsilon=1.0, delta=1e-6)
    with server.client(demo.analyst_key) as client:
        # a SUM of seconds (Δ2 = 72000 grid units) needs σ beyond 2²⁰ grid units, where no μ is proven
        refused = _query(client, "SELECT SUM(duration_s) FROM visits", epsilon=0.1, delta=1e-8, mechanism="gaussian")
        assert refused.status_code == 400 and refused.json()["code"] == "invalid_parameter"
        assert "discrete Gaussian" in refused.json()["error"] and refused.json()["charged"] is False
        codes = [_query(client, f"SELECT COUNT(*) AS n{i} FROM visits", epsilon=0.1).status_code for i in range(4)]
        assert codes == [200, 200, 200, 403]  # μ = 0.1253 each; √3 μ fits 0.229 (δ_conv = 5e-7), √4 μ not
        assert _budget(client)["accounts"][1]["accounting"] == "gdp"


def test_the_dataset_budget_binds_all_analysts_together(
    demo: DemoFiles, tmp_path: Path, started: list[Server]
) -> None:
    server = _serve(demo, tmp_path, started, "budget = { epsilon = 0.375, delta = 1e-6 }", epsilon=5.0, delta=1e-6)
    with server.client(demo.analyst_key) as analyst, server.client(demo.admin_key) as admin:
        assert _query(analyst, "SELECT COUNT(*) AS a FROM visits", epsilon=0.25).status_code == 200
        assert _query(admin, "SELECT COUNT(*) AS b FROM visits", epsilon=0.125).status_code == 200
        refused = _query(admin, "SELECT COUNT(*) AS c FROM visits", epsilon=0.125)
        assert refused.status_code == 403
        detail = refused.json()["detail"]
        assert detail["scope"] == "dataset" and "shared" in refused.json()["error"]
        mine = _budget(admin)
        assert mine["epsilon_spent"] == 0.125 and mine["epsilon_remaining"] == 4.875  # its own budget
        assert mine["shared"]["epsilon"] == 0.375 and mine["shared"]["epsilon_remaining"] == 0.0
        preview = _query(analyst, "SELECT COUNT(*) AS d FROM visits", "/v1/query/preview", epsilon=0.125).json()
        assert preview["admissible"] is False and "dataset's shared" in preview["refusal"]


def test_recommend_prints_the_numbers_and_a_rule(demo: DemoFiles, capsys: pytest.CaptureFixture[str]) -> None:
    policy = demo.policy.with_name("policy-fixed-bounds.toml")  # the figures below are at fixed bounds (20 rows)
    policy.write_text(fixed_bounds(demo.policy.read_text(encoding="utf-8")), encoding="utf-8")
    assert main(["recommend", "--policy", str(policy), "--dataset", "demo", "--budget", "1", "1e-6"]) == 0
    out = capsys.readouterr().out
    rules = ("basic ", "zcdp ", "gdp ")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip().startswith(rules)}
    assert set(rows) == {"basic", "zcdp", "gdp"}
    # ε = 0.1 COUNT(*): ten fit under basic since 0.1 is charged as at most 1/10 (it was nine as a float)
    assert rows["basic"][-2] == "10" and rows["zcdp"][-2] == "4" and rows["gdp"][-2] == "3"
    assert 'recommended: accounting = "basic"' in out
    assert main(["recommend", "--policy", str(policy), "--dataset", "demo", "--budget", "1", "1e-6",
                 "--mechanism", "gaussian", "--epsilon", "0.05", "--delta", "1e-9"]) == 0
    out = capsys.readouterr().out
    # σ ≈ 130·Δ2 here, above 256 grid units: charged at the large-σ bound (docs/privacy.md §8.7), gdp beats zcdp
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.strip().startswith(rules)}
    assert int(rows["gdp"][-2]) > int(rows["zcdp"][-2]) > int(rows["basic"][-2])
    assert 'recommended: accounting = "gdp"' in out and "outside the proven range" not in out
