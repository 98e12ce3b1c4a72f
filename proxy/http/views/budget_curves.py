"""What GET /v1/budget and the dashboard add to a budget: the f-DP trade-off curves under the rule in force
(accountant/tradeoff.py) and the PLD accountant's (ε, δ) of the fixed history, per cell
(accountant/pld_cells.py).
Both are reports of the history, never admit rules (docs/privacy.md §5)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from accountant import tradeoff
from accountant.cells import Ledgered
from accountant.errors import UnsupportedEvent
from accountant.filter import Budget, Entry, Rule
from accountant.ledger.budget_ops import UnusableBudget
from accountant.pld_cells import pld_report_cells
from proxy.policy.load import DatasetPolicy
from proxy.schemas import BudgetReportOut, CurveOut, HistoryReportOut, PairOut, TradeoffOut


def curves(sums: Callable[[Rule], Ledgered], dataset: DatasetPolicy, allowed: Budget) -> TradeoffOut | None:
    """The trade-off curves of the worst-off unit's history (as admit sees it) and of the whole budget. `sums`:
    the history's per-cell sums under a rule, as the ledger keeps them (budget.stored: only what is new
    since the last read is read, never the whole history)."""
    accounting = dataset.accounting
    try:
        used = sums(accounting.rule).bound()
        history, whole = tradeoff.curves(used, allowed, accounting)
    except (UnsupportedEvent, ValueError):
        return None

    def out(curve: tradeoff.Curve) -> CurveOut:
        return CurveOut(beta=list(curve.beta), pairs=[
            PairOut(epsilon=None if math.isinf(e) else e, delta=d) for e, d in curve.pairs
        ])

    return TradeoffOut(accounting=accounting.rule, alpha=list(tradeoff.ALPHAS), history=out(history),
                       budget=out(whole))


def history_report(entries: Sequence[Entry], allowed: Budget) -> HistoryReportOut | None:
    if allowed.delta <= 0:
        return None
    found = pld_report_cells(entries, allowed.delta)  # the worst-off unit's cells, as admit bounds them
    return None if found is None else HistoryReportOut(epsilon=found.epsilon, delta=found.delta)


def detailed(sums: Callable[[Rule], Ledgered], entries: Callable[[], Sequence[Entry]], dataset: DatasetPolicy,
             allowed: Budget) -> BudgetReportOut:
    """The trade-off curves and the PLD report of one budget's history; the history's charges are read only for
    the PLD report (a budget with a δ). `allowed` is the policy's budget: with `sums` a budget.View, the
    budget in force adds its period's grants."""
    granted = getattr(sums, "budget", None)
    try:
        allowed = allowed if granted is None else granted(allowed)
    except UnusableBudget:  # nothing is admitted under it (budget.unusable): no curve of it to draw
        return BudgetReportOut(dataset=dataset.name, tradeoff=None, history_report=None)
    return BudgetReportOut(dataset=dataset.name, tradeoff=curves(sums, dataset, allowed),
                           history_report=history_report(entries(), allowed) if allowed.delta > 0 else None)
