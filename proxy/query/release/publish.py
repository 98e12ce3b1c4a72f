"""Turn the exact per-group measures into a release: partition selection, noise, then post-processing.

Only this module sees exact values, and it lets none of them out: a group appears only if it is public or
passed the noisy threshold; every released number carries noise; HAVING, ORDER BY and LIMIT run on noisy
values; rows come out in key order (or the requested order), never in the engine's data-dependent order.
Every step is total on any data: exact values are clipped to what the sampler accepts (clipping is
1-Lipschitz, so no sensitivity grows), and group keys are read as their declared type (types.canonical), so
the engine's DATE, REAL and DECIMAL values match the policy's public domain and no key reveals a sign (-0.0).
Noise and estimates are computed per column for all cells at once.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal

import numpy as np

from mechanisms.sampling import MAX_ABS_VALUE, Sampler
from proxy.query import types
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import SPREAD_KINDS, Aggregate, Measure, measures_of
from proxy.query.analyse.spread import variance
from proxy.query.expr import Agg, Key, Value, evaluate
from proxy.query.price.charge import Price
from proxy.query.price.quantiles import release_quantile

_LARGEST = MAX_ABS_VALUE - 1


@dataclass(frozen=True, slots=True)
class Release:
    columns: tuple[str, ...]
    rows: tuple[tuple[Value, ...], ...]
    # per row and column: the noisy count an AVG, VAR or STDDEV was divided by (its row's error bar is the
    # column's ci_times_count over it), else None; released noisy values, so post-processing of the release
    counts: tuple[tuple[float | None, ...], ...] = field(default=(), repr=False, compare=False)
    # per row and column: the noisy measures an AVG, VAR or STDDEV was computed from (error_bars.row_interval;
    # AVG: centred sum, count; VAR/STDDEV: count, centred sum, centred squares), else None; released values
    parts: tuple[tuple[tuple[int, ...] | None, ...], ...] = field(default=(), repr=False, compare=False)


def release(rows: Sequence[Sequence[object]], analysis: Analysis, price: Price, sampler: Sampler) -> Release:
    """The DP answer from the rewritten query's result rows (keys, units, measures…).

    Example:
        >>> from mechanisms.sampling import FixedSampler
        >>> from proxy.query.planner import plan
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("orders", "cid", (ColumnSpec("cid", "BIGINT"),
        ...     ColumnSpec("region", "VARCHAR", groupable=True, public_domain=("N", "S"))))
        >>> p = plan("SELECT region, COUNT(*) AS n FROM orders GROUP BY region", Catalog((t,)),
        ...          epsilon=1.0, delta=0.0, mechanism="laplace")
        >>> release([("S", 7, 9)], p.analysis, p.price, FixedSampler((1,)))
        Release(columns=('region', 'n'), rows=(('N', 1), ('S', 10)))
    """
    exact = _exact(rows, analysis)
    zeros = (0,) * (1 + len(analysis.measures))
    if analysis.partitions == "private":
        assert price.selection is not None
        candidates = list(exact)
        draw_units = sampler.laplace if price.selection.mechanism == "laplace" else sampler.gaussian
        noisy_units = np.asarray(draw_units([exact[c][0] for c in candidates], price.selection.scale))
        kept = np.flatnonzero(noisy_units >= price.selection.threshold) if candidates else ()
        cells = sorted((candidates[i] for i in kept), key=_sort_key)
    elif analysis.partitions == "public":
        cells = list(itertools.product(*analysis.domains))
    else:
        cells = [()]

    noisy: dict[Measure, np.ndarray] = {}
    held = [exact.get(cell, zeros) for cell in cells]
    for spec in price.noise:
        values = list(map(operator.itemgetter(1 + spec.measure), held))
        draw = sampler.laplace if spec.mechanism == "laplace" else sampler.gaussian
        noisy[analysis.measures[spec.measure]] = np.asarray(draw(values, spec.scale) if cells else (), dtype=np.int64)
    columns = [[] if a.kind == "quantile" else _estimates(a, analysis, noisy) for a in analysis.aggregates]
    for spec in price.quantiles:  # one exponential-mechanism (or joint) draw per cell (docs/privacy.md §9)
        histograms = [exact[cell][1 + spec.measure] if cell in exact else None for cell in cells]
        for index, values in release_quantile(spec, analysis.measures[spec.measure], histograms, sampler).items():
            columns[index] = values
    shown = [tuple(map(_shown, cell)) for cell in cells]
    per_cell = list(zip(*columns, strict=True)) if columns else [()] * len(cells)
    parts = _parts(analysis, noisy, len(cells))
    denominators = _denominators(parts)
    names = tuple(o.name for o in analysis.outputs)

    if analysis.having is None and not analysis.order and all(isinstance(o.expr, Key | Agg) for o in analysis.outputs):
        # the common case, columns picked whole: no expression evaluated per cell
        picked = [_pick(o.expr, shown, columns) for o in analysis.outputs]
        out_rows = list(zip(*picked, strict=True)) if picked else [()] * len(cells)
        if analysis.limit is not None:
            out_rows = out_rows[: analysis.limit]
        return Release(names, tuple(out_rows), tuple(denominators[: len(out_rows)]), tuple(parts[: len(out_rows)]))

    out = []
    for index, (cell, aggregates) in enumerate(zip(shown, per_cell, strict=True)):
        if analysis.having is not None and not evaluate(analysis.having, cell, aggregates):
            continue
        values = tuple(evaluate(o.expr, cell, aggregates) for o in analysis.outputs)
        out.append((values, cell, aggregates, index))
    for expr, descending in reversed(analysis.order):  # stable sorts, last key first; NULLs last
        out.sort(key=lambda r, e=expr: _order_key(evaluate(e, r[1], r[2]), descending), reverse=descending)
    if analysis.limit is not None:
        out = out[: analysis.limit]
    return Release(names, tuple(r[0] for r in out), tuple(denominators[r[3]] for r in out),
                   tuple(parts[r[3]] for r in out))


def _exact(rows: Sequence[Sequence[object]], analysis: Analysis) -> dict[tuple[Value, ...], tuple[object, ...]]:
    """Per group (its keys read as their declared type), the exact measures after __units: clipped, histograms
    as they are. Column by column (one `map` per column), the same dict a loop over rows would build."""
    if not rows:
        return {}
    n_keys = len(analysis.keys)
    columns = list(zip(*rows, strict=True))
    histogram = [False] + [m.kind == "histogram" for m in analysis.measures]  # after __units: read as is
    values = zip(*(c if h else map(clip, c) for h, c in zip(histogram, columns[n_keys:], strict=True)),
                 strict=True)
    if not n_keys:
        return dict(zip([()] * len(rows), values, strict=True))
    read = [types.reader(_spec_type(analysis, k)) for k in analysis.keys]
    keys = zip(*(map(r, c) for r, c in zip(read, columns[:n_keys], strict=True)), strict=True)
    return dict(zip(keys, values, strict=True))


def _denominators(parts: list[tuple[tuple[int, ...] | None, ...]]) -> list[tuple[float | None, ...]]:
    """Per cell and output, the noisy count an AVG, VAR or STDDEV was divided by (else None)."""
    if parts and all(p is None for p in parts[0]):  # no such output (an output has parts in every cell or none)
        return [parts[0]] * len(parts)  # type: ignore[list-item]  # a row of Nones, shared
    return [tuple(None if p is None else float(p[1] if len(p) == 2 else p[0]) for p in row) for row in parts]


def _parts(analysis: Analysis, noisy: dict[Measure, np.ndarray], n_cells: int
           ) -> list[tuple[tuple[int, ...] | None, ...]]:
    """Per cell, per output: the noisy measures an AVG, VAR or STDDEV output is computed from, in
    measures_of's order (None for any other output)."""
    per_output: list[list[tuple[int, ...]] | None] = []
    for output in analysis.outputs:
        aggregate = analysis.aggregates[output.expr.index] if isinstance(output.expr, Agg) else None
        if aggregate is None or (aggregate.kind != "avg" and aggregate.kind not in SPREAD_KINDS):
            per_output.append(None)
            continue
        measures = measures_of(aggregate, analysis.table)
        if not all(m in noisy for m in measures):
            per_output.append(None)
            continue
        columns = [noisy[m].tolist() for m in measures]
        per_output.append([tuple(int(c[i]) for c in columns) for i in range(n_cells)])
    if all(c is None for c in per_output):  # no such output: one row of Nones shared by every cell
        return [(None,) * len(per_output)] * n_cells
    return [tuple(None if c is None else c[i] for c in per_output) for i in range(n_cells)]


def clip(value: object) -> int:
    """An exact measure as the sampler takes it: NULL is 0, and magnitudes stop just below 2^62.

    Clipping is 1-Lipschitz, so neighbouring inputs stay as close as before: the sensitivity holds, and a
    sum that a heavy table pushes past 2^62 can no longer fail after admission on one person's value.

    Example:
        >>> clip(None), clip(5), clip(2**70) == 2**62 - 1, clip(-(2**100)) == -(2**62 - 1)
        (0, 5, True, True)
    """
    number = int(value or 0)  # type: ignore[call-overload]  # DuckDB returns int (HUGEINT included) or None
    return number if -_LARGEST <= number <= _LARGEST else max(-_LARGEST, min(_LARGEST, number))


def _spec_type(analysis: Analysis, key: str) -> str:
    spec = analysis.table.column(key)
    assert spec is not None
    return spec.type


def _estimates(aggregate: Aggregate, analysis: Analysis, noisy: dict[Measure, np.ndarray]) -> list[Value]:
    """Post-process noisy measures into the aggregate's values, all cells at once (DP is closed under
    post-processing)."""
    measures = measures_of(aggregate, analysis.table)
    first = measures[0]
    value = noisy[first]
    match aggregate.kind:
        case "count" | "count_column" | "count_units":
            return np.maximum(value, 0).tolist()  # type: ignore[no-any-return]
        case "sum":
            return (value if first.grid == 1 else value / first.grid).tolist()  # type: ignore[no-any-return]
    if aggregate.kind in SPREAD_KINDS:
        return variance(value, noisy[measures[1]], noisy[measures[2]], measures[1], aggregate.kind)
    count = noisy[measures[1]]
    positive = count > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        # a capped sum (auto/total.py) is not centred: AVG = noisy SUM / noisy COUNT of the same kept rows
        centre = first.centre if first.kind == "centred_sum" else 0
        mean = (centre + value / np.where(positive, count, 1)) / first.grid
    mean = np.clip(mean, first.lo / first.grid, first.hi / first.grid)
    return [m if ok else None for m, ok in zip(mean.tolist(), positive.tolist(), strict=True)]


def _pick(expr: Key | Agg, cells: list[tuple[Value, ...]], columns: list[list[Value]]) -> list[Value]:
    return [cell[expr.index] for cell in cells] if isinstance(expr, Key) else columns[expr.index]


def _shown(value: object) -> Value:
    """A key as released: a DECIMAL as a JSON number (int when whole)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return value  # type: ignore[return-value]


def _sort_key(cell: tuple[object, ...]) -> tuple[tuple[bool, str, object], ...]:
    return tuple((v is None, type(v).__name__, v if v is not None else 0) for v in cell)


def _order_key(value: Value, descending: bool) -> tuple[bool, Value]:
    # ascending: (False, v) before (True, NULL); descending with reverse=True: (True, v) before (False, NULL)
    if descending:
        return (value is not None, value if value is not None else 0)
    return (value is None, value if value is not None else 0)
