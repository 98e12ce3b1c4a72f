"""What a history has spent and what is left, in the analyst's terms, under each rule; and why a charge is
refused. Pure functions over `filter.Usage`: the ledger reads the history, these only compute.

Under zcdp and gdp, ε is not additive: `epsilon_spent` is the ε (at the budget's δ_conv) that the history's ρ
or μ amounts to, and `epsilon_remaining` the ε that the ρ or μ still unspent amounts to; the two need not
add up to the budget's ε. `tightest` is a reporting-only bound for the history as it happened.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Literal

from accountant import loss
from accountant.cells import bound
from accountant.errors import BudgetExceeded, UnsupportedEvent
from accountant.events import (
    AutoBoundsEvent,
    ComposedEvent,
    Event,
    GaussianEvent,
    GaussianThresholdEvent,
    LaplaceEvent,
    ParallelEvent,
    ThresholdEvent,
)
from accountant.filter import (
    Accounting,
    Budget,
    Entry,
    Rule,
    Spend,
    Usage,
    additive,
    capacity,
    cost,
    fits,
    remaining,
)
from mechanisms import laplace
from mechanisms.gaussian import zcdp
from mechanisms.rounding import down
from mechanisms.rounding import up as _up

Scope = Literal["analyst", "dataset"]
NAMES: dict[Rule, str] = {"basic": "basic composition", "zcdp": "zCDP", "gdp": "GDP"}


def _down(exact: Fraction) -> float:
    return max(0.0, down(exact))  # a remaining budget is never negative


def _sqrt(exact: Fraction, *, up: bool) -> float:
    """√exact rounded up (or down) to a float."""
    root = math.sqrt(float(exact))
    if up:
        while Fraction(root) ** 2 < exact:
            root = math.nextafter(root, math.inf)
    else:
        while root > 0 and Fraction(root) ** 2 > exact:
            root = math.nextafter(root, 0.0)
    return root


@dataclass(frozen=True, slots=True)
class Account:
    """A history against a budget under one rule.

    `spent`/`capacity` are in the rule's currency (Σε, Σρ or √Σμ²; the budget's ε, ρ or μ); `selection_*`
    are the δ of partition selection (zcdp, gdp; None under basic). `epsilon_*`/`delta_*` are in the
    analyst's terms: spent is the (ε, δ) the history amounts to, remaining the ε still available at the
    budget's δ_conv and the δ left (δ itself under basic, the δ reserved for selection under zcdp/gdp).
    """

    rule: Rule
    epsilon_spent: float
    delta_spent: float
    epsilon_remaining: float
    delta_remaining: float
    spent: float
    capacity: float
    selection_delta_spent: float | None
    selection_delta_capacity: float | None


def _epsilon_at(rule: Rule, amount: float, delta: float) -> float:
    """The ε that ρ-zCDP (CKS20 Prop. 12) or μ-GDP (DRS19 Cor. 2.13) amounts to at δ."""
    if amount <= 0:
        return 0.0
    return zcdp.epsilon_from_rho(amount, delta) if rule == "zcdp" else zcdp.epsilon_of(amount, delta)


def account(used: Usage, budget: Budget, accounting: Accounting) -> Account:
    """Spend and remaining budget of a history (given as its `usage` under the rule in force).

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> from accountant.filter import usage
        >>> history = [Entry(LaplaceEvent(1, 8.0), 0.125, 0.0)] * 2
        >>> basic = account(usage(history, "basic"), Budget(1.0, 1e-6), Accounting())
        >>> basic.epsilon_spent, basic.epsilon_remaining, basic.delta_remaining
        (0.25, 0.75, 1e-06)
        >>> z = account(usage(history, "zcdp"), Budget(1.0, 1e-6), Accounting("zcdp", 0.0))
        >>> round(z.spent, 6), round(z.epsilon_spent, 3), round(z.epsilon_remaining, 3)
        (0.015625, 0.789, 0.578)
    """
    if used.rule != accounting.rule:
        raise ValueError(f"usage under {used.rule!r} reported under {accounting.rule!r}")
    limit = capacity(budget, accounting)
    if accounting.rule == "basic":
        spent = Spend(_up(used.amount), _up(used.delta))
        left = remaining(spent, budget)
        return Account("basic", spent.epsilon, spent.delta, left.epsilon, left.delta,
                       spent.epsilon, limit.amount, None, None)
    rule, conversion = accounting.rule, limit.conversion_delta
    if rule == "zcdp":
        amount_spent = _up(used.amount)
        amount_left = _down(Fraction(limit.amount) - used.amount)
    else:  # used.amount is Σμ²
        amount_spent = _sqrt(used.amount, up=True)
        amount_left = _sqrt(max(Fraction(0), Fraction(limit.amount) ** 2 - used.amount), up=False)
    selection_spent = _up(used.delta)
    delta_spent = _up(used.delta + (Fraction(conversion) if amount_spent > 0 else 0))
    return Account(
        rule=rule,
        epsilon_spent=_epsilon_at(rule, amount_spent, conversion),
        delta_spent=delta_spent,
        epsilon_remaining=_epsilon_at(rule, amount_left, conversion),
        delta_remaining=_down(Fraction(limit.delta) - used.delta),
        spent=amount_spent,
        capacity=limit.amount,
        selection_delta_spent=selection_spent,
        selection_delta_capacity=limit.delta,
    )


def _fmt(value: float) -> str:
    text = f"{value:.6g}"
    return text + ".0" if text.lstrip("-").isdigit() else text


def refusal(
    used: Usage, entry: Entry, budget: Budget, accounting: Accounting, *, scope: Scope = "analyst"
) -> BudgetExceeded | None:
    """None if the charge fits the budget under the rule in force, else the `BudgetExceeded` to raise.

    The message says what ran out and how much is left; `detail` carries the remaining and requested
    (ε, δ) and, beyond an analyst's basic-composition budget, the rule, the scope and the rule's currency.

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> from accountant.filter import usage
        >>> query = Entry(LaplaceEvent(1, 10.0), 0.1, 0.0)
        >>> refusal(usage([query] * 3, "zcdp"), query, Budget(1.0, 1e-6), Accounting("zcdp")) is None
        True
        >>> str(refusal(usage([query] * 4, "zcdp"), query, Budget(1.0, 1e-6), Accounting("zcdp")))
        'query needs ρ=0.005 but 0.00293745 of your ρ=0.0229374 remains (ε=1.0, δ=1e-06 under zCDP)'
    """
    rule = accounting.rule
    limit = capacity(budget, accounting)
    try:
        if fits(used, entry, limit):
            return None
        amount, delta = cost(entry, rule)
    except UnsupportedEvent as err:
        return BudgetExceeded(f"{err}; this dataset accounts with {rule!r}", accounting=rule, scope=scope)
    left = account(used, budget, accounting)
    whose = "your" if scope == "analyst" else "the dataset's shared (all analysts)"
    # per-cell accounting (cells.py): what remains is what the cells this charge reaches have left
    where = "" if entry.scope is None else f" in the {entry.scope.count} cells of {entry.scope.table} it can reach"
    detail: dict[str, object] = {
        "epsilon_remaining": left.epsilon_remaining,
        "delta_remaining": left.delta_remaining,
        "epsilon_requested": entry.epsilon,
        "delta_requested": entry.delta,
    }
    if entry.scope is not None:
        detail.update(cells=entry.scope.count, cells_table=entry.scope.table)
    amount_short = used.amount + additive(amount, rule) > limit.limits()[0]
    if rule == "basic":
        if scope != "analyst":
            detail.update(accounting=rule, scope=scope)
        if amount_short:
            message = (f"query needs ε={_fmt(amount)} but {_fmt(left.epsilon_remaining)} of {whose} "
                       f"ε={_fmt(budget.epsilon)} remains{where}")
        else:
            message = (f"query needs δ={_fmt(delta)} but {_fmt(left.delta_remaining)} of {whose} "
                       f"δ={_fmt(budget.delta)} remains{where}")
        return BudgetExceeded(message, **detail)
    symbol, name = ("ρ", "rho") if rule == "zcdp" else ("μ", "mu")
    if rule == "zcdp":
        amount_left = _down(Fraction(limit.amount) - used.amount)
    else:
        amount_left = _sqrt(max(Fraction(0), Fraction(limit.amount) ** 2 - used.amount), up=False)
    detail.update({"accounting": rule, "scope": scope, f"{name}_requested": amount, f"{name}_remaining": amount_left})
    terms = f"ε={_fmt(budget.epsilon)}, δ={_fmt(budget.delta)} under {NAMES[rule]}"
    if amount_short:
        squares = ", μ adding in squares" if rule == "gdp" else ""
        message = (f"query needs {symbol}={_fmt(amount)} but {_fmt(amount_left)} of {whose} "
                   f"{symbol}={_fmt(limit.amount)} remains{where} ({terms}{squares})")
    else:
        message = (f"query needs δ={_fmt(delta)} for partition selection but {_fmt(left.delta_remaining)} of "
                   f"the δ={_fmt(limit.delta)} that {whose} budget reserves for it remains ({terms}); "
                   "group by keys with a public domain, or raise selection_delta_share")
    return BudgetExceeded(message, **detail)


def tightest(history: Sequence[Entry] | Callable[[Rule], Usage], delta: float) -> tuple[float, Rule]:
    """The smallest ε known to hold, at `delta`, for the sequence of charges as it happened: reporting only.
    Per cell (cells.py), like every report: the worst-off unit's charges.

    The minimum over basic composition (if Σδ <= `delta`), zCDP and GDP (if Σδ_sel < `delta`, converting
    at the rest of `delta`). Each is a valid (ε, δ) bound for a fixed sequence of mechanisms; an analyst
    who chose queries adaptively is held to the rule in force, never to this number (docs/privacy.md §5).
    Never more than the basic-composition ε when that applies, by construction. `history` is the charges,
    or what they use under each rule (`rule -> cells.bound`, e.g. from the ledger's memo).

    Example:
        >>> from accountant.events import GaussianEvent, LaplaceEvent
        >>> tightest([Entry(LaplaceEvent(1, 10.0), 0.1, 0.0)] * 2, 1e-6)
        (0.2, 'basic')
        >>> e, rule = tightest([Entry(GaussianEvent(1, 100.0), 0.0481, 1e-8)] * 1000, 1e-6)
        >>> round(e, 3), rule
        (1.368, 'gdp')
    """
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    used_by = history if callable(history) else (lambda rule: bound(history, rule))
    candidates: list[tuple[float, Rule]] = []
    basic = used_by("basic")
    if basic.delta <= Fraction(delta):
        candidates.append((_up(basic.amount), "basic"))
    for rule in ("zcdp", "gdp"):
        try:
            used = used_by(rule)
        except UnsupportedEvent:
            continue  # the discrete Gaussian has no GDP bound
        if used.delta < Fraction(delta):
            rest = _down(Fraction(delta) - used.delta)
            amount = _up(used.amount) if rule == "zcdp" else _sqrt(used.amount, up=True)
            if rest > 0:
                candidates.append((_epsilon_at(rule, amount, rest), rule))
    if not candidates:
        return math.inf, "basic"
    return min(candidates, key=lambda c: c[0])


def how_many(entry: Entry, budget: Budget, accounting: Accounting, *, at_most: int = 10**6) -> int:
    """How many copies of one charge the rule admits from an empty history (exactly; at most `at_most`).

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> query = Entry(LaplaceEvent(1, 10.0), 0.1, 0.0)   # Laplace, ε = 0.1
        >>> [how_many(query, Budget(1.0, 1e-6), Accounting(rule, 0.0)) for rule in ("basic", "zcdp", "gdp")]
        [9, 4, 3]
    """
    rule = accounting.rule
    limit = capacity(budget, accounting)
    try:
        amount, delta = cost(entry, rule)
    except UnsupportedEvent:
        return 0
    counts = [at_most]
    if amount > 0:
        counts.append(math.floor(limit.limits()[0] / additive(amount, rule)))
    if delta > 0:
        counts.append(math.floor(limit.limits()[1] / Fraction(delta)))
    return max(0, min(counts))


@dataclass(frozen=True, slots=True)
class HistoryReport:
    """(ε, δ) of a fixed history by a privacy-loss-distribution accountant (dp-accounting): a report of the
    charges as they happened, never a budget rule (docs/privacy.md §5: PLD bounds hold for a fixed sequence)."""

    epsilon: float
    delta: float
    method: str = "pld"


def _pld_parts(event: Event) -> tuple[list[tuple[str, float]], float]:
    """Dominating pairs of an event for the PLD, and the δ paid outside it (partition selection).

    A μ-GDP part (the discrete Gaussian at its proven μ, docs/privacy.md §8) is dominated by
    (N(0, 1), N(μ, 1)); a pure ε (Laplace) or (ε, δ) part by the pair of f_{ε,δ}. A partition selection's
    δ is added outside the PLD (§5.4); sequential parts compose; a parallel event with several children
    is composed sequentially too (an upper bound: only one of its children sees the unit)."""
    match event:
        case AutoBoundsEvent():
            return _pld_parts(loss.as_composed(event))
        case GaussianEvent() | GaussianThresholdEvent():
            mu, delta = loss.approximate_mu(event)
            return ([("gdp", mu)] if mu > 0 else []), delta
        case LaplaceEvent(sensitivity, scale):
            return [("pure", laplace.epsilon(sensitivity, scale))], 0.0
        case ThresholdEvent(epsilon, delta):
            return [("pure", epsilon)], delta
        case ComposedEvent(events) | ParallelEvent(events):
            parts: list[tuple[str, float]] = []
            extra = 0.0
            for child in events:
                more, delta = _pld_parts(child)
                parts += more
                extra += delta
            return parts, extra
        case _:
            raise UnsupportedEvent(f"no PLD for {event!r}", event=type(event).__name__)


def pld_report(history: Sequence[Entry], delta: float) -> HistoryReport | None:
    """ε at `delta` of the whole history by dp-accounting's PLD accountant (pessimistic discretisation,
    so an upper bound), with the δ of partition selection taken from `delta` first. None when the history
    is empty, holds an event without a dominating pair here, or its selection δ uses up `delta`.
    Over all of the history's charges, whatever cells they reach: never below the per-cell truth.

    Example:
        >>> from accountant.events import GaussianEvent
        >>> r = pld_report([Entry(GaussianEvent(1, 100.0), 0.0481, 1e-8)] * 1000, 1e-6)
        >>> round(r.epsilon, 2), r.delta, r.method
        (1.37, 1e-06, 'pld')
    """
    if not (math.isfinite(delta) and 0 < delta < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta!r}")
    counts: dict[tuple[str, float], int] = {}
    selection = Fraction(0)
    try:
        for entry in history:
            parts, extra = _pld_parts(entry.event)
            selection += Fraction(extra)
            for part in parts:
                counts[part] = counts.get(part, 0) + 1
    except UnsupportedEvent:
        return None
    rest = down(Fraction(delta) - selection) if selection < Fraction(delta) else 0.0
    if not counts or rest <= 0:
        return None
    return HistoryReport(_pld_epsilon(tuple(sorted(counts.items())), rest), delta)


FINE = 1e-4  # dp-accounting's default step between privacy-loss values
PURE_STEPS = 100_000  # a history's pure ε in at most about this many steps (its PLD's support, hence its cost)


def discretisation(counts: tuple[tuple[tuple[str, float], int], ...]) -> float:
    """The step between privacy-loss values: dp-accounting's 1e-4 until the pure ε composed passes 10, then about
    that total / 100 000, at most a tenth of the smallest pure ε and dividing it exactly. A PLD's support, and with
    it the composition's time, grows with the total loss it spans (1,000 charges of ε = 0.25 took 0.5 s, 100,000
    took 56 s). A coarser step only rounds each loss up (pessimistic), so the report stays an upper bound: by
    nothing for the smallest ε (on the grid; a history of one ε is exact), by under 10 % for any other.

    Example:
        >>> discretisation(((("pure", 0.25), 40),)), discretisation(((("pure", 0.25), 4000), (("gdp", 0.1), 9)))
        (0.0001, 0.01)
        >>> discretisation(((("pure", 0.25), 100_000),)), discretisation(((("pure", 0.3), 4000), (("pure", 2.0), 1)))
        (0.025, 0.012)
    """
    pure = [(value, count) for (kind, value), count in counts if kind == "pure" and value > 0]
    if not pure:
        return FINE
    smallest = min(value for value, _ in pure)
    step = min(math.fsum(value * count for value, count in pure) / PURE_STEPS, smallest / 10)
    return FINE if step <= FINE else smallest / math.ceil(smallest / step)


@lru_cache(maxsize=256)
def _pld_epsilon(counts: tuple[tuple[tuple[str, float], int], ...], delta: float) -> float:
    """ε at `delta` of the composition of (part, how many times): cached, since /v1/budget and the dashboard
    ask again for a history that has not changed (a PLD composition costs tens of milliseconds)."""
    # imported here: dp_accounting loads scipy.signal and scipy.stats, ~2 s of every process start (each server and
    # CLI call) that never reports a PLD
    from dp_accounting.pld import common
    from dp_accounting.pld import privacy_loss_distribution as pld

    composed = None
    step = discretisation(counts)
    for (kind, value), count in counts:
        if kind == "gdp":
            one = pld.from_gaussian_mechanism(standard_deviation=1.0, sensitivity=value,
                                              value_discretization_interval=step)
        else:
            one = pld.from_privacy_parameters(common.DifferentialPrivacyParameters(value, 0.0),
                                              value_discretization_interval=step)
        one = one.self_compose(count) if count > 1 else one
        composed = one if composed is None else composed.compose(one)
    assert composed is not None
    return math.nextafter(float(composed.get_epsilon_for_delta(delta)), math.inf)
