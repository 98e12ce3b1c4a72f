"""Discrete Gaussian maps against high-precision references: zCDP, its (ε, δ) conversion, GDP, error bars."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import mpmath
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mechanisms.gaussian import zcdp

positive = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)
rhos = st.floats(min_value=1e-8, max_value=1e3, allow_nan=False, allow_infinity=False)
epsilons = st.floats(min_value=1e-3, max_value=50.0, allow_nan=False, allow_infinity=False)
deltas = st.floats(min_value=1e-15, max_value=0.5, allow_nan=False, allow_infinity=False)


# --- zCDP maps --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sensitivity", "sigma", "expected_rho"),
    [(1, 1.0, 0.5), (1, 2.0, 0.125), (2, 4.0, 0.125), (3, 1.5, 2.0), (0, 5.0, 0.0)],
    ids=["unit", "sigma-2", "scaled", "sum-range-3", "zero-sensitivity"],
)
def test_rho_table(sensitivity: float, sigma: float, expected_rho: float) -> None:
    assert zcdp.rho(sensitivity, sigma) == expected_rho  # exact: dyadic inputs


@given(sensitivity=positive, rho=rhos)
def test_sigma_for_is_conservative_and_smallest(sensitivity: float, rho: float) -> None:
    sigma = zcdp.sigma_for(sensitivity, rho)
    assert zcdp.rho(sensitivity, sigma) <= rho
    assert Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2) <= Fraction(rho)
    smaller = math.nextafter(sigma, 0.0)
    assert Fraction(sensitivity) ** 2 / (2 * Fraction(smaller) ** 2) > Fraction(rho)


@given(sensitivity=positive, sigma=positive)
def test_rho_and_mu_round_up(sensitivity: float, sigma: float) -> None:
    exact_rho = Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2)
    assert Fraction(zcdp.rho(sensitivity, sigma)) >= exact_rho
    assert Fraction(zcdp.mu(sensitivity, sigma)) >= Fraction(sensitivity) / Fraction(sigma)


# --- zCDP -> (ε, δ) ---------------------------------------------------------------------------------


def _reference_epsilon(rho: float, delta: float) -> mpmath.mpf:
    """inf over α > 1 of the CKS20 bound, by a log-spaced grid refined with a root of the derivative."""
    with mpmath.workdps(50):
        r, log_inv_delta = mpmath.mpf(rho), -mpmath.log(mpmath.mpf(delta))

        def objective(alpha: mpmath.mpf) -> mpmath.mpf:
            return alpha * r + (
                log_inv_delta + (alpha - 1) * mpmath.log(1 - 1 / alpha) - mpmath.log(alpha)
            ) / (alpha - 1)

        grid = [1 + mpmath.mpf(10) ** (k / mpmath.mpf(40)) for k in range(-480, 600)]
        i = min(range(len(grid)), key=lambda j: objective(grid[j]))
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        for _ in range(200):  # bisect the derivative's sign change inside the bracket
            mid = (lo + hi) / 2
            if r - log_inv_delta / (mid - 1) ** 2 + mpmath.log(mid) / (mid - 1) ** 2 > 0:
                hi = mid
            else:
                lo = mid
        return max(mpmath.mpf(0), min(objective(grid[i]), objective(lo), objective(hi)))


@pytest.mark.parametrize(
    ("rho", "delta"),
    [
        (0.025, 1e-6),
        (0.5, 1e-5),
        (1e-4, 1e-9),
        (1e-8, 1e-6),
        (2.0, 1e-10),
        (50.0, 1e-6),
        (0.01, 0.3),
        (0.1, 1e-20),
    ],
    ids=[
        "steinke-example",
        "half",
        "small-rho",
        "tiny-rho",
        "large-rho",
        "huge-rho",
        "large-delta",
        "tiny-delta",
    ],
)
def test_epsilon_from_rho_matches_reference(rho: float, delta: float) -> None:
    ours = zcdp.epsilon_from_rho(rho, delta)
    reference = _reference_epsilon(rho, delta)
    assert ours >= reference  # valid: some α attains ε <= ours
    assert ours <= reference * (1 + 1e-9) + 1e-300  # and tight


@given(rho=rhos, delta=deltas)
def test_epsilon_from_rho_beats_the_classical_bound(rho: float, delta: float) -> None:
    value = zcdp.epsilon_from_rho(rho, delta)
    assert 0 <= value <= (rho + 2 * math.sqrt(rho * math.log(1 / delta))) * (1 + 1e-12)


def test_epsilon_from_rho_is_zero_without_noise_cost() -> None:
    assert zcdp.epsilon_from_rho(0.0, 1e-6) == 0.0  # exact by construction


@settings(max_examples=40, deadline=None)
@given(epsilon=epsilons, delta=deltas)
def test_rho_for_inverts_the_conversion(epsilon: float, delta: float) -> None:
    rho = zcdp.rho_for(epsilon, delta)
    assert zcdp.epsilon_from_rho(rho, delta) <= epsilon
    assert zcdp.epsilon_from_rho(rho * (1 + 1e-9), delta) > epsilon  # the largest, up to 1e-9


@settings(max_examples=40, deadline=None)
@given(sensitivity=positive, epsilon=epsilons, delta=deltas)
@example(sensitivity=0.0019983481188351445, epsilon=0.0019983481188351445, delta=0.0019983481188351445)
def test_gaussian_calibration_chain_is_conservative(sensitivity: float, epsilon: float, delta: float) -> None:
    # what a planner does: (ε, δ) -> ρ -> σ, and back through the maps. epsilon_from_rho finds its Rényi
    # order numerically, so a smaller ρ can convert to an ε one ulp larger (Hypothesis found
    # 0.001998348118835145 for 0.0019983481188351445): the chain holds to a relative 1e-12, and the
    # planner, which retries until the charge is within the request, never charges more than asked
    # (test_price.test_calibration_never_charges_more_than_asked).
    sigma = zcdp.sigma_for(sensitivity, zcdp.rho_for(epsilon, delta))
    assert zcdp.epsilon_from_rho(zcdp.rho(sensitivity, sigma), delta) <= epsilon * (1 + 1e-12)


# --- GDP --------------------------------------------------------------------------------------------


def _reference_delta(epsilon: float, mu: float) -> mpmath.mpf:
    with mpmath.workdps(50):
        e, m = mpmath.mpf(epsilon), mpmath.mpf(mu)
        return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)


GDP_CASES = [
    (0.0, 0.5),
    (0.5, 0.5),
    (1.0, 1.0),
    (2.0, 1.0),
    (5.0, 1.0),
    (10.0, 2.0),
    (0.3, 0.1),
    (30.0, 5.0),
    (100.0, 10.0),
    (700.0, 40.0),
    (1000.0, 50.0),
    (2000.0, 60.0),
    (50.0, 1.0),
    (1e-3, 1e-3),
]


@pytest.mark.parametrize(("epsilon", "mu"), GDP_CASES, ids=[f"eps={e}-mu={m}" for e, m in GDP_CASES])
def test_gdp_delta_matches_mpmath(epsilon: float, mu: float) -> None:
    ours = zcdp.delta_of(epsilon, mu)
    reference = _reference_delta(epsilon, mu)
    assert math.isfinite(ours)
    if reference < 1e-290:
        assert ours <= 1e-290
    else:
        assert abs(ours - reference) <= 1e-10 * reference


@given(
    epsilon=st.floats(min_value=0, max_value=1e4),
    extra=st.floats(min_value=1e-3, max_value=10),
    mu=st.floats(min_value=1e-3, max_value=100),
)
def test_gdp_delta_falls_with_epsilon_and_rises_with_mu(epsilon: float, extra: float, mu: float) -> None:
    value = zcdp.delta_of(epsilon, mu)
    assert 0 <= value <= 1
    tolerance = 1e-12 * value + 1e-300
    assert zcdp.delta_of(epsilon + extra, mu) <= value + tolerance
    assert zcdp.delta_of(epsilon, mu * 1.1) >= value - tolerance


@pytest.mark.parametrize(
    ("mu", "delta"),
    [(0.1, 1e-6), (0.5, 1e-6), (1.0, 1e-6), (1.0, 1e-10), (3.0, 1e-5), (10.0, 1e-8)],
    ids=["mu=0.1", "mu=0.5", "mu=1", "mu=1-small-delta", "mu=3", "mu=10"],
)
def test_gdp_epsilon_of_is_the_conservative_inverse(mu: float, delta: float) -> None:
    epsilon = zcdp.epsilon_of(mu, delta)
    assert zcdp.delta_of(epsilon, mu) <= delta
    assert _reference_delta(epsilon, mu) <= delta  # true δ at the reported ε
    assert _reference_delta(epsilon * (1 - 1e-6), mu) > delta  # and not much larger than needed


def test_gdp_zero_mu_is_free() -> None:
    assert zcdp.delta_of(1.0, 0.0) == 0.0
    assert zcdp.epsilon_of(0.0, 1e-6) == 0.0


# --- error bars -------------------------------------------------------------------------------------


def _exact_two_sided_tail(sigma: float, k: int) -> mpmath.mpf:
    with mpmath.workdps(40):
        q = mpmath.exp(-1 / (2 * mpmath.mpf(sigma) ** 2))
        norm = mpmath.jtheta(3, 0, q)  # Σ_{j∈Z} q^{j²}
        return 2 * mpmath.nsum(lambda j: q ** (j * j), [k + 1, mpmath.inf]) / norm


@pytest.mark.parametrize("sigma", [0.4, 1.0, 3.3, 10.0, 30.0], ids=lambda s: f"sigma={s}")
@pytest.mark.parametrize("confidence", [0.5, 0.95, 0.999], ids=lambda c: f"conf={c}")
def test_ci_halfwidth_is_the_exact_quantile(sigma: float, confidence: float) -> None:
    k = zcdp.ci_halfwidth(sigma, confidence)
    alpha = 1 - mpmath.mpf(confidence)
    assert _exact_two_sided_tail(sigma, k) <= alpha
    if k > 0:
        assert _exact_two_sided_tail(sigma, k - 1) > alpha


@pytest.mark.parametrize("sigma", [1e4, 1.5e4, 1e9], ids=["exact-edge", "bound", "huge"])
def test_ci_halfwidth_for_large_sigma_is_near_the_continuous_quantile(sigma: float) -> None:
    k = zcdp.ci_halfwidth(sigma)
    z = 1.959963984540054
    assert z * sigma - 2 <= k <= z * sigma + 2
    with mpmath.workdps(30):  # the continuous tail at k bounds the discrete one (see the docstring)
        assert mpmath.erfc(mpmath.mpf(k) / (mpmath.sqrt(2) * sigma)) <= 0.05


@pytest.mark.parametrize(
    ("function", "args"),
    [
        (zcdp.rho, (1, 0.0)),
        (zcdp.sigma_for, (1, 0.0)),
        (zcdp.sigma_for, (0, 1.0)),
        (zcdp.epsilon_from_rho, (-1.0, 1e-6)),
        (zcdp.epsilon_from_rho, (1.0, 0.0)),
        (zcdp.epsilon_from_rho, (1.0, 1.0)),
        (zcdp.rho_for, (0.0, 1e-6)),
        (zcdp.delta_of, (-1.0, 1.0)),
        (zcdp.epsilon_of, (1.0, 0.0)),
        (zcdp.ci_halfwidth, (math.nan,)),
    ],
    ids=[
        "zero-sigma",
        "calibrate-zero-rho",
        "calibrate-zero-sensitivity",
        "negative-rho",
        "zero-delta",
        "delta-one",
        "zero-epsilon",
        "negative-epsilon",
        "gdp-zero-delta",
        "nan-sigma",
    ],
)
def test_rejects_invalid_arguments(function: Callable[..., object], args: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        function(*args)
