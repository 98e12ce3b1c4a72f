"""The query at the bounds drawn (docs/privacy.md §10, §10.1): the analysis its release reads (`at_bound`, the
clamps on the finest grid that keeps every integer sensitivity within the charge), the analysis its SQL reads
(`for_sql`) and its noise at the same charge (`price_at`: each part keeps the ε it has at the limits). Pure,
data-independent functions of the chosen bounds: post-processing of the selection.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

from mechanisms import laplace
from mechanisms.gaussian import zcdp
from mechanisms.rounding import sqrt_up
from proxy.query.analyse import row_expr
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import Aggregate, capped, measures_for
from proxy.query.auto import quantile
from proxy.query.auto.gauss import sigma_at
from proxy.query.catalog import TableSchema
from proxy.query.price.charge import Price, release_l0
from proxy.query.price.quantiles import QuantileSpec


def price_at(priced: Price, analysis: Analysis, k: int) -> Price:
    """The noise at bound k: each Laplace part keeps the ε it has at the limit (b_j = Δ_j(k)/ε_j rounded up),
    so no part costs more than the admitted event says. `priced` is the plan's price (event: AutoBoundsEvent).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> from proxy.query.price.charge import price
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"),), max_rows=100, auto_max_rows=True)
        >>> a = analyse(parse("SELECT COUNT(*) FROM t"), Catalog((t,)))
        >>> at_limit = price(a, epsilon=0.5, delta=0.0, mechanism="laplace")
        >>> [(n.sensitivity, n.scale) for n in price_at(at_limit, a, 7).noise]
        [(7, 14.0)]
    """
    noise = []
    for spec in priced.noise:
        if not spec.sensitivity:
            noise.append(spec)
            continue
        measure = analysis.measures[spec.measure]
        if spec.mechanism == "gaussian":  # Δ2 = √(g·s(k)²) <= the limit's; σ by gauss.sigma_at
            delta2 = sqrt_up(release_l0(analysis) * Fraction(measure.sensitivity(k)) ** 2)
            if measure.cap:  # a capped unit's L2 is at most its L1 <= C (privacy.md §10.2)
                delta2 = min(delta2, Fraction(measure.cap))
            sigma = sigma_at(delta2, spec.sensitivity, spec.scale) if delta2 else 1.0
            noise.append(dataclasses.replace(spec, sensitivity=delta2, scale=sigma, grid=measure.grid,
                                             ci95=zcdp.ci_halfwidth(sigma)))
            continue
        part = laplace.epsilon(spec.sensitivity, spec.scale)
        sensitivity = measure.release_l1(release_l0(analysis), k)  # L0 = min(g, d): price/charge.py
        scale = laplace.scale_for(sensitivity, part) if sensitivity else 1.0
        assert math.isfinite(scale) and laplace.epsilon(sensitivity, scale) <= part if sensitivity else True
        noise.append(dataclasses.replace(spec, sensitivity=sensitivity, scale=scale, grid=measure.grid,
                                         ci95=laplace.ci_halfwidth(scale)))
    quantiles = tuple(quantile.at_bound(q, k, analysis.measures[q.measure].points)
                      if isinstance(q, QuantileSpec) else quantile.joint_at_bound(q, k) for q in priced.quantiles)
    return dataclasses.replace(priced, noise=tuple(noise), quantiles=quantiles)


def at_bound(analysis: Analysis, k: int, g: int | None = None,
             clamps: tuple[tuple[str, float, float], ...] = (), caps: tuple[tuple[str, int], ...] = ()) -> Analysis:
    """The analysis at max_rows = k, max_groups = g, the chosen clamps (each within its declared limit) and caps: what
    the release reads. The rewrite reads `for_sql` of it: the store's clamped grid column is at the declared
    limits, so the SQL must see the declared bounds (a sum clamped tighter then reads its measure's per-row clamp).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("x", "INTEGER", bounds=(0, 1000), auto_bounds=True)), max_groups=8, auto_max_groups=True)
        >>> a = at_bound(analyse(parse("SELECT g, SUM(x) FROM t GROUP BY g"), Catalog((t,))), 1, 3, caps=(("x", 90),))
        >>> [(m.kind, m.lo, m.hi, m.cap) for m in a.measures], a.max_groups
        ([('sum', 0, 1000, 90)], 3)
        >>> one = TableSchema("t", "u", t.columns, one_row_per_unit=True)  # clamped, not capped: one row per unit
        >>> a = at_bound(analyse(parse("SELECT SUM(x) FROM t"), Catalog((one,))), 1, None, (("x", 0, 90),))
        >>> [(m.kind, m.lo, m.hi) for m in a.measures], a.table.columns[2].bounds
        ([('sum', 0, 90)], (0, 90))
        >>> for_sql(a, one).table.columns[2].bounds
        (0, 1000)
    """
    table = analysis.table
    g = analysis.max_groups if g is None else g
    assert 1 <= k <= table.max_rows and 1 <= g <= analysis.max_groups
    chosen = {name.lower(): (lo, hi) for name, lo, hi in clamps}
    cap_of = {name.lower(): cap for name, cap in caps}
    measures = analysis.measures
    if chosen or cap_of:
        columns = []
        for c in table.columns:
            bounds = chosen.get(c.name.lower())
            if c.name.lower() in cap_of:
                assert c.auto_bounds and cap_of[c.name.lower()] >= 1
                c = dataclasses.replace(c, total_cap=cap_of[c.name.lower()])
            if bounds is not None:
                assert c.auto_bounds and c.bounds is not None and bounds[0] <= bounds[1]
                # kept inside the declared clamp (candidates are: auto/clamp.py), a data-independent step after
                # the draw (post-processing); the declared clamp when nothing is left
                inside = (max(c.bounds[0], bounds[0]), min(c.bounds[1], bounds[1]))
                bounds = inside if inside[0] <= inside[1] else c.bounds
                # a capped sum keeps the declared clamp (cap_bounds) when the column's quantiles or spreads chose
                # a tighter one: the cap, not the clamp, bounds it (the rewrite clamps each measure at its own).
                # The grids start at the declared clamp's (grid_bounds; refined below by `_finest_grids`)
                c = dataclasses.replace(c, bounds=bounds, cap_bounds=c.bounds if capped(c, table) else None,
                                        grid_bounds=c.grid_bounds or c.bounds)
            columns.append(c)
        table = _finest_grids(analysis, dataclasses.replace(table, columns=tuple(columns)), k, set(chosen))
        # an expression inside an aggregate reads each column through the column's chosen clamp, its range by the
        # same interval arithmetic over them (row_expr.at_clamps; docs/privacy.md §10.10)
        final = {c.name.lower(): c.bounds for c in table.columns if c.name.lower() in chosen and c.bounds}
        aggregates = tuple(_expression_at(a, final) for a in analysis.aggregates)
        measures = measures_for(aggregates, table)
        assert [m.kind for m in measures] == [m.kind for m in analysis.measures]
        limit_k = analysis.table.max_rows  # monotone in every bound: within the charge
        assert all(m.sensitivity(k) <= old.sensitivity(limit_k)
                   for m, old in zip(measures, analysis.measures, strict=True) if m.expr)
        analysis = dataclasses.replace(analysis, aggregates=aggregates)
    bounded = dataclasses.replace(table, max_rows=k, max_groups=g if analysis.max_groups > 1 else table.max_groups)
    return dataclasses.replace(analysis, table=bounded, max_groups=g, measures=measures)


def _expression_at(aggregate: Aggregate, clamps: dict[str, tuple[float, float]]) -> Aggregate:
    """SUM/AVG of an expression with each of its columns in `clamps` (lower-case names) clamped there, its range
    by interval arithmetic over the new clamps (inside the range at the declared bounds: every clamp lies inside
    its declared one, and interval arithmetic is inclusion-monotone), on the declared range's fixed-point grid
    (a tighter range's own, finer grid could give a larger integer Δ than the charge's). Other aggregates as
    they are. Pure: a function of the chosen bounds (post-processing of the selection).

    Example:
        >>> from proxy.query.analyse.measures import Aggregate
        >>> sql = 'CASE WHEN "x" IS NULL THEN NULL ELSE LEAST(GREATEST(CAST("x" AS DOUBLE), 0.0), 90.0) END * 2.0'
        >>> a = _expression_at(Aggregate("sum", None, expr=sql, bounds=(0.0, 180.0)), {"x": (1, 8)})
        >>> a.bounds, a.grid_bounds, a.expr.count("8.0")
        ((2.0, 16.0), (0.0, 180.0), 1)
    """
    if not aggregate.expr or aggregate.kind not in ("sum", "avg") or aggregate.bounds is None:
        return aggregate
    reads = [c for c in row_expr.clamped_columns(aggregate.expr) if c.lower() in clamps]
    if not reads:
        return aggregate
    at = row_expr.at_clamps(aggregate.expr, {c: clamps[c.lower()] for c in reads})
    lo, hi = aggregate.bounds
    # inside the declared range by the arithmetic; the intersection keeps it so whatever a float does
    inside = (max(lo, at.lo), min(hi, at.hi))
    return dataclasses.replace(aggregate, expr=at.sql, bounds=inside if inside[0] <= inside[1] else (lo, hi),
                               grid_bounds=aggregate.grid_bounds or aggregate.bounds)


def _finest_grids(analysis: Analysis, table: TableSchema, k: int, names: set[str]) -> TableSchema:
    """`table` with each chosen clamp (columns `names`) on the finest fixed-point grid, 2^j times the declared
    clamp's (its `grid_bounds` scaled by 2^-j), at which no measure's integer sensitivity at k exceeds the charged
    one at the limit. The noise is an integer mechanism on the grid: its privacy is that of its integer (Δ, σ),
    so a tighter clamp's own finer grid, whose Δ in grid units can exceed the charged Δ, would fail the noise's
    calibration after the charge; j = 0 (the declared grid, where the clamp inside the declared one and k <= the
    limit give Δ_k <= Δ_L) always fits. A data-independent function of the chosen bounds: post-processing."""
    limit_k = analysis.table.max_rows

    def fits(candidate: TableSchema) -> bool:
        return all(m.sensitivity(k) <= old.sensitivity(limit_k) for m, old in
                   zip(measures_for(analysis.aggregates, candidate), analysis.measures, strict=True))

    assert fits(table)
    for name in sorted(names):
        spec = table.column(name)
        assert spec is not None and spec.bounds is not None and spec.grid_bounds is not None
        lo, hi = spec.grid_bounds
        if spec.kind == "integer" and float(lo).is_integer() and float(hi).is_integer():
            continue  # grid 1, as declared: whole numbers are exact
        magnitude = max(abs(b) for b in spec.bounds) or 2.0**-20
        top = min(50, max(0, math.ceil(math.log2(max(abs(lo), abs(hi)) / magnitude)) + 1))
        for j in range(top, 0, -1):
            scaled = dataclasses.replace(spec, grid_bounds=(math.ldexp(lo, -j), math.ldexp(hi, -j)))
            candidate = dataclasses.replace(table, columns=tuple(scaled if c is spec else c for c in table.columns))
            if fits(candidate):
                table = candidate
                break
    return table


def for_sql(analysis: Analysis, declared: TableSchema) -> Analysis:
    """`analysis` (at chosen bounds) with the `declared` table's columns, as the rewrite must read it: the
    store's clamped grid column holds values clamped to the declared bounds, and the rewrite reads it only for
    a measure clamped exactly there (rewrite/on_store.py); any tighter clamp is computed per row from the measure."""
    return dataclasses.replace(analysis, table=dataclasses.replace(analysis.table, columns=declared.columns))
