"""Gaussian noise under the `gdp` rule (docs/privacy.md §8): reported ε against the exact continuous-GDP and
the proven discrete values, and a property that every admitted history keeps its budget, checked at 50 digits
independently of the code under test."""

from __future__ import annotations

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accountant.errors import BudgetExceeded
from accountant.events import GaussianEvent
from accountant.filter import Accounting, Budget, Entry, capacity, usage
from accountant.ledger.memory import MemoryLedger
from accountant.loss import epsilon_delta
from accountant.report import account
from mechanisms import gdp

GDP = Accounting("gdp", 0.0)


def _mp_delta(epsilon: float, mu: mpmath.mpf) -> mpmath.mpf:
    """δ(ε) of μ-GDP at 50 digits (DRS19 Cor. 2.13)."""
    e = mpmath.mpf(epsilon)
    return mpmath.ncdf(-e / mu + mu / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu - mu / 2)


def _mp_epsilon(mu: mpmath.mpf, delta: float) -> mpmath.mpf:
    """The ε with δ_μ(ε) = δ, at 50 digits: bisection on the decreasing δ_μ(ε)."""
    lo, hi = mpmath.mpf(0), mpmath.mpf(1)
    while _mp_delta(hi, mu) > delta:
        lo, hi = hi, 2 * hi
    for _ in range(120):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _mp_delta(mid, mu) > delta else (lo, mid)
    return hi


def _mp_unit_mu(sigma: float) -> mpmath.mpf:
    """μ_Z(σ, 1) at 50 digits: the central vertex 2·Φ⁻¹(P[X <= 0]), where the supremum lies (docs §8: the
    certificate bounds all other vertices below it), from an independent pmf sum and mpmath's erfinv."""
    with mpmath.workdps(50):
        s = mpmath.mpf(sigma)
        # Σ_j e^{−j²/2σ²} = √(2π)σ Σ_l e^{−2π²σ²l²} (Poisson summation, exact): fast for every σ
        norm = mpmath.sqrt(2 * mpmath.pi) * s * mpmath.nsum(
            lambda m: mpmath.exp(-2 * mpmath.pi**2 * s * s * m * m), [-mpmath.inf, mpmath.inf])
        at_most_zero = (norm + 1) / (2 * norm)  # P[X <= 0] = (1 + p0)/2 with p0 = 1/norm
        return 2 * mpmath.sqrt(2) * mpmath.erfinv(2 * at_most_zero - 1)


def _history(releases: list[tuple[int, float]]) -> list[Entry]:
    events = [GaussianEvent(k, s) for k, s in releases]
    return [Entry(e, *epsilon_delta(e, 1e-7, "gdp")) for e in events]


releases = st.lists(
    st.tuples(st.integers(min_value=1, max_value=8), st.floats(min_value=2.0, max_value=30.0)).map(
        lambda pair: (pair[0], pair[0] * pair[1])
    ).filter(lambda pair: 2.5 <= pair[1] <= 64.0),
    min_size=1, max_size=12,
)


@given(releases, st.sampled_from([1e-6, 1e-8]))
@settings(max_examples=30, deadline=None)
def test_reported_epsilon_is_within_one_percent_of_continuous_gdp_and_never_below_the_proven(
    history: list[tuple[int, float]], delta: float
) -> None:
    # σ/Δ >= 2 (and σ >= 2.5 grid units); a budget large enough that the history fits; at the budget's δ
    budget = Budget(50.0, delta)
    reported = account(usage(_history(history), "gdp"), budget, GDP).epsilon_spent
    with mpmath.workdps(50):
        continuous = _mp_epsilon(mpmath.sqrt(mpmath.fsum((k / mpmath.mpf(s)) ** 2 for k, s in history)), delta)
        # proven lower bound on what must be charged: the first releases at k·μ_Z(σ, 1), the rest at k/σ
        proven = _mp_epsilon(mpmath.sqrt(mpmath.fsum((k * _mp_unit_mu(s)) ** 2 for k, s in history[:6])
                                         + mpmath.fsum((k / mpmath.mpf(s)) ** 2 for k, s in history[6:])), delta)
    assert proven <= reported <= continuous * 1.01


def test_at_sigma_two_grid_units_the_discrete_gaussian_itself_costs_more_than_one_percent() -> None:
    # Δ = 1, σ = 2: μ_Z = 1.0107/σ, so ε exceeds continuous GDP's by 1.2% — and is never below the proven value
    reported = account(usage(_history([(1, 2.0)]), "gdp"), Budget(50.0, 1e-6), GDP).epsilon_spent
    with mpmath.workdps(50):
        continuous, proven = _mp_epsilon(mpmath.mpf(0.5), 1e-6), _mp_epsilon(_mp_unit_mu(2.0), 1e-6)
    assert proven <= reported <= proven * (1 + 1e-6) and 1.01 < reported / continuous < 1.015


def test_gdp_beats_zcdp_on_gaussian_only_histories() -> None:
    # 100 releases with σ = 20: exact GDP conversion vs zCDP's, at (·, 1e-6)
    history = _history([(1, 20.0)] * 100)
    gdp_epsilon = account(usage(history, "gdp"), Budget(50.0, 1e-6), GDP).epsilon_spent
    zcdp_epsilon = account(usage(history, "zcdp"), Budget(50.0, 1e-6), Accounting("zcdp", 0.0)).epsilon_spent
    assert gdp_epsilon < zcdp_epsilon * 0.97


queries = st.lists(
    st.tuples(st.integers(min_value=1, max_value=3), st.floats(min_value=0.5, max_value=6.0)), min_size=1, max_size=40
)


@given(queries, st.floats(min_value=0.05, max_value=3.0), st.sampled_from([1e-9, 1e-6, 1e-4]))
@settings(max_examples=60, deadline=None)
def test_every_history_admitted_under_gdp_keeps_its_budget(
    requests: list[tuple[int, float]], budget_epsilon: float, budget_delta: float
) -> None:
    budget = Budget(budget_epsilon, budget_delta)
    ledger = MemoryLedger()
    admitted: list[tuple[int, float]] = []
    for sensitivity, sigma in requests:
        event = GaussianEvent(sensitivity, sigma)
        epsilon, delta = epsilon_delta(event, budget_delta, "gdp")
        try:
            ledger.admit(analyst="a", dataset="d", sql_sha256="ab" * 32, event=event, epsilon=epsilon,
                         delta=delta, composition="sequential", budget=budget, accounting=GDP)
        except BudgetExceeded:
            continue
        admitted.append((sensitivity, sigma))
    if not admitted:
        return
    # independent check: μ = √Σ (Δ·μ_Z(σ, 1))² from 50-digit vertices; the interaction is μ-GDP (Smith–Thakurta
    # filter), so it is (ε, δ(ε))-DP; δ(ε) at the budget's ε must not exceed the budget's δ
    with mpmath.workdps(50):
        mu = mpmath.sqrt(mpmath.fsum((k * _mp_unit_mu(s)) ** 2 for k, s in admitted))
        assert _mp_delta(budget_epsilon, mu) <= budget_delta
    assert capacity(budget, GDP).amount > 0


def test_a_release_that_k_over_sigma_would_admit_is_refused() -> None:
    # a budget whose μ lies between Δ/σ = 1 and μ_Z(1, 1) ≈ 1.04576: charged at Δ/σ the release would fit,
    # but its true trade-off curve dips below G_μ (the central vertex): it must be refused
    delta = 1e-6
    lo, hi = 1.0, 20.0  # find ε with gdp.mu_for(ε, δ) ≈ 1.02
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gdp.mu_for(mid, delta) < 1.02 else (lo, mid)
    budget = Budget(hi, delta)
    assert 1.0 < capacity(budget, GDP).amount < 1.04576
    event = GaussianEvent(1, 1.0)
    with pytest.raises(BudgetExceeded):
        MemoryLedger().admit(analyst="a", dataset="d", sql_sha256="ab" * 32, event=event, epsilon=hi,
                             delta=delta, composition="sequential", budget=budget, accounting=GDP)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0, 7.5])
def test_the_reference_unit_mu_matches_the_certificate(sigma: float) -> None:
    from mechanisms.gaussian import gdp_bound

    with mpmath.workdps(50):
        exact = _mp_unit_mu(sigma)
    assert exact <= gdp_bound.unit_mu(sigma) <= exact * (1 + 1e-9)
