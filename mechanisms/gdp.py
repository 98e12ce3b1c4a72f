"""Gaussian differential privacy (Dong, Roth, Su 2019, "DRS19") for the `gdp` admit rule.

μ-GDP means the trade-off curve of every pair of neighbours lies above G_μ(α) = Φ(Φ⁻¹(1 − α) − μ). Here:
the μ of a pure ε-DP mechanism (`pure_mu`) and its inverse (`pure_epsilon`), and the μ a budget (ε, δ)
allows (`mu_for`), the inverse of δ(ε) of `gaussian.delta_of`. The discrete Gaussian is *not* given a μ:
its trade-off curve dips below G_{Δ/σ} (docs/privacy.md §5), so the `gdp` rule refuses it.
Every number is rounded in the safe direction: a mechanism's μ up, a budget's μ and an inverse ε down.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from mechanisms.gaussian import zcdp

_STANDARD = NormalDist()
_INV_SQRT_2PI = 1.0 / math.sqrt(2 * math.pi)
_MU_MARGIN = 1e-12  # relative: covers the few-ulp error of the Newton-refined inverse normal CDF
_DELTA_MARGIN = 1e-6  # relative: `delta_of` is within 2e-10 of the exact value for ε >= 1e-3 (tests)
MIN_BUDGET_EPSILON = 1e-3  # below it `delta_of` loses digits to cancellation: no GDP budget is computed


def _check(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ValueError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def _probit_above_half(t: float) -> float:
    """Φ⁻¹(1/2 + t) for 0 <= t < 1/2, to a few ulps: Newton on erf, which keeps relative precision near 0."""
    z = _STANDARD.inv_cdf(0.5 + t) if t > 1e-16 else t / _INV_SQRT_2PI
    for _ in range(3):
        z -= (0.5 * math.erf(z / math.sqrt(2.0)) - t) / (_INV_SQRT_2PI * math.exp(-z * z / 2))
    return z


def _probit_of_tail(log_p: float) -> float:
    """z >= 0 with Φ(−z) = p, from ln p (p <= 1/2, p >= 1e-300): Newton on ln Φ(−z), to a few ulps."""
    z = -_STANDARD.inv_cdf(math.exp(log_p))
    for _ in range(4):
        tail = 0.5 * math.erfc(z / math.sqrt(2.0))
        z += (math.log(tail) - log_p) * tail / (_INV_SQRT_2PI * math.exp(-z * z / 2))
    return z


def pure_mu(epsilon: float) -> float:
    """The μ with which every pure ε-DP mechanism is μ-GDP: μ = −2Φ⁻¹(1/(1 + e^ε)), rounded up.

    Pure ε-DP is f_{ε,0}-DP (DRS19 Prop. 2.5, after Wasserman–Zhou 2010), where f_{ε,0} is the piecewise
    linear trade-off curve with its kink at α* = 1/(1 + e^ε), f_{ε,0}(α*) = α*. G_μ is convex and agrees
    with f_{ε,0} at α = 0 and 1, so G_μ <= f_{ε,0} everywhere iff G_μ(α*) <= α*, i.e.
    Φ⁻¹(1 − α*) − μ <= Φ⁻¹(α*), i.e. μ >= −2Φ⁻¹(α*). This μ is the smallest that holds for *every* pure
    ε-DP mechanism (randomized response attains f_{ε,0}). For ε > 700 the tail bound
    Φ(−z) <= e^{−z²/2}/2 gives the cruder μ <= 2√(2ε), used instead.

    Example:
        >>> round(pure_mu(0.1), 6), round(pure_mu(1.0), 6)
        (0.125309, 1.232035)
        >>> pure_mu(0.0)
        0.0
    """
    _check("epsilon", epsilon, allow_zero=True)
    if epsilon == 0:
        return 0.0
    if epsilon <= 2.0:
        z = _probit_above_half(0.5 * math.tanh(epsilon / 2))  # 1/2 − 1/(1+e^ε) = tanh(ε/2)/2
    elif epsilon <= 700.0:
        z = _probit_of_tail(-epsilon - math.log1p(math.exp(-epsilon)))  # ln(1/(1+e^ε))
    else:
        z = math.sqrt(2 * epsilon)
    return math.nextafter(2 * z * (1 + _MU_MARGIN), math.inf)


def pure_epsilon(mu: float) -> float:
    """The largest ε (rounded down) with `pure_mu(ε) <= mu`: ε = ln(Φ(μ/2)/Φ(−μ/2)), then checked.

    Example:
        >>> e = pure_epsilon(0.5)
        >>> round(e, 6), pure_mu(e) <= 0.5
        (0.400078, True)
    """
    _check("mu", mu, allow_zero=True)
    if mu == 0:
        return 0.0
    tail = 0.5 * math.erfc(mu / (2 * math.sqrt(2.0)))  # Φ(−μ/2)
    closed = math.log1p(-tail) - math.log(tail) if tail > 0 else mu * mu / 8
    lo, hi = closed * (1 - 1e-9), closed * (1 + 1e-9)
    while pure_mu(lo) > mu:
        lo, hi = lo * (1 - 1e-6), lo
    if pure_mu(hi) <= mu:
        return hi
    while True:  # invariant: pure_mu(lo) <= mu < pure_mu(hi)
        mid = lo + (hi - lo) / 2
        if not lo < mid < hi:
            return lo
        lo, hi = (mid, hi) if pure_mu(mid) <= mu else (lo, mid)


def mu_for(epsilon: float, delta: float) -> float:
    """The largest μ (bisection, rounded down) whose GDP curve passes (ε, δ): `delta_of(ε, μ) <= δ`.

    μ-GDP implies (ε, δ(ε))-DP for every ε (DRS19 Cor. 2.13), and δ(ε) rises with μ, so a history that is
    μ-GDP with μ <= `mu_for(ε, δ)` is (ε, δ)-DP. The target is shrunk by a relative 1e-6, far above the
    evaluation error of `delta_of` for ε >= 1e-3 (checked against mpmath in tests/mechanisms/test_gdp.py); smaller
    budgets are refused.

    Example:
        >>> m = mu_for(1.0, 1e-6)
        >>> round(m, 6), zcdp.delta_of(1.0, m) <= 1e-6
        (0.236704, True)
    """
    _check("epsilon", epsilon)
    if epsilon < MIN_BUDGET_EPSILON:
        raise ValueError(f"a GDP budget needs epsilon >= {MIN_BUDGET_EPSILON}, got {epsilon!r}")
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    target = delta * (1 - _DELTA_MARGIN)

    def ok(mu: float) -> bool:
        return zcdp.delta_of(epsilon, mu) <= target

    lo, hi = 0.0, 1.0
    while ok(hi):
        lo, hi = hi, 2 * hi
    while True:
        mid = lo + (hi - lo) / 2
        if not lo < mid < hi:
            return lo
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
