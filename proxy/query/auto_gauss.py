"""Discrete Gaussian noise at an automatically chosen bound (docs/privacy.md §10.6): the query is charged its
Gaussian events at the declared limits, GaussianEvent(Δ_L, σ_L); at the chosen bounds its sensitivity is
Δ_k <= Δ_L, and the noise run is the σ_k that no rule reads as more than the charged event:

- zCDP (rules basic and zcdp): ρ = Δ²/(2σ²) is a function of Δ/σ, so σ_k = Δ_k/√(2ρ_L), rounded up
  (`gaussian.sigma_for`), has ρ(Δ_k, σ_k) <= ρ_L, the ρ the ledger computes from the event;
- μ-GDP (rule gdp and the PLD report): μ = μ_Z(σ, 1)·Δ is not a function of Δ/σ (μ_Z(σ, 1)·σ falls as σ
  grows), so σ_k is searched upward from there until the proven μ(Δ_k, σ_k) <= μ(Δ_L, σ_L)
  (`discrete_gaussian.sigma_for`, which checks `mu` itself).

σ_k is the larger of the two, so the event charged at the limits bounds the release under every rule, and
re-accounting it (accountant/loss.py) needs nothing of k. Where σ_L is outside the discrete Gaussian's proven
range no μ is charged by anyone (the gdp rule refuses such a σ), and only the zCDP condition applies.

Example:
    >>> sigma = sigma_at(3.0, 30.0, 60.0)
    >>> round(sigma, 4), gaussian.rho(3.0, sigma) <= gaussian.rho(30.0, 60.0)
    (6.0069, True)
    >>> discrete_gaussian.mu(3.0, sigma) <= discrete_gaussian.mu(30.0, 60.0)
    True
"""

from __future__ import annotations

import math

from mechanisms import discrete_gaussian, gaussian


def proven(sigma: float) -> bool:
    """Whether the discrete Gaussian's μ-GDP bound is proven at `sigma` (grid units)."""
    return discrete_gaussian.SIGMA_MIN <= sigma <= discrete_gaussian.SIGMA_MAX


def sigma_at(sensitivity: float, limit_sensitivity: float, limit_sigma: float) -> float:
    """The σ for L2 sensitivity Δ_k = `sensitivity` whose ρ and proven μ are at most those of the charged
    GaussianEvent(`limit_sensitivity`, `limit_sigma`); Δ_k <= Δ_L and both > 0.

    Example:
        >>> sigma_at(20.0, 20.0, 2.0) >= 2.0, round(sigma_at(1.0, 1000.0, 2000.0), 4)  # not 2: μ_Z(σ, 1)·σ
        (True, 2.0207)
    """
    assert 0 < sensitivity <= limit_sensitivity, (sensitivity, limit_sensitivity)
    sigma = gaussian.sigma_for(sensitivity, gaussian.rho(limit_sensitivity, limit_sigma))
    if proven(limit_sigma):
        target = discrete_gaussian.mu(limit_sensitivity, limit_sigma)
        sigma = max(sigma, discrete_gaussian.sigma_for(sensitivity, target))
        # the max of the two need not fit μ unless μ_Z(σ, 1) falls with σ: check `mu` itself, and raise σ (ρ
        # only falls) until it fits; μ_Z(σ, 1)·σ -> 1 as σ grows (§8), so the loop ends
        while discrete_gaussian.mu(sensitivity, sigma) > target:
            sigma = max(math.nextafter(sigma * (1 + 2.0**-20), math.inf), sigma)
    assert gaussian.rho(sensitivity, sigma) <= gaussian.rho(limit_sensitivity, limit_sigma)
    return sigma
