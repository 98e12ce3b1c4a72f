"""Analytic upper bounds on μ_Z(σ, 1), the μ-GDP of N_Z(0, σ²) against N_Z(1, σ²) (docs/privacy.md §8.3, §8.7).

`tail_excess` bounds the far vertices (used by the certificate of `discrete_gaussian.unit_mu` for every σ).
`large_unit_mu` bounds *every* vertex for σ in (LARGE_SIGMA_MIN, LARGE_SIGMA_MAX] without evaluating each
one: blocks of vertices are bounded from their end points (the vertex increment is at most the hazard
increment times a Mills ratio, one rising and one falling in the vertex), the tails S(m) = Σ_{j>m} e^{−j²/2σ²}
are bracketed in closed form (Poisson summation with a remainder for the centre, a geometric series with
Jensen's inequality beyond), and the vertices past 24σ² by `tail_excess`. Its slack is about 2·BLOCK_RATIO
(relative) instead of the certificate's 1e-9; it costs O(log σ / BLOCK_RATIO + min(σ, 1/BLOCK_RATIO))
evaluations instead of 24σ².

Example:
    >>> c = large_unit_mu(1000.0) * 1000.0
    >>> 1 + 1 / (24 * 1000.0 ** 2) < c < 1 + 2.5e-4
    True
"""

from __future__ import annotations

import math

import numpy as np  # scipy.special is imported where it is used: 0.3 s of every process start otherwise

LARGE_SIGMA_MIN = 16.0  # the bound is valid above (tests compare it with the certificate on [64, 256])
LARGE_SIGMA_MAX = 2.0**20  # vertices up to 24σ² stay exact integers in float64 below this
BLOCK_RATIO = 2.0**-14  # a block spans at most this fraction of its start (or of σ near the centre)
_EM_LIMIT = 30.0  # u = (m + ½)/σ up to which the Poisson bracket is used; the geometric one beyond
_POISSON = 1.2020569031595943 / (4 * math.pi**3)  # ζ(3)/(4π³): the remainder's constant
_H_PEAK = 2 * math.exp(-1.5)  # max of H(u) = (u² − 1)e^{−u²/2}, at u = √3
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_MARGIN = 1e-11  # relative, far above the ~1e-13 error of each evaluation below (tests: mpmath at 50 digits)


def tail_excess(sigma: float, start: int) -> float:
    """E(M), with σ·μ_Z-increment(n) <= 1 + E(M) for every vertex n >= M (docs/privacy.md §8.3).

    E(m) = (1/(2σ) + σq + 2L/w)/(w − 2L/w), w = m/σ, q = e^{−(2m+1)/(2σ²)}, L = max(0, ln((w+2)/(σ(1 − q)))),
    nonincreasing for m >= eσ²; valid when L <= w²/2 and M >= σ + 1. Rounded up by a relative 1e-12.

    Example:
        >>> 0 < tail_excess(10.0, 2400) < 1 / (24 * 10.0 ** 2)
        True
    """
    m = start
    w = m / sigma
    q = math.exp(-(2 * m + 1) / (2 * sigma * sigma))
    big_l = max(0.0, math.log(w + 2) - math.log(sigma) - math.log1p(-q))
    if not (m >= math.e * sigma * sigma and m >= sigma + 1 and big_l <= w * w / 2):
        raise AssertionError(f"tail bound preconditions fail at sigma={sigma!r}")  # excluded by the callers
    value = (1 / (2 * sigma) + sigma * q + 2 * big_l / w) / (w - 2 * big_l / w)
    return value * (1 + 1e-12)


def _poisson(m: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """ln of an upper bound on T(m) = S(m)/Z, and an upper bound on the hazard e^{−m²/2σ²}/S(m) (§8.7 (b)).

    S(m) = I(x) + f′(x)/24 + R with x = m + ½, I the Gaussian integral beyond x and
    |R| <= ζ(3)/(4π³)·∫_x^∞ |f‴| (Poisson summation, integrated by parts three times); Z >= √(2π)σ. Only
    for u = x/σ <= _EM_LIMIT (beyond, the values are +inf: no bound).
    """
    from scipy.special import log_ndtr
    u = (m + 0.5) / sigma
    near = u <= _EM_LIMIT
    u = np.where(near, u, 1.0)
    log_tail = log_ndtr(-u)  # ln Φ(−u)
    mills = np.exp(log_tail + 0.5 * u * u + _HALF_LOG_2PI)
    h = (u * u - 1) * np.exp(-0.5 * u * u)
    variation = np.where(u >= math.sqrt(3.0), h, 2 * _H_PEAK - h)  # ∫_u^∞ |H′|, H = σ²·f″(σu)
    with np.errstate(divide="ignore"):
        log_rel = math.log(_POISSON) + np.log(variation) - log_tail - _HALF_LOG_2PI - 3 * math.log(sigma)
    remainder = np.exp(log_rel) * (1 + _MARGIN)
    shift = u / (24 * sigma * sigma * mills)  # −f′(x)/24 over √(2π)σΦ(−u)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_t_hi = log_tail + np.log1p(-shift + remainder)
        low = np.log1p(-shift - remainder)
        hazard = np.exp(-0.5 * (m / sigma) ** 2 - _HALF_LOG_2PI - math.log(sigma) - log_tail - low)
    log_t_hi = np.where(near, log_t_hi * (1 - _MARGIN) + _MARGIN, np.inf)
    hazard = np.where(near & np.isfinite(low), hazard * (1 + _MARGIN), np.inf)
    return log_t_hi, hazard


def _geometric(m: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """The same two bounds from S(m)/f(m) = Σ_{k>=1} e^{−bk − k²/2σ²} (b = m/σ², m >= 1) (§8.7 (b)).

    Above: drop e^{−k²/2σ²}: S/f <= 1/(e^b − 1). Below: that sum is E[e^{−K²/2σ²}]/(e^b − 1) for K geometric on
    {1, 2, …} with P[K = k] = p(1 − p)^{k−1}, p = 1 − e^{−b}, and Jensen gives E[e^{−K²/2σ²}] >= e^{−E}
    with E = E[K²]/(2σ²) = (2 − p)/(2σ²p²).
    """
    b = m / (sigma * sigma)
    p = -np.expm1(-b)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        big_e = (2 - p) / (2 * sigma * sigma * p * p)
        log_t_hi = -0.5 * (m / sigma) ** 2 - np.log(np.expm1(b)) - _HALF_LOG_2PI - math.log(sigma)
        hazard = np.expm1(b) * np.exp(big_e)
    log_t_hi = np.where(m >= 1, log_t_hi + _MARGIN * (1 + np.abs(log_t_hi)), np.inf)
    hazard = np.where(m >= 1, hazard * (1 + _MARGIN), np.inf)
    return log_t_hi, hazard


def _bounds(m: np.ndarray, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """The tighter of the two brackets: ln T_hi(m) and hazard_hi(m)."""
    t1, h1 = _poisson(m, sigma)
    t2, h2 = _geometric(m, sigma)
    return np.minimum(t1, t2), np.minimum(h1, h2)


def _mills_hi(z: np.ndarray) -> np.ndarray:
    """An upper bound on the Mills ratio M(z) = Φ(−z)/φ(z), decreasing in z.

    For z <= 30 evaluated (scipy's log_ndtr) with a margin; above, M(z) <= 1/z − 1/z³ + 3/z⁵ from
    M(z) = ∫_0^∞ e^{−zs} e^{−s²/2} ds and e^{−x} <= 1 − x + x²/2 (x >= 0).
    """
    from scipy.special import log_ndtr
    near = z <= 30.0
    zn = np.where(near, z, 0.0)
    evaluated = np.exp(log_ndtr(-zn) + 0.5 * zn * zn + _HALF_LOG_2PI) * (1 + _MARGIN)
    zf = np.where(near, 31.0, z)
    series = (1 / zf - 1 / zf**3 + 3 / zf**5) * (1 + _MARGIN)
    return np.where(near, evaluated, series)


def _block_starts(sigma: float, end: int) -> np.ndarray:
    """Starts of blocks partitioning the vertices 1..end−1, then `end`: widths about BLOCK_RATIO·max(n, σ)."""
    width = max(1, math.floor(BLOCK_RATIO * sigma))
    centre = np.arange(1, math.ceil(sigma) + 1, width, dtype=np.float64)
    count = math.ceil(math.log(end / sigma) / math.log1p(BLOCK_RATIO)) + 2
    outer = np.floor(sigma * np.exp(np.arange(count) * math.log1p(BLOCK_RATIO)))
    starts = np.unique(np.concatenate((centre, outer)))
    return np.append(starts[(starts >= 1) & (starts < end)], float(end))


def _centre_bound(sigma: float) -> float:
    """σ·d(0) with d(0) = 2g(0) = 2Φ⁻¹(½ + 1/(2Z)) <= 2Φ⁻¹(½ + t), t = 1/(2√(2π)σ) (Z >= √(2π)σ).

    z = Φ⁻¹(½ + t) satisfies t = ∫_0^z φ >= zφ(z), so z <= √(2π)·t·e^{z²/2}; iterated from z <= 1.
    """
    t = 1 / (2 * math.sqrt(2 * math.pi) * sigma)
    z = 1.0
    for _ in range(3):
        z = math.sqrt(2 * math.pi) * t * math.exp(z * z / 2) * (1 + _MARGIN)
    return 2 * z * sigma


def large_unit_mu(sigma: float) -> float:
    """An upper bound on μ_Z(σ, 1) for LARGE_SIGMA_MIN <= σ <= LARGE_SIGMA_MAX (docs/privacy.md §8.7).

    Vertex 0 in closed form (`_centre_bound`); vertices 1..M−1 (M = ⌈24σ²⌉) in blocks [a, b]:
    d(n) <= hazard_hi(b)·½(M_hi(g_lo(a − 1)) + M_hi(g_lo(a))) for every n in the block (the hazard term
    ln(1 + e^{−b²/2σ²}/S(b)) rises with n, the Mills ratio of g falls); vertices >= M by `tail_excess`.
    Rounded up.

    Example:
        >>> round(large_unit_mu(300.0) * 300.0, 4)
        1.0001
    """
    from scipy.special import ndtri_exp
    if not (isinstance(sigma, int | float) and math.isfinite(sigma)
            and LARGE_SIGMA_MIN <= sigma <= LARGE_SIGMA_MAX):
        raise ValueError(f"the large-sigma bound covers [{LARGE_SIGMA_MIN}, {LARGE_SIGMA_MAX}], got {sigma!r}")
    end = math.ceil(24 * sigma * sigma)
    starts = _block_starts(sigma, end)
    first, last = starts[:-1], starts[1:] - 1
    log_t_left, _ = _bounds(first - 1, sigma)
    log_t_right, _ = _bounds(first, sigma)
    _, hazard = _bounds(last, sigma)
    g_left = -ndtri_exp(np.minimum(log_t_left, math.log(0.5)))
    g_right = -ndtri_exp(np.minimum(log_t_right, math.log(0.5)))
    g_left -= _MARGIN * (1 + np.abs(g_left))
    g_right -= _MARGIN * (1 + np.abs(g_right))
    mills = 0.5 * (_mills_hi(g_left) + _mills_hi(g_right))
    blocks = float(np.max(np.log1p(hazard) * (1 + _MARGIN) * mills)) * sigma
    tail = 1 + tail_excess(sigma, end)
    c = max(_centre_bound(sigma), blocks, tail) * (1 + _MARGIN)
    return math.nextafter(c / sigma * (1 + 4 * 2.0**-53), math.inf)
