"""Quantile calls: MEDIAN, QUANTILE, QUANTILE_CONT/DISC, PERCENTILE_CONT/DISC … WITHIN GROUP, APPROX_QUANTILE,
MIN, MAX.

Each is one `Aggregate("quantile", column, q)` on a bounded numeric or DATE column, with q an exact fraction read
from the literal's text (0.9 is 9/10, not the nearest double). MIN is the 0th and MAX the 100th DP quantile
(docs/privacy.md §9): never the true extreme. The released value is a point of the column's grid
(measures.histogram_points), so CONT and DISC are answered alike.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> from proxy.query.analyse.names import Names
    >>> t = TableSchema("orders", "cid", (ColumnSpec("cid", "BIGINT"), ColumnSpec("amount", "DOUBLE", bounds=(0, 100))))
    >>> names = Names(t, None, Catalog((t,)))
    >>> a = quantile(parse_one("PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY amount)"), names)
    >>> a.kind, a.column, a.q
    ('quantile', 'amount', Fraction(9, 10))
    >>> quantile(parse_one("MIN(amount)"), names).q
    Fraction(0, 1)
    >>> quantile(parse_one("QUANTILE(amount, 0.25)", read="duckdb"), names).q
    Fraction(1, 4)
"""

from __future__ import annotations

from fractions import Fraction

from sqlglot import exp

from proxy.query.analyse.measures import Aggregate
from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import AGGREGATE_HINT
from proxy.query.errors import InvalidParameter, PolicyError, UnsupportedQuery
from proxy.query.errors import construct_name as _construct

QUANTILE_NODES = (exp.Median, exp.PercentileCont, exp.PercentileDisc, exp.ApproxQuantile, exp.Quantile,
                  exp.WithinGroup, exp.Min, exp.Max)
QUANTILE_HINT = ("quantiles: MEDIAN(col), QUANTILE(col, q), QUANTILE_CONT(col, q), PERCENTILE_CONT(q) WITHIN GROUP "
                 "(ORDER BY col), APPROX_QUANTILE(col, q), MIN(col), MAX(col), q a number in [0, 1], col a bounded "
                 "numeric or DATE column")


def quantile(node: exp.Expr, names: Names) -> Aggregate:
    """The quantile aggregate `node` asks for, on a checked column with an exact q."""
    # named as DuckDB spells it (QUANTILE_CONT, not sqlglot's PERCENTILE_CONT), as the analyst wrote it
    function = node.this.sql_name() if isinstance(node, exp.WithinGroup) and isinstance(node.this, exp.Func) else (
        node.sql(dialect="duckdb").split("(")[0].upper())
    match node:
        case exp.WithinGroup(this=exp.PercentileCont() | exp.PercentileDisc() as inner,
                             expression=exp.Order() as order):
            _only(inner, ("this",), function)
            _only(order, ("expressions",), function)
            if len(order.expressions) != 1 or not isinstance(order.expressions[0], exp.Ordered):
                raise _shape(node, function)
            ordered = order.expressions[0]
            if ordered.args.get("desc"):  # PERCENTILE_CONT(q) … ORDER BY x DESC is the (1 − q) quantile
                raise UnsupportedQuery(f"{function} WITHIN GROUP (ORDER BY … DESC) is not supported; use q' = 1 − q",
                                       construct=function, hint=QUANTILE_HINT)
            return _aggregate(ordered.this, _q(inner.this, function), names, function)
        case exp.Median():
            _only(node, ("this",), function)
            return _aggregate(node.this, Fraction(1, 2), names, function)
        case exp.Min() | exp.Max():
            _only(node, ("this",), function)
            return _aggregate(node.this, Fraction(int(isinstance(node, exp.Max))), names, function)
        case exp.ApproxQuantile() | exp.Quantile():  # DuckDB's QUANTILE(col, q) is QUANTILE_DISC
            _only(node, ("this", "quantile"), function)
            return _aggregate(node.this, _q(node.args.get("quantile"), function), names, function)
        case exp.PercentileCont() | exp.PercentileDisc():
            _only(node, ("this", "expression"), function)
            return _aggregate(node.this, _q(node.expression, function), names, function)
    raise _shape(node, function)


def _aggregate(argument: exp.Expr | None, q: Fraction, names: Names, function: str) -> Aggregate:
    if not isinstance(argument, exp.Column):
        raise UnsupportedQuery(
            f"{function} takes a plain column; {_construct(argument) if argument else 'nothing'} inside it is "
            "not supported", construct=function, hint=QUANTILE_HINT,
        )
    spec = names.column(argument)
    if spec.kind == "date":  # the grid is the declared days (measures.date_histogram): a public calendar
        if spec.date_bounds is None:
            raise PolicyError(
                f"{function}({spec.name}) needs date bounds in the policy: the DP quantile chooses among the days "
                "of the declared range", construct=function, column=spec.name,
                hint="declare bounds = [first, last] for the DATE column, e.g. bounds = [2026-01-01, 2026-12-31]",
            )
        return Aggregate("quantile", spec.name, q)
    if not spec.numeric:
        raise PolicyError(
            f"{function}({spec.name}) needs a numeric or DATE column; {spec.name} is {spec.type}",
            construct=function, column=spec.name, hint=QUANTILE_HINT,
        )
    if spec.bounds is None:
        raise PolicyError(
            f"{function}({spec.name}) needs clamp bounds in the policy: the DP quantile chooses among points "
            "of the declared range", construct=function, column=spec.name,
            hint="declare bounds = [lo, hi] for the column",
        )
    return Aggregate("quantile", spec.name, q)


def _q(node: exp.Expr | None, function: str) -> Fraction:
    """q from a numeric literal, exactly; anything else (a column, a list, an expression) is refused."""
    negative = isinstance(node, exp.Neg)
    literal = node.this if negative else node  # type: ignore[union-attr]
    if not isinstance(literal, exp.Literal) or literal.is_string:
        what = "a list of quantiles" if isinstance(node, exp.Array) else (_construct(node) if node else "nothing")
        raise UnsupportedQuery(
            f"{function} needs one quantile as a number literal in [0, 1], got {what}; ask for several quantiles "
            "as several calls", construct=function, hint=QUANTILE_HINT,
        )
    try:
        q = Fraction(literal.this)
    except (ValueError, ZeroDivisionError):
        raise InvalidParameter(f"{function}: {literal.this!r} is not a number", parameter="quantile") from None
    q = -q if negative else q
    if not 0 <= q <= 1:
        raise InvalidParameter(
            f"{function}: the quantile must lie in [0, 1], got {'-' if negative else ''}{literal.this}",
            parameter="quantile", construct=function, quantile=float(q), hint=QUANTILE_HINT,
        )
    return q


def _only(node: exp.Expr, allowed: tuple[str, ...], function: str) -> None:
    for name, value in node.args.items():
        if name not in allowed and value:
            raise _shape(node, function)


def _shape(node: exp.Expr, function: str) -> UnsupportedQuery:
    return UnsupportedQuery(
        f"{function} in this form ({node.sql(dialect='duckdb')[:80]}) is not supported",
        construct=function, hint=QUANTILE_HINT + "; " + AGGREGATE_HINT,
    )
