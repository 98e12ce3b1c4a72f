"""`max_groups = "auto"`: the number of groups each unit may touch, chosen per query (docs/privacy.md §10, issue #12).

A table whose `max_groups` is "auto" declares a limit G (`max_groups_limit`). A query with a row-level key
spends its part of the selection share on the histogram h[c] = #units that reach min(groups, G) = c of the
query's groups (cells) under its WHERE, c = 1..G. Each unit adds 1 to one bin: the histogram's L1
sensitivity is 1. The bound g on bounds.bound_grid(G) is chosen by the error it causes (auto_release.draw:
mechanisms/count_target.py, N_i = #units with more than g_i groups, target bounds.cell_target), and the query
then runs with it (each unit keeping g of its groups, its stored group rank <= g).

Read from the store where its rank filter serves the query (one row-level key c, a unit-level WHERE): every
unit's stored group ranks of c are 1..n (a dense rank over its own values), so the units with at least c
groups are its rank-1 rows of group rank c, and one filtered scan with no GROUP BY per unit gives
h>=[c] = #units with >= c groups; h[c] = h>=[c] − h>=[c+1] (h[G] = h>=[G]). Elsewhere: one GROUP BY per
(unit, cell), then per unit.

Example:
    >>> histogram([(1, 1, 10), (2, 1, 7), (3, 1, 7)], limit=3)
    [3, 0, 7]
    >>> histogram([(1, 0, 3), (3, 0, 4)], limit=3)
    [3, 0, 4]
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sqlglot import exp

from proxy.query.analyse.analysis import Analysis
from proxy.query.auto.rows import unit_cells
from proxy.query.rewrite import store_layout

AT_LEAST, EXACT = 1, 0  # how a row of the selection counts units: with >= c groups (the store), or exactly c


def row_keys(analysis: Analysis) -> list[str]:
    """The query's row-level keys (unit-level keys add no group: one value per unit)."""
    table = analysis.table
    return [s.name for k in analysis.keys if (s := table.column(k)) is not None and not s.unit_level]


def domain_limit(analysis: Analysis) -> int:
    """The most groups a unit can reach in the release: the product of the row-level keys' public domains where
    the partitions are public (a unit-level key is one value per unit), else the groups limit. Public, so the
    selection may stop its grid there: a larger g could only add noise (issue #29).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True,
        ...     public_domain=("a", "b")), ColumnSpec("h", "VARCHAR", groupable=True)), max_groups=8,
        ...     auto_max_groups=True)
        >>> domain_limit(analyse(parse("SELECT g, COUNT(*) FROM t GROUP BY g"), Catalog((t,))))
        2
        >>> domain_limit(analyse(parse("SELECT h, COUNT(*) FROM t GROUP BY h"), Catalog((t,))))
        8
    """
    if analysis.partitions != "public" or len(analysis.domains) != len(analysis.keys):
        return analysis.max_groups
    table = analysis.table
    sizes = [len(d) for k, d in zip(analysis.keys, analysis.domains, strict=True)
             if (spec := table.column(k)) is not None and not spec.unit_level]
    return max(1, min(analysis.max_groups, math.prod(sizes)))


def groups_sql(analysis: Analysis, source: exp.Expr) -> exp.Select:
    """(c, EXACT, units): the units with min(groups, G) = c under the query's WHERE, reading `source` (the store's
    table or the source's).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True)),
        ...     max_groups=9, auto_max_groups=True)
        >>> a = analyse(parse("SELECT g, COUNT(*) FROM t WHERE g <> 'x' GROUP BY g"), Catalog((t,)))
        >>> sql = groups_sql(a, exp.table_("t", quoted=True)).sql("duckdb")  # over auto_rows.unit_cells:
        >>> 'WHERE NOT "u" IS NULL AND "g" COLLATE "binary" <> ' in sql and 'GROUP BY "u", "g" COLLATE "binary"' in sql
        True
        >>> print(groups_of_cells(a, exp.to_table("__cells")).sql("duckdb", pretty=True))
        SELECT
          CASE WHEN __g IS NULL OR 9 IS NULL THEN NULL ELSE LEAST(__g, 9) END AS __a,
          0 AS __b,
          COUNT(*) AS __n
        FROM (
          SELECT
            COUNT(*) AS __g
          FROM __cells
          GROUP BY
            __unit
        ) AS __units
        GROUP BY
          __a
    """
    return groups_of_cells(analysis, unit_cells(analysis, source).subquery("__cells", copy=False))


def groups_of_cells(analysis: Analysis, cells: exp.Expr) -> exp.Select:
    """(c, EXACT, units) from `cells` (rows.unit_cells, as a subquery or a CTE's name): each unit's cells
    counted, capped at G."""
    # every node below is built for this query alone: the builders need not copy it
    units = (exp.select(exp.alias_(exp.Count(this=exp.Star()), "__g", copy=False))
             .from_(cells, copy=False).group_by(exp.column("__unit"), copy=False))
    capped = exp.Least(this=exp.column("__g"), expressions=[exp.Literal.number(analysis.max_groups)])
    return (exp.select(exp.alias_(capped, "__a", copy=False), exp.alias_(exp.Literal.number(EXACT), "__b", copy=False),
                       exp.alias_(exp.Count(this=exp.Star()), "__n", copy=False))
            .from_(units.subquery("__units", copy=False), copy=False).group_by(exp.column("__a"), copy=False))


def store_groups_sql(analysis: Analysis, source: exp.Expr | None = None) -> exp.Select:
    """(c, AT_LEAST, units): the units with at least c groups, read from the stored group ranks (the query's rank
    filter serves it: one row-level key, a WHERE on unit-level columns, which keeps or drops whole units).
    `source`: what the store path reads (cells.store_source: a join's or computed keys' virtual table).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True)),
        ...     max_groups=9, auto_max_groups=True)
        >>> a = analyse(parse("SELECT g, COUNT(*) FROM t WHERE u > 3 GROUP BY g"), Catalog((t,)))
        >>> print(store_groups_sql(a).sql("duckdb", pretty=True))
        SELECT
          __group_rank__g AS __a,
          1 AS __b,
          COUNT(*) AS __n
        FROM "t"
        WHERE
          __row_rank__g = 1 AND __group_rank__g <= 9 AND "u" > 3
        GROUP BY
          __a
    """
    (key,) = row_keys(analysis)
    conditions: list[exp.Expr] = [
        exp.EQ(this=exp.column(store_layout.row_rank(key)), expression=exp.Literal.number(1)),
        exp.LTE(this=exp.column(store_layout.group_rank(key)), expression=exp.Literal.number(analysis.max_groups))]
    if analysis.where is not None:
        conditions.append(analysis.where.copy())
    return (exp.select(exp.alias_(exp.column(store_layout.group_rank(key)), "__a", copy=False),
                       exp.alias_(exp.Literal.number(AT_LEAST), "__b", copy=False),
                       exp.alias_(exp.Count(this=exp.Star()), "__n", copy=False))
            .from_(source.copy() if source is not None else exp.table_(analysis.table.name, quoted=True), copy=False)
            .where(exp.and_(*conditions, copy=False), copy=False).group_by(exp.column("__a"), copy=False))


def histogram(rows: Sequence[Sequence[object]], limit: int) -> list[int]:
    """h[c − 1] = #units with min(groups, limit) = c, from the rows of either query above."""
    exact, at_least = [0] * (limit + 2), [0] * (limit + 2)
    for c, kind, units in rows:
        assert isinstance(c, int) and isinstance(units, int) and 1 <= c <= limit
        (at_least if kind == AT_LEAST else exact)[c] += units
    return [exact[c] + at_least[c] - at_least[c + 1] for c in range(1, limit + 1)]
