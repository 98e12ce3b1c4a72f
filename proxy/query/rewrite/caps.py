"""The SQL of a per-unit L1 cap C on a SUM (docs/privacy.md §10.2): each unit's cells scaled together toward zero
so that their absolute values add to at most C. The cap itself is chosen in proxy/query/auto/total.py; every
rewrite (per query, per cell, on the store) builds its capped sums here.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlglot import exp

from proxy.query.analyse.measures import Measure

SAFETY = "0.999999999999"  # the scaling factor is shrunk by 1e-12: four DOUBLE roundings can never round up


def scaled(value: exp.Expr, total: exp.Expr, cap: int) -> exp.Expr:
    """`value` (one cell's contribution, grid units) scaled by min(1, C/T_u) toward zero: exact when T_u <= C;
    else sign·FLOOR(|v| · (C/T) · (1 − 1e-12)) in DOUBLE. Each of the four roundings (|v|, T, C/T, the product)
    moves the product by a factor of at most 1 + 2^−53, far less than the shrink, so the floor never exceeds
    ⌊|v|·C/T⌋ and the unit's cells add to at most C in absolute value; the final LEAST keeps |scaled| <= |v|.

    Example:
        >>> import duckdb
        >>> sql = scaled(exp.column("v"), exp.column("t"), 10).sql("duckdb")
        >>> duckdb.sql(f"SELECT {sql} FROM (VALUES (-7, 21), (14, 21), (5, 9)) AS x(v, t)").fetchall()
        [(-3,), (6,), (5,)]
    """
    c = exp.Literal.number(cap)
    magnitude = exp.Abs(this=value.copy())
    # every node placed below is built here or copied in (value, total, c and magnitude are read more than once)
    double, bigint = exp.DataType.Type.DOUBLE, exp.DataType.Type.BIGINT  # enum types: a name is parsed per call
    factor = exp.Div(this=exp.cast(c.copy(), double, copy=False), expression=exp.cast(total.copy(), double, copy=False))
    product = exp.Mul(this=exp.Mul(this=exp.cast(magnitude.copy(), double, copy=False), expression=factor),
                      expression=exp.cast(exp.Literal.number(SAFETY), double, copy=False))
    shrunk = exp.func("LEAST", exp.cast(exp.Floor(this=product), bigint, copy=False), magnitude.copy(), copy=False)
    negative = exp.LT(this=value.copy(), expression=exp.Literal.number(0))  # not SIGN: Spark's is a DOUBLE
    signed = exp.Case(ifs=[exp.If(this=negative, true=exp.Neg(this=shrunk.copy()))], default=shrunk)
    few = exp.LTE(this=total.copy(), expression=c.copy())
    return exp.Case(ifs=[exp.If(this=few, true=value.copy())], default=signed)


def capped_cells(measures: Sequence[Measure], columns: Sequence[str], unit: str, cells: str,
                 one_per_unit: bool = False) -> exp.Select:
    """The rows of the table `cells` (one per kept (unit, group) cell, a column per measure named in `columns`,
    the unit never NULL) with `<column>__capped` for each capped measure: its value scaled by its unit's total
    over the unit's cells. The totals are one GROUP BY joined back (a window per unit sorts, about 4× slower).
    `one_per_unit` (a query without keys: its cells are grouped by the unit alone): a unit's total is its one
    cell's |value|, so no totals are joined back (the same numbers; the join was a fifth of a filtered AVG at 10M).

    Example:
        >>> print(capped_cells([Measure("rows"), Measure("sum", "x", 1, 0, 9, cap=5)], ["__c0", "__c1"], "__unit",
        ...                    "__cells").sql("duckdb")[:96])
        SELECT __cap_cells.*, CASE WHEN __cap_totals.__c1__total <= 5 THEN COALESCE(__cap_cells.__c1, 0)
        >>> one = capped_cells([Measure("sum", "x", 1, 0, 9, cap=5)], ["__c0"], "__unit", "__cells", one_per_unit=True)
        >>> print(one.sql("duckdb")[:106])
        SELECT __cap_cells.*, CASE WHEN ABS(COALESCE(__cap_cells.__c0, 0)) <= 5 THEN COALESCE(__cap_cells.__c0, 0)
    """
    # every node is built here for this query alone: the builders need not copy the growing trees
    out = exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier("__cap_cells")))
    totals = exp.select(exp.alias_(exp.column(unit), "__cap_unit", copy=False))
    for measure, name in zip(measures, columns, strict=True):
        if measure.cap:
            value = exp.func("COALESCE", exp.column(name, table="__cap_cells"), exp.Literal.number(0), copy=False)
            total: exp.Expr = exp.column(f"{name}__total", table="__cap_totals")
            if one_per_unit:
                total = exp.Abs(this=exp.func("COALESCE", exp.column(name, table="__cap_cells"), exp.Literal.number(0),
                                              copy=False))
            out = out.select(exp.alias_(scaled(value, total, measure.cap), f"{name}__capped", copy=False),
                             append=True, copy=False)
            summed = exp.Sum(this=exp.Abs(this=exp.func("COALESCE", exp.column(name), exp.Literal.number(0),
                                                        copy=False)))
            totals = totals.select(exp.alias_(summed, f"{name}__total", copy=False), append=True, copy=False)
    read = out.from_(exp.alias_(exp.table_(cells), "__cap_cells", table=True, copy=False), copy=False)
    if one_per_unit:  # as the join, which matches no NULL unit (the sources drop them: never there)
        return read.where(exp.Not(this=exp.Is(this=exp.column(unit, table="__cap_cells"), expression=exp.Null())),
                          copy=False)
    totals = totals.from_(exp.table_(cells), copy=False).group_by(exp.column(unit), copy=False)
    joined = exp.EQ(this=exp.column(unit, table="__cap_cells"),
                    expression=exp.column("__cap_unit", table="__cap_totals"))
    return read.join(totals.subquery("__cap_totals", copy=False), on=joined, copy=False)
