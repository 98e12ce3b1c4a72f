"""The parts of a query answer and a preview besides the rows and the budget: the charge (with its cost
under every accounting), the noise and error bars per column, and the partitions.

Split from proxy/http/routes.py; the routes assemble these into `QueryResponse` and `PreviewResponse`.

Example (does an output expression use an aggregate):
    >>> uses_aggregate(Agg(0)), uses_aggregate(3)
    (True, False)
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from accountant import loss
from accountant.cell_scope import CellScope
from accountant.errors import UnsupportedEvent
from accountant.events import Event, to_json
from proxy.http.views.budget import scope_out
from proxy.pipeline import Prepared
from proxy.policy.load import DatasetPolicy
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import measures_of
from proxy.query.expr import Agg
from proxy.query.price.charge import Price
from proxy.query.price.hidden_groups import hidden_groups
from proxy.query.release.error_bars import error_bar, row_interval
from proxy.schemas import ChargeOut, CostOut, NoiseOut, PartitionsOut


def charge_out(price: Price, charge_id: str | None, dataset: DatasetPolicy, scope: CellScope | None) -> ChargeOut:
    return ChargeOut(
        id=charge_id, epsilon=price.epsilon, delta=price.delta, mechanism=price.mechanism,
        composition=price.composition, events=to_json(price.event), accounting=dataset.accounting.rule,
        costs=costs(price), scope=None if scope is None else scope_out(scope, dataset),
    )



def costs(price: Price) -> list[CostOut]:
    """The charge under basic composition, zCDP and (without Gaussian noise) GDP."""
    try:
        return list(_costs_of(price.event, price.epsilon, price.delta))
    except TypeError:  # an event built with a list somewhere is not hashable: computed as it is
        return list(_costs_of.__wrapped__(price.event, price.epsilon, price.delta))


@functools.lru_cache(maxsize=1024)  # a pure function of an immutable event: most answers repeat a few shapes
def _costs_of(event: Event, epsilon: float, delta: float) -> tuple[CostOut, ...]:
    basic = CostOut(accounting="basic", epsilon=epsilon, delta=delta)
    rho, selection = loss.approximate_rho(event)
    zcdp = CostOut(accounting="zcdp", rho=rho, delta=selection)
    try:
        mu, selection = loss.approximate_mu(event)
    except UnsupportedEvent:  # the discrete Gaussian has no proven μ-GDP bound
        return basic, zcdp
    return basic, zcdp, CostOut(accounting="gdp", mu=mu, delta=selection)




def noise(analysis: Analysis, price: Price, confidence: float | None = None) -> list[NoiseOut]:
    """Noise per released aggregate column, in the column's own units, with its error bar at `confidence`
    (proxy/query/release/error_bars.py). Derived columns (AVG, VAR, arithmetic) have no single scale: their scale and
    ci95 are None (absent from the JSON, as every None of a `NoiseOut`)."""
    out = []
    level = 0.95 if confidence is None else float(confidence)
    for output in analysis.outputs:
        if isinstance(output.expr, Agg):
            aggregate = analysis.aggregates[output.expr.index]
            bar = error_bar(analysis, price, output.expr.index, level)
            bars = {"confidence": level, "ci": bar.ci, "ci_times_count": bar.ci_times_count,
                    "rank_error": bar.rank_error}
            if aggregate.kind == "quantile":
                out.append(NoiseOut(column=output.name, mechanism="exponential", scale=None, ci95=None,
                                    method="rank", **bars))
                continue
            if aggregate.kind not in ("avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp"):
                measure = analysis.measures.index(first_measure(analysis, output.expr.index))
                spec = next(n for n in price.noise if n.measure == measure)
                out.append(NoiseOut(column=output.name, mechanism=spec.mechanism, scale=spec.scale / spec.grid,
                                    ci95=spec.ci95 / spec.grid, method="noise", **bars))
                continue
            out.append(NoiseOut(column=output.name, mechanism=price.mechanism, scale=None, ci95=None, **bars))
            continue
        if uses_aggregate(output.expr):
            out.append(NoiseOut(column=output.name, mechanism=price.mechanism, scale=None, ci95=None))
    return out


def noised_outputs(analysis: Analysis) -> list[int]:
    """The outputs `noise` describes, in its order: aggregates and expressions over them."""
    return [j for j, o in enumerate(analysis.outputs) if isinstance(o.expr, Agg) or uses_aggregate(o.expr)]


def with_row_bars(analysis: Analysis, price: Price, rows: Sequence[Sequence[Any]],
                  parts: Sequence[Sequence[tuple[int, ...] | None]], noise: list[NoiseOut]) -> list[NoiseOut]:
    """`noise` with each AVG, VAR and STDDEV column's per-row bars from the row's released noisy parts
    (`Release.parts`; error_bars.row_interval at the entry's confidence): `parts_rows`, `interval_rows` and
    `ci_rows` (the larger distance from the row's value to an end of its interval), method `parts`; none
    where the value is NULL. Public numbers only: free (docs/privacy.md §6)."""
    out = []
    for j, entry in zip(noised_outputs(analysis), noise, strict=True):
        expr = analysis.outputs[j].expr
        if entry.ci_times_count is not None and parts and isinstance(expr, Agg):
            cells = [row[j] for row in parts]
            intervals = [None if p is None or not isinstance(v, int | float) else
                         row_interval(analysis, price, expr.index, p, entry.confidence)
                         for p, v in zip(cells, (r[j] for r in rows), strict=True)]
            entry = entry.model_copy(update={
                "method": "parts",
                "parts_rows": [None if p is None else list(p) for p in cells],
                "interval_rows": [None if i is None else list(i) for i in intervals],
                "ci_rows": [None if i is None else max(r[j] - i[0], i[1] - r[j])
                            for i, r in zip(intervals, rows, strict=True)]})
        out.append(entry)
    return out


def unreliable(analysis: Analysis, rows: Sequence[Sequence[Any]], noise: list[NoiseOut]) -> list[list[int]]:
    """[row, column] of every released value whose error bar is wider than its magnitude: COUNT and SUM by their
    `ci`, AVG, VAR and STDDEV by the row's `ci_rows` (from its interval, in the value's own units; a variance or
    deviation of 0 whose interval reaches above 0 is flagged). Quantiles (a bar in ranks), expressions and NULLs
    are not judged.

    Example:
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> t = TableSchema("o", "c", (ColumnSpec("c", "BIGINT"), ColumnSpec("x", "INTEGER", bounds=(0, 9))))
        >>> a = analyse(parse("SELECT COUNT(*), AVG(x), STDDEV(x) FROM o"), Catalog((t,)))
        >>> bars = [NoiseOut(column="n", mechanism="laplace", scale=1.0, ci95=3.0, ci=3.0),
        ...         NoiseOut(column="a", mechanism="laplace", scale=None, ci95=None, ci_rows=[0.5, 4.0, None]),
        ...         NoiseOut(column="s", mechanism="laplace", scale=None, ci95=None, ci_rows=[0.5, 3.0, 1.0])]
        >>> unreliable(a, [[4, 1.0, 1.0], [3, 3.5, 2.0], [0, None, 0.0]], bars)  # ±3 on 3 is not wider than 3
        [[1, 1], [1, 2], [2, 0], [2, 2]]
    """
    flagged = []
    for j, entry in zip(noised_outputs(analysis), noise, strict=True):
        expr = analysis.outputs[j].expr
        if not isinstance(expr, Agg):
            continue
        for i, row in enumerate(rows):
            value = row[j]
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            width = entry.ci if entry.ci is not None else (entry.ci_rows[i] if entry.ci_rows else None)
            if width is not None and width > abs(value):
                flagged.append([i, j])
    return sorted(flagged)


def first_measure(analysis: Analysis, index: int) -> Any:
    return measures_of(analysis.aggregates[index], analysis.table)[0]


def uses_aggregate(expr: Any) -> bool:
    if isinstance(expr, Agg):
        return True
    return any(uses_aggregate(a) for a in getattr(expr, "args", ()))


def partitions_out(prepared: Prepared) -> PartitionsOut:
    selection = prepared.plan.price.selection
    threshold = None if selection is None else selection.threshold
    return PartitionsOut(kind=prepared.plan.analysis.partitions, threshold=threshold,
                         note=hidden_groups(prepared.plan.analysis, threshold))


def summarised(body: bytes) -> bytes:
    """An answer as sent by default (`detail=summary`): its budget without the per-rule accounts and the per-cell
    spend, its charge without the event tree, the per-rule costs and the scope's cell list and bitmap, and its
    AVG/VAR/STDDEV bars without the noisy parts they were computed from (`parts_rows`; `?detail=cells` and GET
    /v1/budget give them). Display only: the answer as stored, repeated and audited is
    the full one, and every exact figure a program reads stays (ε, δ, spent, remaining, the shared budget).

    Example:
        >>> full = {"ok": True, "charge": {"epsilon": 0.5, "events": {"kind": "laplace"}, "costs": [{}],
        ...         "scope": {"cells": 2, "listed": [{"r": "a"}, {"r": "b"}], "truncated": False, "bitmap": "eJ"}},
        ...         "budget": {"epsilon_remaining": 4.5, "accounts": [{}], "cells": [{}],
        ...                    "shared": {"epsilon_remaining": 9.5, "accounts": [{}]}}}
        >>> charge = json.loads(summarised(json.dumps(full).encode()))["charge"]
        >>> charge["events"], charge["costs"], charge["scope"]
        (None, [], {'cells': 2, 'listed': [], 'truncated': True, 'bitmap': None})
        >>> json.loads(summarised(json.dumps(full).encode()))["budget"]
        {'epsilon_remaining': 4.5, 'accounts': [], 'cells': [], 'shared': {'epsilon_remaining': 9.5, 'accounts': []}}
    """
    answer = json.loads(body)
    if not isinstance(answer, dict) or answer.get("ok") is not True:
        return body  # an error travels as it is
    charge = answer.get("charge")
    if isinstance(charge, dict):
        charge.update(events=None, costs=[])
        scope = charge.get("scope")
        if isinstance(scope, dict):
            scope.update(listed=[], truncated=scope.get("cells", 0) > 0, bitmap=None)
    for entry in answer.get("noise") or []:
        if isinstance(entry, dict):  # the intervals stay; the parts under them are detail
            entry.pop("parts_rows", None)
            for name in [name for name, value in entry.items() if value is None]:
                del entry[name]  # an answer stored before NoiseOut left its nulls out is shown as one is now
    budget = answer.get("budget")
    if isinstance(budget, dict):
        budget.update(accounts=[], cells=[])
        if isinstance(budget.get("shared"), dict):
            budget["shared"]["accounts"] = []
    return json.dumps(answer, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()

