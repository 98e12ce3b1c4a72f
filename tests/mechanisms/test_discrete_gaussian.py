"""The proven μ-GDP bound of the discrete Gaussian (mechanisms/gaussian/gdp_bound.py, docs/privacy.md §8):
vertices against mpmath at 50 digits, the certificate's error bounds, the tail bound, the vector bound."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.gaussian import gdp_bound as dg

SIGMAS = [0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0]
SHIFTS = [1, 2, 3, 5, 8]


def _mp_probits(sigma: float, count: int) -> list[mpmath.mpf]:
    """g(m) = −Φ⁻¹(P[X > m]) for m = 0..count−1 at 50 digits (exact sums of the pmf, mpmath's erfinv)."""
    with mpmath.workdps(60):
        s = mpmath.mpf(sigma)
        last = count + int(40 * sigma) + 40
        weights = [mpmath.exp(-mpmath.mpf(j) ** 2 / (2 * s * s)) for j in range(last + 1)]
        z = weights[0] + 2 * mpmath.fsum(weights[1:])
        tails, acc = [mpmath.mpf(0)] * (last + 1), mpmath.mpf(0)
        for j in range(last, 0, -1):
            acc += weights[j]
            tails[j - 1] = acc / z  # P[X > j − 1]
        return [_mp_probit(tails[m]) for m in range(count)]


def _mp_probit(tail: mpmath.mpf) -> mpmath.mpf:
    """z with Φ(−z) = tail, as the root of ln Φ(−z) − ln tail (mpmath's own convergence test decides)."""
    target = mpmath.log(tail)
    guess = -mpmath.sqrt(2) * mpmath.erfinv(2 * tail - 1) if tail > mpmath.mpf(10) ** -30 else mpmath.sqrt(-2 * target)
    return mpmath.findroot(lambda x: mpmath.log(mpmath.ncdf(-x)) - target, guess, tol=mpmath.mpf(10) ** -45)


def _mp_mu(sigma: float, shift: int, count: int) -> mpmath.mpf:
    """sup over the vertices n in (−count, count) of g(n) − g(n − k), with g(−n−1) = −g(n)."""
    g = _mp_probits(sigma, count + shift)

    def at(n: int) -> mpmath.mpf:
        return g[n] if n >= 0 else -g[-n - 1]

    return max(at(n) - at(n - shift) for n in range(-count + shift, count))


@pytest.mark.parametrize("sigma", SIGMAS)
def test_probits_agree_with_mpmath_within_their_error_bounds(sigma: float) -> None:
    count = int(6 * sigma) + 8
    z, error = dg._probits(sigma, count)
    reference = _mp_probits(sigma, count)
    for m in range(count):
        assert abs(mpmath.mpf(float(z[m])) - reference[m]) <= error[m], m
        assert error[m] < 1e-10


@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("shift", SHIFTS)
def test_vertex_mu_agrees_with_mpmath(sigma: float, shift: int) -> None:
    count = int(6 * sigma) + 8
    exact = _mp_mu(sigma, shift, count)
    assert abs(dg.shift_mu(sigma, shift) - exact) <= 1e-10 * exact
    assert shift * dg.unit_mu(sigma) >= exact  # the certified bound covers every shift (telescoping)
    assert exact > shift / sigma  # and k/σ alone would not


@pytest.mark.parametrize("sigma", SIGMAS)
def test_the_supremum_over_shifts_is_at_one(sigma: float) -> None:
    per_unit = [dg.shift_mu(sigma, k) / k for k in SHIFTS]
    assert all(later <= per_unit[0] * (1 + 1e-12) for later in per_unit)


@pytest.mark.parametrize(("sigma", "c"), [(0.5, 1.2441909), (1.0, 1.0457601), (2.0, 1.0106508), (5.0, 1.0016725),
                                          (10.0, 1.0004170), (100.0, 1.0000041), (256.0, 1.0000006)])
def test_factor_values(sigma: float, c: float) -> None:
    assert c <= dg.factor(sigma) <= c + 2e-7
    assert dg.factor(sigma) - 1 <= 1.5 / (24 * sigma * sigma)  # ≈ 1 + 1/(24σ²)


def test_k_over_sigma_is_not_enough_for_small_sigma() -> None:
    # σ = 1, shift 1: the central vertex (α, β) = ((1 − p0)/2, (1 − p0)/2) lies below G_1, so N_Z(0, 1) is not
    # 1-GDP: charging μ = Δ/σ would under-charge. It is within G_{μ_Z} (μ_Z = unit_mu(1) ≈ 1.04576).
    with mpmath.workdps(50):
        p0 = 1 / mpmath.nsum(lambda j: mpmath.exp(-j * j / 2), [-mpmath.inf, mpmath.inf])
        alpha = beta = (1 - p0) / 2

        def g(mu: float) -> mpmath.mpf:
            return mpmath.ncdf(mpmath.sqrt(2) * mpmath.erfinv(1 - 2 * alpha) - mu)

        assert g(1.0) > beta + mpmath.mpf("0.01")
        assert g(dg.unit_mu(1.0)) <= beta


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0, 10.0, 64.0, 256.0])
def test_the_tail_bound_is_below_the_centre(sigma: float) -> None:
    start = dg._tail_start(sigma)
    excess = dg._tail_excess(sigma, start)
    z, _ = dg._probits(sigma, 2)
    assert 1 + excess < 2 * z[0] * sigma  # the analytic tail bound never decides the maximum


@pytest.mark.parametrize("sigma", [1.0, 2.0, 5.0])
def test_far_vertices_respect_the_tail_bound(sigma: float) -> None:
    # beyond M the increments, evaluated at 50 digits through ln Φ(−z) = ln T, stay within (1 + E(M))/σ
    start = dg._tail_start(sigma)
    bound = (1 + dg._tail_excess(sigma, start)) / sigma
    with mpmath.workdps(50):
        s = mpmath.mpf(sigma)
        norm = mpmath.nsum(lambda j: mpmath.exp(-j * j / (2 * s * s)), [-mpmath.inf, mpmath.inf])

        def z(m: int) -> mpmath.mpf:
            tail = mpmath.nsum(lambda j: mpmath.exp(-j * j / (2 * s * s)), [m + 1, mpmath.inf]) / norm
            target = mpmath.log(tail)
            return mpmath.findroot(lambda x: mpmath.log(mpmath.ncdf(-x)) - target, (m + 1) / s)

        for m in (start, start + 1, 2 * start, 10 * start):
            assert z(m) - z(m - 1) <= bound


@given(st.floats(min_value=1.0, max_value=50.0), st.floats(min_value=0.02, max_value=1.0))
@settings(max_examples=40, deadline=None)
def test_sigma_for_inverts_mu(sensitivity: float, mu: float) -> None:
    if not dg.SIGMA_MIN <= sensitivity / mu * 1.3 <= dg.SIGMA_MAX:
        return
    sigma = dg.sigma_for(sensitivity, mu)
    assert dg.mu(sensitivity, sigma) <= mu
    slack = 1e-6 if sigma <= dg.CERTIFIED_SIGMA_MAX else 2e-5  # above: steps of 2⁻¹⁸ over a jittering c(σ)
    assert dg.mu(sensitivity, sigma * (1 - slack)) > mu  # essentially the smallest σ that fits


def test_vector_bound_is_the_l2_norm_times_the_unit_mu() -> None:
    # independent coordinates with shifts (3, 4): μ = √(μ_Z(σ,3)² + μ_Z(σ,4)²) <= 5·μ_Z(σ,1) = mu(5, σ)
    sigma = 2.0
    composed = math.hypot(dg.shift_mu(sigma, 3), dg.shift_mu(sigma, 4))
    assert composed <= dg.mu(5, sigma)
    assert dg.mu(5, sigma) == pytest.approx(5 * dg.unit_mu(sigma), rel=1e-15)


@pytest.mark.parametrize("sigma", [0.0, 0.49, 2.0**20 + 1, math.inf, math.nan])
def test_sigma_outside_the_proven_range_is_refused(sigma: float) -> None:
    with pytest.raises(ValueError, match="proven for sigma"):
        dg.unit_mu(sigma)


def test_increments_fall_away_from_the_centre() -> None:
    # what the certificate finds: the maximum is the central vertex, as the analysis of §8 expects
    for sigma in (1.0, 4.0, 20.0):
        z, _ = dg._probits(sigma, dg._tail_start(sigma))
        increments = np.diff(np.concatenate(([-z[0]], z)))
        assert int(np.argmax(increments)) == 0
