"""The privacy map of every event: zCDP pooling of Gaussians, sequential sums, parallel maxima."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accountant.errors import AccountantError, UnsupportedEvent
from accountant.events import ComposedEvent, Event, GaussianEvent, LaplaceEvent, ParallelEvent, ThresholdEvent
from accountant.loss import epsilon_delta, rho
from mechanisms.gaussian import zcdp

DELTA = 1e-6


def test_laplace_is_pure_epsilon() -> None:
    assert epsilon_delta(LaplaceEvent(2, 8.0), DELTA) == (0.25, 0.0)  # exact: 2/8


def test_threshold_is_its_own_pair() -> None:
    assert epsilon_delta(ThresholdEvent(0.5, 1e-9), DELTA) == (0.5, 1e-9)


def test_gaussian_converts_its_rho_at_the_given_delta() -> None:
    eps, delta = epsilon_delta(GaussianEvent(1, 4.0), DELTA)
    assert delta == DELTA
    assert eps == zcdp.epsilon_from_rho(zcdp.rho(1, 4.0), DELTA)  # the same deterministic map


def test_gaussians_pool_in_zcdp_across_nesting() -> None:
    # ρ(3, 8) + ρ(4, 8) = ρ(5, 8) = 25/128: a 3-4-5 triangle on a dyadic σ keeps every ρ exact
    flat = ComposedEvent((GaussianEvent(3, 8.0), GaussianEvent(4, 8.0)))
    nested = ComposedEvent((GaussianEvent(3, 8.0), ComposedEvent((GaussianEvent(4, 8.0),))))
    single = GaussianEvent(5, 8.0)
    assert epsilon_delta(flat, DELTA) == epsilon_delta(single, DELTA)
    assert epsilon_delta(nested, DELTA) == epsilon_delta(single, DELTA)
    separate = [epsilon_delta(GaussianEvent(s, 8.0), DELTA)[0] for s in (3, 4)]
    assert epsilon_delta(flat, DELTA)[0] < sum(separate)  # why pooling matters
    assert epsilon_delta(flat, DELTA)[1] == DELTA  # one conversion, one δ


def test_mixed_sequential_composition_adds() -> None:
    event = ComposedEvent((LaplaceEvent(1, 10.0), ThresholdEvent(0.25, 1e-9), GaussianEvent(1, 4.0)))
    eps, delta = epsilon_delta(event, DELTA)
    gaussian_eps = zcdp.epsilon_from_rho(zcdp.rho(1, 4.0), DELTA)
    assert Fraction(eps) >= Fraction(0.1) + Fraction(0.25) + Fraction(gaussian_eps)
    assert eps == pytest.approx(0.35 + gaussian_eps, rel=1e-15)
    assert Fraction(delta) >= Fraction(1e-9) + Fraction(DELTA)
    assert delta == pytest.approx(1e-9 + DELTA, rel=1e-15)


def test_parallel_is_the_maximum_of_its_children() -> None:
    event = ParallelEvent((LaplaceEvent(1, 10.0), LaplaceEvent(1, 2.0), ThresholdEvent(0.1, 1e-8)))
    assert epsilon_delta(event, DELTA) == (0.5, 1e-8)
    gaussians = ParallelEvent((GaussianEvent(1, 4.0), GaussianEvent(1, 4.0)))
    assert epsilon_delta(gaussians, DELTA) == epsilon_delta(GaussianEvent(1, 4.0), DELTA)


def test_parallel_children_are_not_pooled_with_outer_gaussians() -> None:
    inner = ParallelEvent((GaussianEvent(1, 4.0),))
    event = ComposedEvent((GaussianEvent(1, 4.0), inner))
    single = epsilon_delta(GaussianEvent(1, 4.0), DELTA)
    eps, delta = epsilon_delta(event, DELTA)
    assert eps == pytest.approx(2 * single[0], rel=1e-15) and eps >= 2 * single[0]
    assert delta == 2 * DELTA  # exact: doubling a float


def test_empty_events_cost_nothing() -> None:
    assert epsilon_delta(ComposedEvent(()), DELTA) == (0.0, 0.0)
    assert epsilon_delta(ParallelEvent(()), DELTA) == (0.0, 0.0)
    assert epsilon_delta(GaussianEvent(0, 1.0), DELTA) == (0.0, 0.0)


def test_sums_round_up() -> None:
    event = ComposedEvent(tuple(LaplaceEvent(1, 10.0) for _ in range(10)))
    eps, _ = epsilon_delta(event, DELTA)
    assert Fraction(eps) >= 10 * Fraction(0.1)  # 10 × float(0.1) exceeds 1 by 5.6e-17
    assert eps == math.nextafter(1.0, 2.0)  # exact by construction: the next float above 1


@pytest.mark.parametrize(
    "event",
    [object(), ComposedEvent((LaplaceEvent(1, 1.0), "laplace")), ParallelEvent((3.0,))],  # type: ignore[arg-type]
    ids=["foreign", "nested-in-composed", "nested-in-parallel"],
)
def test_unknown_events_are_unsupported(event: Event) -> None:
    with pytest.raises(UnsupportedEvent) as info:
        epsilon_delta(event, DELTA)
    assert info.value.code == "unsupported_event"
    assert isinstance(info.value, AccountantError)
    with pytest.raises(UnsupportedEvent):
        rho(event)


@pytest.mark.parametrize("bad", [1.0, -1e-6, math.nan], ids=["one", "negative", "nan"])
def test_gaussian_delta_is_validated(bad: float) -> None:
    with pytest.raises(ValueError):
        epsilon_delta(LaplaceEvent(1, 1.0), bad)


def test_zero_gaussian_delta_only_without_gaussian_noise() -> None:
    assert epsilon_delta(ComposedEvent((LaplaceEvent(1, 2.0), ThresholdEvent(0.5, 1e-9))), 0.0) == (1.0, 1e-9)
    assert epsilon_delta(GaussianEvent(0, 1.0), 0.0) == (0.0, 0.0)  # no sensitivity, no noise cost
    with pytest.raises(ValueError, match="needs gaussian_delta > 0"):
        epsilon_delta(ComposedEvent((LaplaceEvent(1, 2.0), GaussianEvent(1, 4.0))), 0.0)


def test_rho_of_gaussian_and_laplace() -> None:
    assert rho(GaussianEvent(1, 2.0)) == 0.125  # exact: 1/(2·4)
    assert rho(LaplaceEvent(1, 2.0)) == 0.125  # exact: (1/2)²/2
    assert rho(ComposedEvent((GaussianEvent(1, 2.0), LaplaceEvent(1, 2.0)))) == 0.25
    assert rho(ParallelEvent((GaussianEvent(1, 2.0), GaussianEvent(2, 2.0)))) == 0.5
    assert rho(ParallelEvent(())) == 0.0


def test_rho_refuses_threshold_events() -> None:
    with pytest.raises(UnsupportedEvent, match="no zCDP bound"):
        rho(ComposedEvent((GaussianEvent(1, 2.0), ThresholdEvent(0.1, 1e-9))))


# --- properties -------------------------------------------------------------------------------------

finite = st.floats(min_value=1e-3, max_value=1e3)
leaves = st.one_of(
    st.builds(LaplaceEvent, finite, finite),
    st.builds(GaussianEvent, finite, finite),
    st.builds(ThresholdEvent, finite, st.floats(min_value=1e-12, max_value=1e-3)),
)
children = st.lists(leaves, min_size=1, max_size=5).map(tuple)


@given(children)
def test_parallel_never_costs_more_than_sequential(events: tuple[Event, ...]) -> None:
    par_eps, par_delta = epsilon_delta(ParallelEvent(events), DELTA)
    seq_eps, seq_delta = epsilon_delta(ComposedEvent(events), DELTA)
    assert par_eps <= seq_eps * (1 + 1e-12)
    assert par_delta <= seq_delta


@given(st.lists(st.builds(LaplaceEvent, finite, finite), max_size=8).map(tuple))
def test_pure_laplace_totals_are_exact_upper_bounds(events: tuple[LaplaceEvent, ...]) -> None:
    eps, delta = epsilon_delta(ComposedEvent(events), DELTA)
    exact = sum((Fraction(e.sensitivity) / Fraction(e.scale) for e in events), Fraction(0))
    assert Fraction(eps) >= exact
    assert eps <= float(exact) * (1 + 1e-12) + 1e-300
    assert delta == 0.0


@given(st.lists(st.one_of(st.builds(LaplaceEvent, finite, finite), st.builds(GaussianEvent, finite, finite))))
def test_rho_of_a_sequence_is_at_least_the_sum(events: list[Event]) -> None:
    assert Fraction(rho(ComposedEvent(tuple(events)))) >= sum((Fraction(rho(e)) for e in events), Fraction(0))
