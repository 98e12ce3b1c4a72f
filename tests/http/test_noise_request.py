"""Calibration read the other way: the analyst names the noise, the proxy reports (and charges) its cost."""

from __future__ import annotations

import pytest

from accountant.events import GaussianEvent, LaplaceEvent
from mechanisms.gaussian import zcdp
from proxy.cli.demo import DemoFiles
from proxy.query.errors import InvalidParameter
from proxy.query.planner import plan
from tests.support.catalogs import CATALOG
from tests.support.live import StartFresh, spend


@pytest.mark.parametrize("multiplier", [0.5, 1.0, 3.0, 10.0, 1234.5])
def test_laplace_noise_multiplier_costs_one_over_m_per_measure(multiplier: float) -> None:
    p = plan("SELECT COUNT(*), SUM(duration_s) FROM visits", CATALOG, epsilon=0.1, delta=0.0,
             mechanism="laplace", noise_multiplier=multiplier)
    for spec, event in zip(p.price.noise, p.price.event.events, strict=True):  # type: ignore[union-attr]
        assert isinstance(event, LaplaceEvent)
        assert spec.scale >= multiplier * spec.sensitivity  # never less noise than asked
        assert spec.scale == pytest.approx(multiplier * spec.sensitivity, rel=1e-15)
    assert p.price.epsilon >= 2 / multiplier  # two measures, ε = 1/m each, rounded up
    assert p.price.epsilon == pytest.approx(2 / multiplier, rel=1e-12)


@pytest.mark.parametrize("multiplier", [1.0, 4.0, 25.0])
def test_gaussian_noise_multiplier_costs_rho_one_over_two_m_squared(multiplier: float) -> None:
    p = plan("SELECT COUNT(*) FROM visits", CATALOG, epsilon=0.1, delta=1e-7, mechanism="gaussian",
             noise_multiplier=multiplier)
    (event,) = p.price.event.events  # type: ignore[union-attr]
    assert isinstance(event, GaussianEvent) and event.sigma >= multiplier * event.sensitivity
    rho = 1 / (2 * multiplier**2)
    assert p.price.epsilon == pytest.approx(zcdp.epsilon_from_rho(rho, 1e-7), rel=1e-9)
    assert p.price.delta == 1e-7


def test_noise_multiplier_out_of_range_is_refused() -> None:
    with pytest.raises(InvalidParameter):
        plan("SELECT COUNT(*) FROM visits", CATALOG, epsilon=0.1, delta=0.0, mechanism="laplace",
             noise_multiplier=1e-9)


def test_http_noise_multiplier_is_charged_what_it_costs(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server()
    sql = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"
    with server.client(demo.analyst_key) as analyst:
        preview = analyst.post("/v1/query/preview", json={"sql": sql, "noise_multiplier": 50.0}).json()
        assert preview["noise"][0]["scale"] == 50.0 * 20  # max_rows = 20, one region per user
        assert preview["charge"]["epsilon"] == 1 / 50
        before = spend(analyst)["epsilon_spent"]
        answer = analyst.post("/v1/query", json={"sql": sql, "noise_multiplier": 50.0})
        assert answer.status_code == 200 and answer.json()["charge"]["epsilon"] == 1 / 50
        assert spend(analyst)["epsilon_spent"] == before + 1 / 50
        # too little noise for the dataset's per-query maximum (1.0): refused before any charge
        greedy = analyst.post("/v1/query", json={"sql": sql, "noise_multiplier": 0.5})
        assert (greedy.status_code, greedy.json()["code"], greedy.json()["charged"]) == (
            400, "invalid_parameter", False)
        both = analyst.post("/v1/query", json={"sql": sql, "noise_multiplier": 2.0, "epsilon": 0.1})
        assert (both.status_code, both.json()["code"]) == (400, "invalid_request")
