"""The admit rules: privacy filters over the charge history, exact and rounded in the safe direction.

Each dataset fixes one rule in its policy (`Accounting`); budgets stay (ε, δ) in the analyst's terms. A rule
turns a budget into a `Capacity` in its own additive currency and each charge into a cost in that currency:

    basic  Σε <= ε and Σδ <= δ                                  Rogers, Roth, Ullman, Vadhan 2016
    zcdp   Σρ <= ρ(ε, δ_conv) and Σδ_sel <= δ_sel               Feldman–Zrnic 2021; Whitehouse et al. 2023
    gdp    Σμ² <= μ(ε, δ_conv)² and Σδ_sel <= δ_sel             Smith–Thakurta 2022

δ_sel = share·δ is reserved, in advance, for private partition selection (the δ of threshold events) and
δ_conv = δ − δ_sel is where ρ or μ is converted to ε. Each is a valid stopping rule under fully adaptive
composition (docs/privacy.md §5). Sums are exact (Fractions) over costs rounded up; capacities round down.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Literal, get_args

from accountant import loss
from accountant.cell_scope import CellScope
from accountant.events import Event
from mechanisms import gdp
from mechanisms.gaussian import zcdp
from mechanisms.rounding import down as _down

Rule = Literal["basic", "zcdp", "gdp"]
RULES: tuple[Rule, ...] = get_args(Rule)
DEFAULT_SELECTION_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Budget:
    """An analyst's total allowance on one dataset: (ε, δ)-DP over all of their queries.

    `exact` is the (ε, δ) as written in decimal, when known (the policy's digits); `epsilon` and `delta` are
    then the largest floats at or below them. Under `basic` the filter compares the exact sums of the
    charges with `exact`, so charges whose written decimals add up to the budget fit (0.25 + 0.05 in 0.3),
    which the floats alone would refuse by an ulp (docs/privacy.md §8.6).

    Example:
        >>> from fractions import Fraction
        >>> Budget(0.3, 1e-6, exact=(Fraction(3, 10), Fraction(1, 10**6))).limits()
        (Fraction(3, 10), Fraction(1, 1000000))
        >>> Budget(0.5, 0.0).limits()
        (Fraction(1, 2), Fraction(0, 1))
    """

    epsilon: float
    delta: float
    exact: tuple[Fraction, Fraction] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"budget epsilon must be finite and > 0, got {self.epsilon!r}")
        if not (math.isfinite(self.delta) and 0 <= self.delta < 1):
            raise ValueError(f"budget delta must be in [0, 1), got {self.delta!r}")
        if self.exact is not None and (_down(self.exact[0]), _down(self.exact[1])) != (self.epsilon, self.delta):
            raise ValueError(f"a budget's floats must be the largest at or below its exact values, got {self!r}")

    def limits(self) -> tuple[Fraction, Fraction]:
        """The exact (ε, δ) that basic composition must stay within: the written decimals, else the floats."""
        return self.exact if self.exact is not None else (Fraction(self.epsilon), Fraction(self.delta))


@dataclass(frozen=True, slots=True)
class Spend:
    """(ε, δ) spent so far (or still available), under basic composition."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        for name, value in (("epsilon", self.epsilon), ("delta", self.delta)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"spent {name} must be finite and >= 0, got {value!r}")


def total(charges: Iterable[tuple[float, float]]) -> Spend:
    """Σε and Σδ of the charges (math.fsum, raised to the next float if it rounded below the exact sum).

    Example:
        >>> total([(0.5, 1e-6), (0.25, 0.0)])
        Spend(epsilon=0.75, delta=1e-06)
        >>> total([])
        Spend(epsilon=0.0, delta=0.0)
    """
    pairs = tuple(charges)

    def column(i: int) -> float:
        values = tuple(pair[i] for pair in pairs)
        rounded = math.fsum(values)
        # fsum is correctly rounded, so the sign of fsum(values − rounded) is the sign of the exact residual:
        # the exact check of Fraction arithmetic at a fortieth of its cost (10k charges: ~2 ms, not ~80 ms)
        residual = math.fsum((*values, -rounded))
        return rounded if residual <= 0 else math.nextafter(rounded, math.inf)

    return Spend(column(0), column(1))


def admits(spent: Spend, epsilon: float, delta: float, budget: Budget) -> bool:
    """Whether a charge of (ε, δ) fits: spent ε + ε <= budget ε and spent δ + δ <= budget δ, exactly.

    Basic composition is a valid privacy filter under fully adaptive composition, where each query and
    its (ε, δ) are chosen after seeing earlier answers (Rogers, Roth, Ullman, Vadhan 2016, "Privacy
    Odometers and Filters: Pay-as-you-Go Composition", the basic composition filter), so this rule may
    stop an analyst at any point (docs/privacy.md §5).

    Example:
        >>> budget = Budget(1.0, 1e-6)
        >>> admits(Spend(0.75, 0.0), 0.25, 1e-6, budget)
        True
        >>> admits(Spend(0.75, 0.0), 0.5, 0.0, budget)
        False
    """
    for name, value in (("epsilon", epsilon), ("delta", delta)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"requested {name} must be finite and >= 0, got {value!r}")
    epsilon_limit, delta_limit = budget.limits()
    epsilon_fits = Fraction(spent.epsilon) + Fraction(epsilon) <= epsilon_limit
    delta_fits = Fraction(spent.delta) + Fraction(delta) <= delta_limit
    return epsilon_fits and delta_fits


def remaining(spent: Spend, budget: Budget) -> Spend:
    """What is left of the budget, rounded down and clipped at 0.

    Example:
        >>> remaining(Spend(0.75, 0.0), Budget(1.0, 1e-6))
        Spend(epsilon=0.25, delta=1e-06)
        >>> remaining(Spend(2.0, 0.0), Budget(1.0, 0.0))
        Spend(epsilon=0.0, delta=0.0)
    """
    epsilon_limit, delta_limit = budget.limits()
    left = (epsilon_limit - Fraction(spent.epsilon), delta_limit - Fraction(spent.delta))
    return Spend(*(max(0.0, _down(x)) for x in left))


# --- the rules ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Accounting:
    """A dataset's admit rule and, for zcdp and gdp, the share of every budget's δ kept for partition
    selection. Fixed in the policy before the first query: switching rules is covered by no theorem."""

    rule: Rule = "basic"
    selection_share: float = DEFAULT_SELECTION_SHARE

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"accounting must be one of {', '.join(RULES)}, got {self.rule!r}")
        share = self.selection_share
        if isinstance(share, bool) or not (isinstance(share, int | float) and 0 <= share < 1):
            raise ValueError(f"selection_delta_share must be a number in [0, 1), got {share!r}")


BASIC = Accounting()


@dataclass(frozen=True, slots=True)
class Entry:
    """One charge as the filter sees it: the exact event, its (ε, δ) under basic composition, and the
    cells it could touch (None: every privacy unit; see cells.py)."""

    event: Event
    epsilon: float
    delta: float
    scope: CellScope | None = None


@dataclass(frozen=True, slots=True)
class Capacity:
    """A budget in a rule's currency: ε (basic), ρ (zcdp) or μ (gdp); δ (basic) or the δ reserved for
    partition selection (zcdp, gdp); and the δ at which ρ or μ converts to ε (0 under basic)."""

    rule: Rule
    amount: float
    delta: float
    conversion_delta: float
    exact: tuple[Fraction, Fraction] | None = field(default=None, repr=False)  # basic: the budget's decimals

    def limits(self) -> tuple[Fraction, Fraction]:
        """What the exact sums may reach: Σε (exact decimal under basic when known), Σρ or Σμ²; and Σδ."""
        if self.exact is not None:
            return self.exact
        return additive(self.amount, self.rule), Fraction(self.delta)


def split_delta(delta: float, share: float) -> tuple[float, float]:
    """(δ_sel, δ_conv): δ_sel = share·δ rounded down, δ_conv = δ − δ_sel rounded down, so they add to <= δ.

    Example:
        >>> split_delta(1e-6, 0.5)
        (5e-07, 5e-07)
        >>> split_delta(1e-6, 0.0)
        (0.0, 1e-06)
    """
    selection = _down(Fraction(delta) * Fraction(share))
    return selection, _down(Fraction(delta) - Fraction(selection))


@lru_cache(maxsize=1024)
def capacity(budget: Budget, accounting: Accounting) -> Capacity:
    """The budget in the rule's currency, rounded down.

    zcdp: the largest ρ whose conversion (CKS20 Prop. 12) at δ_conv is within ε (`gaussian.rho_for`).
    gdp: the largest μ with δ_μ(ε) <= δ_conv (DRS19 Cor. 2.13; `gdp.mu_for`).

    Example:
        >>> capacity(Budget(1.0, 1e-6), BASIC)
        Capacity(rule='basic', amount=1.0, delta=1e-06, conversion_delta=0.0)
        >>> c = capacity(Budget(1.0, 1e-6), Accounting("zcdp", 0.0))
        >>> round(c.amount, 5), c.delta, c.conversion_delta
        (0.02436, 0.0, 1e-06)
    """
    if accounting.rule == "basic":
        return Capacity("basic", budget.epsilon, budget.delta, 0.0, budget.exact)
    selection, conversion = split_delta(budget.delta, accounting.selection_share)
    if conversion <= 0:
        raise ValueError(f"accounting = {accounting.rule!r} needs a budget delta > 0, got {budget.delta!r}")
    if accounting.rule == "zcdp":
        amount = zcdp.rho_for(budget.epsilon, conversion)
    else:
        amount = gdp.mu_for(budget.epsilon, conversion)
    return Capacity(accounting.rule, amount, selection, conversion)


@lru_cache(maxsize=65536)
def _event_cost(event: Event, rule: Rule) -> tuple[float, float]:
    return loss.approximate_rho(event) if rule == "zcdp" else loss.approximate_mu(event)


def cost(entry: Entry, rule: Rule) -> tuple[float, float]:
    """A charge in the rule's currency, rounded up: (ε, δ), (ρ, δ_sel) or (μ, δ_sel).

    Raises:
        UnsupportedEvent: the rule cannot account for the event (the discrete Gaussian under gdp).

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> entry = Entry(LaplaceEvent(1, 10.0), 0.1, 0.0)
        >>> cost(entry, "basic"), cost(entry, "zcdp")
        ((0.1, 0.0), (0.005000000000000001, 0.0))
    """
    if rule == "basic":
        return entry.epsilon, entry.delta
    return _event_cost(entry.event, rule)


def additive(amount: float, rule: Rule) -> Fraction:
    """What adds up under the rule: ε, ρ, or μ² (GDP composes as √Σμᵢ², DRS19 Cor. 3.3)."""
    return Fraction(amount) ** 2 if rule == "gdp" else Fraction(amount)


@dataclass(frozen=True, slots=True)
class Usage:
    """The exact sum of a history's costs under one rule: Σε, Σρ or Σμ², and Σδ (or Σδ_sel)."""

    rule: Rule
    amount: Fraction
    delta: Fraction


def usage(entries: Iterable[Entry], rule: Rule) -> Usage:
    """The exact total cost of `entries` under `rule` (each cost rounded up first).

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> used = usage([Entry(LaplaceEvent(1, 8.0), 0.125, 0.0)] * 2, "gdp")
        >>> used.rule, float(used.delta), round(float(used.amount), 6)
        ('gdp', 0.0, 0.04906)
    """
    amount, delta = Fraction(0), Fraction(0)
    for entry in entries:
        value, extra = cost(entry, rule)
        amount += additive(value, rule)
        delta += Fraction(extra)
    return Usage(rule, amount, delta)


def fits(used: Usage, entry: Entry, limit: Capacity) -> bool:
    """Whether the history's usage plus the entry's cost stays within the capacity, exactly.

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> limit = capacity(Budget(1.0, 1e-6), Accounting("zcdp"))
        >>> query = Entry(LaplaceEvent(1, 10.0), 0.1, 0.0)   # ε = 0.1: ρ = 0.005
        >>> [fits(usage([query] * k, "zcdp"), query, limit) for k in (3, 4)]
        [True, False]
    """
    if used.rule != limit.rule:
        raise ValueError(f"usage under {used.rule!r} checked against a {limit.rule!r} capacity")
    amount, delta = cost(entry, limit.rule)
    amount_limit, delta_limit = limit.limits()
    return used.amount + additive(amount, limit.rule) <= amount_limit and used.delta + Fraction(delta) <= delta_limit
