"""The f-DP trade-off curve of a history under the rule in force, and of the whole budget (DRS19 §2).

A curve is β = f(α): the smallest type II error of any test with type I error α telling the analyst's
data from a neighbour's. Each rule's state is a family of (ε, δ) guarantees, and (ε, δ)-DP is
f_{ε,δ}-DP with f_{ε,δ}(α) = max(0, 1 − δ − e^ε α, e^{−ε}(1 − δ − α)) (DRS19 Prop. 2.5), so the curve drawn
is the upper envelope of f_{ε,δ} over the family — a valid lower bound on the true trade-off, and exactly
G_μ for μ-GDP without partition selection (the envelope of its δ(ε) curve, DRS19 Prop. 2.12).
    basic  one pair (Σε, Σδ)
    zcdp   (ε(δ'), δ' + δ_sel) for δ' on a grid (CKS20 conversion), δ_sel the selection δ spent
    gdp    G_μ, or (ε, δ_μ(ε) + δ_sel) on an ε grid when partition selection spent δ_sel > 0
Curves are pictures of guarantees for reports (docs/privacy.md §5.6): none of them is an admit rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from accountant.filter import Accounting, Budget, Usage, capacity
from mechanisms.gaussian import zcdp

_NORMAL = NormalDist()
ALPHAS: tuple[float, ...] = tuple(sorted({*(10.0 ** (-k / 4) for k in range(4, 33)), *(i / 40 for i in range(41))}))
REPORT_DELTAS = (1e-3, 1e-5, 1e-7, 1e-9)


@dataclass(frozen=True, slots=True)
class Curve:
    """β at each α of `ALPHAS`, and the (ε, δ) pairs the curve implies at a few δ (ε = inf: none)."""

    beta: tuple[float, ...]
    pairs: tuple[tuple[float, float], ...]


def _f(epsilon: float, delta: float, alpha: float) -> float:
    """f_{ε,δ}(α) (DRS19 Prop. 2.5), rounded down a little (a curve must not claim more privacy)."""
    if epsilon > 700:
        return max(0.0, 1 - delta - alpha) if alpha == 0 else 0.0
    value = max(0.0, 1 - delta - math.exp(epsilon) * alpha, math.exp(-epsilon) * (1 - delta - alpha))
    return max(0.0, value * (1 - 1e-12))


def _envelope(pairs: list[tuple[float, float]]) -> tuple[float, ...]:
    return tuple(max((_f(e, d, a) for e, d in pairs if d < 1), default=0.0) for a in ALPHAS)


def _gaussian_curve(mu: float) -> tuple[float, ...]:
    """G_μ(α) = Φ(Φ⁻¹(1 − α) − μ), rounded down a little."""
    out = []
    for a in ALPHAS:
        if a <= 0:
            out.append(1.0)
        elif a >= 1:
            out.append(0.0)
        else:
            out.append(max(0.0, _NORMAL.cdf(_NORMAL.inv_cdf(1 - a) - mu) * (1 - 1e-12)))
    return tuple(out)


def _state(rule: str, amount: float, selection: float, conversion: float) -> Curve:
    """The curve of a rule's state: ε (basic, with δ = `selection`), ρ or μ with δ_sel = `selection`."""
    if rule == "basic":
        return Curve(_envelope([(amount, selection)]), ((amount, selection),))
    deltas = [10.0 ** (-k / 2) for k in range(2, 40)]
    if rule == "zcdp":
        def epsilon_at(d: float) -> float:
            return zcdp.epsilon_from_rho(amount, d) if amount > 0 else 0.0
    else:
        def epsilon_at(d: float) -> float:
            return zcdp.epsilon_of(amount, d) if amount > 0 else 0.0
    exact = rule == "gdp" and selection == 0
    beta = _gaussian_curve(amount) if exact else _envelope([(epsilon_at(d), d + selection) for d in deltas])
    pairs = tuple(
        (epsilon_at(d - selection) if d > selection else math.inf, d)
        for d in sorted({*REPORT_DELTAS, conversion + selection}, reverse=True) if d > 0
    )
    return Curve(beta, pairs)


def curves(used: Usage, budget: Budget, accounting: Accounting) -> tuple[Curve, Curve]:
    """(history, budget): the trade-off curves of the spent history and of the whole budget under the rule.

    Example:
        >>> from accountant.events import GaussianEvent
        >>> from accountant.filter import Entry, usage
        >>> history = [Entry(GaussianEvent(1, 20.0), 0.25, 1e-7)] * 16
        >>> spent, whole = curves(usage(history, "gdp"), Budget(1.0, 1e-6), Accounting("gdp", 0.0))
        >>> i = ALPHAS.index(0.1)
        >>> round(spent.beta[i], 3), round(whole.beta[i], 3), spent.beta[i] >= whole.beta[i]
        (0.86, 0.852, True)
    """
    rule = accounting.rule
    limit = capacity(budget, accounting)
    if rule == "basic":
        history = _state("basic", float(used.amount), float(used.delta), 0.0)
        return history, _state("basic", budget.epsilon, budget.delta, 0.0)
    amount = math.sqrt(float(used.amount)) if rule == "gdp" else float(used.amount)
    history = _state(rule, amount, float(used.delta), limit.conversion_delta)
    return history, _state(rule, limit.amount, limit.delta, limit.conversion_delta)
