"""Discrete Gaussian on the integer grid: zCDP maps and their inverses, (ε, δ) conversion, GDP, error bars.

Noise Z has P[Z = k] ∝ exp(−k²/(2σ²)) (Canonne, Kamath, Steinke 2020, arXiv:2004.00010, "CKS20").
Admission uses zCDP, which is exact for the discrete Gaussian with integer shifts (CKS20: ρ = Δ2²/(2σ²)).
The GDP curve δ(ε) of μ-GDP is here too (`mechanisms/gdp.py` builds the `gdp` rule on it); μ = Δ2/σ
describes the continuous Gaussian only and is reported for information (docs/privacy.md §5).
Every privacy number is rounded in the safe direction: ε, δ, ρ, μ and σ up; `rho_for` down.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from mechanisms import search
from mechanisms.rounding import up as _up

_EPS = 2.0**-52  # unit roundoff bound used for error margins
_SQRT_HALF_PI = math.sqrt(math.pi / 2)
_INV_SQRT_2PI = 1.0 / math.sqrt(2 * math.pi)
_EXACT_CI_MAX_SIGMA = 1e4




def _check(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ValueError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def _check_delta(delta: float) -> None:
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")


# --- zCDP -------------------------------------------------------------------------------------------


def rho(sensitivity: float, sigma: float) -> float:
    """ρ (zCDP) of discrete Gaussian noise `sigma` on a vector of L2 `sensitivity`: Δ2²/(2σ²), rounded up.

    CKS20 show D_α(N_Z(0, σ²) ‖ N_Z(d, σ²)) <= α d²/(2σ²) for integer shifts d, and Rényi divergences of
    independent coordinates add, so the vector bound uses the L2 norm.

    Example:
        >>> rho(1, 2.0)
        0.125
    """
    _check("sensitivity", sensitivity, allow_zero=True)
    _check("sigma", sigma)
    return _up(Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2))


def sigma_for(sensitivity: float, rho: float) -> float:
    """The smallest sigma with `rho(sensitivity, sigma) <= rho`: Δ2/√(2ρ), rounded up.

    Example:
        >>> sigma_for(1, 0.125)
        2.0
        >>> r = 0.3
        >>> rho(3, sigma_for(3, r)) <= r
        True
    """
    _check("sensitivity", sensitivity)
    _check("rho", rho)
    bound = Fraction(sensitivity) ** 2 / (2 * Fraction(rho))  # σ² must be >= this

    def enough(sigma: float) -> bool:
        return Fraction(sigma) ** 2 >= bound

    sigma = sensitivity / math.sqrt(2 * rho)
    while not enough(sigma):
        sigma = math.nextafter(sigma, math.inf)
    while enough(below := math.nextafter(sigma, 0.0)) and below > 0:
        sigma = below
    return sigma


def _cks_epsilon(rho: float, t: float, log_inv_delta: float) -> float:
    """CKS20 §2.3 (Prop. 12) at Rényi order α = 1 + t, as an upper bound on its exact value.

    ε(α) = αρ + ln(1 − 1/α) + (ln(1/δ) − ln α)/(α − 1): δ = e^((α−1)(αρ−ε)) (1 − 1/α)^α / (α − 1) solved
    for ε. Every α > 1 gives a valid ε, so only the evaluation error needs a margin: each term below is
    computed to a few ulps (ln(1 − 1/α) = −log1p(1/t) avoids cancellation), and we add 16 ulps of the sum
    of their magnitudes.
    """
    log_alpha = math.log1p(t)
    a = (1.0 + t) * rho
    b = -math.log1p(1.0 / t)
    c = (log_inv_delta - log_alpha) / t
    margin = 16 * _EPS * (a - b + (log_inv_delta + log_alpha) / t)
    return a + b + c + margin


def epsilon_from_rho(rho: float, delta: float) -> float:
    """The ε with which ρ-zCDP implies (ε, δ)-DP, rounded up.

    The tight conversion of CKS20 §2.3 (Prop. 12; also Asoodeh et al. 2021):
    ε = inf_{α>1} αρ + (ln(1/δ) + (α−1) ln(1 − 1/α) − ln α)/(α − 1), never above the classical
    ρ + 2√(ρ ln(1/δ)) (Bun–Steinke 2016, Prop. 1.3), which is kept as a fallback. The objective's
    derivative ρ − ln(1/(αδ))/(α−1)² changes sign once, so bisection on it finds the minimiser; any α is
    valid, so an imprecise minimiser only loosens the bound.

    Example:
        >>> round(epsilon_from_rho(0.025, 1e-6), 4)
        1.0141
        >>> epsilon_from_rho(0.5, 1e-6) <= 0.5 + 2 * math.sqrt(0.5 * math.log(1e6))
        True
    """
    _check("rho", rho, allow_zero=True)
    _check_delta(delta)
    if rho == 0:
        return 0.0
    log_inv_delta = -math.log(delta)

    def rising(t: float) -> bool:  # the derivative of ε(1 + t) in t is positive
        return rho * t * t > log_inv_delta - math.log1p(t)

    hi = math.sqrt(log_inv_delta / rho)  # ρ·hi² = ln(1/δ) > ln(1/δ) − ln α: already rising
    lo = hi / 2
    while rising(lo) and lo > 1e-300:
        lo /= 2
    for _ in range(200):
        mid = math.sqrt(lo) * math.sqrt(hi)
        if not lo < mid < hi:
            break
        lo, hi = (lo, mid) if rising(mid) else (mid, hi)
    cks = min(_cks_epsilon(rho, lo, log_inv_delta), _cks_epsilon(rho, hi, log_inv_delta))
    classical = (rho + 2 * math.sqrt(rho * log_inv_delta)) * (1 + 8 * _EPS)
    value = max(0.0, min(cks, classical))  # ε < 0 from some α: then (0, δ) holds as well
    return math.nextafter(value, math.inf) if value > 0 else 0.0


def rho_for(epsilon: float, delta: float) -> float:
    """The largest ρ (found by bisection, rounded down) with `epsilon_from_rho(ρ, delta) <= epsilon`.

    Example:
        >>> r = rho_for(1.0, 1e-6)
        >>> round(r, 4), epsilon_from_rho(r, 1e-6) <= 1.0
        (0.0244, True)
    """
    _check("epsilon", epsilon)
    _check_delta(delta)

    def ok(r: float) -> bool:
        return epsilon_from_rho(r, delta) <= epsilon

    return search.largest(ok, 0.0, max(epsilon, 1.0))


# --- Gaussian differential privacy -----------------------------------------------------------------


def mu(sensitivity: float, sigma: float) -> float:
    """μ = Δ2/σ, rounded up: the Gaussian mechanism of `sigma` is μ-GDP (Dong, Roth, Su 2019, Thm. 2.7).

    Exact for continuous noise. The discrete Gaussian is *not* Δ2/σ-GDP (its trade-off curve dips below
    G_{1/σ} at the central vertex; docs/privacy.md §5): this number is reported, never used to admit.

    Example:
        >>> mu(2, 4.0)
        0.5
    """
    _check("sensitivity", sensitivity, allow_zero=True)
    _check("sigma", sigma)
    return _up(Fraction(sensitivity) / Fraction(sigma))


def _mills(x: float) -> float:
    """Mills ratio Φ(−x)/φ(x) for x >= 0, without underflow (continued fraction for large x)."""
    y = x / math.sqrt(2.0)
    if y < 5.0:
        return _SQRT_HALF_PI * math.exp(y * y) * math.erfc(y)
    # erfc(y) e^{y²} √π = 1/(y + (1/2)/(y + (2/2)/(y + (3/2)/(y + …)))), fast to converge for y >= 5
    value = y
    for k in range(60, 0, -1):
        value = y + (k / 2) / value
    return _SQRT_HALF_PI / (math.sqrt(math.pi) * value)


def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def delta_of(epsilon: float, mu: float) -> float:
    """δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Dong, Roth, Su 2019, Cor. 2.13).

    With a = −ε/μ + μ/2 and b = a − μ <= 0, e^ε φ(b) = φ(a), so e^ε Φ(b) = φ(a)·M(−b) with the Mills ratio
    M: no overflow for large ε, and for a < 0 the difference is φ(a)(M(−a) − M(−b)), with no underflow.

    Example:
        >>> round(delta_of(1.0, 1.0), 6)
        0.126937
        >>> delta_of(1000.0, 1.0)
        0.0
    """
    _check("epsilon", epsilon, allow_zero=True)
    _check("mu", mu, allow_zero=True)
    if mu == 0:
        return 0.0
    a = -epsilon / mu + mu / 2
    phi_a = _INV_SQRT_2PI * math.exp(-a * a / 2)
    if a < 0:  # Φ(a) = φ(a)·M(−a)
        return min(1.0, max(0.0, phi_a * (_mills(-a) - _mills(mu - a))))
    value = _normal_cdf(a) - phi_a * _mills(mu - a)
    return min(1.0, max(0.0, value))


def epsilon_of(mu: float, delta: float) -> float:
    """The smallest ε (bisection, rounded up) with `delta_of(ε, mu) <= delta`: μ-GDP as (ε, δ)-DP.

    The target is shrunk by a relative 1e-9 so that the evaluation error of `delta_of` stays on the
    safe side.

    Example:
        >>> e = epsilon_of(1.0, 1e-6)
        >>> round(e, 3), delta_of(e, 1.0) <= 1e-6
        (4.887, True)
    """
    _check("mu", mu, allow_zero=True)
    _check_delta(delta)
    target = delta * (1 - 1e-9)

    def ok(e: float) -> bool:
        return delta_of(e, mu) <= target

    return search.smallest(ok, 0.0, 1.0)


# --- error bars -------------------------------------------------------------------------------------


@lru_cache(maxsize=1024)  # a pure function of its floats, O(σ) work up to σ = 1e4 (8 ms there): once per σ
def ci_halfwidth(sigma: float, confidence: float = 0.95) -> int:
    """The smallest integer k with P[|Z| > k] <= 1 − confidence for discrete Gaussian noise of `sigma`.

    Exact summation of the pmf when σ <= 1e4. Above, the continuous bound ⌈zσ⌉ + 1 with z = Φ⁻¹(1 − α/2):
    the pmf decreases on k >= 0, so Σ_{j>k} e^{−j²/2σ²} <= ∫_k^∞ e^{−x²/2σ²} dx, and the discrete
    normaliser is at least √(2π)σ (Poisson summation), hence P[Z > k] <= P[X >= k] for X ~ N(0, σ²).
    An error bar for analysts; it carries no privacy guarantee.

    Example:
        >>> ci_halfwidth(1.0)
        2
        >>> ci_halfwidth(10.0)
        20
        >>> ci_halfwidth(1e6)
        1959965
    """
    _check("sigma", sigma)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    alpha = 1.0 - confidence
    if sigma > _EXACT_CI_MAX_SIGMA:
        z = -NormalDist().inv_cdf(alpha / 2)
        return math.ceil(z * sigma) + 1
    last = math.ceil(38.6 * sigma) + 2  # e^{−k²/2σ²} underflows to 0 beyond 38.6σ
    weights = np.exp(-(np.arange(last + 1, dtype=np.float64) ** 2) / (2 * sigma * sigma))
    above = np.cumsum(weights[::-1])[::-1]  # above[j] = Σ_{i>=j} w_i, summed from the small end
    norm = weights[0] + 2 * above[1]
    two_sided = np.append(2 * above[1:], 0.0)  # two_sided[k] = Σ_{|j|>k} w_j
    return int(np.argmax(two_sided <= alpha * norm))
