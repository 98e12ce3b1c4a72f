"""Gaussian noise on a `gdp` dataset over HTTP, end to end (docs/privacy.md §8): answered and charged at the
proven μ; a query whose σ would leave the proven range is refused before any charge."""

from __future__ import annotations

from pathlib import Path

from mechanisms.gaussian import gdp_bound
from proxy.cli.demo import DemoFiles
from tests.support.live import Server, policy_copy, spend

FULL = "/v1/query?detail=cells"  # the answer with its full charge and per-cell budget (default: summary)

def test_a_gaussian_query_on_a_gdp_dataset(demo: DemoFiles, tmp_path: Path) -> None:
    policy = policy_copy(demo, tmp_path, epsilon=3.0, delta=1e-6)
    text = policy.read_text(encoding="utf-8").replace(
        'mechanism = "laplace"', 'mechanism = "gaussian"\naccounting = "gdp"\nselection_delta_share = 0.5', 1)
    policy.write_text(text, encoding="utf-8")
    server = Server(tmp_path / "server.log").start(policy)
    try:
        with server.client(demo.analyst_key) as analyst:
            response = analyst.post("/v1/query?detail=cells", json={
                "sql": "SELECT region, COUNT(*) AS n FROM visits GROUP BY region", "epsilon": 1, "delta": 1e-7})
            assert response.status_code == 200, response.text
            charge = response.json()["charge"]
            assert charge["accounting"] == "gdp" and charge["mechanism"] == "gaussian"
            (composed,) = charge["events"]["events"]
            (event,) = composed["events"]
            mu = {c["accounting"]: c for c in charge["costs"]}["gdp"]["mu"]
            assert mu == gdp_bound.mu(event["sensitivity"], event["sigma"])  # the proven μ_Z, charged
            assert mu > event["sensitivity"] / event["sigma"]  # more than Δ/σ, as it must be
            budget = spend(analyst)
            assert budget["accounting"] == "gdp" and 0 < budget["epsilon_remaining"] < 3.0

            # ε = 0.01 for a COUNT with Δ2 = 20 needs σ of thousands of grid units: the large-σ bound (§8.7)
            small = analyst.post(FULL, json={"sql": "SELECT COUNT(*) AS m FROM visits", "epsilon": 0.01,
                                                    "delta": 1e-7})
            assert small.status_code == 200, small.text
            event = small.json()["charge"]["events"]["events"][0]
            mu = {c["accounting"]: c for c in small.json()["charge"]["costs"]}["gdp"]["mu"]
            assert event["sigma"] > gdp_bound.CERTIFIED_SIGMA_MAX
            assert mu == gdp_bound.mu(event["sensitivity"], event["sigma"])
            assert mu > event["sensitivity"] / event["sigma"]
            budget = spend(analyst)

            # a SUM of seconds (Δ2 = 72000 grid units) at ε = 0.01 needs σ beyond 2²⁰: refused, nothing charged
            refused = analyst.post("/v1/query?detail=cells", json={"sql": "SELECT SUM(duration_s) AS s FROM visits",
                                                      "epsilon": 0.01, "delta": 1e-7})
            assert refused.status_code == 400, refused.text
            body = refused.json()
            assert body["code"] == "invalid_parameter" and body["charged"] is False and "proven" in body["error"]
            assert spend(analyst)["epsilon_spent"] == budget["epsilon_spent"]
    finally:
        server.stop()
