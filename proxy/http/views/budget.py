"""The budget as every response shows it: spent and remaining under each rule, per cell, and the shared
dataset budget, from the ledger's per-cell sums (the admit's memo), with a previewed charge added or not.

Split from proxy/http/routes.py: the query answer, the preview, GET /v1/budget and the metrics all render a
budget through `budget_now` / `budget_out` here, so they agree.

Example (a value as JSON shows it):
    >>> import datetime as dt
    >>> json_value(dt.date(2024, 1, 2)), json_value(3)
    ('2024-01-02', 3)
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accountant import cells, report
from accountant.cell_scope import CellScope
from accountant.cells import Ledgered, SpaceUsage
from accountant.errors import UnsupportedEvent
from accountant.filter import Accounting, Budget, Entry, Rule, Usage
from accountant.ledger.budget_ops import NONE, Allowance, UnusableBudget, raised
from proxy.pipeline import Env
from proxy.policy.load import DatasetPolicy
from proxy.query.analyse.cell_space import cell_space
from proxy.query.analyse.joins import joins_of
from proxy.query.catalog import Catalog, TableSchema
from proxy.schemas import (
    AccountOut,
    BudgetOut,
    CellOut,
    CellSpaceOut,
    ReportedOut,
    ScopeOut,
    SharedBudgetOut,
)

_LISTED_CELLS = 100


def describer(key: tuple[str, str], dataset: DatasetPolicy | None) -> Callable[[int], dict[str, object]] | None:
    """`CellSpace.describe` for the space `key` names, if the policy in force still has that space: the table's
    own, or that of a join of it whose other table gives it an axis (joins.joins_of)."""
    table = None if dataset is None else dataset.catalog.table(key[0])
    if table is None or dataset is None:
        return None
    return _spaces(table, dataset.catalog).get(key[1])


@functools.lru_cache(maxsize=64)
def _spaces(table: TableSchema, catalog: Catalog) -> dict[str, Callable[[int], dict[str, object]]]:
    """The describers of the table's spaces by fingerprint (once per policy: a catalog is frozen)."""
    spaces = [cell_space(table)] + [cell_space(j.table, j.via, j.foreign) for j in joins_of(table, catalog)]
    return {space.fingerprint: space.describe for space in reversed(spaces)}  # the table's own wins a tie


def scope_out(scope: CellScope, dataset: DatasetPolicy | None) -> ScopeOut:
    describe = describer(scope.key, dataset)
    cells = scope.indices()
    listed = [] if describe is None else [cell(describe(int(i))) for i in cells[:_LISTED_CELLS]]
    return ScopeOut(table=scope.table, cells=int(cells.size), of=scope.size, listed=listed,
                    truncated=len(listed) < cells.size, bitmap=scope.to_json()["cells"], space=scope.space)


def cell(coordinates: dict[str, object]) -> dict[str, Any]:
    return {column: json_value(value) for column, value in coordinates.items()}



@dataclass(frozen=True, slots=True)
class View:
    """A budget's history in its current period: its per-cell sums under a rule (`view(rule)`, raising
    UnsupportedEvent), and what operators granted it in that period (`allowance`, added to the policy's
    budget wherever one is shown or checked, as the admit does)."""

    sums: Callable[[Rule], Ledgered]
    allowance: Allowance = NONE

    def __call__(self, rule: Rule) -> Ledgered:
        return self.sums(rule)

    def budget(self, policy: Budget) -> Budget:
        """The budget in force: the policy's plus the grants of the period (budget_ops.raised)."""
        return raised(policy, self.allowance)


def stored(env: Env, dataset: str, analyst: str | None) -> View:
    """The history in the ledger (the current budget period's), read through the admit's memo (only what is
    new since is read), once per rule: one budget's figures ask for the same rule several times. The period is
    read once: its grants and its floor (where the sums start) come from the same read."""
    allowance = env.ledger.allowance(dataset=dataset, analyst=analyst)
    return View(functools.cache(lambda rule: env.ledger.tallied(dataset=dataset, analyst=analyst, rule=rule,
                                                                floor=allowance.floor)), allowance)


def plus(history: View, entry: Entry) -> View:
    """A history with one more charge (one only being previewed), from the history's sums (cells.plus)."""
    return View(functools.cache(lambda rule: cells.plus(history(rule), entry)), history.allowance)


def budget_now(env: Env, analyst: str, dataset: DatasetPolicy, allowed: Budget) -> BudgetOut:
    everyone = stored(env, dataset.name, None) if dataset.budget is not None else None
    return budget_out(dataset, allowed, stored(env, dataset.name, analyst), everyone)


def refusal(
    mine: View, everyone: View | None, entry: Entry, allowed: Budget, dataset: DatasetPolicy
) -> Exception | None:
    """What `Ledger.admit` would raise for `entry` now (the same pure check), or None if it would admit."""
    rule = dataset.accounting.rule
    try:
        used = mine(rule).bound(entry.scope)
        refused = report.refusal(used, entry, mine.budget(allowed), dataset.accounting)
        if refused is None and everyone is not None and dataset.budget is not None:
            used = everyone(rule).bound(entry.scope)
            refused = report.refusal(used, entry, everyone.budget(dataset.budget), dataset.accounting,
                                     scope="dataset")
    except (UnsupportedEvent, UnusableBudget) as err:  # the history holds an event the rule cannot account for,
        return err  # or the budget in force guarantees nothing: the admit refuses it too
    return refused


def _accounts(history: View, allowed: Budget, accounting: Accounting) -> list[AccountOut]:
    """The worst-off unit's history (the maximum over cells) under basic composition and under the rule in
    force (if another)."""
    out = []
    for rule in dict.fromkeys(("basic", accounting.rule)):
        try:
            used = history(rule).bound()
        except UnsupportedEvent:
            continue  # e.g. a discrete Gaussian charged before the dataset moved to gdp: nothing is admitted
        out.append(_account(used, allowed, Accounting(rule, accounting.selection_share)))
    return out


def _account(used: Usage, allowed: Budget, accounting: Accounting) -> AccountOut:
    a = report.account(used, allowed, accounting)
    return AccountOut(
        accounting=a.rule, epsilon_spent=a.epsilon_spent, delta_spent=a.delta_spent,
        epsilon_remaining=a.epsilon_remaining, delta_remaining=a.delta_remaining, spent=a.spent,
        capacity=a.capacity, selection_delta_spent=a.selection_delta_spent,
        selection_delta_capacity=a.selection_delta_capacity,
    )


_HEAVIEST_CELLS = 20


def _cells(dataset: DatasetPolicy, allowed: Budget, view: View) -> list[CellSpaceOut]:
    """Per cell of every space a charge is scoped to, under the rule in force: the most-charged cells."""
    accounting = dataset.accounting
    try:
        history = view(accounting.rule)
    except UnsupportedEvent:
        return []
    return [_space_out(space, describer(space.key, dataset), allowed, accounting) for space in history.spaces]


def _space_out(space: SpaceUsage, describe: Callable[[int], dict[str, object]] | None, allowed: Budget,
               accounting: Accounting) -> CellSpaceOut:
    """One space's most-charged cells and the rest. One account per distinct usage: cells charged alike (and
    every untouched cell, `elsewhere` too, at the base alone) share it, keyed by the cell's own sums, which with
    the space's base are its usage."""
    accounts: dict[tuple[int, int], AccountOut] = {}

    def account(i: int | None) -> AccountOut:
        own = (0, 0) if i is None else (int(space.amount[i]), int(space.delta[i]))
        if own not in accounts:
            used = space.base if i is None else space.cell(i)
            accounts[own] = _account(Usage(accounting.rule, *used), allowed, accounting)
        return accounts[own]

    heaviest = [CellOut(cell=cell(describe(i)) if describe is not None else {"#": i}, account=account(i))
                for i in space.heaviest(_HEAVIEST_CELLS)]
    return CellSpaceOut(table=space.key[0], cells=space.size, heaviest=heaviest, elsewhere=account(None))


def budget_out(dataset: DatasetPolicy, allowed: Budget, mine: View, everyone: View | None) -> BudgetOut:
    """A budget and its history: basic Σε/Σδ spent, and what the rule in force leaves (ε at the budget's δ);
    the budgets are the policy's plus what operators granted in the current period."""
    accounting = dataset.accounting
    try:
        allowed = mine.budget(allowed)
        shared_budget = None if dataset.budget is None or everyone is None else everyone.budget(dataset.budget)
    except UnusableBudget as err:
        return unusable(dataset, allowed, mine, err)
    accounts = _accounts(mine, allowed, accounting)
    basic = accounts[0]
    in_force = next((a for a in accounts if a.accounting == accounting.rule), None)
    reported = None
    if allowed.delta > 0:
        epsilon, rule = report.tightest(lambda rule: mine(rule).bound(), allowed.delta)
        if epsilon < float("inf"):
            reported = ReportedOut(epsilon=epsilon, delta=allowed.delta, accounting=rule)
    shared = None
    if shared_budget is not None and everyone is not None:
        totals = _accounts(everyone, shared_budget, accounting)
        total_in_force = next((a for a in totals if a.accounting == accounting.rule), None)
        shared = SharedBudgetOut(
            epsilon=shared_budget.epsilon, delta=shared_budget.delta, accounts=totals,
            epsilon_remaining=0.0 if total_in_force is None else total_in_force.epsilon_remaining,
            delta_remaining=0.0 if total_in_force is None else total_in_force.delta_remaining,
        )
    return displayed(BudgetOut(
        dataset=dataset.name, epsilon=allowed.epsilon, delta=allowed.delta,
        epsilon_spent=basic.epsilon_spent, delta_spent=basic.delta_spent,
        epsilon_remaining=0.0 if in_force is None else in_force.epsilon_remaining,
        delta_remaining=0.0 if in_force is None else in_force.delta_remaining,
        accounting=accounting.rule, accounts=accounts, reported=reported, shared=shared,
        cells=_cells(dataset, allowed, mine),
    ))


def unusable(dataset: DatasetPolicy, policy: Budget, mine: View, err: UnusableBudget) -> BudgetOut:
    """A budget whose grants and policy add up to a δ of 1 or more, as reads show it (GET /v1/budget, the
    dashboard, the metrics, an answer's summary), where the admit refuses every query (budget_ops.UnusableBudget):
    the policy's (ε, δ) without the grants, the basic spend, nothing remaining, and `display` saying why and
    what the operator can do, instead of the error every read would otherwise answer."""
    basic = _accounts(mine, policy, Accounting("basic"))[0]
    return BudgetOut(
        dataset=dataset.name, epsilon=policy.epsilon, delta=policy.delta, epsilon_spent=basic.epsilon_spent,
        delta_spent=basic.delta_spent, epsilon_remaining=0.0, delta_remaining=0.0,
        accounting=dataset.accounting.rule, display=f"unusable: {err}; {err.detail.get('hint', '')}",
    )


def json_value(value: object) -> object:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


def displayed(budget: BudgetOut) -> BudgetOut:
    """`budget` with its `display` text: the figures a person reads, rounded to 4 significant digits (the exact
    fields stay as they are, for programs).

    Example:
        >>> b = BudgetOut(dataset="d", epsilon=5.0, delta=1e-6, epsilon_spent=0.30000000000000004, delta_spent=0.0,
        ...               epsilon_remaining=4.699999999999999, delta_remaining=1e-6)
        >>> displayed(b).display
        'ε 0.3 of 5 spent (basic), 4.7 left (basic); δ 0 of 1e-06 spent, 1e-06 left'
    """
    text = (f"ε {budget.epsilon_spent:.4g} of {budget.epsilon:.4g} spent (basic), "
            f"{budget.epsilon_remaining:.4g} left ({budget.accounting}); "
            f"δ {budget.delta_spent:.4g} of {budget.delta:.4g} spent, {budget.delta_remaining:.4g} left")
    if budget.shared is not None:
        shared = budget.shared
        text += f"; the dataset's shared budget: ε {shared.epsilon_remaining:.4g} of {shared.epsilon:.4g} left"
    return budget.model_copy(update={"display": text})

