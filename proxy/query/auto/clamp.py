"""A column's clamp `bounds = "auto"`: chosen per query within declared outer limits (docs/privacy.md §10, issue #12).

A column declares `bounds = "auto"` and `bounds_limit = [lo, hi]`. A query that sums or averages it spends its
part of the selection share on the DP q-quantile of the column's values under the query's WHERE (the upper
bound U), and, when lo != 0, the DP (1 − q)-quantile (the lower bound L); it then clamps to [L, U] ⊆ [lo, hi].

Each unit's rows are bounded first: the selection reads at most `VALUES_PER_UNIT` (m) of a unit's rows
(its stored row rank <= m, or a per-query order by a hash of the value), so a unit moves the histogram by
at most m in L1, the sensitivity of the exponential mechanism (mechanisms/dp_quantile.py). Values are binned
on a signed geometric grid: ±M·2^(−j/2), j = 0..J, with M = max(|lo|, |hi|), 0, lo and hi (a bound within
a factor √2 of any quantile). Binning runs in the engine; only (sign, j, count) rows come back.

As Amin et al. (ICML 2019) and Google's/Tumult's bounds: a quantile of the values, with the per-unit
contribution bounded. Where this improves: the quantile is of the query's own rows (its WHERE), read in
the same engine call as the other bounds, and its cost is part of one exactly re-accountable charge.

Example:
    >>> grid = clamp_grid((0.0, 100.0), "DOUBLE")
    >>> len(grid), grid[0], [round(p, 2) for p in grid[-4:]]
    (66, 0.0, [35.36, 50.0, 70.71, 100.0])
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from decimal import ROUND_CEILING, Context, Decimal

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.analysis import Analysis
from proxy.query.catalog import ColumnSpec
from proxy.query.rewrite import store_layout

VALUES_PER_UNIT = 8  # m: the selection reads at most m rows of each unit (its L1 sensitivity)
STEPS = 64  # J: the geometric grid reaches down to M·2^−32
_EXACT = Context(prec=800)  # a DOUBLE's exact decimal expansion has at most 767 digits


def _points(magnitude: float) -> list[float]:
    return [magnitude / 2 ** (j / 2) for j in range(STEPS + 1)]


def clamp_grid(limit: tuple[float, float], type_name: str) -> tuple[float, ...]:
    """The candidate bounds within `limit`, ascending: values of the column's type only (whole numbers for an
    integer column, multiples of 10^-scale for a DECIMAL), so every chosen clamp holds a value of the type.

    Example:
        >>> clamp_grid((-4, 10), "BIGINT")
        (-4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 8, 10)
        >>> clamp_grid((0.0, 0.01), "DECIMAL(9,3)")
        (0.0, 0.001, 0.002, 0.003, 0.004, 0.006, 0.008, 0.01)
    """
    lo, hi = limit
    magnitude = max(abs(lo), abs(hi))
    points = _points(magnitude) if magnitude > 0 else []
    values = {lo, hi, *(p for p in points if lo <= p <= hi), *(-p for p in points if lo <= -p <= hi)}
    if lo <= 0 <= hi:
        values.add(0)
    found = types.grid(type_name)
    if found is not None:  # each point moved up onto the type's grid, within the type's values inside the limit
        span = types.grid_span(type_name, lo, hi)
        assert span is not None, "the catalog refuses bounds holding no value of the type"
        scale = found[0]
        values = {min(max(types.grid_double(_ceil_units(v, scale), scale), span[0]), span[1]) + 0.0 for v in values}
        if scale == 0:  # whole numbers stay integers: the rewrite's clamp keeps an integer column's exact sum
            values = {int(v) for v in values}
    return tuple(sorted(values))


def _ceil_units(value: float, scale: int) -> Decimal:
    return Decimal(value).scaleb(scale, context=_EXACT).to_integral_value(rounding=ROUND_CEILING)


def clamp_sql(analysis: Analysis, spec: ColumnSpec, part: int, source: exp.Expr, stored_ranks: bool,
              rank_filter: bool) -> exp.Select:
    """(sign, j, values) of the column's values, each unit's first m rows under the query's WHERE, `part`-tagged
    by the caller. `rank_filter`: the store's row rank bounds the unit's rows (a unit-level WHERE); else a
    per-query window ranks them after the WHERE (by the stored rank where `stored_ranks`, else by a hash of
    the value: the same values whichever tied rows it keeps).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, TableSchema
        >>> x = ColumnSpec("x", "DOUBLE", bounds=(0, 100), auto_bounds=True)
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), x))
        >>> a = analyse(parse("SELECT SUM(x) FROM t"), Catalog((t,)))
        >>> sql = clamp_sql(a, x, 0, exp.table_("t", quoted=True), True, True).sql("duckdb")
        >>> sql.startswith("SELECT SIGN(__x) AS __a"), 'FROM "t" WHERE __row_rank <= 8 AND NOT "x" IS NULL' in sql
        (True, True)
    """
    table = analysis.table
    assert spec.bounds is not None
    lo, hi = (float(b) for b in spec.bounds)
    column = exp.column(spec.name, quoted=True)
    clamped = exp.Least(this=exp.Greatest(this=exp.cast(column.copy(), exp.DataType.Type.DOUBLE, copy=False),
                                          expressions=[exp.Literal.number(lo)]),
                        expressions=[exp.Literal.number(hi)])
    conditions: list[exp.Expr] = [exp.Not(this=exp.Is(this=column.copy(), expression=exp.Null()))]
    if analysis.where is not None:
        conditions.append(analysis.where.copy())
    # every node below is built for this query alone (shared ones copied in): the builders need not copy it
    values = exp.select(exp.alias_(clamped, "__x", copy=False)).from_(source.copy(), copy=False)
    m = exp.Literal.number(VALUES_PER_UNIT)
    if rank_filter:
        conditions.insert(0, exp.LTE(this=exp.column(store_layout.ROW_RANK), expression=m))
    else:
        unit = exp.column(table.privacy_unit, quoted=True)
        conditions.insert(0, exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null())))
        order = ([exp.Ordered(this=exp.column(store_layout.ROW_RANK))] if stored_ranks else
                 [exp.Ordered(this=exp.Anonymous(this="HASH", expressions=[column.copy()])),
                  exp.Ordered(this=column.copy())])
        rank = exp.Window(this=exp.RowNumber(), partition_by=[unit], order=exp.Order(expressions=order))
        values = values.qualify(exp.LTE(this=rank, expression=m), copy=False)
    values = values.where(exp.and_(*conditions, copy=False), copy=False)
    x = exp.column("__x")
    magnitude = max(abs(lo), abs(hi))
    step = exp.Cast(this=exp.Floor(this=exp.Least(this=exp.Mul(this=exp.Literal.number(2), expression=exp.Anonymous(
        this="LOG2", expressions=[exp.Div(this=exp.Literal.number(magnitude), expression=exp.Abs(this=x.copy()))])),
        expressions=[exp.Literal.number(STEPS)])), to=exp.DataType.build(exp.DataType.Type.BIGINT))
    bucket = exp.Case(ifs=[exp.If(this=exp.EQ(this=x.copy(), expression=exp.Literal.number(0)),
                                  true=exp.Literal.number(0))], default=step)
    return (exp.select(exp.alias_(exp.Anonymous(this="SIGN", expressions=[x.copy()]), "__a", copy=False),
                       exp.alias_(bucket, "__b", copy=False), exp.alias_(exp.Count(this=exp.Star()), "__n", copy=False))
            .from_(values.subquery("__values", copy=False), copy=False)
            .group_by(exp.column("__a"), exp.column("__b"), copy=False))


def histograms(rows: Sequence[Sequence[object]], limit: tuple[float, float], type_name: str
               ) -> tuple[tuple[float, ...], list[int], list[int]]:
    """(grid, up, down): each value counted at the smallest grid point >= it (for the upper bound) and at the
    largest <= it (for the lower), from the (sign, j, count) rows of `clamp_sql`.

    Example:
        >>> grid, up, down = histograms([(1, 0, 5), (1, 2, 3), (0, 0, 1)], (0, 8), "BIGINT")
        >>> grid, up, down
        ((0, 1, 2, 3, 4, 6, 8), [1, 0, 0, 0, 3, 0, 5], [1, 0, 3, 0, 5, 0, 0])
    """
    lo, hi = limit
    grid = clamp_grid(limit, type_name)
    magnitude = max(abs(lo), abs(hi))
    points = [*_points(magnitude), 0.0]  # points[STEPS + 1] = 0: below the last step
    up, down = [0] * len(grid), [0] * len(grid)
    for sign, step, count in rows:
        j = min(max(int(step), 0), STEPS)  # the SQL keeps 0 <= j <= STEPS; never fail on data after the charge
        if sign == 0:
            above = below = 0.0
        elif int(sign) > 0:  # |x| in (points[j + 1], points[j]]
            above, below = points[j], points[j + 1]
        else:
            above, below = -points[j + 1], -points[j]
        up[min(bisect.bisect_left(grid, min(max(above, lo), hi)), len(grid) - 1)] += int(count)
        down[max(0, bisect.bisect_right(grid, max(min(below, hi), lo)) - 1)] += int(count)
    return grid, up, down
