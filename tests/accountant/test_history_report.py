"""The PLD report of a fixed history (accountant/report.py) and the trade-off curves (accountant/tradeoff.py):
valid bounds, labelled as reports, agreeing with closed forms."""

from __future__ import annotations

import math

import mpmath
import pytest

from accountant.events import GaussianEvent, GaussianThresholdEvent, LaplaceEvent
from accountant.filter import Accounting, Budget, Entry, usage
from accountant.report import pld_report
from accountant.tradeoff import ALPHAS, curves
from mechanisms.gaussian import gdp_bound, zcdp
from mechanisms.threshold import gaussian_delta_of_threshold


def test_pld_of_laplace_histories_beats_basic_composition_and_is_labelled() -> None:
    history = [Entry(LaplaceEvent(1, 10.0), 0.1, 0.0)] * 30
    found = pld_report(history, 1e-6)
    assert found is not None and found.method == "pld" and found.delta == 1e-6
    assert found.epsilon < 3.0 * 0.8  # far below Σε = 3
    assert found.epsilon > 0.1 * math.sqrt(30)  # and not below what 30 pure-0.1 steps can cost


def test_pld_of_gaussian_histories_matches_the_exact_gdp_conversion() -> None:
    history = [Entry(GaussianEvent(1, 50.0), 0.0, 0.0)] * 400
    found = pld_report(history, 1e-6)
    mu = math.sqrt(400) * gdp_bound.unit_mu(50.0)
    exact = zcdp.epsilon_of(mu, 1e-6)
    assert found is not None and exact <= found.epsilon <= exact * 1.01  # pessimistic discretisation: above


def test_pld_pays_selection_delta_outside() -> None:
    selection = GaussianThresholdEvent(1, 10.0, 60)
    delta = gaussian_delta_of_threshold(1, 10.0, 60)
    found = pld_report([Entry(selection, 0.0, delta)] * 3, 1e-6)
    assert found is not None and found.delta == 1e-6
    assert pld_report([Entry(selection, 0.0, delta)] * 3, 3 * delta) is None  # nothing left for the rest


def test_pld_gives_none_for_sigma_beyond_the_proven_range() -> None:
    assert pld_report([Entry(GaussianEvent(1, 4e6), 0.1, 1e-8)], 1e-6) is None


@pytest.mark.parametrize("mu", [0.2, 1.0, 2.5])
def test_gdp_curve_is_g_mu(mu: float) -> None:
    # a history of one Gaussian with μ_Z = mu, no selection: the curve drawn is G_μ (checked with mpmath)
    sigma = 4.0
    sensitivity = mu / gdp_bound.unit_mu(sigma)
    history = [Entry(GaussianEvent(sensitivity, sigma), 0.0, 0.0)]
    spent, _ = curves(usage(history, "gdp"), Budget(50.0, 1e-6), Accounting("gdp", 0.0))
    for a, b in zip(ALPHAS, spent.beta, strict=True):
        if 0 < a < 1:
            exact = mpmath.ncdf(mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * mpmath.mpf(a)) - mu)
            assert b <= exact * (1 + 1e-9) + 1e-15 and b >= exact * (1 - 1e-6) - 1e-12


@pytest.mark.parametrize("rule", ["basic", "zcdp", "gdp"])
def test_a_history_within_its_budget_lies_on_or_above_the_budget_curve(rule: str) -> None:
    history = [Entry(LaplaceEvent(1, 40.0), 0.025, 0.0)] * 3
    spent, whole = curves(usage(history, rule), Budget(1.0, 1e-6), Accounting(rule, 0.0))  # type: ignore[arg-type]
    assert all(h >= w - 1e-12 for h, w in zip(spent.beta, whole.beta, strict=True))
    assert all(0 <= b <= 1 for b in spent.beta + whole.beta)


def _exact_pure_epsilon(k: int, eps: float, delta: float) -> float:
    """The least ε' at which k compositions of an ε-DP mechanism are (ε', δ)-DP: the hockey stick of the k-fold
    randomized-response pair (its privacy loss is (k − 2l)·ε with probability C(k, l) p^(k−l) q^l, p = e^ε/(1 + e^ε)),
    solved by bisection with mpmath."""
    mpmath.mp.dps = 60
    p = mpmath.e**eps / (1 + mpmath.e**eps)
    terms = [(mpmath.binomial(k, n) * p ** (k - n) * (1 - p) ** n, (k - 2 * n) * eps) for n in range(k + 1)]

    def hockey(e: mpmath.mpf) -> mpmath.mpf:
        return mpmath.fsum(w * (1 - mpmath.e ** (e - loss)) for w, loss in terms if loss > e)

    lo, hi = mpmath.mpf(0), mpmath.mpf(k * eps)
    for _ in range(80):  # past the 53-bit precision the midpoint is an end
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if hockey(mid) > delta else (lo, mid)
    return float(hi)


@pytest.mark.parametrize(("k", "eps"), [(40, 0.25), (400, 0.25), (300, 0.3)])
def test_pld_of_long_pure_histories_stays_an_upper_bound_on_a_coarser_step(k: int, eps: float) -> None:
    """A long pure history is composed on a coarser step (report.discretisation: its PLD would span the whole
    total at 1e-4). The step divides ε, so each loss ±ε lies on the grid and the composition is exact: its ε is
    the exact k-fold figure up to dp-accounting's search for ε at δ (about 1e-9 relative, either side). A step
    that did not divide ε would be 0.42 % above at k = 300 (checked)."""
    history = [Entry(LaplaceEvent(1, 1 / eps), eps, 0.0)] * k
    exact = _exact_pure_epsilon(k, eps, 1e-6)
    found = pld_report(history, 1e-6)
    assert found is not None and exact * (1 - 1e-8) <= found.epsilon <= exact * (1 + 1e-6)
