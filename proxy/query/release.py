"""Turn the exact per-group measures into a release: partition selection, noise, then post-processing.

Only this module sees exact values, and it lets none of them out: a group appears only if it is public or
passed the noisy threshold; every released number carries noise; HAVING, ORDER BY and LIMIT run on noisy
values; rows come out in key order (or the requested order), never in the engine's data-dependent order.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from mechanisms.sampling import Sampler
from proxy.query.analyse import Analysis
from proxy.query.expr import Value, evaluate
from proxy.query.measures import Aggregate, Measure, measures_of
from proxy.query.price import Price


@dataclass(frozen=True, slots=True)
class Release:
    columns: tuple[str, ...]
    rows: tuple[tuple[Value, ...], ...]


def release(rows: Sequence[Sequence[object]], analysis: Analysis, price: Price, sampler: Sampler) -> Release:
    """The DP answer from the rewritten query's result rows (keys, units, measures…).

    Example:
        >>> from mechanisms.sampling import FixedSampler
        >>> from proxy.query import plan
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("orders", "cid", (ColumnSpec("cid", "BIGINT"),
        ...     ColumnSpec("region", "VARCHAR", groupable=True, public_domain=("N", "S"))))
        >>> p = plan("SELECT region, COUNT(*) AS n FROM orders GROUP BY region", Catalog((t,)),
        ...          epsilon=1.0, delta=0.0, mechanism="laplace")
        >>> release([("S", 7, 9)], p.analysis, p.price, FixedSampler((1,)))
        Release(columns=('region', 'n'), rows=(('N', 1), ('S', 10)))
    """
    n_keys = len(analysis.keys)
    exact = {tuple(row[:n_keys]): tuple(int(v or 0) for v in row[n_keys:]) for row in rows}
    zeros = (0,) * (1 + len(analysis.measures))
    if analysis.partitions == "private":
        cells = sorted(exact, key=_sort_key)
        assert price.selection is not None
        draw_units = sampler.laplace if price.selection.mechanism == "laplace" else sampler.gaussian
        noisy_units = draw_units([exact[c][0] for c in cells], price.selection.scale)
        cells = [c for c, n in zip(cells, noisy_units, strict=True) if n >= price.selection.threshold]
    elif analysis.partitions == "public":
        cells = list(itertools.product(*analysis.domains))
    else:
        cells = [()]

    noisy: list[tuple[int, ...]] = []
    for spec in price.noise:
        values = [exact.get(cell, zeros)[1 + spec.measure] for cell in cells]
        draw = sampler.laplace if spec.mechanism == "laplace" else sampler.gaussian
        noisy.append(draw(values, spec.scale) if cells else ())
    by_measure = {analysis.measures[spec.measure]: column for spec, column in zip(price.noise, noisy, strict=True)}

    out = []
    for i, cell in enumerate(cells):
        aggregates = [_estimate(a, analysis, {m: v[i] for m, v in by_measure.items()}) for a in analysis.aggregates]
        if analysis.having is not None and not evaluate(analysis.having, cell, aggregates):
            continue
        values = tuple(evaluate(o.expr, cell, aggregates) for o in analysis.outputs)
        out.append((values, cell, aggregates))
    for expr, descending in reversed(analysis.order):  # stable sorts, last key first; NULLs last
        out.sort(key=lambda r, e=expr: _order_key(evaluate(e, r[1], r[2]), descending), reverse=descending)
    if analysis.limit is not None:
        out = out[: analysis.limit]
    return Release(tuple(o.name for o in analysis.outputs), tuple(values for values, _, _ in out))


def _estimate(aggregate: Aggregate, analysis: Analysis, noisy: dict[Measure, int]) -> Value:
    """Post-process noisy measures into the aggregate's value (free: DP is closed under post-processing)."""
    measures = measures_of(aggregate, analysis.table)
    first = measures[0]
    value = noisy[first]
    match aggregate.kind:
        case "count" | "count_column" | "count_units":
            return max(0, value)
        case "sum":
            return value if first.grid == 1 else value / first.grid
    count = noisy[measures[1]]
    if count <= 0:
        return None
    mean = (first.centre + value / count) / first.grid
    return min(max(mean, first.lo / first.grid), first.hi / first.grid)


def _sort_key(cell: tuple[object, ...]) -> tuple[tuple[bool, str, object], ...]:
    return tuple((v is None, type(v).__name__, v if v is not None else 0) for v in cell)


def _order_key(value: Value, descending: bool) -> tuple[bool, Value]:
    # ascending: (False, v) before (True, NULL); descending with reverse=True: (True, v) before (False, NULL)
    if descending:
        return (value is not None, value if value is not None else 0)
    return (value is None, value if value is not None else 0)
