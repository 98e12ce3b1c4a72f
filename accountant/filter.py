"""The admit rule: a privacy filter under basic composition, exact and rounded in the safe direction.

Budgets are (ε, δ); a charge is admitted iff the spent ε and δ plus the request stay within them. Sums
are taken exactly (Fractions), totals are rounded up and what remains is rounded down.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction


def _down(exact: Fraction) -> float:
    nearest = float(exact)
    return nearest if Fraction(nearest) <= exact else math.nextafter(nearest, -math.inf)


@dataclass(frozen=True, slots=True)
class Budget:
    """An analyst's total allowance on one dataset: (ε, δ)-DP over all of their queries."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise ValueError(f"budget epsilon must be finite and > 0, got {self.epsilon!r}")
        if not (math.isfinite(self.delta) and 0 <= self.delta < 1):
            raise ValueError(f"budget delta must be in [0, 1), got {self.delta!r}")


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
        exact = sum(map(Fraction, values), Fraction(0))
        return rounded if Fraction(rounded) >= exact else math.nextafter(rounded, math.inf)

    return Spend(column(0), column(1))


def admits(spent: Spend, epsilon: float, delta: float, budget: Budget) -> bool:
    """Whether a charge of (ε, δ) fits: spent ε + ε <= budget ε and spent δ + δ <= budget δ, exactly.

    Basic composition is a valid privacy filter under fully adaptive composition, where each query and
    its (ε, δ) are chosen after seeing earlier answers (Rogers, Roth, Ullman, Vadhan 2016, "Privacy
    Odometers and Filters: Pay-as-you-Go Composition", the basic composition filter), so this rule may
    stop an analyst at any point (DESIGN.md §4).

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
    epsilon_fits = Fraction(spent.epsilon) + Fraction(epsilon) <= Fraction(budget.epsilon)
    delta_fits = Fraction(spent.delta) + Fraction(delta) <= Fraction(budget.delta)
    return epsilon_fits and delta_fits


def remaining(spent: Spend, budget: Budget) -> Spend:
    """What is left of the budget, rounded down and clipped at 0.

    Example:
        >>> remaining(Spend(0.75, 0.0), Budget(1.0, 1e-6))
        Spend(epsilon=0.25, delta=1e-06)
        >>> remaining(Spend(2.0, 0.0), Budget(1.0, 0.0))
        Spend(epsilon=0.0, delta=0.0)
    """
    left = (
        Fraction(budget.epsilon) - Fraction(spent.epsilon),
        Fraction(budget.delta) - Fraction(spent.delta),
    )
    return Spend(*(max(0.0, _down(x)) for x in left))
