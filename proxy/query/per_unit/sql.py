"""The per-unit query as it runs: rebuilt from declared names and checked literals, one row per privacy unit, each
aggregate clamped to its public range (inner.py). It is the FROM of the outer query's bounded SQL (outer.py).

    SELECT __t0.__unit AS "<unit>", <clamped aggregate> AS "<name>", …
    FROM (SELECT <unit> AS __unit, <read columns> FROM <first table> WHERE <unit> IS NOT NULL AND <its filters>) AS __t0
    [LEFT] JOIN (… the joined table, likewise …) AS __t1 ON __t0.__unit = __t1.__unit
    GROUP BY __t0.__unit

Rows of no unit are dropped before the join, as in every bounded query: they belong to no one we can bound.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> from proxy.query.per_unit.inner import per_unit
    >>> v = TableSchema("visits", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("ms", "INTEGER")), max_rows=5)
    >>> print(per_unit_sql(per_unit(parse_one("SELECT uid, COUNT(*) AS n FROM visits WHERE ms > 3 GROUP BY uid"), (),
    ...     Catalog((v,)))).sql())
    SELECT __t0.__unit AS "uid", LEAST(COUNT(*), 5) AS "n" FROM (SELECT "uid" AS __unit FROM "visits" WHERE NOT "uid" IS NULL AND "ms" > 3) AS __t0 GROUP BY __t0.__unit
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query import types
from proxy.query.per_unit.inner import PerUnit, Side, Value


def per_unit_sql(query: PerUnit) -> exp.Select:
    """The per-unit query's SELECT (a tree of its own: every node is built here)."""
    reads = [[(j, v.column) for j, v in enumerate(query.values) if v.side == i and v.column is not None]
             for i in range(len(query.sides))]
    parts = [_side(side, read, i) for i, (side, read) in enumerate(zip(query.sides, reads, strict=True))]
    unit = exp.column("__unit", table="__t0")
    select = exp.select(exp.alias_(unit, query.unit, quoted=True), *(
        exp.alias_(_clamp(v, j, query.rows), v.name, quoted=True) for j, v in enumerate(query.values)))
    select = select.from_(parts[0], copy=False)
    if len(parts) == 2:
        on = exp.EQ(this=unit.copy(), expression=exp.column("__unit", table="__t1"))
        select = select.join(parts[1], on=on, join_type="LEFT" if query.left else "INNER", copy=False)
    return select.group_by(unit.copy(), copy=False)


def _side(side: Side, read: list[tuple[int, str]], index: int) -> exp.Subquery:
    table = side.table
    spec = table.column(table.privacy_unit)
    assert spec is not None
    projections = [exp.alias_(types.column(spec.name, spec.type), "__unit", copy=False)]
    projections += [exp.alias_(exp.column(name, quoted=True), f"__x{j}", copy=False) for j, name in read]
    conditions = [exp.Not(this=exp.Is(this=exp.column(spec.name, quoted=True), expression=exp.Null()))]
    conditions += [f.copy() for f in side.filters]
    select = exp.select(*projections).from_(exp.table_(table.name, quoted=True), copy=False)
    select = select.where(exp.and_(*conditions, copy=False), copy=False)
    return select.subquery(f"__t{index}", copy=False)


def _clamp(value: Value, index: int, rows: int) -> exp.Expr:
    """The aggregate, clamped to its public range: a count to [0, C] (never below 0), a sum to [low, high] by a
    CASE, which leaves a NULL sum (a unit with no joined row) NULL where LEAST and GREATEST would not."""
    read = exp.column(f"__x{index}", table=f"__t{value.side}") if value.column is not None else exp.Star()
    if value.kind == "count":
        return exp.Least(this=exp.Count(this=read), expressions=[exp.Literal.number(rows)])
    total = exp.Sum(this=read)
    low, high = (types.literal(value.type, types.canonical(value.type, b)) for b in (value.low, value.high))
    clamped = exp.Case(ifs=[exp.If(this=exp.LT(this=total, expression=low), true=low.copy()),
                            exp.If(this=exp.GT(this=total.copy(), expression=high), true=high.copy())],
                       default=total.copy())
    return exp.cast(clamped, exp.DataType.build(value.type))
