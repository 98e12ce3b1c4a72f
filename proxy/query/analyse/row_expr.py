"""Per-row expressions inside SUM and AVG: `SUM(x * 2 + y)`, `AVG(price * qty)`,
`SUM(CASE WHEN … THEN x ELSE 0 END)`, rebuilt from checked names and numbers, with their range.

Allowed: bounded numeric columns, number literals, `+ - *`, `/` by a non-zero number, unary minus,
parentheses, and `CASE WHEN <condition> THEN <expr> [ELSE <expr>] END` whose conditions are checked like
WHERE (where.predicate). Each column is clamped to its declared bounds where it is read, so the expression's
value lies in the range found by interval arithmetic over those bounds ([lo, hi] of every operand; a
product takes the least and greatest of the four corner products). The rewrite clamps the whole value to
that range once more on the fixed-point grid, so the sensitivity holds for any data whatever floating-point
rounding does. A range beyond ±1e15 is refused: its sum could not be exact.

The range is read from the rebuilt SQL itself (`expression_range`: each column's clamp literals, then the
interval arithmetic), so the expression at other clamps (`at_clamps`: chosen per query within the declared
bounds, docs/privacy.md §10.10) gets its range by the same arithmetic, from the SQL that runs.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"), ColumnSpec("price", "DOUBLE", bounds=(0, 50)),
    ...     ColumnSpec("qty", "INTEGER", bounds=(-2, 10))))
    >>> e = row_expression(parse_one("price * qty + 1"), Names(t, None, Catalog((t,))), "SUM")
    >>> e.lo, e.hi
    (-99.0, 501.0)
    >>> c = at_clamps(e.sql, {"qty": (0, 3)})
    >>> c.lo, c.hi, clamped_columns(c.sql)
    (1.0, 151.0, ('price', 'qty'))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from sqlglot import exp, parse_one

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
    sql = _build(node, names, function).sql(dialect="duckdb")
    lo, hi = expression_range(parse_one(sql, read="duckdb"))
    if not (math.isfinite(lo) and math.isfinite(hi)) or max(abs(lo), abs(hi)) > MAX_ABS_BOUND:
        raise PolicyError(
            f"{function}({node.sql(dialect='duckdb')[:80]}) ranges over [{lo:.6g}, {hi:.6g}] given the declared "
            f"bounds, beyond ±{MAX_ABS_BOUND:.0e}: its sum could not be exact; scale it down",
            construct=function, expression=node.sql(dialect="duckdb")[:200], lo=lo, hi=hi,
        )
    return RowExpression(sql, lo + 0.0, hi + 0.0)


def at_clamps(sql: str, clamps: Mapping[str, tuple[float, float]]) -> RowExpression:
    """The rebuilt expression `sql` (of `row_expression`) with each column named in `clamps` clamped to its
    (lo, hi) instead, and its range by the same interval arithmetic (`expression_range`) over the new SQL.
    With every clamp inside the one it replaces, the range lies inside the former range (docs/privacy.md
    §10.10: interval arithmetic is inclusion-monotone). Columns are matched by name, case-insensitively.

    Example:
        >>> sql = 'CASE WHEN "x" IS NULL THEN NULL ELSE LEAST(GREATEST(CAST("x" AS DOUBLE), 0.0), 9.0) END * 2.0'
        >>> e = at_clamps(sql, {"X": (-1.5, 4)})
        >>> e.sql[52:], e.lo, e.hi
        ('CAST("x" AS DOUBLE), -1.5), 4.0) END * 2.0', -3.0, 8.0)
    """
    wanted = {name.lower(): bounds for name, bounds in clamps.items()}
    tree = parse_one(sql, read="duckdb")
    for node in list(tree.find_all(exp.Case)):
        name = _clamped(node)
        if name is not None and name.lower() in wanted:
            lo, hi = wanted[name.lower()]
            assert lo <= hi
            least = node.args["default"]
            least.this.set("expressions", [_literal(lo)])
            least.set("expressions", [_literal(hi)])
    text = tree.sql(dialect="duckdb")
    lo, hi = expression_range(parse_one(text, read="duckdb"))
    return RowExpression(text, lo + 0.0, hi + 0.0)


def clamped_columns(sql: str) -> tuple[str, ...]:
    """The columns the rebuilt expression `sql` reads (each through its clamp), in first-use order."""
    names = (_clamped(node) for node in parse_one(sql, read="duckdb").find_all(exp.Case))
    return tuple(dict.fromkeys(name for name in names if name is not None))


def expression_range(node: exp.Expr) -> tuple[float, float]:
    """[lo, hi] of a rebuilt expression's value by interval arithmetic: a column's range is its clamp's literals;
    + and − add the ends crosswise, × takes the least and greatest corner product, / by a number divides the
    ends, unary minus swaps them, a CASE takes the hull of its values (an absent or NULL ELSE adds nothing).
    Every step is isotonic under inclusion, in floats too (rounding is monotone), docs/privacy.md §10.10.

    Example:
        >>> expression_range(parse_one("CASE WHEN a > 1 THEN -(2.0) * 3.0 ELSE 4.0 / -2.0 END", read="duckdb"))
        (-6.0, -2.0)
    """
    if (name := _clamped(node)) is not None:
        least = node.args["default"]
        lo, hi = _constant(least.this.expressions[0]), _constant(least.expressions[0])
        assert lo is not None and hi is not None, name
        return lo, hi
    match node:
        case exp.Paren():
            return expression_range(node.this)
        case exp.Literal() if not node.is_string:
            value = float(number(node))
            return value, value
        case exp.Neg():
            lo, hi = expression_range(node.this)
            return -hi, -lo
        case exp.Add() | exp.Sub() | exp.Mul():
            a, b = expression_range(node.this)
            c, d = expression_range(node.expression)
            if isinstance(node, exp.Add):
                return a + c, b + d
            if isinstance(node, exp.Sub):
                return a - d, b - c
            corners = (a * c, a * d, b * c, b * d)
            return min(corners), max(corners)
        case exp.Div() if (divisor := _constant(node.expression)) is not None and divisor != 0:
            a, b = expression_range(node.this)
            return min(a / divisor, b / divisor), max(a / divisor, b / divisor)
        case exp.Case():
            values = [branch.args["true"] for branch in node.args.get("ifs") or []]
            default = node.args.get("default")
            if default is not None and not isinstance(default, exp.Null):
                values.append(default)
            ranges = [expression_range(v) for v in values]
            assert ranges, "a rebuilt CASE has a value"
            return min(r[0] for r in ranges), max(r[1] for r in ranges)
    raise AssertionError(f"not a rebuilt expression: {node.sql(dialect='duckdb')[:80]}")


def _clamped(node: exp.Expr) -> str | None:
    """The column a rebuilt column read clamps (`CASE WHEN c IS NULL THEN NULL ELSE LEAST(GREATEST(CAST(c AS
    DOUBLE), lo), hi) END`), else None. A user's expression cannot take this form: LEAST, GREATEST, CAST and a
    NULL THEN are not allowed inside an aggregate (`_build`)."""
    if not isinstance(node, exp.Case) or len(node.args.get("ifs") or []) != 1:
        return None
    (branch,) = node.args["ifs"]
    least = node.args.get("default")
    if not (isinstance(branch.this, exp.Is) and isinstance(branch.this.this, exp.Column)
            and isinstance(branch.args.get("true"), exp.Null) and isinstance(least, exp.Least)
            and isinstance(least.this, exp.Greatest) and isinstance(least.this.this, exp.Cast)
            and isinstance(least.this.this.this, exp.Column) and len(least.expressions) == 1
            and len(least.this.expressions) == 1):
        return None
    name = branch.this.this.name
    return name if least.this.this.this.name == name else None


def _build(node: exp.Expr, names: Names, function: str) -> exp.Expr:
    match node:
        case exp.Paren():
            return exp.Paren(this=_build(node.this, names, function))
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
            return exp.Case(ifs=[exp.If(this=missing, true=exp.Null())], default=clamped)
        case exp.Literal() if not node.is_string:
            return _literal(float(number(node)))
        case exp.Neg():
            return exp.Neg(this=exp.Paren(this=_build(node.this, names, function)))
        case exp.Add() | exp.Sub() | exp.Mul():
            left = _build(node.this, names, function)
            right = _build(node.expression, names, function)
            return type(node)(this=exp.Paren(this=left), expression=exp.Paren(this=right))
        case exp.Div() if _constant(node.expression) is not None:
            left = _build(node.this, names, function)
            divisor = _constant(node.expression)
            assert divisor is not None
            if divisor == 0:
                raise UnsupportedQuery(f"division by zero in {function}(…)", construct=function)
            return exp.Div(this=exp.Paren(this=left), expression=_literal(divisor))
        case exp.Case() if not node.this:
            return _case(node, names, function)
    raise UnsupportedQuery(
        f"{_construct(node)} is not allowed inside {function}(…); {EXPRESSION_HINT}",
        construct=_construct(node), position=function, hint=EXPRESSION_HINT,
    )


def _case(node: exp.Case, names: Names, function: str) -> exp.Expr:
    ifs = [exp.If(this=predicate(branch.this, names), true=_build(branch.args["true"], names, function))
           for branch in node.args.get("ifs") or []]
    default = node.args.get("default")
    built_default = None
    if default is not None and not isinstance(default, exp.Null):
        built_default = _build(default, names, function)
    if not ifs and built_default is None:
        raise UnsupportedQuery(f"a CASE in {function}(…) needs a THEN value", construct="CASE")
    return exp.Case(ifs=ifs, default=built_default)


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
