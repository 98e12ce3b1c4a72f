"""Exact decimal charges: ε and δ are priced from the digits the analyst wrote (proxy/http/decimal_json.py,
proxy/schemas.py). Nine queries of ε = 0.1 used to fit a budget of 1 (float 0.1 exceeds 1/10); now ten do, and
nothing ever charges more than was written or more than the budget."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from pydantic import ValidationError

from accountant.errors import BudgetExceeded
from accountant.events import LaplaceEvent
from accountant.filter import BASIC, Budget
from accountant.ledger.memory import MemoryLedger
from mechanisms import laplace
from mechanisms.rounding import down
from proxy.cli.demo import DemoFiles
from proxy.http.decimal_json import loads
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.schemas import QueryRequest
from tests.support.live import StartFresh, spend

CATALOG = Catalog((TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"),), max_rows=1),))


def _request(body: str) -> QueryRequest:
    return QueryRequest.model_validate(loads(body))


def _admit_all(epsilons: list[float], budget: Budget) -> int:
    ledger, admitted = MemoryLedger(), 0
    for i, epsilon in enumerate(epsilons):
        p = plan(f"SELECT COUNT(*) AS n{i} FROM t", CATALOG, epsilon=epsilon, delta=0.0, mechanism="laplace")
        try:
            ledger.admit(analyst="a", dataset="d", sql_sha256=f"{i:064x}", event=p.price.event,
                         epsilon=p.price.epsilon, delta=p.price.delta, composition="sequential", budget=budget,
                         accounting=BASIC)
        except BudgetExceeded:
            break
        admitted += 1
    return admitted


def test_ten_queries_of_a_tenth_fit_a_budget_of_one_exactly() -> None:
    epsilon = _request('{"sql": "SELECT 1", "epsilon": 0.1}').epsilon
    assert epsilon is not None and Fraction(epsilon) <= Fraction(1, 10) < Fraction(0.1)
    assert _admit_all([epsilon] * 11, Budget(1.0, 1e-6)) == 10  # and the eleventh is refused
    assert _admit_all([0.1] * 11, Budget(1.0, 1e-6)) == 9  # a float 0.1 (as before) still does not fit ten


def test_three_thirds_written_in_decimal_do_not_exceed_one() -> None:
    epsilon = _request('{"sql": "SELECT 1", "epsilon": 0.3333333333}').epsilon
    assert epsilon is not None and Fraction(epsilon) <= Fraction(3333333333, 10**10)
    assert _admit_all([epsilon] * 4, Budget(1.0, 1e-6)) == 3
    priced = plan("SELECT COUNT(*) FROM t", CATALOG, epsilon=epsilon, delta=0.0, mechanism="laplace").price
    assert 3 * Fraction(priced.epsilon) <= 1


@pytest.mark.parametrize("written", ["0.1", "1e-1", "1E-1", "0.10", "0.3333333333", "2.5e-3", "7"])
def test_the_mechanism_never_exceeds_the_written_decimal(written: str) -> None:
    epsilon = _request(f'{{"sql": "SELECT 1", "epsilon": {written}}}').epsilon
    assert epsilon is not None
    priced = plan("SELECT COUNT(*) FROM t", CATALOG, epsilon=epsilon, delta=0.0, mechanism="laplace").price
    (event,) = priced.event.events  # type: ignore[union-attr]
    assert isinstance(event, LaplaceEvent)
    true = Fraction(event.sensitivity) / Fraction(event.scale)  # pure ε of the noise actually added
    assert true <= Fraction(priced.epsilon) <= Fraction(Decimal(written))
    assert laplace.epsilon(event.sensitivity, event.scale) == priced.epsilon


def test_exponents_are_exact() -> None:
    assert _request('{"sql": "SELECT 1", "epsilon": 1e-1}') == _request('{"sql": "SELECT 1", "epsilon": 0.1}')
    delta = _request('{"sql": "SELECT 1", "delta": 1E-6}').delta
    assert delta is not None and Fraction(delta) <= Fraction(1, 10**6)


@pytest.mark.parametrize(("field", "literal", "message"), [
    ("epsilon", "NaN", "finite"), ("epsilon", "Infinity", "finite"), ("delta", "-Infinity", "finite"),
    ("epsilon", "0." + "1" * 60, "significant digits"), ("epsilon", "1" * 5000, "significant digits"),
    ("epsilon", "1e-401", "between"), ("epsilon", "1e400", "between"),
    ("epsilon", '"0.1"', "JSON number"), ("epsilon", "true", "JSON number"),
])
def test_non_numbers_and_extreme_numbers_are_refused(field: str, literal: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _request(f'{{"sql": "SELECT 1", "{field}": {literal}}}')


def test_over_http_ten_tenths_fit_and_bad_numbers_charge_nothing(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server(epsilon=1.0, delta=1e-6)
    with server.client(demo.analyst_key) as analyst:
        for literal in ("NaN", "Infinity", "-Infinity", "0." + "3" * 80, "1e-999", "1e999"):
            raw = '{"sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": ' + literal + "}"
            response = analyst.post("/v1/query", content=raw, headers={"content-type": "application/json"})
            assert response.status_code == 400, (literal, response.text)
            body = response.json()
            assert body["code"] == "invalid_request" and body["charged"] is False
            assert "epsilon" in str(body["detail"])
        assert spend(analyst)["epsilon_spent"] == 0
        for i in range(10):
            raw = '{"sql": "SELECT COUNT(*) AS n' + str(i) + ' FROM visits", "epsilon": 0.1}'
            response = analyst.post("/v1/query", content=raw, headers={"content-type": "application/json"})
            assert response.status_code == 200, (i, response.text)
        raw = '{"sql": "SELECT COUNT(*) AS eleven FROM visits", "epsilon": 0.1}'
        response = analyst.post("/v1/query", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 403 and response.json()["code"] == "budget_exceeded"
        assert Fraction(spend(analyst)["epsilon_spent"]) <= 1


def _written(epsilon: str, delta: str = "1e-6") -> Budget:
    exact = (Fraction(Decimal(epsilon)), Fraction(Decimal(delta)))
    return Budget(down(exact[0]), down(exact[1]), exact=exact)


def test_a_budget_is_compared_as_its_written_decimal() -> None:
    parts = [_request(f'{{"sql": "SELECT 1", "epsilon": {e}}}').epsilon for e in ("0.25", "0.05")]
    assert all(p is not None for p in parts)
    floats_only = Budget(_written("0.3").epsilon, 1e-6)  # the float below 0.3: refused by an ulp (as before)
    assert _admit_all(parts, floats_only) == 1  # type: ignore[arg-type]
    assert _admit_all([*parts, 1e-6], _written("0.3")) == 2  # type: ignore[list-item]  # exactly full: no more
    tenths = [_request('{"sql": "SELECT 1", "epsilon": 0.1}').epsilon] * 4
    assert _admit_all(tenths, _written("0.3")) == 3  # type: ignore[arg-type]


def test_a_budget_never_admits_beyond_its_written_decimal() -> None:
    # the exact comparison admits only histories whose charges (each >= the mechanism's true ε) fit the decimal
    budget = _written("0.7")
    ledger = MemoryLedger()
    for i, e in enumerate(["0.3", "0.3", "0.1", "0.000001"]):
        epsilon = _request(f'{{"sql": "SELECT 1", "epsilon": {e}}}').epsilon
        assert epsilon is not None
        p = plan(f"SELECT COUNT(*) AS n{i} FROM t", CATALOG, epsilon=epsilon, delta=0.0, mechanism="laplace")
        try:
            ledger.admit(analyst="a", dataset="d", sql_sha256=f"{i:064x}", event=p.price.event,
                         epsilon=p.price.epsilon, delta=p.price.delta, composition="sequential", budget=budget)
        except BudgetExceeded:
            assert i == 3
    total = sum(Fraction(c.epsilon) for c in ledger.charges(limit=10))
    assert total <= Fraction(7, 10) and len(ledger.charges(limit=10)) == 3


def test_budget_floats_must_be_the_decimal_rounded_down() -> None:
    with pytest.raises(ValueError, match="largest at or below"):
        Budget(0.1, 1e-6, exact=(Fraction(1, 10), Fraction(1, 10**6)))  # 0.1 as a float lies above 1/10
    with pytest.raises(ValueError, match="largest at or below"):
        Budget(0.2, 1e-6, exact=(Fraction(3, 10), Fraction(1, 10**6)))


def test_over_http_decimals_that_add_up_to_the_budget_fit(fresh_server: StartFresh, demo: DemoFiles) -> None:
    server = fresh_server(epsilon=0.3, delta=1e-6)  # written "0.3" in the policy TOML
    with server.client(demo.analyst_key) as analyst:
        for i, literal in enumerate(("0.25", "0.05")):
            raw = '{"sql": "SELECT COUNT(*) AS n' + str(i) + ' FROM visits", "epsilon": ' + literal + "}"
            response = analyst.post("/v1/query", content=raw, headers={"content-type": "application/json"})
            assert response.status_code == 200, (literal, response.text)
        budget = spend(analyst)
        # Σ of the charged floats is 0.2999999999999999958…, reported rounded up: the float just above 0.3
        assert budget["epsilon_remaining"] == 0.0 and budget["epsilon_spent"] == math.nextafter(0.3, math.inf)
        response = analyst.post("/v1/query", json={"sql": "SELECT COUNT(*) AS more FROM visits", "epsilon": 1e-6})
        assert response.status_code == 403 and response.json()["code"] == "budget_exceeded"
