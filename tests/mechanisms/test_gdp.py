"""GDP math against high-precision references and Google's dp-accounting: pure ε-DP → μ, budgets → μ, the
δ(ε) curve, k-fold composition; and why the discrete Gaussian gets no μ (the Neyman–Pearson vertex test)."""

from __future__ import annotations

import math

import mpmath
import pytest
from dp_accounting import gaussian_mechanism
from dp_accounting.pld import privacy_loss_distribution as pld
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import gdp
from mechanisms.gaussian import zcdp

mpmath.mp.dps = 50


def _reference_pure_mu(epsilon: float) -> mpmath.mpf:
    """−2Φ⁻¹(1/(1 + e^ε)) at 50 digits: the root of ln Φ(−z) = −ln(1 + e^ε), by mpmath's secant method
    started from a crude guess (its own convergence test decides, not our float code)."""
    e = mpmath.mpf(epsilon)
    log_target = -mpmath.log1p(mpmath.exp(e))
    guess = mpmath.sqrt(2 * mpmath.log1p(mpmath.exp(e))) if epsilon > 1 else mpmath.sqrt(2 * mpmath.pi) * e / 4
    root = mpmath.findroot(lambda z: mpmath.log(mpmath.ncdf(-z)) - log_target, guess, tol=mpmath.mpf(10) ** -45)
    return 2 * root


def _reference_delta(epsilon: float, mu: float) -> mpmath.mpf:
    e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
    return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)


def _g(mu: mpmath.mpf, alpha: mpmath.mpf) -> mpmath.mpf:
    """The GDP trade-off curve G_μ(α) = Φ(Φ⁻¹(1 − α) − μ)."""
    return mpmath.ncdf(mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * alpha) - mu)


# --- pure ε-DP → μ-GDP ---------------------------------------------------------------------------------


@pytest.mark.parametrize("epsilon", [1e-12, 1e-6, 0.01, 0.1, 0.5, 1.0, 2.0, 2.0000001, 5.0, 30.0, 300.0, 699.0])
def test_pure_mu_matches_the_closed_form_rounded_up(epsilon: float) -> None:
    ours, exact = gdp.pure_mu(epsilon), _reference_pure_mu(epsilon)
    assert ours >= exact  # valid: never below the μ the theorem needs
    assert ours <= exact * (1 + 1e-11)  # and tight


@given(st.floats(min_value=1e-9, max_value=650.0))
@settings(max_examples=100, deadline=None)
def test_pure_mu_is_never_below_the_closed_form(epsilon: float) -> None:
    assert gdp.pure_mu(epsilon) >= _reference_pure_mu(epsilon)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
def test_pure_mu_is_the_tangent_at_the_kink(epsilon: float) -> None:
    # f_{ε,0} has its kink at α* = 1/(1 + e^ε) with f(α*) = α*; G_μ touches it there exactly at μ = pure_mu
    alpha = 1 / (1 + mpmath.exp(epsilon))
    exact = _reference_pure_mu(epsilon)
    assert abs(_g(exact, alpha) - alpha) < mpmath.mpf(10) ** -40
    assert _g(exact * (1 - mpmath.mpf(10) ** -6), alpha) > alpha  # any smaller μ crosses f_{ε,0}


@pytest.mark.parametrize("epsilon", [0.05, 0.5, 2.0])
def test_pure_mu_lies_below_f_epsilon_everywhere(epsilon: float) -> None:
    mu = mpmath.mpf(gdp.pure_mu(epsilon))
    e = mpmath.mpf(epsilon)
    for k in range(1, 200):
        alpha = mpmath.mpf(k) / 200
        f = max(0, 1 - mpmath.exp(e) * alpha, mpmath.exp(-e) * (1 - alpha))
        assert _g(mu, alpha) <= f + mpmath.mpf(10) ** -30


@pytest.mark.parametrize("mu", [1e-9, 0.05, 0.5, 1.0, 5.0, 20.0])
def test_pure_epsilon_inverts_pure_mu_downwards(mu: float) -> None:
    epsilon = gdp.pure_epsilon(mu)
    assert gdp.pure_mu(epsilon) <= mu
    assert gdp.pure_mu(epsilon * (1 + 1e-9)) > mu  # the largest, up to 1e-9


def test_pure_mu_of_zero_is_zero() -> None:
    assert gdp.pure_mu(0.0) == 0.0 and gdp.pure_epsilon(0.0) == 0.0


# --- budgets: μ(ε, δ) ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(1.0, 1e-6), (1.0, 5e-7), (0.1, 1e-8), (1e-3, 1e-12), (5.0, 1e-6), (20.0, 1e-5), (0.5, 1e-30), (100.0, 1e-3)],
)
def test_mu_for_is_the_largest_valid_mu(epsilon: float, delta: float) -> None:
    mu = gdp.mu_for(epsilon, delta)
    assert _reference_delta(epsilon, mu) <= delta  # the true δ at the budget's ε is within it
    assert _reference_delta(epsilon, mu * (1 + 1e-5)) > delta  # and μ is not much below the best


@given(epsilon=st.floats(min_value=1e-3, max_value=50.0), log_delta=st.floats(min_value=-40, max_value=-3))
@settings(max_examples=60, deadline=None)
def test_mu_for_never_exceeds_the_budget(epsilon: float, log_delta: float) -> None:
    delta = 10.0**log_delta
    assert _reference_delta(epsilon, gdp.mu_for(epsilon, delta)) <= delta


def test_mu_for_refuses_budgets_where_the_curve_is_imprecise() -> None:
    with pytest.raises(ValueError, match=r"epsilon >= 0\.001"):
        gdp.mu_for(1e-4, 1e-6)
    with pytest.raises(ValueError):
        gdp.mu_for(1.0, 0.0)


# --- agreement with dp-accounting ----------------------------------------------------------------------


@pytest.mark.parametrize(("sigma", "delta"), [(1.0, 1e-6), (2.0, 1e-5), (0.5, 1e-8), (10.0, 1e-6), (4.0, 1e-10)])
def test_gdp_epsilon_agrees_with_the_analytic_gaussian_mechanism(sigma: float, delta: float) -> None:
    # Balle–Wang's analytic Gaussian mechanism and μ-GDP with μ = 1/σ are the same curve (DRS19 Cor. 2.13)
    ours = zcdp.epsilon_of(1 / sigma, delta)
    theirs = gaussian_mechanism.get_epsilon_gaussian(sigma, delta)
    assert ours == pytest.approx(theirs, rel=1e-6)


@pytest.mark.parametrize(("k", "sigma"), [(1, 3.0), (4, 6.0), (25, 20.0), (100, 30.0)])
def test_k_fold_composition_is_sqrt_k_mu(k: int, sigma: float) -> None:
    # k Gaussian releases of sensitivity 1 compose to √k/σ-GDP exactly (DRS19 Cor. 3.3): compare the closed
    # form with dp-accounting's numerical privacy-loss distribution of the k-fold composition
    epsilon = 1.0
    closed = float(_reference_delta(epsilon, math.sqrt(k) / sigma))
    composed = pld.from_gaussian_mechanism(sigma, value_discretization_interval=1e-4).self_compose(k)
    numeric = composed.get_delta_for_epsilon(epsilon)
    assert numeric >= closed * (1 - 1e-3)  # the pessimistic PLD is an upper bound, close to the exact δ
    assert numeric <= closed * 1.05 + 1e-12


def test_laplace_gdp_bound_is_valid_against_the_exact_laplace_curve() -> None:
    # the μ of pure ε is an upper bound for any ε-DP mechanism: check against the exact PLD of discrete
    # Laplace noise composed 10 times (dp-accounting), at several ε
    scale = 10.0  # ε = 0.1 per release
    mu = math.sqrt(10) * gdp.pure_mu(0.1)
    composed = pld.from_discrete_laplace_mechanism(1 / scale, sensitivity=1).self_compose(10)
    for epsilon in (0.1, 0.3, 0.6, 1.0):
        assert composed.get_delta_for_epsilon(epsilon) <= float(_reference_delta(epsilon, mu)) + 1e-9


# --- the discrete Gaussian is not Δ/σ-GDP ---------------------------------------------------------------


def _central_vertex(sigma: int) -> tuple[mpmath.mpf, mpmath.mpf]:
    """(α, β) of the Neyman–Pearson test "X >= 1" between N_Z(0, σ²) and N_Z(1, σ²): both (1 − p₀)/2."""
    p0 = 1 / mpmath.jtheta(3, 0, mpmath.exp(-1 / (2 * mpmath.mpf(sigma) ** 2)))
    alpha = (1 - p0) / 2  # P_0[X >= 1]
    return alpha, alpha  # type II error P_1[X < 1] = P_0[X <= -1], the same by symmetry


@pytest.mark.parametrize(("sigma", "needed"), [(1, 1.04576), (2, 1.01065), (3, 1.00468)])
def test_the_discrete_gaussian_trade_off_dips_below_g_one_over_sigma(sigma: int, needed: float) -> None:
    alpha, beta = _central_vertex(sigma)
    assert _g(mpmath.mpf(1) / sigma, alpha) > beta  # G_{1/σ} lies above the curve at this vertex: not 1/σ-GDP
    # the μ this vertex alone needs is Φ⁻¹(1 − α) − Φ⁻¹(β), here 2Φ⁻¹(1 − α): about (1 + 1/(24σ²))/σ
    vertex_mu = 2 * mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * alpha)
    assert float(vertex_mu * sigma) == pytest.approx(needed, abs=1e-5)
    assert float(vertex_mu * sigma) == pytest.approx(1 + 1 / (24 * sigma**2), rel=5e-3)


def test_the_sigma_1_vertex_numbers_in_the_docs() -> None:
    alpha, _ = _central_vertex(1)
    assert f"{float(alpha):.6f}" == "0.300529"
    assert f"{float(_g(mpmath.mpf(1), alpha)):.6f}" == "0.316638"
