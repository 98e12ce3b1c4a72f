"""The outer query of a two-level aggregation, analysed over the per-unit query's result as a virtual protected
table: one row per unit (max_rows = max_groups = 1), its aggregates unit-level columns with their clamps as
bounds, a count's public domain the integers 0..C. The ordinary rules then read the outer query (a histogram of
an inner value, an aggregate over the units, a WHERE on inner values), and the price, the bounded SQL (its FROM
is the per-unit query, sql.py) and the release are the ones every query has (docs/privacy.md §14).

The keys of a histogram of a count are released over the public domain 0..C: every value a unit can have after
the clamp, so the answer is complete (no group of few units is hidden, as a threshold would) and no δ is spent
on selecting keys. A sum's values are not enumerable: its groups are selected privately.

The charge covers every unit: the virtual table's cells depend on the per-unit query, so they are no cells of
the dataset's space, and no scope narrower than every unit is claimed (docs/privacy.md §7).

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> v = TableSchema("visits", "uid", (ColumnSpec("uid", "BIGINT"),), max_rows=3)
    >>> a = two_level_analysis(parse_one(
    ...     "SELECT n, COUNT(*) FROM (SELECT uid, COUNT(*) AS n FROM visits GROUP BY uid) AS per GROUP BY n"),
    ...     Catalog((v,)))
    >>> a.table.name, a.table.max_rows, a.max_groups, a.partitions, a.domains, a.scope.cells
    ('per', 1, 1, 'public', ((0, 1, 2, 3),), None)
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlglot import exp

from proxy.query.analyse.analysis import MAX_PUBLIC_CELLS, Analysis, analyse
from proxy.query.analyse.cell_space import CellSpace, Scope
from proxy.query.catalog import MAX_ABS_BOUND, Catalog, ColumnSpec, TableSchema
from proxy.query.errors import UnsupportedQuery
from proxy.query.per_unit.inner import HINT, PerUnit, per_unit
from proxy.query.per_unit.recognise import TwoLevel, two_level
from proxy.query.per_unit.sql import per_unit_sql


def two_level_analysis(select: exp.Expr, catalog: Catalog, *, today: dt.date | None = None) -> Analysis | None:
    """The analysis of `select` as a two-level aggregation, or None when it is not one."""
    shape = two_level(select)
    if shape is None:
        return None
    if shape.outer.args.get("joins"):
        raise UnsupportedQuery(f"the outer query of a per-unit subquery reads it alone, with no JOIN; {HINT}",
                               construct="JOIN", hint=HINT)
    query = per_unit(shape.inner, shape.columns, catalog, today)
    table = virtual_table(shape, query)
    outer = shape.outer.copy()
    outer.set("from_", exp.From(this=exp.table_(table.name)))
    analysis = analyse(outer, dataclasses.replace(catalog, tables=(table,), public=()), today=today)
    source = exp.Subquery(this=per_unit_sql(query), alias=exp.TableAlias(this=exp.to_identifier(table.name)))
    return dataclasses.replace(analysis, source=source, canonical=(), scope=Scope(CellSpace(table.name, ()), None))


def virtual_table(shape: TwoLevel, query: PerUnit) -> TableSchema:
    """The per-unit query's result as a protected table of one row per unit."""
    base = query.sides[0].table
    unit = base.column(base.privacy_unit)
    assert unit is not None
    columns = [ColumnSpec(query.unit, unit.type)]
    for value in query.values:
        if max(abs(value.low), abs(value.high)) > MAX_ABS_BOUND:
            raise UnsupportedQuery(
                f"{value.name}'s public range [{value.low}, {value.high}] (max_rows × the column's bounds) exceeds "
                f"±{MAX_ABS_BOUND:.0e}: narrow the column's bounds or the tables' max_rows", construct="SUM")
        bounds = (float(value.low), float(value.high))
        domain = tuple(range(int(value.low), int(value.high) + 1)) if value.kind == "count" and \
            value.high - value.low + 1 <= MAX_PUBLIC_CELLS else None
        columns.append(ColumnSpec(value.name, value.type, bounds=bounds, unit_level=True, groupable=True,
                                  public_domain=domain))
    return TableSchema(shape.alias, query.unit, tuple(columns), max_groups=1, max_rows=1, one_row_per_unit=True)
