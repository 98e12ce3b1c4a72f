"""The two-step release of a query on a table with `max_rows = "auto"`, run after its one charge: read the
selection histogram from the engine, choose k privately, and re-plan the query at k (proxy/query/auto_bounds.py
holds the math; this module only connects it to an engine).

Example:
    >>> from proxy.query import plan
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"),), max_rows=40, auto_max_rows=True)
    >>> p = plan_at(plan("SELECT COUNT(*) FROM t", Catalog((t,)), epsilon=1.0, delta=0.0, mechanism="laplace"), 4)
    >>> p.analysis.table.max_rows, [(n.sensitivity, n.scale) for n in p.price.noise], p.price.epsilon
    (4, [(4, 4.4444444444444455)], 1.0)
"""

from __future__ import annotations

import dataclasses

from mechanisms import laplace
from mechanisms.sampling import Sampler
from proxy.engine import QueryEngine
from proxy.query import QueryPlan, bounded_sql
from proxy.query import auto_bounds as auto
from proxy.query.render import DUCKDB
from proxy.store import StoreEngine


def selection_text(planned: QueryPlan, engine: QueryEngine | StoreEngine) -> str:
    """The histogram query as `engine` reads it; rendered before the charge, so a refusal is free."""
    return auto.selection_text(planned.analysis, planned.bounding == "store", getattr(engine, "target", DUCKDB))


def choose(
    planned: QueryPlan, engine: QueryEngine | StoreEngine, sql: str, sampler: Sampler, timeout_s: float | None,
) -> auto.ChosenBounds:
    """Run the selection (`sql`: `selection_text`) and draw the bound."""
    chooser = planned.auto
    assert chooser is not None
    rows = engine.run(sql, timeout_s).rows
    k = auto.choose_bound(rows, limit=chooser.limit, q=chooser.q, epsilon=chooser.epsilon,
                          sensitivity=chooser.cells_per_unit, sampler=sampler)
    epsilon = laplace.epsilon(chooser.selection.sensitivity, chooser.selection.scale)  # as the ledger charges it
    return auto.ChosenBounds(k, chooser.limit, epsilon, chooser.q)


def plan_at(planned: QueryPlan, k: int) -> QueryPlan:
    """The plan with max_rows = k: its SQL bounds at k and its noise is calibrated to k, at the same charge."""
    analysis = auto.at_bound(planned.analysis, k)
    tree, sql = bounded_sql(analysis, planned.salt, planned.bounding)
    return dataclasses.replace(planned, analysis=analysis, sql=sql, tree=tree,
                               price=auto.price_at(planned.price, analysis, k))
