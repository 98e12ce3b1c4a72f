"""The admit rules (basic, zcdp, gdp): costs, capacities, the filter, reports; checked against independent
high-precision computations and Google's dp-accounting privacy-loss distributions."""

from __future__ import annotations

import math
from fractions import Fraction

import dp_accounting
import mpmath
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld
from dp_accounting.rdp import rdp_privacy_accountant
from hypothesis import example, given, settings
from hypothesis import strategies as st

from accountant.errors import UnsupportedEvent
from accountant.events import ComposedEvent, Event, GaussianEvent, LaplaceEvent, ParallelEvent, ThresholdEvent
from accountant.filter import (
    BASIC,
    RULES,
    Accounting,
    Budget,
    Capacity,
    Entry,
    Rule,
    Usage,
    capacity,
    cost,
    fits,
    split_delta,
    usage,
)
from accountant.loss import approximate_mu, approximate_rho, epsilon_delta
from accountant.report import account, how_many, refusal, tightest
from mechanisms import gdp
from mechanisms.gaussian import gdp_bound
from mechanisms.gaussian import zcdp as gaussian
from tests.mechanisms.test_gaussian import _reference_epsilon
from tests.mechanisms.test_gdp import _reference_pure_mu  # also sets mpmath to 50 digits

UNIT = Budget(1.0, 1e-6)


def _laplace(epsilon_scale: float = 10.0, sensitivity: int = 1) -> Entry:
    event = LaplaceEvent(sensitivity, epsilon_scale)
    return Entry(event, *epsilon_delta(event, 0.0))


def _gaussian(sigma: float, sensitivity: int = 1, delta: float = 1e-8) -> Entry:
    event = GaussianEvent(sensitivity, sigma)
    return Entry(event, *epsilon_delta(event, delta))


def _admit_all(requests: list[Entry], budget: Budget, accounting: Accounting) -> list[Entry]:
    """Run the filter over a sequence of requests, as the ledger does: admitted ones join the history."""
    admitted: list[Entry] = []
    used = usage([], accounting.rule)
    limit = capacity(budget, accounting)
    for entry in requests:
        try:
            if fits(used, entry, limit):
                admitted.append(entry)
                one = usage([entry], accounting.rule)
                used = Usage(accounting.rule, used.amount + one.amount, used.delta + one.delta)
        except UnsupportedEvent:
            pass
    return admitted


# --- the numbers of docs/privacy.md §5.6 -------------------------------------------------------------------------


@pytest.mark.parametrize(("rule", "expected"), [("basic", 9), ("zcdp", 4), ("gdp", 3)])
def test_laplace_tenths_at_one_epsilon(rule: Rule, expected: int) -> None:
    # docs/privacy.md §5.6: 10 under basic in exact arithmetic (float 0.1 > 1/10, so ten exceed 1.0: 9), 4 zCDP, 3 GDP
    accounting = Accounting(rule, 0.0)
    assert how_many(_laplace(10.0), UNIT, accounting) == expected
    assert len(_admit_all([_laplace(10.0)] * 20, UNIT, accounting)) == expected


def test_exactly_representable_tenths_fit_ten_times_under_basic() -> None:
    assert how_many(_laplace(8.0), Budget(1.25, 1e-6), BASIC) == 10  # ε = 0.125 exactly, 10 × 0.125 = 1.25


def test_many_small_gaussian_releases_fit_far_better_under_zcdp() -> None:
    small = _gaussian(50.0)  # ρ = 2e-4 each
    basic, zcdp = (how_many(small, UNIT, Accounting(rule, 0.0)) for rule in ("basic", "zcdp"))
    assert zcdp == math.floor(Fraction(gaussian.rho_for(1.0, 1e-6)) / Fraction(gaussian.rho(1, 50.0)))
    assert zcdp >= 10 * basic
    # the discrete Gaussian's proven μ (docs/privacy.md §8): μ = c(50)/50 each, GDP admits ⌊μ_budget²/μ²⌋
    gdp_count = how_many(small, UNIT, Accounting("gdp", 0.0))
    assert gdp_count == math.floor(Fraction(gdp.mu_for(1.0, 1e-6)) ** 2 / Fraction(gdp_bound.mu(1, 50.0)) ** 2)
    assert gdp_count > zcdp


# --- costs -------------------------------------------------------------------------------------------------


def test_approximate_costs_of_each_event() -> None:
    assert approximate_rho(GaussianEvent(3, 8.0)) == (9 / 128, 0.0)  # Δ²/(2σ²), exact
    assert approximate_rho(LaplaceEvent(1, 4.0)) == (1 / 32, 0.0)  # ε²/2 with ε = 1/4
    assert approximate_rho(ThresholdEvent(0.5, 1e-9)) == (0.125, 1e-9)
    assert approximate_mu(ThresholdEvent(0.5, 1e-9)) == (gdp.pure_mu(0.5), 1e-9)
    assert approximate_mu(LaplaceEvent(2, 4.0)) == (gdp.pure_mu(0.5), 0.0)
    assert approximate_mu(GaussianEvent(0, 4.0)) == (0.0, 0.0)  # no sensitivity, nothing to account
    mu, _ = approximate_mu(ComposedEvent((LaplaceEvent(1, 1.0), GaussianEvent(1, 4.0))))
    assert Fraction(mu) ** 2 >= Fraction(gdp.pure_mu(1.0)) ** 2 + Fraction(gdp_bound.mu(1, 4.0)) ** 2
    assert mu == pytest.approx(math.hypot(gdp.pure_mu(1.0), gdp_bound.unit_mu(4.0)), rel=1e-15)
    with pytest.raises(UnsupportedEvent, match="proven for sigma in"):  # beyond the proven range of σ
        approximate_mu(ComposedEvent((LaplaceEvent(1, 1.0), GaussianEvent(1, 4e6))))


def test_composition_within_a_query() -> None:
    composed = ComposedEvent((LaplaceEvent(1, 2.0), ThresholdEvent(0.5, 1e-9), LaplaceEvent(1, 2.0)))
    assert approximate_rho(composed) == (0.375, 1e-9)
    mu, delta = approximate_mu(composed)
    assert Fraction(mu) ** 2 >= 3 * Fraction(gdp.pure_mu(0.5)) ** 2  # √Σμ², rounded up
    assert mu == pytest.approx(math.sqrt(3) * gdp.pure_mu(0.5), rel=1e-15) and delta == 1e-9
    parallel = ParallelEvent((ComposedEvent((LaplaceEvent(1, 2.0),)), ThresholdEvent(0.25, 1e-8)))
    assert approximate_rho(parallel) == (0.125, 1e-8)  # maxima, taken separately


leaves = st.one_of(
    st.builds(LaplaceEvent, st.integers(1, 5), st.floats(1.0, 500.0)),
    st.builds(GaussianEvent, st.integers(1, 5), st.floats(1.0, 500.0)),
    st.builds(ThresholdEvent, st.floats(1e-3, 0.5), st.floats(1e-10, 1e-7)),
)
laplace_leaves = st.one_of(
    st.builds(LaplaceEvent, st.integers(1, 5), st.floats(1.0, 500.0)),
    st.builds(ThresholdEvent, st.floats(1e-3, 0.5), st.floats(1e-10, 1e-7)),
)


def _queries(leaf: st.SearchStrategy[Event]) -> st.SearchStrategy[Event]:
    composed = st.lists(leaf, min_size=1, max_size=3).map(lambda es: ComposedEvent(tuple(es)))
    parallel = st.lists(composed, min_size=1, max_size=2).map(lambda es: ParallelEvent(tuple(es)))
    return st.one_of(composed, parallel)


@given(st.lists(leaves, min_size=1, max_size=4).map(tuple))
def test_parallel_never_costs_more_than_sequential_under_zcdp(events: tuple[Event, ...]) -> None:
    par, seq = approximate_rho(ParallelEvent(events)), approximate_rho(ComposedEvent(events))
    assert par[0] <= seq[0] and par[1] <= seq[1]


# --- capacities --------------------------------------------------------------------------------------------


def test_capacity_of_each_rule() -> None:
    assert capacity(UNIT, BASIC) == Capacity("basic", 1.0, 1e-6, 0.0)
    zcdp = capacity(UNIT, Accounting("zcdp", 0.5))
    assert (zcdp.delta, zcdp.conversion_delta) == (5e-7, 5e-7)
    assert zcdp.amount == gaussian.rho_for(1.0, 5e-7)
    assert gaussian.epsilon_from_rho(zcdp.amount, 5e-7) <= 1.0
    g = capacity(UNIT, Accounting("gdp", 0.25))
    assert g.delta == 2.5e-7 and Fraction(g.delta) + Fraction(g.conversion_delta) <= Fraction(1e-6)
    assert g.amount == gdp.mu_for(1.0, g.conversion_delta)


@given(st.floats(0.0, 0.999), st.floats(1e-300, 0.999))
def test_split_delta_never_adds_up_to_more(share: float, delta: float) -> None:
    selection, conversion = split_delta(delta, share)
    assert selection >= 0 and conversion >= 0
    assert Fraction(selection) + Fraction(conversion) <= Fraction(delta)
    assert Fraction(selection) <= Fraction(share) * Fraction(delta)


def test_tighter_rules_need_a_delta() -> None:
    with pytest.raises(ValueError, match="needs a budget delta > 0"):
        capacity(Budget(1.0, 0.0), Accounting("zcdp"))
    with pytest.raises(ValueError, match="selection_delta_share"):
        Accounting("zcdp", 1.0)
    with pytest.raises(ValueError, match="accounting must be one of"):
        Accounting("rdp")  # type: ignore[arg-type]


# --- the filter never admits past the true guarantee -------------------------------------------------------


def _exact_rho(event: Event) -> tuple[Fraction, Fraction]:
    """(ρ, δ) with exact rationals, written independently of accountant/loss.py."""
    match event:
        case GaussianEvent(sensitivity, sigma):
            return Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2), Fraction(0)
        case LaplaceEvent(sensitivity, scale):
            return (Fraction(sensitivity) / Fraction(scale)) ** 2 / 2, Fraction(0)
        case ThresholdEvent(epsilon, delta):
            return Fraction(epsilon) ** 2 / 2, Fraction(delta)
        case ComposedEvent(events):
            parts = [_exact_rho(e) for e in events]
            return sum((r for r, _ in parts), Fraction(0)), sum((d for _, d in parts), Fraction(0))
        case ParallelEvent(events):
            parts = [_exact_rho(e) for e in events]
            return max((r for r, _ in parts), default=Fraction(0)), max((d for _, d in parts), default=Fraction(0))
    raise AssertionError(event)


def _exact_mu2(event: Event) -> tuple[mpmath.mpf, Fraction]:
    """(μ², δ) at 50 digits, independently of accountant/loss.py and mechanisms/gdp.py."""
    match event:
        case LaplaceEvent(sensitivity, scale):
            return _reference_pure_mu(sensitivity / scale) ** 2, Fraction(0)
        case ThresholdEvent(epsilon, delta):
            return _reference_pure_mu(epsilon) ** 2, Fraction(delta)
        case ComposedEvent(events):
            parts = [_exact_mu2(e) for e in events]
            return mpmath.fsum(m for m, _ in parts), sum((d for _, d in parts), Fraction(0))
        case ParallelEvent(events):
            parts = [_exact_mu2(e) for e in events]
            return max(m for m, _ in parts), max(d for _, d in parts)
    raise AssertionError(event)


def _reference_gdp_delta(epsilon: float, mu: mpmath.mpf) -> mpmath.mpf:
    if mu == 0:
        return mpmath.mpf(0)
    e = mpmath.mpf(epsilon)
    return mpmath.ncdf(-e / mu + mu / 2) - mpmath.exp(e) * mpmath.ncdf(-e / mu - mu / 2)


budgets = st.builds(Budget, st.floats(0.05, 5.0), st.floats(1e-9, 1e-4))
shares = st.sampled_from([0.0, 0.25, 0.5, 0.9])


@settings(max_examples=60, deadline=None)
@given(st.lists(_queries(leaves), min_size=1, max_size=40), budgets, shares)
def test_zcdp_filter_never_admits_past_the_budget(events: list[Event], budget: Budget, share: float) -> None:
    requests = [Entry(e, *epsilon_delta(e, 1e-9)) for e in events]
    admitted = _admit_all(requests, budget, Accounting("zcdp", share))
    parts = [_exact_rho(entry.event) for entry in admitted]
    rho = sum((r for r, _ in parts), Fraction(0))
    selection = sum((d for _, d in parts), Fraction(0))
    assert selection <= Fraction(share) * Fraction(budget.delta)  # δ paid from the share fixed in advance
    if rho > 0:  # the true guarantee: (ε_CKS(ρ, δ − Σδ_sel), δ) with ε within the budget
        rest = float(Fraction(budget.delta) - selection)
        assert _reference_epsilon(float(rho), rest) <= budget.epsilon * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(_queries(laplace_leaves), min_size=1, max_size=30), budgets, shares)
def test_gdp_filter_never_admits_past_the_budget(events: list[Event], budget: Budget, share: float) -> None:
    requests = [Entry(e, *epsilon_delta(e, 0.0)) for e in events]
    admitted = _admit_all(requests, budget, Accounting("gdp", share))
    parts = [_exact_mu2(entry.event) for entry in admitted]
    mu = mpmath.sqrt(mpmath.fsum(m for m, _ in parts))
    selection = sum((d for _, d in parts), Fraction(0))
    assert selection <= Fraction(share) * Fraction(budget.delta)
    true_delta = _reference_gdp_delta(budget.epsilon, mu) + mpmath.mpf(selection.numerator) / selection.denominator
    assert true_delta <= budget.delta


@settings(max_examples=60, deadline=None)
@given(st.lists(_queries(leaves), min_size=1, max_size=40), budgets)
def test_basic_filter_never_admits_past_the_budget(events: list[Event], budget: Budget) -> None:
    requests = [Entry(e, *epsilon_delta(e, 1e-9)) for e in events]
    admitted = _admit_all(requests, budget, BASIC)
    assert sum((Fraction(e.epsilon) for e in admitted), Fraction(0)) <= Fraction(budget.epsilon)
    assert sum((Fraction(e.delta) for e in admitted), Fraction(0)) <= Fraction(budget.delta)


pld_laplace = st.builds(LaplaceEvent, st.integers(1, 2), st.floats(2.0, 60.0))
pld_gaussian = st.builds(GaussianEvent, st.integers(1, 2), st.floats(2.0, 60.0))


def _pld_of(event: LaplaceEvent | GaussianEvent) -> pld.PrivacyLossDistribution:
    # The optimistic discretisation: its δ(ε) is a lower bound on the true δ(ε). The pessimistic one rounds
    # every privacy loss up by up to one interval per mechanism, so five pure-ε releases composing to
    # ε = 0.9995 <= 1 showed δ(1) ≈ 1e-4 there: a discretisation artefact, not a breach. A lower bound
    # above the budget is a certain breach, so this test fails exactly on real violations.
    if isinstance(event, LaplaceEvent):  # P[Z = k] ∝ e^{−|k|/b}: dp-accounting's parameter is 1/b
        return pld.from_discrete_laplace_mechanism(
            1 / event.scale, sensitivity=int(event.sensitivity), value_discretization_interval=1e-4,
            pessimistic_estimate=False,
        )
    return pld.from_discrete_gaussian_mechanism(
        event.sigma, sensitivity=int(event.sensitivity), value_discretization_interval=1e-4,
        pessimistic_estimate=False,
    )


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.one_of(pld_laplace, pld_gaussian), min_size=1, max_size=25),
    st.sampled_from(["basic", "zcdp", "gdp"]),
)
@example([LaplaceEvent(1, 2.0), LaplaceEvent(1, 3.0), LaplaceEvent(1, 17.0), LaplaceEvent(2, 27.0),
          LaplaceEvent(2, 60.0)], "basic")  # Σε = 0.9995: within budget, and pure (δ = 0)
def test_admitted_histories_hold_under_dp_accountings_privacy_loss_distribution(
    events: list[LaplaceEvent | GaussianEvent], rule: Rule
) -> None:
    # Ground truth for the sequence as admitted: dp-accounting's PLD of the exact discrete mechanisms.
    # Whatever a rule admitted must be (ε, δ)-DP by it too.
    budget = Budget(1.0, 1e-6)
    requests = [Entry(e, *epsilon_delta(e, 1e-8)) for e in events]
    admitted = _admit_all(requests, budget, Accounting(rule, 0.0))
    if not admitted:
        return
    composed = _pld_of(admitted[0].event)  # type: ignore[arg-type]
    for entry in admitted[1:]:
        composed = composed.compose(_pld_of(entry.event))  # type: ignore[arg-type]
    assert composed.get_delta_for_epsilon(budget.epsilon) <= budget.delta


# --- reports ----------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(_queries(leaves), max_size=30), st.floats(1e-9, 1e-3))
def test_tightest_never_reports_more_than_basic(events: list[Event], delta: float) -> None:
    history = [Entry(e, *epsilon_delta(e, 1e-10)) for e in events]
    basic = usage(history, "basic")
    reported, _ = tightest(history, delta)
    if basic.delta <= Fraction(delta):  # basic is reported as its exact sum rounded up, like any spend
        spent = float(basic.amount)
        spent = spent if Fraction(spent) >= basic.amount else math.nextafter(spent, math.inf)
        assert reported <= spent


def test_tightest_picks_zcdp_for_many_gaussians_and_basic_for_few_laplaces() -> None:
    assert tightest([_laplace(10.0)] * 3, 1e-6) == (0.30000000000000004, "basic")
    epsilon, rule = tightest([_gaussian(40.0)] * 200, 1e-5)
    assert rule == "gdp" and epsilon < usage([_gaussian(40.0)] * 200, "basic").amount / 10
    zcdp = gaussian.epsilon_from_rho(float(usage([_gaussian(40.0)] * 200, "zcdp").amount), 1e-5)
    assert epsilon < zcdp  # the exact GDP conversion beats zCDP's


def test_account_at_the_start_is_the_whole_budget() -> None:
    for rule in RULES:
        accounting = Accounting(rule, 0.5)
        a = account(usage([], rule), UNIT, accounting)
        assert a.epsilon_spent == 0.0 and a.spent == 0.0
        assert 0.999 * UNIT.epsilon <= a.epsilon_remaining <= UNIT.epsilon
        assert a.delta_remaining == (1e-6 if rule == "basic" else 5e-7)


@given(st.lists(_queries(laplace_leaves), max_size=12), st.sampled_from(RULES))
@settings(max_examples=40, deadline=None)
def test_remaining_falls_and_spent_rises_as_charges_are_added(events: list[Event], rule: Rule) -> None:
    accounting = Accounting(rule, 0.5)
    history: list[Entry] = []
    before = account(usage(history, rule), UNIT, accounting)
    for event in events:
        history.append(Entry(event, *epsilon_delta(event, 0.0)))
        after = account(usage(history, rule), UNIT, accounting)
        assert after.epsilon_remaining <= before.epsilon_remaining
        assert after.epsilon_spent >= before.epsilon_spent
        before = after


def test_refusal_messages_name_the_currency_and_what_is_left() -> None:
    query = _laplace(10.0)
    history = [query] * 4
    zcdp = refusal(usage(history, "zcdp"), query, UNIT, Accounting("zcdp", 0.0))
    assert zcdp is not None and zcdp.code == "budget_exceeded"
    assert str(zcdp).startswith("query needs ρ=0.005 but 0.00435597 of your ρ=0.024356 remains")
    assert zcdp.detail["accounting"] == "zcdp" and zcdp.detail["rho_requested"] == cost(query, "zcdp")[0]
    g = refusal(usage([query] * 3, "gdp"), query, UNIT, Accounting("gdp", 0.0), scope="dataset")
    assert g is not None and "μ=0.125309" in str(g) and "dataset's shared" in str(g) and "squares" in str(g)
    selection = Entry(ThresholdEvent(0.01, 1e-7), 0.01, 1e-7)
    short = refusal(usage([selection] * 5, "zcdp"), selection, UNIT, Accounting("zcdp", 0.5))
    assert short is not None and "for partition selection" in str(short)
    assert refusal(usage([], "gdp"), _gaussian(10.0), UNIT, Accounting("gdp")) is None  # proven μ (§8)
    gaussian_under_gdp = refusal(usage([], "gdp"), _gaussian(4e6), UNIT, Accounting("gdp"))
    assert gaussian_under_gdp is not None and "proven for sigma in" in str(gaussian_under_gdp)


def test_basic_refusal_keeps_its_message_and_detail() -> None:
    budget = Budget(3.0, 1e-6)
    spent = Entry(LaplaceEvent(11, 4.0), 2.75, 0.0)
    request = Entry(LaplaceEvent(1, 2.0), 0.5, 0.0)
    error = refusal(usage([spent], "basic"), request, budget, BASIC)
    assert error is not None and str(error) == "query needs ε=0.5 but 0.25 of your ε=3.0 remains"
    assert error.detail == {
        "epsilon_remaining": 0.25, "delta_remaining": 1e-6, "epsilon_requested": 0.5, "delta_requested": 0.0,
    }


@given(st.lists(_queries(leaves), min_size=1, max_size=3), budgets, st.sampled_from(RULES), shares)
@settings(max_examples=60, deadline=None)
def test_how_many_is_what_the_filter_admits_one_by_one(
    events: list[Event], budget: Budget, rule: Rule, share: float
) -> None:
    entry = Entry(events[0], *epsilon_delta(events[0], 1e-9))
    accounting = Accounting(rule, share)
    count = how_many(entry, budget, accounting, at_most=100)
    assert min(100, len(_admit_all([entry] * 101, budget, accounting))) == count


@pytest.mark.parametrize(
    ("k", "rho", "delta"), [(1, 0.025, 1e-6), (10, 0.005, 1e-6), (1000, 2e-4, 1e-8), (4, 0.5, 1e-5)]
)
def test_zcdp_conversion_agrees_with_dp_accountings_rdp_accountant(k: int, rho: float, delta: float) -> None:
    # k-fold composition adds ρ exactly; dp-accounting converts RDP on a grid of orders, we optimise the
    # order continuously (CKS20 Prop. 12), so ours is never larger and within a hair of theirs
    accountant = rdp_privacy_accountant.RdpAccountant()
    accountant.compose(dp_accounting.SelfComposedDpEvent(dp_accounting.ZCDpEvent(rho), k))
    theirs = accountant.get_epsilon(delta)
    ours = gaussian.epsilon_from_rho(float(k * Fraction(rho)), delta)
    assert theirs * (1 - 1e-3) <= ours <= theirs * (1 + 1e-12)
