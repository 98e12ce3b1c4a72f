"""Aggregates and the integer measures DuckDB computes for them, with per-group sensitivities.

Every noised quantity is an integer: counts are, and sums are taken over values clamped and scaled to a
fixed-point grid (|value| <= 2^50), so the engine adds integers exactly (no floating-point summation error), in
HUGEINT on DuckDB and DECIMAL(38, 0) on Spark, which no sum of fewer than 2^63 rows can overflow
(docs/privacy.md §11.1), and the noise is discrete (docs/privacy.md §1, §2). Per-group sensitivities, add/remove
adjacency, after the rewrite keeps at most `max_rows` rows per unit and group:
    rows, values      max_rows                     (COUNT(*), COUNT(col))
    units             1                            (COUNT(DISTINCT unit))
    sum               max_rows · max(|lo|, |hi|)   (SUM, grid units)
    centred_sum       max_rows · max(hi − c, c − lo), c = centre of [lo, hi]   (AVG's numerator)
    centred_squares   max_rows · max(hi − c, c − lo)²   (VAR and STDDEV, on a coarser grid: `spread_grid`)
    histogram         max_rows rows in the group's histogram over `points` grid points (quantiles; not
                      noised: read by the exponential mechanism of mechanisms/dp_quantile.py)
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from proxy.query.catalog import ColumnSpec, TableSchema

AggregateKind = Literal["count", "count_column", "count_units", "sum", "avg", "quantile", "var_pop", "var_samp",
                        "stddev_pop", "stddev_samp"]
MeasureKind = Literal["rows", "values", "units", "sum", "centred_sum", "histogram", "centred_squares"]
SPREAD_KINDS = ("var_pop", "var_samp", "stddev_pop", "stddev_samp")

GRID_BITS = 30  # a fine grid spans at most 2^30 steps (an integer column with integral bounds keeps grid 1: 1e15)


@dataclass(frozen=True, slots=True)
class Aggregate:
    kind: AggregateKind
    column: str | None
    q: Fraction | None = None  # the quantile, for kind "quantile" (0: MIN, 1: MAX)
    where: str = ""  # FILTER (WHERE …) / COUNT_IF: the rebuilt condition (DuckDB SQL), "" for none
    expr: str = ""  # SUM/AVG of a per-row expression (row_expr.py): its rebuilt SQL; column is then None
    bounds: tuple[float, float] | None = None  # the expression's range by interval arithmetic
    # at chosen clamps (auto/at_bounds.py): the range at the declared bounds, whose fixed-point grid it keeps
    grid_bounds: tuple[float, float] | None = None

    def label(self) -> str:
        if self.kind == "quantile":
            return f"QUANTILE({self.column}, {self.q})"
        if self.expr or self.where:
            inner = self.expr or self.column or "*"
            return f"{self.kind.replace('_column', '').upper()}({inner})" + (
                f" FILTER (WHERE {self.where})" if self.where else "")
        return {"count": "COUNT(*)", "count_units": f"COUNT(DISTINCT {self.column})"}.get(
            self.kind, f"{self.kind.replace('_column', '').upper()}({self.column})"
        )


@dataclass(frozen=True, slots=True)
class Measure:
    """An integer quantity per group; `lo`/`hi` are clamp bounds in grid units (value = grid · x)."""

    kind: MeasureKind
    column: str | None = None
    grid: int = 1
    lo: int = 0
    hi: int = 0
    points: int = 0  # histogram: grid points lo, lo + (hi − lo)/(points − 1), …, hi (grid units)
    where: str = ""  # only rows meeting this condition count (FILTER); a function of the row alone
    expr: str = ""  # the per-row value is this expression (clamped to [lo, hi] on the grid), not `column`
    epoch: str = ""  # a DATE histogram: the first declared day (ISO); lo … hi count days after it
    cap: int = 0  # sum: each unit's contributions scaled to L1 <= cap over the release (auto/total.py); 0: none

    @property
    def centre(self) -> int:
        return (self.lo + self.hi) // 2

    def sensitivity(self, max_rows: int) -> int:
        """Per-group sensitivity in grid units: how far one unit can move this measure in one group.

        Example:
            >>> Measure("sum", "amount", 1, -5, 20).sensitivity(3)
            60
            >>> Measure("centred_sum", "amount", 1, 0, 10).sensitivity(3)
            15
        """
        match self.kind:
            case "rows" | "values" | "histogram":
                return max_rows
            case "units":
                return 1
            case "sum":
                return max_rows * max(abs(self.lo), abs(self.hi))
            case "centred_sum":
                return max_rows * max(self.hi - self.centre, self.centre - self.lo)
            case "centred_squares":  # (x − c)² lies in [0, max(hi − c, c − lo)²] for x in [lo, hi]
                return max_rows * max(self.hi - self.centre, self.centre - self.lo) ** 2

    def release_l1(self, max_groups: int, max_rows: int) -> int:
        """Δ1 over the whole release: L0 · the per-group sensitivity, or the unit's L1 cap if smaller (a capped
        unit's contributions add to at most `cap` in absolute value over all groups: docs/privacy.md §10.2).

        Example:
            >>> Measure("sum", "x", 1, 0, 100, cap=250).release_l1(4, 3), Measure("rows").release_l1(4, 3)
            (250, 12)
        """
        full = max_groups * self.sensitivity(max_rows)
        return min(full, self.cap) if self.cap else full


def fixed_point(spec: ColumnSpec) -> tuple[int, int, int]:
    """(grid, lo, hi) for a bounded column: integers with integral bounds keep grid 1.

    The integer bounds are rounded inwards (ceil lo, floor hi), so clamped values never exceed the
    declared bounds and the sensitivity derived from them is never below the truth. A chosen clamp keeps the
    grid of the declared one it lies within (`grid_bounds`).

    Example:
        >>> fixed_point(ColumnSpec("age", "INTEGER", bounds=(18, 90)))
        (1, 18, 90)
        >>> fixed_point(ColumnSpec("amount", "DOUBLE", bounds=(0.0, 500.0)))
        (2097152, 0, 1048576000)
        >>> fixed_point(ColumnSpec("amount", "DOUBLE", bounds=(0.0, 500.0), grid_bounds=(0.0, 1e5)))
        (8192, 0, 4096000)
    """
    assert spec.bounds is not None
    lo, hi = spec.bounds
    basis_lo, basis_hi = spec.grid_bounds or spec.bounds
    if spec.kind == "integer" and float(basis_lo).is_integer() and float(basis_hi).is_integer():
        return 1, math.ceil(lo), math.floor(hi)
    magnitude = max(abs(basis_lo), abs(basis_hi), 2.0**-20)
    bits = min(50, max(0, GRID_BITS - math.ceil(math.log2(magnitude))))
    grid = 2**bits
    return grid, math.ceil(lo * grid), math.floor(hi * grid)


SPREAD_STEPS = 2**16  # VAR/STDDEV: at least this many grid steps over the range when the grid can be >= 1
MAX_SPREAD_STEPS = 2**21  # … and at most this many: a square stays below 2^40, a sensitivity below 2^56


def spread_grid(spec: ColumnSpec) -> tuple[int, int, int]:
    """(grid, lo, hi) for the sums of VAR and STDDEV: a power-of-two grid with 2^16 to 2^17 steps over the
    range (an integer range of at most 2^21 keeps grid 1), bounds rounded inwards as in `fixed_point`.
    Squares of fine-grid values (2^30 steps) would reach 2^60: the coarse grid keeps them exact in BIGINT.

    Example:
        >>> spread_grid(ColumnSpec("amount", "DOUBLE", bounds=(0.0, 500.0)))
        (128, 0, 64000)
        >>> spread_grid(ColumnSpec("age", "INTEGER", bounds=(18, 90)))
        (1, 18, 90)
    """
    assert spec.bounds is not None
    lo, hi = spec.bounds
    basis_lo, basis_hi = spec.grid_bounds or spec.bounds  # a chosen clamp keeps the declared one's grid
    integral = spec.kind == "integer" and float(basis_lo).is_integer() and float(basis_hi).is_integer()
    if integral and basis_hi - basis_lo <= MAX_SPREAD_STEPS:
        return 1, math.ceil(lo), math.floor(hi)
    width = basis_hi - basis_lo
    ratio = SPREAD_STEPS / width if width else 1.0  # inf for a width of 1e-310: the finest grid, 2^50
    bits = 50 if math.isinf(ratio) else max(0, min(50, math.floor(math.log2(ratio))))
    grid = 2**bits
    return grid, math.ceil(lo * grid), math.floor(hi * grid)


HISTOGRAM_POINTS = 1001  # the grid of a quantile: the clamp range in 1000 steps (or each integer, if fewer)


def histogram_points(spec: ColumnSpec, lo: int, hi: int) -> int:
    """How many grid points a quantile of the column chooses from: each integer of a narrow integer range,
    else HISTOGRAM_POINTS evenly spaced (the error bar grows only with log(points)).

    Example:
        >>> histogram_points(ColumnSpec("age", "INTEGER", bounds=(18, 90)), 18, 90)
        73
        >>> histogram_points(ColumnSpec("amount", "DOUBLE", bounds=(0.0, 500.0)), 0, 2**29)
        1001
    """
    if spec.kind == "integer" and hi - lo < HISTOGRAM_POINTS:
        return hi - lo + 1
    return HISTOGRAM_POINTS if hi > lo else 1


MAX_DATE_POINTS = 10_001  # a DATE quantile chooses among every day of at most 10 000 days' span, else this many


def date_histogram(spec: ColumnSpec) -> Measure:
    """The histogram of a DATE column with declared date bounds [first, last]: its value per row is the number
    of days after `first` (clamped to [0, span]); the grid is every day when the span is at most 10 000 days,
    else MAX_DATE_POINTS evenly spaced points, each released as the day it falls in (quantile_noise).

    Example:
        >>> m = date_histogram(ColumnSpec("day", "DATE", date_bounds=("2026-01-01", "2026-12-31")))
        >>> m.lo, m.hi, m.points, m.epoch
        (0, 364, 365, '2026-01-01')
        >>> print(m.expr)
        DATE_DIFF('DAY', CAST('2026-01-01' AS DATE), "day")
        >>> date_histogram(ColumnSpec("d", "DATE", date_bounds=("1900-01-01", "2099-12-31"))).points
        10001
    """
    assert spec.date_bounds is not None
    first, last = (dt.date.fromisoformat(str(d)) for d in spec.date_bounds)
    span = (last - first).days
    quoted = '"' + spec.name.replace('"', '""') + '"'
    days = f"DATE_DIFF('DAY', CAST('{first.isoformat()}' AS DATE), {quoted})"
    return Measure("histogram", spec.name, 1, 0, span, min(span + 1, MAX_DATE_POINTS), expr=days,
                   epoch=first.isoformat())


def measures_of(aggregate: Aggregate, table: TableSchema) -> tuple[Measure, ...]:
    """The measures one aggregate is computed from (AVG: a centred sum and a count); a FILTER condition or a
    per-row expression travels with every measure of the aggregate."""
    where, expr = aggregate.where, aggregate.expr
    match aggregate.kind:
        case "count":
            return (Measure("values", where=where),) if where else (Measure("rows"),)
        case "count_column":
            return (Measure("values", aggregate.column, where=where),)
        case "count_units":
            return (Measure("units"),)
    if expr:
        assert aggregate.bounds is not None
        grid, lo, hi = fixed_point(ColumnSpec("__expr", "DOUBLE", bounds=aggregate.bounds,
                                              grid_bounds=aggregate.grid_bounds))
        sums = (Measure("sum", None, grid, lo, hi, where=where, expr=expr),)
        if aggregate.kind == "sum":
            return sums
        return (Measure("centred_sum", None, grid, lo, hi, where=where, expr=expr),
                Measure("values", None, where=where, expr=expr))
    column = table.column(aggregate.column or "")
    assert column is not None and (column.bounds is not None or column.date_bounds is not None)
    if where:  # the same measures, each reading only the rows meeting the condition
        plain = measures_of(Aggregate(aggregate.kind, aggregate.column, aggregate.q), table)
        return tuple(dataclasses.replace(m, where=where) for m in plain)
    if aggregate.kind == "quantile" and column.date_bounds is not None:
        return (date_histogram(column),)
    grid, lo, hi = fixed_point(column)
    if capped(column, table) and aggregate.kind in ("sum", "avg"):  # AVG = capped SUM / COUNT, uncentred
        if column.cap_bounds is not None:  # clamped at the declared limits, whatever the column's quantiles chose
            grid, lo, hi = fixed_point(dataclasses.replace(column, bounds=column.cap_bounds, grid_bounds=None))
        total = Measure("sum", column.name, grid, lo, hi, cap=column.total_cap)
        return (total,) if aggregate.kind == "sum" else (total, Measure("values", column.name))
    if aggregate.kind in SPREAD_KINDS:  # count, centred sum and centred sum of squares, on a coarser grid
        g2, lo2, hi2 = spread_grid(column)
        return (Measure("values", column.name), Measure("centred_sum", column.name, g2, lo2, hi2),
                Measure("centred_squares", column.name, g2, lo2, hi2))
    if aggregate.kind == "quantile":  # every quantile of a column reads the one histogram
        return (Measure("histogram", column.name, grid, lo, hi, histogram_points(column, lo, hi)),)
    if aggregate.kind == "sum":
        return (Measure("sum", column.name, grid, lo, hi),)
    return (Measure("centred_sum", column.name, grid, lo, hi), Measure("values", column.name))


def capped(column: ColumnSpec, table: TableSchema) -> bool:
    """Whether SUM and AVG of `column` cap each unit's total (auto/total.py): a column with `bounds = "auto"`
    on a table that may hold several rows per unit (one row per unit: its clamp is chosen instead)."""
    return column.auto_bounds and not table.one_row_per_unit


def measures_for(aggregates: tuple[Aggregate, ...], table: TableSchema) -> tuple[Measure, ...]:
    """All measures of a query, each once, in first-use order."""
    seen: dict[Measure, None] = {}
    for aggregate in aggregates:
        for measure in measures_of(aggregate, table):
            seen.setdefault(measure)
    return tuple(seen)
