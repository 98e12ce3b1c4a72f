"""Aggregate calls: COUNT(*), COUNT(col), COUNT(DISTINCT unit), SUM(col), AVG(col), each on a declared column.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"),
    ...     ColumnSpec("amount", "DOUBLE", bounds=(0, 100))))
    >>> a = aggregate(parse_one("SUM(amount)"), Names(t, None, Catalog((t,))))
    >>> a.kind, a.column
    ('sum', 'amount')
"""

from __future__ import annotations

import dataclasses

from sqlglot import exp

from proxy.query.analyse.measures import Aggregate
from proxy.query.analyse.names import Names
from proxy.query.analyse.quantiles import QUANTILE_NODES, quantile
from proxy.query.analyse.refusals import AGGREGATE_HINT, unsupported
from proxy.query.analyse.row_expr import row_expression
from proxy.query.analyse.spread import SPREAD_NODES, spread
from proxy.query.analyse.where import predicate
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.errors import construct_name as _construct
from proxy.query.parse.case_filters import as_filter

# aggregate calls beyond COUNT, SUM and AVG (issue #15)
MORE_AGGREGATES = (*QUANTILE_NODES, *SPREAD_NODES, exp.Filter, exp.CountIf)


def aggregate(node: exp.Expr, names: Names) -> Aggregate:
    if (case := as_filter(node)) is not None:  # SUM(CASE WHEN c THEN x ELSE 0 END): SUM(x) FILTER (WHERE c)
        return conditional(case, names)
    if isinstance(node, exp.Filter | exp.CountIf):
        return conditional(node, names)
    if isinstance(node, QUANTILE_NODES):
        return quantile(node, names)
    if type(node) in SPREAD_NODES:
        return spread(node, names)
    for name, value in node.args.items():
        if name not in ("this", "big_int") and value:
            raise unsupported(node, "an aggregate (no extra arguments)")
    argument = node.this
    table = names.table
    if isinstance(node, exp.Count):
        if isinstance(argument, exp.Star) or _non_null_constant(argument):
            return Aggregate("count", None)  # COUNT(1), COUNT('x'): every row, as COUNT(*) (BI tools send them)
        if isinstance(argument, exp.Null):
            raise UnsupportedQuery("COUNT(NULL) is 0 on any data; count rows with COUNT(*)", construct="COUNT(NULL)",
                                   hint=AGGREGATE_HINT)
        if isinstance(argument, exp.Distinct):
            inner = argument.expressions
            is_column = len(inner) == 1 and isinstance(inner[0], exp.Column)
            if is_column and names.column(inner[0]).name == table.privacy_unit:
                return Aggregate("count_units", table.privacy_unit)
            raise UnsupportedQuery(
                f"COUNT(DISTINCT ...) is supported only on the privacy unit {table.privacy_unit!r}",
                construct="COUNT(DISTINCT)", hint=AGGREGATE_HINT,
            )
        if isinstance(argument, exp.Column):
            return Aggregate("count_column", names.column(argument).name)
        raise inside_aggregate(argument, "COUNT")
    function = "SUM" if isinstance(node, exp.Sum) else "AVG"
    if not isinstance(argument, exp.Column):  # a per-row expression, its range from the declared bounds
        expression = row_expression(argument, names, function)
        kind = "sum" if function == "SUM" else "avg"
        return Aggregate(kind, None, expr=expression.sql, bounds=(expression.lo, expression.hi))
    spec = names.column(argument)
    if not spec.numeric:
        raise PolicyError(f"{function}({spec.name}) needs a numeric column", construct=function, column=spec.name)
    if spec.bounds is None:
        raise PolicyError(
            f"{function}({spec.name}) needs clamp bounds in the policy; the column has none",
            construct=function, column=spec.name, hint="declare bounds = [lo, hi] for the column",
        )
    return Aggregate("sum" if function == "SUM" else "avg", spec.name)


def _non_null_constant(node: exp.Expr) -> bool:
    """A literal that is never NULL (`1`, `-1`, `'x'`, `TRUE`): COUNT of it counts every row.

    Example:
        >>> from sqlglot import parse_one
        >>> [_non_null_constant(parse_one(t)) for t in ("1", "-2.5", "'x'", "TRUE", "NULL", "a")]
        [True, True, True, True, False, False]
    """
    inner = node.this if isinstance(node, exp.Neg) else node
    return isinstance(inner, exp.Literal) or (isinstance(node, exp.Boolean))


def inside_aggregate(node: exp.Expr, function: str) -> UnsupportedQuery:
    return UnsupportedQuery(
        f"{function} takes a plain column; {_construct(node)} inside an aggregate would defeat clamping",
        construct=_construct(node), position=function, hint=AGGREGATE_HINT,
    )


def conditional(node: exp.Filter | exp.CountIf, names: Names) -> Aggregate:
    """`agg FILTER (WHERE c)` and `COUNT_IF(c)`: the aggregate over the rows meeting c, checked like WHERE.

    Example:
        >>> from sqlglot import parse_one
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"), ColumnSpec("age", "INTEGER")))
        >>> conditional(parse_one("COUNT_IF(age >= 18)"), Names(t, None, Catalog((t,)))).where
        '"age" >= 18'
    """
    if isinstance(node, exp.CountIf):
        return Aggregate("count", None, where=predicate(node.this, names).sql(dialect="duckdb"))
    where = node.expression
    if not isinstance(where, exp.Where):
        raise unsupported(node, "an aggregate's FILTER (WHERE …)")
    inner = node.this
    if not isinstance(inner, (exp.Count, exp.Sum, exp.Avg, *QUANTILE_NODES)) and type(inner) not in SPREAD_NODES:
        raise unsupported(inner, "FILTER (WHERE …), which follows an aggregate")
    base = aggregate(inner, names)
    if base.kind == "count_units":
        raise UnsupportedQuery(
            "COUNT(DISTINCT …) FILTER (WHERE …) is not supported; put the condition in WHERE",
            construct="FILTER", hint=AGGREGATE_HINT,
        )
    condition = predicate(where.this, names).sql(dialect="duckdb")
    if base.where:  # SUM(CASE WHEN c THEN x END) FILTER (WHERE d): the rows meeting both
        condition = f"({base.where}) AND ({condition})"
    return dataclasses.replace(base, where=condition)
