"""What GET /v1/budget and the dashboard add to a budget: the f-DP trade-off curves under the rule in force
(accountant/tradeoff.py) and the PLD accountant's (ε, δ) of the fixed history, per cell
(accountant/pld_cells.py).
Both are reports of the history, never admit rules (DESIGN.md §4)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from accountant import tradeoff
from accountant.cells import bound
from accountant.errors import UnsupportedEvent
from accountant.filter import Budget, Entry
from accountant.pld_cells import pld_report_cells
from proxy.policy import DatasetPolicy
from proxy.schemas import BudgetReportOut, CurveOut, HistoryReportOut, PairOut, TradeoffOut


def curves(entries: Sequence[Entry], dataset: DatasetPolicy, allowed: Budget) -> TradeoffOut | None:
    """The trade-off curves of the worst-off unit's history (as admit sees it) and of the whole budget."""
    accounting = dataset.accounting
    try:
        used = bound(entries, accounting.rule)
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


def detailed(entries: Sequence[Entry], dataset: DatasetPolicy, allowed: Budget) -> BudgetReportOut:
    """The trade-off curves and the PLD report of one budget's history."""
    return BudgetReportOut(dataset=dataset.name, tradeoff=curves(entries, dataset, allowed),
                           history_report=history_report(entries, allowed))
