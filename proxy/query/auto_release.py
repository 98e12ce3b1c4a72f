"""The two-step release of a query with automatic bounds, after its one charge: every selection histogram in
one query (`selection_text`), each bound drawn from them privately (`draw`, by the mechanisms of
mechanisms/count_target.py, dp_quantile.py and proxy/query/auto/), and the query re-planned at the bounds drawn
(`plan_at`).
The pipeline runs the selection on the engine and calls `draw` and `plan_at`; nothing here touches an engine.

Example:
    >>> from proxy.query.planner import plan
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"),), max_rows=40, auto_max_rows=True)
    >>> p = plan_at(plan("SELECT COUNT(*) FROM t", Catalog((t,)), epsilon=1.0, delta=0.0, mechanism="laplace"), 4)
    >>> p.analysis.table.max_rows, [(n.sensitivity, n.scale) for n in p.price.noise], p.price.epsilon
    (4, [(4, 4.4444444444444455)], 1.0)
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import math
from collections.abc import Sequence
from fractions import Fraction

from mechanisms import count_target, dp_quantile, laplace
from mechanisms.sampling import Sampler
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import fixed_point
from proxy.query.auto import bounds as auto
from proxy.query.auto import clamp, groups, total
from proxy.query.auto.histograms import selection, slots
from proxy.query.planner import QueryPlan, bounded_sql
from proxy.query.rewrite.on_store import rewrite_ranked
from proxy.query.rewrite.render import DUCKDB, Target


def selection_text(planned: QueryPlan, target: Target = DUCKDB) -> str:
    """Every histogram in one query for `target`'s engine, tagged by `__part`; rendered before the charge, so a
    refusal is free. Empty at the declared limits (bounds.limits_reason): nothing to read."""
    assert planned.auto is not None
    if not planned.auto.parts:
        return ""
    # the store's ranks serve the selection only where they serve the query (bounded_sql: its tree is None)
    return selection(planned.analysis, planned.auto, planned.bounding == "store", target, ranked=planned.tree is None)


def shape_sha256(planned: QueryPlan) -> str:
    """What the selection's histograms are a function of, apart from the data, as the key its chosen bounds are
    kept under for reuse (docs/privacy.md §10.8): the selection query itself (it holds the table or join, the
    WHERE with its literals, the computed and row-level keys, each measured column, expression and FILTER, the
    declared limits and the bounding: the store's ranks or per-query windows; never the salt) and each part's
    bound, column, limit and sensitivity. ε, the parts' targets and the aggregates' other details are left out:
    they change how a bound is drawn from the histograms, not the histograms.

    Example:
        >>> from proxy.query.planner import plan
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("a", "INTEGER", bounds=(0, 9))),
        ...                 max_rows=40, auto_max_rows=True)
        >>> def key(sql, epsilon=1.0, salt=1):
        ...     p = plan(sql, Catalog((t,)), epsilon=epsilon, delta=0.0, mechanism="laplace", salt=salt)
        ...     return shape_sha256(p)
        >>> key("SELECT COUNT(*) FROM t") == key("SELECT COUNT(*) AS n FROM t", epsilon=0.1, salt=2)
        True
        >>> key("SELECT COUNT(*) FROM t") == key("SELECT COUNT(*) FROM t WHERE a > 3")
        False
    """
    assert planned.auto is not None
    parts = [(p.bound, p.column, p.limit, p.sensitivity) for p in planned.auto.parts]
    text = json.dumps([selection_text(planned), parts, planned.bounding], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def plan_reused(planned: QueryPlan, chosen: auto.ChosenBounds) -> QueryPlan:
    """The plan at bounds an earlier query of the same shape chose (kept by the ledger), run as if they were
    declared: no selection, and the query's price at the limits on the whole ε (`planned.unselected`), its noise
    then calibrated at the kept bounds exactly as at chosen ones (`plan_at`: each part keeps its ε at the limits,
    which the split of §5 fixes from the query's shape alone), so the charge is the fixed-bounds price at that ε.

    Example:
        >>> from proxy.query.planner import plan
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"),), max_rows=40, auto_max_rows=True)
        >>> p = plan("SELECT COUNT(*) FROM t", Catalog((t,)), epsilon=1.0, delta=0.0, mechanism="laplace")
        >>> kept = auto.ChosenBounds((auto.ChosenBound("max_rows", None, 4.0, 40, 0.1, 1.4),), 4, 1)
        >>> r = plan_reused(p, kept)
        >>> r.auto, r.price.epsilon, [(n.sensitivity, n.scale) for n in r.price.noise]  # fixed at 4: scale 4/1
        (None, 1.0, [(4, 4.0)])
    """
    assert planned.auto is not None and planned.auto.parts and planned.unselected is not None
    return plan_at(dataclasses.replace(planned, price=planned.unselected, auto=None), chosen)


def draw(analysis: Analysis, chooser: auto.AutoBounds, rows: Sequence[Sequence[object]],
         sampler: Sampler) -> auto.ChosenBounds:
    """The bounds drawn from the tagged histogram rows: each part's exponential mechanism at its own ε."""
    by_part: dict[int, list[tuple[object, object, int]]] = {}
    for part, a, b, n in rows:
        by_part.setdefault(int(part), []).append((int(a), int(b), int(n)))  # type: ignore[call-overload]
    table = analysis.table
    k, g = table.max_rows, analysis.max_groups
    clamps: dict[str, list[float]] = {}
    caps: list[tuple[str, int]] = []
    chosen: list[auto.ChosenBound] = []
    values: dict[int, float] = {}
    # max_groups first: the rows per cell are then drawn over the g largest cells of each unit (sensitivity g,
    # at the same ε as recorded: the mechanism's pure ε is Δ/b whichever g it runs at)
    order = sorted(range(len(chooser.parts)), key=lambda i: chooser.parts[i].bound != "max_groups")
    for i in order:
        part, slot = chooser.parts[i], slots(chooser)[i]
        got = by_part.get(slot, [])
        value: float
        if part.bound == "max_rows":
            grouped = chooser.part("max_groups") is not None
            cells = [(a, n) for a, r, n in got if not grouped or r <= g]
            # by the error it causes: t = τ cells per cell a unit keeps (part.q, bounds.cell_target; g once drawn)
            cells_per_unit = g if grouped else part.sensitivity
            # a quantile-only query: t = ρ·C, ρ = part.q, a share of the cells read (bounds.rows_share)
            share = Fraction(part.q) if part.relative else None
            k = value = auto.choose_bound(cells, limit=int(part.limit), target=Fraction(part.q) * cells_per_unit,
                                          epsilon=part.epsilon, sensitivity=cells_per_unit, sampler=sampler,
                                          share=share)
        elif part.bound == "max_groups":
            # candidates up to the groups a unit can reach in the release (public domains), the last holding every
            # unit at or beyond it: each unit still in one bin
            grid = auto.bound_grid(groups.domain_limit(analysis))
            binned = [0] * len(grid)
            for c, units in enumerate(groups.histogram(got, int(part.limit)), start=1):
                binned[min(bisect.bisect_left(grid, c), len(grid) - 1)] += units
            # units beyond g, with the target τ of one cell (bounds.cell_target): each unit is in one bin
            g = value = grid[count_target.index(count_target.counts_above(binned), target=part.q,
                                                epsilon=part.epsilon, sensitivity=part.sensitivity, sampler=sampler)]
        elif part.bound == "total":  # t (part.q) is a float of the plan: its exact rational is the target
            spec = table.column(part.column or "")
            assert spec is not None and spec.bounds is not None
            grid, lo, hi = fixed_point(spec)
            cap = total.choose_cap(got, limit=total.total_limit(analysis, spec),
                                        magnitude=max(abs(lo), abs(hi)), t=Fraction(part.q), epsilon=part.epsilon,
                                        sampler=sampler)
            caps.append((spec.name, cap))
            value = cap / grid
        else:
            spec = table.column(part.column or "")
            assert spec is not None and spec.bounds is not None
            grid_, up, down = clamp.histograms(got, spec.bounds, spec.type)
            upper = part.bound == "upper"
            value = grid_[dp_quantile.quantile_index(up if upper else down, part.q if upper else 1 - part.q,
                                                     part.epsilon, part.sensitivity, sampler)]
            clamps.setdefault(spec.name, [spec.bounds[0], spec.bounds[1]])[1 if upper else 0] = value
        values[i] = value
    for i, part in enumerate(chooser.parts):
        epsilon = laplace.epsilon(part.selection.sensitivity, part.selection.scale)  # as the ledger charges it
        chosen.append(auto.ChosenBound(part.bound, part.column, values[i], part.limit, epsilon, part.q))
    ordered = tuple((name, min(lo, hi), max(lo, hi)) for name, (lo, hi) in clamps.items())
    return auto.ChosenBounds(tuple(chosen), int(k), int(g), ordered, tuple(caps))


def preview(chooser: auto.AutoBounds, analysis: Analysis) -> auto.ChosenBounds:
    """The bounds a preview reports: their limits and costs; the bounds themselves need the data. At the
    declared limits (no parts), what the query runs at: the limits, and why."""
    parts = tuple(auto.ChosenBound(p.bound, p.column, None, p.limit,
                                   laplace.epsilon(p.selection.sensitivity, p.selection.scale), p.q)
                  for p in chooser.parts)
    return auto.ChosenBounds(parts, analysis.table.max_rows, analysis.max_groups, note=chooser.note)


def plan_at(planned: QueryPlan, chosen: auto.ChosenBounds | int) -> QueryPlan:
    """The plan at the chosen bounds (or at max_rows = k): its SQL bounds at them and its noise is calibrated to
    them, at the same charge. A plan at the declared limits is its own answer."""
    if planned.auto is not None and not planned.auto.parts:
        return planned
    if isinstance(chosen, int):
        analysis = auto.at_bound(planned.analysis, chosen)
    else:
        analysis = auto.at_bound(planned.analysis, chosen.max_rows, chosen.max_groups, chosen.clamps, chosen.caps)
    assert all(math.isfinite(lo) and math.isfinite(hi) for _, lo, hi in getattr(chosen, "clamps", ()))
    bounded = auto.for_sql(analysis, planned.analysis.table)
    if planned.bounding == "store" and planned.tree is None:  # the store's rank filter served it at the limits
        tree, sql = None, rewrite_ranked(bounded, planned.salt)  # (a join needs the catalog to tell: it did)
    else:
        tree, sql = bounded_sql(bounded, planned.salt, planned.bounding)
    return dataclasses.replace(planned, analysis=analysis, sql=sql, tree=tree,
                               price=auto.price_at(planned.price, analysis, analysis.table.max_rows))
