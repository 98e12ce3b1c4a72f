"""A proven μ-GDP bound for the discrete Gaussian N_Z(0, σ²) with integer shifts (docs/privacy.md §8).

For a shift k, T(N_Z(0, σ²), N_Z(k, σ²)) is piecewise linear; its vertices are the threshold tests
"reject when X >= t", and G_μ is convex, so the pair is μ-GDP iff μ >= μ_Z(σ, k) = sup_n g(n) − g(n − k)
with g(n) = Φ⁻¹(P[X <= n]). Increments telescope, so μ_Z(σ, k) <= k·μ_Z(σ, 1), and independent
coordinates compose as √Σμᵢ² (DRS19 Cor. 3.3): noise of σ on an integer vector of L2 sensitivity Δ2 is
(c(σ)·Δ2/σ)-GDP with c(σ) = σ·μ_Z(σ, 1) ≈ 1 + 1/(24σ²). `unit_mu` certifies an upper bound on μ_Z(σ, 1):
every central vertex evaluated with its floating-point error bounded (directed), and an analytic bound on the
infinitely many tail vertices, for σ <= CERTIFIED_SIGMA_MAX; above, where that certificate would evaluate
too many (24σ²) vertices, the block bound of `discrete_gaussian_analytic` (docs/privacy.md §8.7). σ outside
[SIGMA_MIN, SIGMA_MAX] is refused (ValueError): below, nothing is proven here; above, vertex numbers up to
24σ² would leave float64's exact integers.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np  # scipy.special is imported where it is used: 0.3 s of every process start otherwise

from mechanisms.gaussian.gdp_bound_analytic import LARGE_SIGMA_MAX, large_unit_mu
from mechanisms.gaussian.gdp_bound_analytic import tail_excess as _tail_excess
from mechanisms.rounding import up as _up

SIGMA_MIN = 0.5
CERTIFIED_SIGMA_MAX = 256.0  # up to here every central vertex is evaluated; above, §8.7's block bound
SIGMA_MAX = LARGE_SIGMA_MAX
_U = 2.0**-53  # unit roundoff
_MILLS_AT_0 = math.sqrt(math.pi / 2)  # M(z) = Φ(−z)/φ(z) <= M(0) for z >= 0; also M(z) <= 1/z


def _check_sigma(sigma: float, top: float = SIGMA_MAX) -> None:
    if not (isinstance(sigma, int | float) and math.isfinite(sigma) and SIGMA_MIN <= sigma <= top):
        raise ValueError(
            f"the discrete Gaussian's μ-GDP bound is proven for sigma in [{SIGMA_MIN}, {top:g}] "
            f"(grid units), got {sigma!r}"
        )


def _tail_start(sigma: float) -> int:
    """M: vertices n >= M are bounded analytically (`_tail_excess`), those below are evaluated."""
    return max(math.ceil(24 * sigma * sigma), math.ceil(sigma) + 2, 8)


def _log_tails(sigma: float, count: int) -> tuple[np.ndarray, np.ndarray]:
    """ln S(m) = ln Σ_{j>m} e^{−j²/(2σ²)} for m = 0..count−1, and a bound on each value's absolute error.

    The sum is accumulated from the far end in log space (np.logaddexp.accumulate) and starts from an
    upper bound of the remainder beyond the last term, W/(1 − q) with q bounding the ratio of successive
    terms, so the truncation errs upward (it is counted in the error bound as well). A computed step
    r_m = logaddexp(a_m, r_{m+1}) is within 4u·|r_m| of the exact one (u = 2⁻⁵³), a_m carries 2u·|a_m|, and
    an error in r_{m+1} reaches r_m damped by S(m+1)/S(m): summed, |error_m| <= 6u·Σ_{k>=m} (|r_k| + λ)
    S(k)/S(m) with λ = ln(2 + 3σ) >= |a_k| − |r_k|. That sum is computed too, and doubled.
    """
    extra = math.ceil(12 * sigma) + 64
    last = count + extra  # terms j = 1..last, then the remainder beyond
    j = np.arange(1, last + 1, dtype=np.float64)
    a = -(j * j) / (2.0 * sigma * sigma)
    q = math.exp(-(2 * last + 1) / (2 * sigma * sigma))  # W_{i+1}/W_i <= q for i > last
    remainder = a[-1] - (2 * last + 1) / (2 * sigma * sigma) - math.log1p(-q)  # ln(W_{last+1}/(1 − q))
    r = np.logaddexp.accumulate(np.append(a, remainder)[::-1])[::-1]
    lam = math.log(2 + 3 * sigma)
    weights = np.log(np.abs(r) + lam) + r
    spread = np.exp(np.logaddexp.accumulate(weights[::-1])[::-1] - r)  # Σ_{k>=m} (|r_k| + λ) S(k)/S(m)
    error = 2 * 6 * _U * spread[:count]
    r = r[:count]
    return r, error


def _probits(sigma: float, count: int) -> tuple[np.ndarray, np.ndarray]:
    """g(m) = Φ⁻¹(P[X <= m]) = −Φ⁻¹(T(m)) for m = 0..count−1, and a bound on each value's absolute error.

    T(m) = S(m)/Z with Z = 1 + 2S(0). z = −Φ⁻¹(e^ℓ) comes from scipy's ndtri_exp and one Newton step, and
    its error is bounded through the residual of log_ndtr: |z − z*| <= (|log_ndtr(−z) − ℓ| + 8u|ℓ|
    + error of ℓ)·M, where the Mills ratio M = Φ(−z)/φ(z) is the derivative of z in −ℓ and
    M(z) <= min(√(π/2), 1/z) for z >= 0; doubled.
    """
    from scipy.special import log_ndtr, ndtri_exp
    log_s, error_s = _log_tails(sigma, count)
    s0 = math.exp(log_s[0])
    log_z = math.log1p(2 * s0)
    error_z = 2 * s0 * error_s[0] / (1 + 2 * s0) + 4 * _U * log_z
    ell = log_s - log_z
    ell_error = error_s + error_z + 4 * _U * np.abs(ell)
    z = -ndtri_exp(ell)
    log_tail = log_ndtr(-z)
    z += (log_tail - ell) * np.exp(log_tail + 0.5 * z * z + 0.5 * math.log(2 * math.pi))  # one Newton step
    log_tail = log_ndtr(-z)
    mills = np.exp(log_tail + 0.5 * z * z + 0.5 * math.log(2 * math.pi))  # M(z) = Φ(−z)/φ(z)
    bound = np.minimum(_MILLS_AT_0, np.minimum(1.0 / np.maximum(z, 1e-300), mills * (1 + 1e-6)))
    # |z − z*| <= (|ln Φ(−z) − ℓ| + error of ℓ)·sup M on the way; doubled for the slack of `bound`
    error = (np.abs(log_tail - ell) + 8 * _U * np.abs(ell) + ell_error) * bound * 2 + 4 * _U * np.abs(z)
    return z, error


@lru_cache(maxsize=4096)
def unit_mu(sigma: float) -> float:
    """An upper bound (certified, rounded up) on μ_Z(σ, 1): the μ-GDP of N_Z(0, σ²) against N_Z(1, σ²).

    Up to CERTIFIED_SIGMA_MAX: the maximum over the central vertices 0 <= n < M of g(n) − g(n − 1)
    (symmetry: g(−1) = −g(0), and the vertices below the centre mirror those above), each raised by its
    error bound, and the analytic bound (1 + E(M))/σ on all vertices n >= M. Above: the block bound of
    `discrete_gaussian_analytic.large_unit_mu` (docs/privacy.md §8.7), within ~1e-4 of the true value.

    Example:
        >>> round(unit_mu(1.0), 5), round(unit_mu(2.0) * 2, 5)
        (1.04576, 1.01065)
        >>> unit_mu(10.0) * 10 <= 1 + 1 / (24 * 10 ** 2) * 1.01
        True
        >>> 1 < unit_mu(4096.0) * 4096 < 1.0001
        True
    """
    _check_sigma(sigma)
    if sigma > CERTIFIED_SIGMA_MAX:
        return large_unit_mu(sigma)
    start = _tail_start(sigma)
    z, error = _probits(sigma, start)
    increments = np.empty(start)
    increments[0] = 2 * z[0] + 2 * error[0]
    increments[1:] = z[1:] - z[:-1] + error[1:] + error[:-1]
    central = float(np.max(increments)) * (1 + 4 * _U)
    tail = (1 + _tail_excess(sigma, start)) / sigma * (1 + 4 * _U)
    return math.nextafter(max(central, tail), math.inf)


def factor(sigma: float) -> float:
    """c(σ) = σ·`unit_mu`(σ), rounded up: the discrete Gaussian is (c(σ)·Δ2/σ)-GDP.

    Example:
        >>> [round(factor(s), 6) for s in (1.0, 2.0, 5.0, 10.0)]
        [1.04576, 1.010651, 1.001673, 1.000417]
    """
    return _up(Fraction(unit_mu(sigma)) * Fraction(sigma))


def mu(sensitivity: float, sigma: float) -> float:
    """μ = μ_Z(σ, 1)·Δ2, rounded up: discrete Gaussian noise of `sigma` on an integer vector of L2 norm of
    the shift at most `sensitivity` is μ-GDP (docs/privacy.md §8.4).

    Example:
        >>> mu(1, 2.0) > 1 / 2.0, round(mu(3, 30.0), 6)
        (True, 0.100005)
        >>> mu(0, 2.0)
        0.0
    """
    if not (math.isfinite(sensitivity) and sensitivity >= 0):
        raise ValueError(f"sensitivity must be finite and >= 0, got {sensitivity!r}")
    _check_sigma(sigma)
    if sensitivity == 0:
        return 0.0
    return _up(Fraction(unit_mu(sigma)) * Fraction(sensitivity))


def sigma_for(sensitivity: float, mu_target: float) -> float:
    """The σ (rounded up) found by inverting `mu`: `mu(sensitivity, σ) <= mu_target`, essentially the smallest.

    The iteration σ ← c(σ)·Δ2/μ from σ = Δ2/μ brackets the fixed point from both sides (c falls as σ grows,
    contracting by ~1/(12σ²) per step); the result is then checked against `mu` itself and raised until it
    fits, so the guarantee never rests on c being monotone. Never below SIGMA_MIN: a request that would
    need less noise gets σ = SIGMA_MIN, charged at its true (smaller) μ.

    Raises:
        ValueError: the σ needed lies outside [SIGMA_MIN, SIGMA_MAX].

    Example:
        >>> s = sigma_for(1, 0.5)
        >>> round(s, 6), mu(1, s) <= 0.5, mu(1, s * (1 - 1e-6)) > 0.5
        (2.020855, True, True)
        >>> sigma_for(1, 10.0), mu(1, 0.5) <= 10.0
        (0.5, True)
    """
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise ValueError(f"sensitivity must be finite and > 0, got {sensitivity!r}")
    if not (math.isfinite(mu_target) and mu_target > 0):
        raise ValueError(f"mu must be finite and > 0, got {mu_target!r}")
    ratio = Fraction(sensitivity) / Fraction(mu_target)
    sigma = max(SIGMA_MIN, _up(ratio))
    for _ in range(25):  # iterates alternate around the fixed point, closing in; keep the upper one
        _check_sigma(sigma)
        following = max(SIGMA_MIN, _up(Fraction(factor(sigma)) * ratio))
        # above the certified range c(σ) jitters by ~1e-7 as blocks move: stop at 2⁻²⁰, then step by 2⁻¹⁸
        large = following > CERTIFIED_SIGMA_MAX
        done = abs(following - sigma) <= (2.0**-20 if large else 1e-10) * sigma
        sigma = max(sigma, following) if done else following
        if done:
            break
    for step in range(34 if sigma > CERTIFIED_SIGMA_MAX else 0, 64):
        _check_sigma(sigma)
        if mu(sensitivity, sigma) <= mu_target:
            return sigma
        sigma = math.nextafter(sigma * (1 + 2.0 ** (step - 52)), math.inf)
    raise AssertionError("sigma_for did not converge")  # c(σ) is bounded: unreachable


def shift_mu(sigma: float, shift: int) -> float:
    """μ_Z(σ, k) over the central vertices, in floating point (no error margin, no tail bound): for
    tests and reports, σ <= CERTIFIED_SIGMA_MAX. Always <= shift·`unit_mu`(σ).

    Example:
        >>> shift_mu(1.0, 2) <= 2 * unit_mu(1.0)
        True
    """
    _check_sigma(sigma, CERTIFIED_SIGMA_MAX)
    if isinstance(shift, bool) or not isinstance(shift, int) or shift < 1:
        raise ValueError(f"shift must be an integer >= 1, got {shift!r}")
    count = _tail_start(sigma) + shift
    z, _ = _probits(sigma, count)
    full = np.concatenate((-z[::-1], z))  # g(n) for n = −count..count−1
    return float(np.max(full[shift:] - full[:-shift]))
