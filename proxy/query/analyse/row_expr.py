"""Per-row expressions inside SUM and AVG: `SUM(x * 2 + y)`, `AVG(price * qty)`,
`SUM(CASE WHEN … THEN x ELSE 0 END)`, rebuilt from checked names and numbers, with their range.

Allowed: bounded numeric columns, number literals, `+ - *`, `/` by a non-zero number, unary minus,
parentheses, and `CASE WHEN <condition> THEN <expr> [ELSE <expr>] END` whose conditions are checked like
WHERE (where.predicate). Each column is clamped to its declared bounds where it is read, so the expression's
value lies in the range found by interval arithmetic over those bounds ([lo, hi] of every operand; a
product takes the least and greatest of the four corner products). The rewrite clamps the whole value to
that range once more on the fixed-point grid, so the sensitivity holds for any data whatever floating-point
rounding does. A range beyond ±1e15 is refused: its sum could not be exact.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"), ColumnSpec("price", "DOUBLE", bounds=(0, 50)),
    ...     ColumnSpec("qty", "INTEGER", bounds=(-2, 10))))
    >>> e = row_expression(parse_one("price * qty + 1"), Names(t, None, Catalog((t,))), "SUM")
    >>> e.lo, e.hi
    (-99.0, 501.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sqlglot import exp

from proxy.query.analyse.literals import number
from proxy.query.analyse.names import Names
from proxy.query.analyse.where import predicate
from proxy.query.catalog import MAX_ABS_BOUND
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.errors import construct_name as _construct

EXPRESSION_HINT = ("inside SUM/AVG: bounded numeric columns, numbers, + - *, / by a number, "
                   "CASE WHEN <condition> THEN <expr> [ELSE <expr>] END")


@dataclass(frozen=True, slots=True)
class RowExpression:
    sql: str  # DuckDB SQL rebuilt from declared names (each clamped) and numbers
    lo: float
    hi: float


def row_expression(node: exp.Expr, names: Names, function: str) -> RowExpression:
    """The rebuilt expression and its range; refuses anything else with the construct named."""
    built, lo, hi = _build(node, names, function)
    if not (math.isfinite(lo) and math.isfinite(hi)) or max(abs(lo), abs(hi)) > MAX_ABS_BOUND:
        raise PolicyError(
            f"{function}({node.sql(dialect='duckdb')[:80]}) ranges over [{lo:.6g}, {hi:.6g}] given the declared "
            f"bounds, beyond ±{MAX_ABS_BOUND:.0e}: its sum could not be exact; scale it down",
            construct=function, expression=node.sql(dialect="duckdb")[:200], lo=lo, hi=hi,
        )
    return RowExpression(built.sql(dialect="duckdb"), lo + 0.0, hi + 0.0)


def _build(node: exp.Expr, names: Names, function: str) -> tuple[exp.Expr, float, float]:
    match node:
        case exp.Paren():
            inner, lo, hi = _build(node.this, names, function)
            return exp.Paren(this=inner), lo, hi
        case exp.Column():
            spec = names.column(node)
            if not spec.numeric or spec.bounds is None:
                raise PolicyError(
                    f"{spec.name} in {function}(…) needs a numeric column with clamp bounds",
                    construct=function, column=spec.name, hint="declare bounds = [lo, hi] for the column",
                )
            lo, hi = spec.bounds
            value = exp.cast(exp.column(spec.name, quoted=True), exp.DataType.Type.DOUBLE)
            clamped = exp.func("LEAST", exp.func("GREATEST", value, _literal(lo)), _literal(hi))
            # DuckDB's GREATEST skips a NULL: without the CASE a NULL column read as its lower bound, so
            # `SUM(x + n)` added lo for every row missing x (issue #28, the differential tester). NULL stays NULL,
            # and the expression is NULL as SQL has it: the row adds nothing.
            missing = exp.Is(this=exp.column(spec.name, quoted=True), expression=exp.Null())
            return exp.Case(ifs=[exp.If(this=missing, true=exp.Null())], default=clamped), float(lo), float(hi)
        case exp.Literal() if not node.is_string:
            value = float(number(node))
            return _literal(value), value, value
        case exp.Neg():
            inner, lo, hi = _build(node.this, names, function)
            return exp.Neg(this=exp.Paren(this=inner)), -hi, -lo
        case exp.Add() | exp.Sub() | exp.Mul():
            left, a, b = _build(node.this, names, function)
            right, c, d = _build(node.expression, names, function)
            built = type(node)(this=exp.Paren(this=left), expression=exp.Paren(this=right))
            if isinstance(node, exp.Add):
                return built, a + c, b + d
            if isinstance(node, exp.Sub):
                return built, a - d, b - c
            corners = (a * c, a * d, b * c, b * d)
            return built, min(corners), max(corners)
        case exp.Div() if _constant(node.expression) is not None:
            left, a, b = _build(node.this, names, function)
            divisor = _constant(node.expression)
            assert divisor is not None
            if divisor == 0:
                raise UnsupportedQuery(f"division by zero in {function}(…)", construct=function)
            built = exp.Div(this=exp.Paren(this=left), expression=_literal(divisor))
            return built, min(a / divisor, b / divisor), max(a / divisor, b / divisor)
        case exp.Case() if not node.this:
            return _case(node, names, function)
    raise UnsupportedQuery(
        f"{_construct(node)} is not allowed inside {function}(…); {EXPRESSION_HINT}",
        construct=_construct(node), position=function, hint=EXPRESSION_HINT,
    )


def _case(node: exp.Case, names: Names, function: str) -> tuple[exp.Expr, float, float]:
    ifs, lows, highs = [], [], []
    for branch in node.args.get("ifs") or []:
        condition = predicate(branch.this, names)
        value, lo, hi = _build(branch.args["true"], names, function)
        ifs.append(exp.If(this=condition, true=value))
        lows.append(lo)
        highs.append(hi)
    default = node.args.get("default")
    built_default = None
    if default is not None and not isinstance(default, exp.Null):
        built_default, lo, hi = _build(default, names, function)
        lows.append(lo)
        highs.append(hi)
    if not lows:
        raise UnsupportedQuery(f"a CASE in {function}(…) needs a THEN value", construct="CASE")
    return exp.Case(ifs=ifs, default=built_default), min(lows), max(highs)


def _constant(node: exp.Expr) -> float | None:
    """The value of a number literal, possibly negated; None for anything else (a column, an expression)."""
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        value = float(number(inner))
        return -value if negative else value
    return None


def _literal(value: float) -> exp.Expr:
    text = repr(float(value))
    literal = exp.Literal.number(text.lstrip("-"))
    return exp.Neg(this=literal) if text.startswith("-") else literal
