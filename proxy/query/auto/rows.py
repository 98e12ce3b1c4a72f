"""`max_rows = "auto"`: the histogram of rows per (unit, group) cell and the bound chosen from it by the error it
causes (`choose_bound`; proxy/query/auto/bounds.py composes it with the other automatic bounds, docs/privacy.md §10).

Example:
    >>> from mechanisms.sampling import FixedSampler
    >>> choose_bound([(1, 900), (2, 80), (40, 20)], limit=100, target=20, epsilon=1.0, sensitivity=1,
    ...              sampler=FixedSampler())
    2
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from fractions import Fraction

from sqlglot import exp

from mechanisms import count_target
from mechanisms.sampling import Sampler
from proxy.query import types
from proxy.query.analyse.analysis import Analysis
from proxy.query.rewrite import store_layout
from proxy.query.rewrite.cells import store_source
from proxy.query.rewrite.on_store import uses_rank_filter
from proxy.query.rewrite.per_query import source_table, with_computed
from proxy.query.rewrite.render import Target, render


def selection_sql(analysis: Analysis, source: exp.Expr, ranks: bool = False) -> exp.Select:
    """The histogram query: (capped rows per cell, cells) over the cells of the query's WHERE and keys, each
    unit keeping its L0 largest cells. `source` is the table the query reads (the store's, or the source's
    with canonical unit values). With `ranks`, (capped rows, the cell's rank in its unit, cells): the
    histogram of any g <= L0 largest cells per unit is then the rows of rank <= g (max_groups chosen first).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
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
            __n
          FROM (
            SELECT
              "u" AS __unit,
              COUNT(*) AS __n
            FROM "t"
            WHERE
              NOT "u" IS NULL AND "r" COLLATE "binary" = 'N'
            GROUP BY
              "u",
              "g" COLLATE "binary"
          ) AS __cells
          QUALIFY
            ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY __n DESC) <= 2
        ) AS __kept
        GROUP BY
          __c
    """
    return cells_histogram(analysis, unit_cells(analysis, source).subquery("__cells", copy=False), ranks)


def unit_cells(analysis: Analysis, source: exp.Expr) -> exp.Select:
    """The query's (unit, group) cells under its WHERE, read from `source`: (`__unit`, rows `__n`), one row per
    cell of a row-level key (a unit-level key is one value per unit: the unit alone is the cell). Both
    selection histograms of such a query read them (histograms.selection shares them between the two)."""
    table = analysis.table
    unit = exp.column(table.privacy_unit, quoted=True)
    row_keys = []
    for key in analysis.keys:
        spec = table.column(key)
        assert spec is not None
        if not spec.unit_level:
            row_keys.append(types.column(spec.name, spec.type))
    conditions: list[exp.Expr] = [exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null()))]
    if analysis.where is not None:
        conditions.append(analysis.where.copy())
    # every node below is built for this query alone (shared ones copied in): the builders need not copy it
    return (exp.select(exp.alias_(unit.copy(), "__unit", copy=False), exp.alias_(exp.Count(this=exp.Star()), "__n",
                                                                                copy=False))
            .from_(source.copy(), copy=False).where(exp.and_(*conditions, copy=False), copy=False)
            .group_by(unit, *row_keys, copy=False))


def cells_histogram(analysis: Analysis, cells: exp.Expr, ranks: bool = False) -> exp.Select:
    """The histogram of `cells` (`unit_cells`, as a subquery or a CTE's name): (capped rows, [rank,] cells), each
    unit keeping its L0 largest cells (with a row-level key; one cell per unit without)."""
    row_keyed = any(not spec.unit_level for key in analysis.keys if (spec := analysis.table.column(key)) is not None)
    rank: exp.Expr = exp.Literal.number(1)
    kept = exp.select(exp.column("__n")).from_(cells, copy=False)
    if row_keyed:  # the unit's largest cells: a function of its own rows, so the histogram moves by <= L0
        rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("__unit")], order=exp.Order(
            expressions=[exp.Ordered(this=exp.column("__n"), desc=True)]))
        kept = kept.qualify(exp.LTE(this=rank.copy(), expression=exp.Literal.number(analysis.max_groups)), copy=False)
    if ranks:
        kept = kept.select(exp.alias_(rank, "__r", copy=False), copy=False)
    capped = exp.Least(this=exp.column("__n"), expressions=[exp.Literal.number(analysis.table.max_rows)])
    return _histogram(capped, ranks, exp.column("__r")).from_(kept.subquery("__kept", copy=False), copy=False)


def _histogram(capped: exp.Expr, ranks: bool, rank: exp.Expr) -> exp.Select:
    """SELECT capped AS __c[, rank AS __r], COUNT(*) AS __cells … GROUP BY __c[, __r]."""
    projections = [exp.alias_(capped, "__c", copy=False), *([exp.alias_(rank, "__r", copy=False)] if ranks else []),
                   exp.alias_(exp.Count(this=exp.Star()), "__cells", copy=False)]
    return exp.select(*projections).group_by(exp.column("__c"), *([exp.column("__r")] if ranks else []), copy=False)


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


def store_selection_sql(analysis: Analysis, ranks: bool = False, source: exp.Expr | None = None) -> exp.Select:
    """The histogram read from the counts the bounding store holds (proxy/query/rewrite/store_layout.py), for a
    query the store's rank filter serves (at most one row-level key, a WHERE on unit-level columns): one filtered scan,
    no GROUP BY per unit. A cell is a unit's rank-1 row of a group (of the unit, with no row-level key) among
    the L0 groups its stored group rank keeps, carrying the stored row count of that cell; a unit-level WHERE
    keeps or drops whole units. So each unit adds at most L0 cells, each a function of its own rows.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
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
    rank: exp.Expr = exp.Literal.number(1)
    if row_keys:
        (key,) = row_keys
        rows = exp.column(store_layout.cell_rows(key))
        rank = exp.column(store_layout.group_rank(key))  # the cell's rank in its unit: kept at any g >= it
        conditions = [exp.EQ(this=exp.column(store_layout.row_rank(key)), expression=exp.Literal.number(1)),
                      exp.LTE(this=exp.column(store_layout.group_rank(key)),
                              expression=exp.Literal.number(analysis.max_groups))]
    else:
        rows = exp.column(store_layout.UNIT_ROWS)
        conditions = [exp.EQ(this=exp.column(store_layout.ROW_RANK), expression=exp.Literal.number(1))]
    if analysis.where is not None:
        conditions.append(analysis.where.copy())
    capped = exp.Least(this=rows, expressions=[exp.Literal.number(table.max_rows)])
    read = source.copy() if source is not None else exp.table_(table.name, quoted=True)  # a join: store_source
    return _histogram(capped, ranks, rank).from_(read, copy=False).where(exp.and_(*conditions, copy=False),
                                                                         copy=False)


def selection_text(analysis: Analysis, store: bool, target: Target, ranks: bool = False,
                   served: bool | None = None) -> str:
    """The histogram query as the engine reads it: over the bounding store (its stored counts where the rank
    filter serves the query, else its table), or over the source as the per-query rewrite reads it, rendered
    for `target` (render.py checks it for Spark; the DuckDB store has no target: DuckDB's text); a join's or
    computed keys' virtual table as the query reads it. `served` (default: the rank filter serves the query)
    is False where the plan does not read the store's ranks (histograms.histograms)."""
    # each tree is built here for this call alone: rendered without copying it (render's `fresh`)
    if store and (uses_rank_filter(analysis) if served is None else served):
        return render(store_selection_sql(analysis, ranks, store_source(analysis)), target, fresh=True)
    if store:
        return render(selection_sql(analysis, store_source(analysis), ranks), target, fresh=True)
    return render(selection_sql(analysis, with_computed(analysis, source_table(analysis)), ranks), target,
                  fresh=True)


# One cell per unit (no row-level key, or g = 1): k is drawn by the truncated cells (at a share w of ε) and the
# truncated rows, each unit's clipped at D rows (the rest), with the base measure e^(−λ) per candidate
# (count_target.joint_index; docs/privacy.md §10, *The rows target by truncated rows*). Chosen on the demo workload
# (bench/bound_scores.py): the count of truncated cells alone cannot resolve the few dozen heavy units a large k
# keeps, and its base measure e^(−1/2) pulls k below them; the rows alone cannot see thin data's many small cells.
ROWS_CLIP = 64
ROWS_STEP = Fraction(7, 20)
ROWS_WEIGHT = Fraction(2, 3)


def choose_bound(
    rows: Sequence[Sequence[object]], *, limit: int, target: float | Fraction, epsilon: float | Fraction,
    sensitivity: int, sampler: Sampler, share: Fraction | None = None,
) -> int:
    """k on `bound_grid(limit)`, chosen by the error it causes (mechanisms/count_target.py): candidate k_i scores
    −|N_i − t|, N_i = #cells of more than k_i rows (what k_i truncates) and t = `target` (bounds.cell_target
    times the cells a unit may keep), with the base measure e^(−1/2) per candidate: ε-DP, as one unit adds at most
    `sensitivity` cells and so moves every N_i by at most that. With a `share` ρ (a quantile-only query,
    targets.rows_share) the target is ρ·C, C all the cells counted, and the score's sensitivity max(ρ, 1 − ρ)·s
    (count_target.share_index). With one cell per unit (`sensitivity` 1) and no share, the score adds the error
    itself at (1 − w) of ε, the rows k_i truncates (each unit's clipped at `ROWS_CLIP`) plus t·k_i of noise
    (count_target.joint_index, a monotone term), with the base measure e^(−7/20) per candidate. `rows`: the
    histogram (capped rows per cell, cells); a cell
    of c rows counts at the smallest grid point >= c, the bound that keeps all of it.

    Example:
        >>> from mechanisms.sampling import FixedSampler
        >>> choose_bound([(3, 1000)], limit=5, target=10, epsilon=1.0, sensitivity=2, sampler=FixedSampler())
        3
        >>> choose_bound([(1, 90), (40, 4)], limit=100, target=20, epsilon=0.01, sensitivity=1, sampler=FixedSampler())
        1
    """
    grid = bound_grid(limit)
    histogram = [0] * len(grid)
    for capped, cells in rows:
        assert isinstance(capped, int) and isinstance(cells, int) and 1 <= capped <= limit
        histogram[bisect.bisect_left(grid, capped)] += cells
    above = count_target.counts_above(histogram)
    if share is None and sensitivity == 1:  # one cell per unit: the truncated rows beside the truncated cells
        truncated = count_target.clipped_truncation([(int(c), int(n)) for c, n in rows], grid, ROWS_CLIP)
        return grid[count_target.joint_index(above, truncated, grid, target=target, epsilon=epsilon, sensitivity=1,
                                             clip=ROWS_CLIP, sampler=sampler, step=ROWS_STEP, weight=ROWS_WEIGHT)]
    if share is not None:
        return grid[count_target.share_index(above, sum(histogram), share=share, epsilon=epsilon,
                                             sensitivity=sensitivity, sampler=sampler)]
    return grid[count_target.index(above, target=target, epsilon=epsilon, sensitivity=sensitivity, sampler=sampler)]
