"""The large-σ bound on μ_Z(σ, 1) (mechanisms/gaussian/gdp_bound_analytic.py, docs/privacy.md §8.7): against the
vertex certificate where both apply, its closed-form tail brackets and vertex increments against 50-digit
mpmath sums, its range, and what admitting σ > 256 changes for the `gdp` rule."""

from __future__ import annotations

import math
from functools import lru_cache

import mpmath
import numpy as np
import pytest

from accountant.errors import UnsupportedEvent
from accountant.events import GaussianEvent
from accountant.filter import Entry
from accountant.loss import approximate_mu
from accountant.report import tightest
from mechanisms.gaussian import gdp_bound as dg
from mechanisms.gaussian import gdp_bound_analytic as dga
from mechanisms.gaussian import zcdp


@lru_cache(maxsize=256)
def _mp_tail(sigma: float, m: int) -> tuple[mpmath.mpf, mpmath.mpf]:
    """S(m) = Σ_{j>m} e^{−j²/2σ²} at 50 digits (terms summed until they fall below 10⁻⁶⁰ of the first), and
    f(m) = e^{−m²/2σ²}."""
    with mpmath.workdps(60):
        s2 = 2 * mpmath.mpf(sigma) ** 2
        first = mpmath.exp(-mpmath.mpf(m + 1) ** 2 / s2)
        total, j = mpmath.mpf(0), m + 1
        while True:
            term = mpmath.exp(-mpmath.mpf(j) ** 2 / s2)
            total += term
            if term < first * mpmath.mpf(10) ** -60:
                return total, mpmath.exp(-mpmath.mpf(m) ** 2 / s2)
            j += 1


def _mp_norm(sigma: float) -> mpmath.mpf:
    """Z = Σ_j e^{−j²/2σ²} = √(2π)σ·Σ_l e^{−2π²σ²l²} (Poisson summation): for σ >= 16, √(2π)σ to 50 digits."""
    with mpmath.workdps(60):
        return mpmath.sqrt(2 * mpmath.pi) * sigma * (1 + 2 * mpmath.exp(-2 * mpmath.pi**2 * sigma**2))


def _mp_probit(log_tail: mpmath.mpf) -> mpmath.mpf:
    """z with ln Φ(−z) = log_tail (Newton from the tail's leading term; mpmath's convergence test decides)."""
    with mpmath.workdps(60):
        guess = mpmath.sqrt(-2 * log_tail) if log_tail < -3 else mpmath.mpf(0)
        return mpmath.findroot(lambda x: mpmath.log(mpmath.ncdf(-x)) - log_tail, guess, tol=mpmath.mpf(10) ** -45)


def _mp_g(sigma: float, m: int) -> mpmath.mpf:
    """g(m) = −Φ⁻¹(P[X > m])."""
    tail, _ = _mp_tail(sigma, m)
    with mpmath.workdps(60):
        return _mp_probit(mpmath.log(tail / _mp_norm(sigma)))


@pytest.mark.parametrize("sigma", [64.0, 100.0, 181.5, 256.0])
def test_the_large_bound_covers_the_certificate_and_stays_within_2e_4(sigma: float) -> None:
    certified = dg.unit_mu(sigma)  # σ <= 256: every central vertex evaluated, errors bounded
    large = dga.large_unit_mu(sigma)
    assert certified <= large <= certified * (1 + 2e-4)


@pytest.mark.parametrize("sigma", [300.0, 2000.0])
def test_tail_brackets_hold_against_mpmath(sigma: float) -> None:
    # m across the centre, the Poisson range (u <= 30), the geometric range, and the far tail up to 24σ²
    ms = [0, 1, 2, int(sigma) // 3, int(sigma), 3 * int(sigma), 29 * int(sigma), 31 * int(sigma),
          int(sigma) ** 2 // 10, int(sigma) ** 2, 24 * int(sigma) ** 2 - 1]
    m = np.array(ms, dtype=np.float64)
    for log_t_hi, hazard_hi in (dga._poisson(m, sigma), dga._geometric(m, sigma), dga._bounds(m, sigma)):
        for i, mi in enumerate(ms):
            tail, f = _mp_tail(sigma, mi)
            with mpmath.workdps(60):
                if math.isfinite(log_t_hi[i]):
                    assert mpmath.log(tail / _mp_norm(sigma)) <= log_t_hi[i], mi
                if math.isfinite(hazard_hi[i]):
                    assert f / tail <= hazard_hi[i], mi
    _, hazard = dga._bounds(m, sigma)
    for i, mi in enumerate(ms[1:], start=1):  # the brackets are tight: each within 1e-4 of the truth
        tail, f = _mp_tail(sigma, mi)
        assert hazard[i] <= float(f / tail) * (1 + 1e-4), mi


@pytest.mark.parametrize("sigma", [300.0, 1000.0])
def test_every_sampled_vertex_lies_below_the_bound(sigma: float) -> None:
    bound = dga.large_unit_mu(sigma)
    s = int(sigma)
    centre = 2 * _mp_g(sigma, 0)
    assert 1 / sigma < centre <= bound
    assert float(centre) * sigma == pytest.approx(1 + 1 / (24 * sigma**2), abs=1e-8)  # the 1 + 1/(24σ²) law
    for n in (1, 2, s // 2, s, 3 * s, 20 * s, s * s // 4, 2 * s * s):
        increment = _mp_g(sigma, n) - _mp_g(sigma, n - 1)
        assert 1 / sigma * (1 - 1e-3) < increment <= bound, n


def test_the_far_tail_bound_still_holds_at_large_sigma() -> None:
    for sigma in (300.0, 1e4, dga.LARGE_SIGMA_MAX):
        excess = dga.tail_excess(sigma, math.ceil(24 * sigma * sigma))
        assert 0 < excess < 0.04 / sigma**2 + math.exp(-24) / 24  # the σq term: e^{−24}/24 at most


@pytest.mark.parametrize("sigma", [257.0, 1000.0, 12345.6, 1e5, dga.LARGE_SIGMA_MAX])
def test_sigma_beyond_256_is_priced_at_the_large_bound(sigma: float) -> None:
    assert dg.unit_mu(sigma) == dga.large_unit_mu(sigma)
    assert 1 + 1 / (24 * sigma**2) < dg.factor(sigma) < 1 + 1.3e-4
    mu, delta = approximate_mu(GaussianEvent(3, sigma))
    assert mu == dg.mu(3, sigma) >= 3 * dg.unit_mu(sigma) and delta == 0.0


@pytest.mark.parametrize("sigma", [dga.LARGE_SIGMA_MAX * 1.0001, 1e7])
def test_sigma_beyond_the_range_is_refused(sigma: float) -> None:
    with pytest.raises(ValueError, match="proven for sigma"):
        dg.unit_mu(sigma)
    with pytest.raises(UnsupportedEvent, match="proven for sigma"):
        approximate_mu(GaussianEvent(1, sigma))


@pytest.mark.parametrize(("sensitivity", "target"), [(1.0, 0.003), (20.0, 0.0125), (72000.0, 0.1), (1.0, 1 / 256.01)])
def test_calibration_by_inversion_above_256(sensitivity: float, target: float) -> None:
    sigma = dg.sigma_for(sensitivity, target)
    assert sigma > 256 and dg.mu(sensitivity, sigma) <= target
    assert sigma <= sensitivity / target * (1 + 1.3e-4)  # at most the bound's slack above Δ2/μ


def test_a_large_sigma_history_reports_within_a_tenth_of_a_percent_of_continuous_gdp() -> None:
    history = [Entry(GaussianEvent(1, 1000.0), 0.01, 0.0)] * 200 + [Entry(GaussianEvent(20, 3000.0), 0.01, 0.0)] * 50
    epsilon, rule = tightest(history, 1e-6)
    continuous = zcdp.epsilon_of(math.sqrt(200 / 1000.0**2 + 50 * (20 / 3000.0) ** 2), 1e-6)
    assert rule == "gdp" and continuous < epsilon <= continuous * 1.001
