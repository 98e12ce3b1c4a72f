"""The admit rule: basic composition, exact comparisons, totals rounded up and remainders rounded down."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accountant.filter import Budget, Spend, admits, remaining, total

amounts = st.floats(min_value=0, max_value=10)
deltas = st.floats(min_value=0, max_value=1e-3)
requests = st.lists(st.tuples(amounts, deltas), max_size=30)
budgets = st.builds(Budget, st.floats(min_value=1e-3, max_value=20), st.floats(min_value=0, max_value=1e-2))


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(0.0, 0.0), (-1.0, 0.0), (math.inf, 0.0), (math.nan, 0.0), (1.0, 1.0), (1.0, -1e-9), (1.0, math.nan)],
    ids=[
        "zero-epsilon",
        "negative-epsilon",
        "inf-epsilon",
        "nan-epsilon",
        "delta-one",
        "negative-delta",
        "nan-delta",
    ],
)
def test_budget_is_validated(epsilon: float, delta: float) -> None:
    with pytest.raises(ValueError):
        Budget(epsilon, delta)


def test_budget_without_delta_is_allowed() -> None:
    assert Budget(1.0, 0.0).delta == 0.0


@pytest.mark.parametrize(("epsilon", "delta"), [(-1.0, 0.0), (0.0, math.inf)], ids=["negative", "infinite"])
def test_spend_is_validated(epsilon: float, delta: float) -> None:
    with pytest.raises(ValueError):
        Spend(epsilon, delta)


@given(requests)
def test_total_is_the_exact_sum_rounded_up(charges: list[tuple[float, float]]) -> None:
    spend = total(charges)
    for i, value in enumerate((spend.epsilon, spend.delta)):
        exact = sum((Fraction(c[i]) for c in charges), Fraction(0))
        assert Fraction(value) >= exact
        assert Fraction(math.nextafter(value, -math.inf)) < exact or value == 0.0


def test_total_accepts_any_iterable() -> None:
    assert total(iter([(0.5, 1e-6), (0.25, 0.0)])) == Spend(0.75, 1e-6)  # exact: dyadic ε, one δ


def test_admits_up_to_the_budget_exactly() -> None:
    budget = Budget(1.0, 1e-6)
    assert admits(Spend(0.875, 0.0), 0.125, 1e-6, budget)  # exactly 1.0 and exactly 1e-6
    assert not admits(Spend(0.875, 0.0), math.nextafter(0.125, 1.0), 0.0, budget)
    assert not admits(Spend(0.0, 1e-6), 0.0, 5e-324, budget)


def test_eight_eighths_fit_but_ten_float_tenths_do_not() -> None:
    # float(0.1) > 1/10, so ten of them exceed 1.0 by 5.6e-17: the safe rounding refuses the tenth
    budget = Budget(1.0, 0.0)
    assert admits(total([(0.125, 0.0)] * 7), 0.125, 0.0, budget)
    assert admits(total([(0.1, 0.0)] * 8), 0.1, 0.0, budget)
    assert not admits(total([(0.1, 0.0)] * 9), 0.1, 0.0, budget)


def test_delta_free_budget_admits_only_pure_charges() -> None:
    budget = Budget(1.0, 0.0)
    assert admits(Spend(0.0, 0.0), 0.5, 0.0, budget)
    assert not admits(Spend(0.0, 0.0), 0.5, 1e-12, budget)


@pytest.mark.parametrize(
    ("epsilon", "delta"), [(-0.1, 0.0), (math.nan, 0.0), (0.1, math.inf)], ids=["neg", "nan", "inf"]
)
def test_admits_refuses_malformed_requests(epsilon: float, delta: float) -> None:
    with pytest.raises(ValueError):
        admits(Spend(0.0, 0.0), epsilon, delta, Budget(1.0, 1e-6))


@given(requests, budgets)
def test_the_filter_never_admits_past_the_budget(charges: list[tuple[float, float]], budget: Budget) -> None:
    admitted: list[tuple[float, float]] = []
    for epsilon, delta in charges:
        if admits(total(admitted), epsilon, delta, budget):
            admitted.append((epsilon, delta))
    assert sum((Fraction(e) for e, _ in admitted), Fraction(0)) <= Fraction(budget.epsilon)
    assert sum((Fraction(d) for _, d in admitted), Fraction(0)) <= Fraction(budget.delta)


@given(st.tuples(amounts, deltas), budgets)
def test_remaining_is_rounded_down_and_spendable(spent_pair: tuple[float, float], budget: Budget) -> None:
    spent = Spend(*spent_pair)
    left = remaining(spent, budget)
    assert left.epsilon >= 0 and left.delta >= 0
    epsilon_within = Fraction(spent.epsilon) <= Fraction(budget.epsilon)
    if epsilon_within and Fraction(spent.delta) <= Fraction(budget.delta):
        assert admits(spent, left.epsilon, left.delta, budget)  # what we report as left can be spent


def test_remaining_is_clipped_at_zero() -> None:
    assert remaining(Spend(5.0, 1.0), Budget(1.0, 1e-6)) == Spend(0.0, 0.0)
    assert remaining(Spend(0.25, 0.0), Budget(1.0, 1e-6)) == Spend(0.75, 1e-6)  # exact: dyadic
