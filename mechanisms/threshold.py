"""Private partition selection: release a group iff its distinct-unit count plus discrete Laplace (or, for
Gaussian queries, discrete Gaussian) noise reaches a threshold T. With Laplace noise its cost is (ε, δ) with
ε = max_groups / scale (`laplace.epsilon`) and δ below.

Why δ: a unit touches at most `max_groups` groups. A group that exists only because of that unit has
count 1, so it appears with probability P[1 + Z >= T] = P[Z >= T − 1] and never without the unit; each
such group is a (0, P[Z >= T − 1])-DP release, each shared group a (1/scale, 0)-DP one (counts move by 1),
and basic composition over the at most `max_groups` touched groups gives δ = max_groups · P[Z >= T − 1].
For discrete Laplace noise and n >= 0: P[Z >= n] = Σ_{k>=n} (1−q)/(1+q) q^k = q^n/(1+q), q = e^(−1/scale).
"""

from __future__ import annotations

import math

from mechanisms import search

_EPS = 2.0**-52


def _check(max_groups: int, scale: float) -> None:
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
        raise ValueError(f"max_groups must be an integer >= 1, got {max_groups!r}")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")


def delta_of_threshold(max_groups: int, scale: float, threshold: int) -> float:
    """δ = max_groups · e^(−(T−1)/scale) / (1 + e^(−1/scale)), rounded up (capped at 1).

    Computed as exp(−x) with x = (T−1)/scale + ln(1 + e^(−1/scale)); x carries a few ulps of relative
    error, so the result is raised by a relative 8·ulp·(x + 2) before rounding up.

    Example:
        >>> delta_of_threshold(1, 1.0, 2) <= math.exp(-1) / (1 + math.exp(-1)) * (1 + 1e-12)
        True
        >>> f"{delta_of_threshold(4, 2.0, 40):.6e}"
        '8.461134e-09'
    """
    _check(max_groups, scale)
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
        raise ValueError(f"threshold must be an integer >= 1, got {threshold!r}")
    x = (threshold - 1) / scale + math.log1p(math.exp(-1.0 / scale))
    value = max_groups * math.exp(-x) * (1 + 8 * _EPS * (x + 2))
    return min(1.0, math.nextafter(value, math.inf))


def threshold_for(max_groups: int, scale: float, delta: float) -> int:
    """The smallest integer T >= 2 with `delta_of_threshold(max_groups, scale, T) <= delta`.

    Example:
        >>> threshold_for(4, 2.0, 1e-8)
        40
        >>> delta_of_threshold(4, 2.0, 39) > 1e-8
        True
    """
    _check(max_groups, scale)
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")

    def ok(threshold: int) -> bool:
        return delta_of_threshold(max_groups, scale, threshold) <= delta

    # closed-form guess, then an integer search (stepping by 1 would crawl for large scales)
    guess = 1 + scale * (math.log(max_groups) - math.log(delta) - math.log1p(math.exp(-1.0 / scale)))
    return search.smallest_int(ok, 1, max(2, math.ceil(guess)))  # T = 1 never qualifies: T >= 2 by contract


# --- Gaussian partition selection ---------------------------------------------------------------------


def _gaussian_upper_tail(n: int, sigma: float) -> float:
    """An upper bound on P[Z >= n] for Z ~ N_Z(0, σ²) and integer n >= 1: Σ_{j>=n} W_j / Σ_j W_j with
    W_j = e^{−j²/(2σ²)}, the numerator bounded above and the normaliser below.

    Numerator: for σ <= 1e4 the terms up to j = n + ⌈40σ⌉ + 64 (math.fsum), then W/(1 − q) for the rest,
    q = e^{−(2j+1)/(2σ²)} bounding the ratio of successive terms there; above, W_n + ∫_n^∞ e^{−x²/(2σ²)} dx.
    Normaliser: the larger of √(2π)σ (Poisson summation: Σ_j W_j = √(2π)σ Σ_l e^{−2π²σ²l²}) and the partial
    sum over |j| <= ⌈40σ⌉ + 2. Each exp carries a relative error below 1e-13 (exponents up to 745): the
    quotient is raised by a relative 1e-11 and rounded up.
    """
    two_var = 2 * sigma * sigma
    floor_norm = math.sqrt(2 * math.pi) * sigma
    if sigma <= 1e4:
        last = n + math.ceil(40 * sigma) + 64
        numerator = math.fsum(math.exp(-(j * j) / two_var) for j in range(n, last))
        numerator += math.exp(-(last * last) / two_var) / -math.expm1(-(2 * last + 1) / two_var)
        span = math.ceil(40 * sigma) + 2
        partial = 1 + 2 * math.fsum(math.exp(-(j * j) / two_var) for j in range(1, span + 1))
        norm = max(floor_norm, partial)
    else:
        numerator = math.exp(-(n * n) / two_var) + floor_norm * 0.5 * math.erfc(n / (sigma * math.sqrt(2)))
        norm = floor_norm
    return min(1.0, math.nextafter(numerator / norm * (1 + 1e-11), math.inf))


def gaussian_delta_of_threshold(max_groups: int, sigma: float, threshold: int) -> float:
    """δ = max_groups · P[Z >= T − 1] for discrete Gaussian noise Z of `sigma`, rounded up (capped at 1).

    As for Laplace noise (module docstring): a group only the added unit creates has count 1 and is released
    iff 1 + Z >= T; a unit creates at most `max_groups` of them (union bound). Google's DP libraries use the
    same rule with 1 − (1 − P[Z >= T − 1])^L0, which this bounds from above.

    Example:
        >>> f"{gaussian_delta_of_threshold(1, 2.0, 12):.4e}"
        '5.7025e-08'
    """
    _check(max_groups, sigma)
    if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 2:
        raise ValueError(f"threshold must be an integer >= 2, got {threshold!r}")
    return min(1.0, math.nextafter(max_groups * _gaussian_upper_tail(threshold - 1, sigma), math.inf))


def gaussian_threshold_for(max_groups: int, sigma: float, delta: float) -> int:
    """The smallest integer T >= 2 with `gaussian_delta_of_threshold(max_groups, sigma, T) <= delta`.

    Example:
        >>> gaussian_threshold_for(1, 2.0, 1e-6), gaussian_delta_of_threshold(1, 2.0, 10) > 1e-6
        (11, True)
    """
    _check(max_groups, sigma)
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")

    def ok(threshold: int) -> bool:
        return gaussian_delta_of_threshold(max_groups, sigma, threshold) <= delta

    guess = 2 + sigma * math.sqrt(2 * max(0.0, math.log(max_groups / delta)))
    return search.smallest_int(ok, 1, max(2, math.ceil(guess)))
