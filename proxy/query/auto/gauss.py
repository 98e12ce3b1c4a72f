"""Discrete Gaussian noise at an automatically chosen bound (docs/privacy.md §10.3): the query is charged its
Gaussian events at the declared limits, GaussianEvent(Δ_L, σ_L); at the chosen bounds its sensitivity is
Δ_k <= Δ_L, and the noise run is the σ_k that no rule reads as more than the charged event:

- zCDP (rules basic and zcdp): ρ = Δ²/(2σ²) is a function of Δ/σ, so σ_k = Δ_k/√(2ρ_L), rounded up
  (`gaussian.sigma_for`), has ρ(Δ_k, σ_k) <= ρ_L, the ρ the ledger computes from the event;
- μ-GDP (rule gdp and the PLD report): μ = μ_Z(σ, 1)·Δ is not a function of Δ/σ (μ_Z(σ, 1)·σ falls as σ
  grows), so σ_k is searched upward from there, on a fine geometric grid, until the proven μ(Δ_k, σ_k) <=
  μ(Δ_L, σ_L), checked by evaluating `discrete_gaussian.mu` itself.

σ_k is the larger of the two, so the event charged at the limits bounds the release under every rule, and
re-accounting it (accountant/loss.py) needs nothing of k. Where σ_L is outside the discrete Gaussian's proven
range no μ is charged by anyone (the gdp rule refuses such a σ), and only the zCDP condition applies.

Example:
    >>> sigma = sigma_at(3.0, 30.0, 60.0)
    >>> round(sigma, 4), zcdp.rho(3.0, sigma) <= zcdp.rho(30.0, 60.0)
    (6.0203, True)
    >>> gdp_bound.mu(3.0, sigma) <= gdp_bound.mu(30.0, 60.0)
    True
"""

from __future__ import annotations

import math

from mechanisms.gaussian import gdp_bound, zcdp


def proven(sigma: float) -> bool:
    """Whether the discrete Gaussian's μ-GDP bound is proven at `sigma` (grid units)."""
    return gdp_bound.SIGMA_MIN <= sigma <= gdp_bound.SIGMA_MAX


GRID = 256  # σ_k is a point 2^(j/256): its certified μ_Z is computed once per process (lru_cache), not per query


def grid_up(sigma: float) -> float:
    """The smallest 2^(j/GRID) >= `sigma` (at most 0.27 % more noise).

    Example:
        >>> grid_up(1.0), grid_up(2.0), round(grid_up(1.001), 6)
        (1.0, 2.0, 1.002711)
    """
    j = math.ceil(math.log2(sigma) * GRID)
    while 2.0 ** (j / GRID) < sigma:
        j += 1
    return 2.0 ** (j / GRID)


def sigma_at(sensitivity: float, limit_sensitivity: float, limit_sigma: float) -> float:
    """The σ for L2 sensitivity Δ_k = `sensitivity` whose ρ and proven μ are at most those of the charged
    GaussianEvent(`limit_sensitivity`, `limit_sigma`); Δ_k <= Δ_L and both > 0.

    From σ_ρ on the grid, up the grid while the certified μ(Δ_k, σ) exceeds μ_L; σ_L itself always fits (Δ_k <=
    Δ_L), so it ends there at the latest. The guarantee rests on evaluating `mu` at the σ returned, not on any
    monotonicity of c(σ). On the grid, the few σ a query shape reaches are certified once per process: the
    certificate above 256 grid units takes tenths of a second.

    Example:
        >>> sigma_at(20.0, 20.0, 2.0), round(sigma_at(1.0, 1000.0, 2000.0), 4)  # not 2: μ_Z(σ, 1)·σ falls with σ
        (2.0, 2.0218)
    """
    assert 0 < sensitivity <= limit_sensitivity, (sensitivity, limit_sensitivity)
    sigma = grid_up(zcdp.sigma_for(sensitivity, zcdp.rho(limit_sensitivity, limit_sigma)))
    if not proven(limit_sigma):  # no rule charges a μ for the event: only ρ binds
        return sigma
    target = gdp_bound.mu(limit_sensitivity, limit_sigma)
    while sigma < limit_sigma:
        if sigma >= gdp_bound.SIGMA_MIN and gdp_bound.mu(sensitivity, sigma) <= target:
            return sigma
        sigma = grid_up(math.nextafter(sigma, math.inf))
    return limit_sigma  # ρ(Δ_k, σ_L) <= ρ_L and μ(Δ_k, σ_L) <= μ_L, as Δ_k <= Δ_L
