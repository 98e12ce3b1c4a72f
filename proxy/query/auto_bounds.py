"""Contribution bounds chosen per query, privately (issue #12, DESIGN.md §7): `max_rows = "auto"`.

A table whose `max_rows` is "auto" declares only a limit L (`max_rows_limit`). Each query on it spends a
share s of its ε (`auto_bounds_share`) choosing its bound k <= L, and the rest running at k:

1. **Selection** (ε_sel = s·ε): one small GROUP BY under the query's WHERE and keys counts the rows of every
   (unit, group) cell, each unit keeping at most L0 = `max_groups` cells (its largest: a function of its own
   rows), and makes the histogram h[c] = #cells with min(rows, L) = c over c = 1..L. A unit adds or removes at
   most L0 cells, so h moves by at most L0 in L1, and the DP q-quantile of h (mechanisms/dp_quantile.py, the
   exponential mechanism, exact) is ε_sel-DP. k is that quantile.
2. **Query** (ε_q = ε − ε_sel): the plan priced at the limit fixes each measure's ε_j (the split depends on
   the query's shape, never on k); at k each Laplace scale is b_j(k) = Δ_j(k)/ε_j rounded up, so the query
   costs at most ε_q whatever k is. The charge, admitted before any data is read, is the event
   `AutoBoundsEvent(selection, query at L)`: exact for every k (accountant/events.py).

Which q. Amin et al. (ICML 2019, "Bounding User Contributions") show the error of a bounded Laplace count,
bias(k) + noise(k), is minimised where the number of cells above k equals the noise's slope d std/dk =
√2·L0/ε_q (per group): the optimal quantile is 1 − √2·L0/(ε_q·n_group), above 0.99 for any group of more
than a few hundred cells at ε ≈ 1. n_group is private, so q is a dataset setting, `auto_bounds_quantile`,
default 0.99: near the optimum for large groups; for small groups it over-estimates k (more noise, no
bias), the side that keeps answers unbiased. Where this improves on Amin et al.: their quantile is over
units' totals; here it is over (unit, group) cells under the query's own WHERE and keys, the quantity the
bound truncates, and it is read from one GROUP BY with no second pass over the source.

Only Laplace noise: a pure ε is a function of Δ/b alone, which is what makes the event exact for any k; the
discrete Gaussian's proven μ is not (docs/privacy.md §8), so Gaussian queries on auto tables are refused
free, as are shapes other than counts, sums and averages of plain columns over one table.

Example:
    >>> split_epsilon(1.0, 0.25)
    (0.25, 0.75)
    >>> from mechanisms.sampling import FixedSampler
    >>> choose_bound([(1, 900), (2, 80), (40, 20)], limit=100, q=0.9, epsilon=1.0, sensitivity=1,
    ...              sampler=FixedSampler())
    2
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from sqlglot import exp

from accountant import loss
from accountant.events import AutoBoundsEvent, ExponentialEvent
from mechanisms import dp_quantile, laplace
from mechanisms.rounding import down
from mechanisms.sampling import Sampler
from proxy.query import ranked, types
from proxy.query.analyse import Analysis
from proxy.query.errors import QueryError
from proxy.query.price import Price
from proxy.query.render import Target, render
from proxy.query.rewrite import source_table
from proxy.query.rewrite_ranked import uses_rank_filter

DEFAULT_AUTO_SHARE = 0.10
DEFAULT_AUTO_QUANTILE = 0.99
DEFAULT_AUTO_LIMIT = 1000


class AutoBoundsUnsupported(QueryError):
    """A query on a table with `max_rows = "auto"` that the bound selection cannot serve (refused free)."""

    code = "auto_bounds_unsupported"


@dataclass(frozen=True, slots=True)
class AutoBounds:
    """The bound selection of one query: everything fixed before admission (k is not)."""

    limit: int  # L: the largest bound the selection may choose
    q: float  # the quantile of rows per (unit, group) cell
    cells_per_unit: int  # L0: the histogram's L1 sensitivity
    selection: ExponentialEvent  # its pure ε = cells_per_unit / scale

    @property
    def epsilon(self) -> Fraction:
        """The ε the selection runs with: exactly Δ/b, at most what its event is charged."""
        return Fraction(self.selection.sensitivity) / Fraction(self.selection.scale)


@dataclass(frozen=True, slots=True)
class ChosenBounds:
    """What a response reports: the bound used, and what choosing it cost."""

    max_rows: int
    limit: int
    epsilon: float  # the selection's charged ε (its share of the query's)
    q: float


def split_epsilon(epsilon: float, share: float) -> tuple[float, float]:
    """(ε_sel, ε_q): the selection's share and the query's rest, each rounded down so they add to at most ε.

    Example:
        >>> sel, rest = split_epsilon(0.3, 0.1)
        >>> Fraction(sel) + Fraction(rest) <= Fraction(0.3), round(sel, 12), round(rest, 12)
        (True, 0.03, 0.27)
    """
    selection = down(Fraction(epsilon) * Fraction(share))
    return selection, down(Fraction(epsilon) - Fraction(selection))


def uses_auto(analysis: Analysis) -> bool:
    """Whether the query's table chooses its max_rows per query."""
    return analysis.table.auto_max_rows


def check_supported(analysis: Analysis, mechanism: str, noise_multiplier: float | None, plain: bool) -> None:
    """Refuse, free, what the selection cannot serve: Gaussian noise, a given noise, and any shape but plain
    counts, sums and averages over one table (`plain`: proxy.query.ranks_serve)."""
    table = analysis.table.name
    hint = (f'; or declare an integer max_rows for table {table} (max_rows = "auto" chooses the bound per query '
            "for counts, sums and averages of columns under Laplace noise)")
    if mechanism != "laplace":
        raise AutoBoundsUnsupported(
            f"table {table} chooses its max_rows per query, which needs Laplace noise (its charge must not depend "
            f"on the bound chosen); send mechanism \"laplace\"{hint}", construct="mechanism", table=table)
    if noise_multiplier is not None:
        raise AutoBoundsUnsupported(
            f"table {table} chooses its max_rows per query from a share of epsilon: send epsilon, not "
            f"noise_multiplier{hint}", construct="noise_multiplier", table=table)
    if not plain:
        raise AutoBoundsUnsupported(
            f"table {table} chooses its max_rows per query only for COUNT, SUM and AVG of columns over the table "
            f"alone (no JOIN, computed key, quantile, spread, FILTER or expression in an aggregate){hint}",
            construct="aggregate", table=table)


def auto_bounds(analysis: Analysis, selection_epsilon: float, q: float) -> AutoBounds:
    """The selection for `analysis` at ε_sel.

    Example:
        >>> from proxy.query.parse import parse
        >>> from proxy.query.analyse import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True)),
        ...     max_rows=500, max_groups=4, auto_max_rows=True)
        >>> a = auto_bounds(analyse(parse("SELECT g, COUNT(*) FROM t GROUP BY g"), Catalog((t,))), 0.1, 0.99)
        >>> a.limit, a.cells_per_unit, a.selection.scale, float(a.epsilon)
        (500, 4, 40.0, 0.1)
    """
    sensitivity = analysis.max_groups
    scale = laplace.scale_for(sensitivity, selection_epsilon)
    return AutoBounds(analysis.table.max_rows, q, sensitivity, ExponentialEvent(float(sensitivity), scale))


def auto_price(query: Price, auto: AutoBounds, conversion: loss.Conversion = "zcdp") -> Price:
    """The charge of the whole two-step release: `query` (priced at the limit) with the selection composed in.

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> q = Price("laplace", (), None, LaplaceEvent(300, 400.0), 0.75, 0.0, 0.0, "parallel")
        >>> p = auto_price(q, AutoBounds(300, 0.99, 1, ExponentialEvent(1.0, 4.0)))
        >>> p.epsilon, p.event.selection
        (1.0, ExponentialEvent(sensitivity=1.0, scale=4.0))
    """
    event = AutoBoundsEvent(auto.selection, query.event)
    epsilon, delta = loss.epsilon_delta(event, query.gaussian_delta, conversion)
    return dataclasses.replace(query, event=event, epsilon=epsilon, delta=delta)


def selection_sql(analysis: Analysis, source: exp.Expr) -> exp.Select:
    """The histogram query: (capped rows per cell, cells) over the cells of the query's WHERE and keys, each
    unit keeping its L0 largest cells. `source` is the table the query reads (the store's, or the source's
    with canonical unit values).

    Example:
        >>> from proxy.query.parse import parse
        >>> from proxy.query.analyse import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True)), max_rows=50, max_groups=2,
        ...     auto_max_rows=True)
        >>> a = analyse(parse("SELECT g, r, COUNT(*) FROM t WHERE r = 'N' GROUP BY g, r"), Catalog((t,)))
        >>> print(selection_sql(a, exp.table_("t", quoted=True)).sql("duckdb", pretty=True))
        SELECT
          CASE WHEN __n IS NULL OR 50 IS NULL THEN NULL ELSE LEAST(__n, 50) END AS __c,
          COUNT(*) AS __cells
        FROM (
          SELECT
            COUNT(*) AS __n
          FROM "t"
          WHERE
            NOT "u" IS NULL AND "r" COLLATE "binary" = 'N'
          GROUP BY
            "u",
            "g" COLLATE "binary"
          QUALIFY
            ROW_NUMBER() OVER (PARTITION BY "u" ORDER BY COUNT(*) DESC) <= 2
        ) AS __cells
        GROUP BY
          __c
    """
    table = analysis.table
    unit = exp.column(table.privacy_unit, quoted=True)
    row_keys = []
    for key in analysis.keys:
        spec = table.column(key)
        assert spec is not None
        if not spec.unit_level:  # a unit-level key is one value per unit: the unit alone is the cell
            row_keys.append(types.column(spec.name, spec.type))
    conditions: list[exp.Expr] = [exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null()))]
    if analysis.where is not None:
        conditions.append(analysis.where.copy())
    cells = exp.select(exp.alias_(exp.Count(this=exp.Star()), "__n")).from_(source.copy())
    cells = cells.where(exp.and_(*conditions)).group_by(unit.copy(), *row_keys)
    if row_keys:  # the unit's largest cells: a function of its own rows, so the histogram moves by <= L0
        largest = exp.Window(this=exp.RowNumber(), partition_by=[unit.copy()], order=exp.Order(
            expressions=[exp.Ordered(this=exp.Count(this=exp.Star()), desc=True)]))
        cells = cells.qualify(exp.LTE(this=largest, expression=exp.Literal.number(analysis.max_groups)))
    capped = exp.Least(this=exp.column("__n"), expressions=[exp.Literal.number(table.max_rows)])
    return (exp.select(exp.alias_(capped, "__c"), exp.alias_(exp.Count(this=exp.Star()), "__cells"))
            .from_(cells.subquery("__cells")).group_by(exp.column("__c")))


def bound_grid(limit: int) -> tuple[int, ...]:
    """The bounds the selection chooses among: about √2 apart from 1 up to `limit` (and `limit` itself).

    A geometric grid, as Amin et al. and Google's bounding use: few candidates above the data's largest cells,
    which all score alike (the exponential mechanism spreads mass over them), and a bound within a factor √2
    of any quantile, which costs at most √2 in noise.

    Example:
        >>> bound_grid(100)
        (1, 2, 3, 4, 6, 8, 11, 16, 23, 32, 45, 64, 91, 100)
    """
    grid, point = [], 1.0
    while round(point) < limit:
        if not grid or round(point) > grid[-1]:
            grid.append(round(point))
        point *= math.sqrt(2)
    return (*grid, limit)


def store_selection_sql(analysis: Analysis) -> exp.Select:
    """The histogram read from the counts the bounding store holds (proxy/query/ranked.py), for a query the
    store's rank filter serves (at most one row-level key, a WHERE on unit-level columns): one filtered scan,
    no GROUP BY per unit. A cell is a unit's rank-1 row of a group (of the unit, with no row-level key) among
    the L0 groups its stored group rank keeps, carrying the stored row count of that cell; a unit-level WHERE
    keeps or drops whole units. So each unit adds at most L0 cells, each a function of its own rows.

    Example:
        >>> from proxy.query.parse import parse
        >>> from proxy.query.analyse import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True)),
        ...     max_rows=50, max_groups=2, auto_max_rows=True)
        >>> a = analyse(parse("SELECT g, COUNT(*) FROM t WHERE u > 3 GROUP BY g"), Catalog((t,)))
        >>> print(store_selection_sql(a).args["where"].sql("duckdb"))
        WHERE __row_rank__g = 1 AND __group_rank__g <= 2 AND "u" > 3
    """
    table = analysis.table
    row_keys = [spec.name for key in analysis.keys if (spec := table.column(key)) is not None and not spec.unit_level]
    conditions: list[exp.Expr]
    if row_keys:
        (key,) = row_keys
        rows = exp.column(ranked.cell_rows(key))
        conditions = [exp.EQ(this=exp.column(ranked.row_rank(key)), expression=exp.Literal.number(1)),
                      exp.LTE(this=exp.column(ranked.group_rank(key)),
                              expression=exp.Literal.number(analysis.max_groups))]
    else:
        rows = exp.column(ranked.UNIT_ROWS)
        conditions = [exp.EQ(this=exp.column(ranked.ROW_RANK), expression=exp.Literal.number(1))]
    if analysis.where is not None:
        conditions.append(analysis.where.copy())
    capped = exp.Least(this=rows, expressions=[exp.Literal.number(table.max_rows)])
    return (exp.select(exp.alias_(capped, "__c"), exp.alias_(exp.Count(this=exp.Star()), "__cells"))
            .from_(exp.table_(table.name, quoted=True)).where(exp.and_(*conditions)).group_by(exp.column("__c")))


def selection_text(analysis: Analysis, store: bool, target: Target) -> str:
    """The histogram query as the engine reads it: over the bounding store (its stored counts where the rank
    filter serves the query, else its table), or over the source as the per-query rewrite reads it, rendered
    for `target` (render.py checks it for Spark)."""
    if store and uses_rank_filter(analysis):
        return store_selection_sql(analysis).sql(dialect="duckdb")
    if store:
        return selection_sql(analysis, exp.table_(analysis.table.name, quoted=True)).sql(dialect="duckdb")
    return render(selection_sql(analysis, source_table(analysis)), target)


def choose_bound(
    rows: Sequence[Sequence[object]], *, limit: int, q: float, epsilon: float | Fraction, sensitivity: int,
    sampler: Sampler,
) -> int:
    """k: the ε-DP q-quantile, on `bound_grid(limit)`, of the histogram `rows` (capped rows per cell, cells).
    A cell of c rows counts at the smallest grid point >= c: the bound that keeps all of it.

    Example:
        >>> from mechanisms.sampling import FixedSampler
        >>> choose_bound([(3, 1000)], limit=5, q=0.99, epsilon=1.0, sensitivity=2, sampler=FixedSampler())
        3
    """
    grid = bound_grid(limit)
    histogram = [0] * len(grid)
    for capped, cells in rows:
        assert isinstance(capped, int) and isinstance(cells, int) and 1 <= capped <= limit
        histogram[bisect.bisect_left(grid, capped)] += cells
    return grid[dp_quantile.quantile_index(histogram, q, epsilon, sensitivity, sampler)]


def price_at(priced: Price, analysis: Analysis, k: int) -> Price:
    """The noise at bound k: each Laplace part keeps the ε it has at the limit (b_j = Δ_j(k)/ε_j rounded up),
    so no part costs more than the admitted event says. `priced` is the plan's price (event: AutoBoundsEvent).

    Example:
        >>> from proxy.query.parse import parse
        >>> from proxy.query.analyse import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> from proxy.query.price import price
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
        part = laplace.epsilon(spec.sensitivity, spec.scale)
        sensitivity = analysis.max_groups * analysis.measures[spec.measure].sensitivity(k)
        scale = laplace.scale_for(sensitivity, part) if sensitivity else 1.0
        assert math.isfinite(scale) and laplace.epsilon(sensitivity, scale) <= part if sensitivity else True
        noise.append(dataclasses.replace(spec, sensitivity=sensitivity, scale=scale,
                                         ci95=laplace.ci_halfwidth(scale)))
    return dataclasses.replace(priced, noise=tuple(noise))


def at_bound(analysis: Analysis, k: int) -> Analysis:
    """The analysis with max_rows = k (k <= the declared limit): what the rewrite and release read."""
    assert 1 <= k <= analysis.table.max_rows
    return dataclasses.replace(analysis, table=dataclasses.replace(analysis.table, max_rows=k))
