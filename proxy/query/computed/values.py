"""Computed values: a positive allow-list of per-row functions over declared columns, rebuilt typed and total.

A computed group key or filter (`date_trunc('month', day)`, `CAST(FLOOR(age / 10) * 10 AS INTEGER)`,
`LOWER(region)`, `amount * 2 > duration_s`) is rebuilt node by node from declared columns and checked literals;
each function is admitted only with the argument types listed in `ALLOWED`. Semantics are DuckDB's, with
three deliberate differences that make every expression *total* (no data can make it fail after admission,
which would be a data-dependent error, docs/architecture.md, the security boundary):
- the whole value is wrapped in DuckDB's `TRY(...)`: an overflow, a division by zero or a failed cast gives
  NULL instead of an error;
- integer arithmetic runs in BIGINT, any arithmetic touching FLOAT, DOUBLE or DECIMAL in DOUBLE;
- a DOUBLE result that is not finite (±inf, NaN) is NULL.
Nothing here is random, reads a file or depends on the time: a computed value is a function of the row.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> from proxy.query.analyse.names import Names
    >>> t = TableSchema("v", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("age", "INTEGER")))
    >>> s = scalar(parse_one("CAST(FLOOR(age / 10) * 10 AS INTEGER)"), Names(t, None, Catalog((t,))))
    >>> s.type, sorted(s.columns), total(s).sql("duckdb")
    ('INTEGER', ['age'], 'TRY(CAST(FLOOR(CAST("age" AS DOUBLE) / 10) * 10 AS INT))')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.literals import exact
from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import unsupported
from proxy.query.errors import UnsupportedQuery, construct_name

MAX_TEXT_LITERAL = 1_000
MAX_SUBSTRING = 1_000

# What each admitted function takes, for the error that lists them (docs/sql.md has the full table).
ALLOWED = (
    "+ - * / // % on numbers; FLOOR, CEIL, ROUND(x[, n]), ABS on numbers; CAST/TRY_CAST to integer types, "
    "DOUBLE, DECIMAL(p,s), VARCHAR, DATE; CASE WHEN <condition> THEN <literal> … [ELSE <literal>] END, IF; "
    "COALESCE; LOWER, UPPER, SUBSTR(text, start[, length]), LEFT(text, n) on text; DATE_TRUNC(year|quarter|"
    "month|week|day, date), EXTRACT/DATE_PART(year|quarter|month|week|day|dow|isodow|doy|isoyear FROM date), "
    "YEAR/QUARTER/MONTH/DAY/DAYOFWEEK/ISODOW/DAYOFYEAR/WEEK(date), STRFTIME(date, format), DATE(date or text)"
)

_TRUNC_UNITS = frozenset({"YEAR", "QUARTER", "MONTH", "WEEK", "DAY"})
_PARTS = {"YEAR": "YEAR", "QUARTER": "QUARTER", "MONTH": "MONTH", "WEEK": "WEEK", "DAY": "DAY",
          "DOW": "DOW", "DAYOFWEEK": "DOW", "ISODOW": "ISODOW", "DOY": "DOY", "DAYOFYEAR": "DOY",
          "ISOYEAR": "ISOYEAR"}
_PART_FUNCTIONS: dict[type[exp.Expr], str] = {
    exp.Year: "YEAR", exp.Quarter: "QUARTER", exp.Month: "MONTH", exp.Day: "DAY", exp.DayOfWeek: "DOW",
    exp.DayOfWeekIso: "ISODOW", exp.DayOfYear: "DOY", exp.Week: "WEEK", exp.WeekOfYear: "WEEK",
}
_FORMAT = re.compile(r"(?:%[YymdbBaAjuw%]|[-/ .:_,A-Za-z0-9])*")  # date parts and plain separators only
_CAST_TARGETS = frozenset({"TINYINT", "SMALLINT", "INTEGER", "BIGINT", "DOUBLE", "FLOAT", "VARCHAR", "DATE"})
_ARITHMETIC: dict[type[exp.Expr], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Mod: "%"}


@dataclass(frozen=True, slots=True)
class Scalar:
    """A rebuilt per-row value: its SQL over declared columns, DuckDB type, the columns it reads, and, when
    every value it can take is a literal of the query (CASE … THEN 'a' … ELSE 'b'), those values."""

    sql: exp.Expr
    type: str
    columns: frozenset[str]
    choices: tuple[types.Value, ...] | None = None

    @property
    def kind(self) -> types.Kind:
        return types.kind(self.type)


def total(value: Scalar) -> exp.Expr:
    """The value as it runs: typed, non-finite doubles as NULL, any run-time error as NULL (see the module)."""
    typed = isinstance(value.sql, exp.Cast) and value.sql.to == exp.DataType.build(value.type)
    cast = value.sql.copy() if typed else exp.Cast(this=value.sql.copy(), to=exp.DataType.build(value.type))
    if value.kind == "float":
        finite = exp.Anonymous(this="ISFINITE", expressions=[cast.copy()])
        cast = exp.Case(ifs=[exp.If(this=finite, true=cast)])
    return exp.Anonymous(this="TRY", expressions=[cast])


def scalar(node: exp.Expr, names: Names) -> Scalar:
    """Rebuild `node` from the allow-list, or refuse it naming the construct."""
    match node:
        case exp.Paren():
            return scalar(node.this, names)
        case exp.Column():
            spec = names.column(node)
            column = types.column(spec.name, spec.type)
            if spec.kind == "string":
                column = exp.column(spec.name, quoted=True)  # collation is applied where values are compared
            return Scalar(column, "DOUBLE" if spec.type == "FLOAT" else spec.type, frozenset({spec.name}))
        case exp.Neg() if not isinstance(node.this, exp.Literal):
            inner = _number(node.this, names, node)
            kind = "BIGINT" if inner.kind == "integer" else "DOUBLE"
            return Scalar(exp.Neg(this=_operand(inner, kind)), kind, inner.columns)
        case exp.Literal() | exp.Neg() | exp.Boolean() | exp.Null():
            return constant(node)
        case exp.Date() if not node.expressions:  # DATE(x): a DATE as is, text read as a date
            inner = scalar(node.this, names)
            if inner.kind == "date":
                return inner
            if inner.kind == "string":
                return Scalar(exp.cast(inner.sql, "DATE"), "DATE", inner.columns)
        case exp.TsOrDsToDate() | exp.TsOrDsToTimestamp():  # how MySQL and BigQuery read a DATE argument
            inner = scalar(node.this, names)
            if inner.kind == "date" and not node.args.get("format"):
                return inner
        case exp.Div() | exp.IntDiv():
            return _division(node, names)
        case exp.Add() | exp.Sub() if isinstance(node.expression, exp.Interval) or (
                isinstance(node, exp.Add) and isinstance(node.this, exp.Interval)):
            return _day_shift(node, names)
        case _ if type(node) in _ARITHMETIC:
            left, right = _numbers(node, names)
            integer = left.kind == right.kind == "integer"
            if integer:
                result = type(node)(this=_operand(left, "BIGINT"), expression=_operand(right, "BIGINT"))
                return Scalar(result, "BIGINT", left.columns | right.columns)
            result = type(node)(this=_operand(left, "DOUBLE"), expression=_operand(right, "DOUBLE"))
            return Scalar(result, "DOUBLE", left.columns | right.columns)
        case exp.Floor() | exp.Ceil() | exp.Abs() if not node.args.get("decimals"):
            inner = _number(node.this, names, node)
            if inner.kind == "integer":
                return Scalar(type(node)(this=_as(inner, "BIGINT")), "BIGINT", inner.columns)
            return Scalar(type(node)(this=_as(inner, "DOUBLE")), "DOUBLE", inner.columns)
        case exp.Round() if not node.args.get("truncate"):
            inner = _number(node.this, names, node)
            digits = node.args.get("decimals")
            places = None if digits is None else _integer_literal(digits, node, -18, 18)
            kind = "BIGINT" if inner.kind == "integer" else "DOUBLE"
            args = [_as(inner, kind)] + ([] if places is None else [exp.Literal.number(places)])
            return Scalar(exp.Anonymous(this="ROUND", expressions=args), kind, inner.columns)
        case exp.Cast() | exp.TryCast() if not node.args.get("format"):
            return _cast(node, names)
        case exp.Case() | exp.If():
            return _case(node, names)
        case exp.Coalesce():
            return _coalesce(node, names)
        case exp.Lower() | exp.Upper():
            inner = _text(node.this, names, node)
            return Scalar(type(node)(this=inner.sql), "VARCHAR", inner.columns)
        case exp.Substring():
            inner = _text(node.this, names, node)
            start = _integer_literal(node.args.get("start") or exp.Literal.number(1), node, -MAX_SUBSTRING,
                                     MAX_SUBSTRING)
            args = [inner.sql, exp.Literal.number(start)]
            if node.args.get("length") is not None:
                args.append(exp.Literal.number(_integer_literal(node.args["length"], node, 0, MAX_SUBSTRING)))
            return Scalar(exp.Anonymous(this="SUBSTRING", expressions=args), "VARCHAR", inner.columns)
        case exp.Left():
            inner = _text(node.this, names, node)
            count = _integer_literal(node.expression, node, 0, MAX_SUBSTRING)
            return Scalar(exp.Anonymous(this="LEFT", expressions=[inner.sql, exp.Literal.number(count)]),
                          "VARCHAR", inner.columns)
        case exp.DateTrunc() | exp.TimestampTrunc():
            unit = _part(node.args.get("unit"), node, _TRUNC_UNITS)
            inner = _date(node.this, names, node)
            trunc = exp.Anonymous(this="DATE_TRUNC", expressions=[exp.Literal.string(unit.lower()), inner.sql])
            return Scalar(exp.cast(trunc, "DATE"), "DATE", inner.columns)
        case exp.Extract():
            return _extract(_part(node.this, node, frozenset(_PARTS)), node.expression, names, node)
        case exp.Anonymous() if node.name.upper() == "DATE_PART" and len(node.expressions) == 2:
            return _extract(_part(node.expressions[0], node, frozenset(_PARTS)), node.expressions[1], names, node)
        case _ if type(node) in _PART_FUNCTIONS:
            return _extract(_PART_FUNCTIONS[type(node)], node.this, names, node)
        case exp.TimeToStr():
            inner = _date(node.this, names, node)
            form = node.args.get("format")
            if not (isinstance(form, exp.Literal) and form.is_string and _FORMAT.fullmatch(form.this)):
                raise UnsupportedQuery(
                    "STRFTIME takes a literal format of date parts (%Y %y %m %d %b %B %a %A %j %u %w) and "
                    "separators", construct="STRFTIME()",
                )
            call = exp.Anonymous(this="STRFTIME", expressions=[inner.sql, exp.Literal.string(form.this)])
            return Scalar(call, "VARCHAR", inner.columns)
    refusal = unsupported(node, "a computed value")
    refusal.detail["hint"] = ALLOWED
    raise refusal


def constant(node: exp.Expr) -> Scalar:
    """A literal as a typed constant: integers as BIGINT, other numbers as DOUBLE, text as VARCHAR."""
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if isinstance(inner, exp.Literal) and not inner.is_string:
        number = exact(inner)
        number = -number if negative else number
        if number == number.to_integral_value():
            return Scalar(exp.Literal.number(int(number)), "BIGINT", frozenset(), (int(number),))
        return Scalar(exp.Literal.number(str(number)), "DOUBLE", frozenset(), (float(number),))
    if negative:
        raise unsupported(node, "a literal")
    if isinstance(node, exp.Literal):
        if len(node.this) > MAX_TEXT_LITERAL:
            raise UnsupportedQuery(f"text literals are limited to {MAX_TEXT_LITERAL} characters", construct="LITERAL")
        return Scalar(exp.Literal.string(node.this), "VARCHAR", frozenset(), (node.this,))
    if isinstance(node, exp.Boolean):
        return Scalar(exp.Boolean(this=bool(node.this)), "BOOLEAN", frozenset(), (bool(node.this),))
    return Scalar(exp.Null(), "NULL", frozenset(), ())


def _as(value: Scalar, type_name: str) -> exp.Expr:
    """`value` in `type_name` (no cast when it already is one, or is an integer literal)."""
    literal = isinstance(value.sql, exp.Literal) and value.kind in ("integer", "float")
    if value.type == type_name or (literal and type_name in ("BIGINT", "DOUBLE")):
        return value.sql
    return exp.cast(value.sql, type_name)


def _operand(value: Scalar, type_name: str) -> exp.Expr:
    """`value` in `type_name` as an operand of an operator, parenthesised unless atomic: sqlglot prints a tree
    as it is (`Sub(a, Sub(b, c))` prints `a - b - c`), so precedence must be in the tree (docs/privacy.md §12).

    Example:
        >>> inner = Scalar(exp.Sub(this=exp.column("a"), expression=exp.Literal.number(18)), "BIGINT", frozenset())
        >>> exp.IntDiv(this=_operand(inner, "BIGINT"), expression=exp.Literal.number(10)).sql("duckdb")
        '(a - 18) // 10'
    """
    sql = _as(value, type_name)
    if isinstance(sql, exp.Binary | exp.Unary) and not isinstance(sql, exp.Paren):
        return exp.Paren(this=sql)
    if isinstance(sql, exp.Literal) and sql.this.startswith("-"):  # `a - -1` is fine, `a--1` a comment
        return exp.Paren(this=sql)
    return sql


def _number(node: exp.Expr, names: Names, parent: exp.Expr) -> Scalar:
    value = scalar(node, names)
    if value.kind not in ("integer", "float", "decimal"):
        raise UnsupportedQuery(
            f"{errors_name(parent)} takes numbers, not {value.type} ({node.sql()})", construct=errors_name(parent)
        )
    return value


def _numbers(node: exp.Expr, names: Names) -> tuple[Scalar, Scalar]:
    return _number(node.this, names, node), _number(node.expression, names, node)


def _text(node: exp.Expr, names: Names, parent: exp.Expr) -> Scalar:
    value = scalar(node, names)
    if value.kind != "string":
        raise UnsupportedQuery(f"{errors_name(parent)} takes text, not {value.type} ({node.sql()})",
                               construct=errors_name(parent))
    return value


_SHIFT_UNITS = {"DAY": 1, "WEEK": 7}


def _day_shift(node: exp.Add | exp.Sub, names: Names) -> Scalar:
    """`day ± INTERVAL n DAY|WEEK`, as in Metabase's Sunday-start weeks (`date_trunc('week', day + INTERVAL 1 DAY)
    - INTERVAL 1 DAY`): DuckDB's TIMESTAMP at that day's 00:00, kept as the DATE it is (months are not a fixed
    number of days, and hours would leave the days: both refused)."""
    interval, side = (node.this, node.expression) if isinstance(node.this, exp.Interval) else (
        node.expression, node.this)
    inner = _date(side, names, node)
    unit = interval.args.get("unit")
    unit_name = unit.name.upper().rstrip("S") if unit is not None else ""
    amount = interval.this
    try:
        count = int(str(amount.this).strip()) if isinstance(amount, exp.Literal) else None
    except ValueError:
        count = None
    if unit_name not in _SHIFT_UNITS or count is None or abs(count) > 100_000:
        raise UnsupportedQuery(
            f"{node.sql()}: a date is shifted here by INTERVAL n DAY or n WEEK (a whole number up to 100000)",
            construct="INTERVAL",
        )
    days = count * _SHIFT_UNITS[unit_name] * (1 if isinstance(node, exp.Add) else -1)
    shifted = exp.Add(this=exp.Paren(this=inner.sql), expression=exp.Interval(
        this=exp.Literal.string(str(days)), unit=exp.var("DAY")))
    return Scalar(exp.cast(shifted, "DATE"), "DATE", inner.columns)


def _date(node: exp.Expr, names: Names, parent: exp.Expr) -> Scalar:
    value = scalar(node, names)
    if value.kind != "date":
        raise UnsupportedQuery(f"{errors_name(parent)} takes a DATE, not {value.type} ({node.sql()})",
                               construct=errors_name(parent))
    return value


def errors_name(node: exp.Expr) -> str:
    if type(node) in _ARITHMETIC or isinstance(node, exp.Div | exp.IntDiv):
        return "ARITHMETIC"
    return construct_name(node)


def _division(node: exp.Div | exp.IntDiv, names: Names) -> Scalar:
    left, right = _numbers(node, names)
    columns = left.columns | right.columns
    integer = left.kind == right.kind == "integer"
    if isinstance(node, exp.IntDiv) or (integer and node.args.get("typed")):
        # `//` (DuckDB) and `/` between integers in a dialect with typed division (PostgreSQL, T-SQL):
        # integer division, truncating towards zero in both
        if not integer:
            raise UnsupportedQuery("integer division // takes integers", construct="ARITHMETIC")
        return Scalar(exp.IntDiv(this=_operand(left, "BIGINT"), expression=_operand(right, "BIGINT")), "BIGINT",
                      columns)
    return Scalar(exp.Div(this=_operand(left, "DOUBLE"), expression=_operand(right, "DOUBLE")), "DOUBLE", columns)


def _integer_literal(node: exp.Expr, parent: exp.Expr, low: int, high: int) -> int:
    value = constant(node) if isinstance(node, exp.Literal | exp.Neg) else None
    if value is None or value.type != "BIGINT" or not low <= int(value.choices[0]) <= high:  # type: ignore[index, arg-type]
        raise UnsupportedQuery(f"{errors_name(parent)} takes a whole-number literal in [{low}, {high}] there",
                               construct=errors_name(parent))
    return int(value.choices[0])  # type: ignore[index, arg-type]


def _part(node: exp.Expr | None, parent: exp.Expr, allowed: frozenset[str]) -> str:
    text = node.name.upper() if isinstance(node, exp.Var | exp.Literal | exp.Column) else None
    if text not in allowed:
        raise UnsupportedQuery(
            f"{errors_name(parent)} takes one of {', '.join(sorted(allowed)).lower()}, not "
            f"{node.sql() if node is not None else 'nothing'}", construct=errors_name(parent),
        )
    return text  # type: ignore[return-value]


def _extract(part: str, node: exp.Expr, names: Names, parent: exp.Expr) -> Scalar:
    inner = _date(node, names, parent)
    call = exp.Extract(this=exp.var(_PARTS.get(part, part)), expression=inner.sql)
    return Scalar(call, "BIGINT", inner.columns)


def _cast(node: exp.Cast | exp.TryCast, names: Names) -> Scalar:
    inner = scalar(node.this, names)
    try:
        target = types.normalize(node.to.sql(dialect="duckdb"))
    except ValueError:
        target = node.to.sql(dialect="duckdb")
    if target not in _CAST_TARGETS and not target.startswith("DECIMAL"):
        raise UnsupportedQuery(
            f"CAST to {target} is not supported; cast to an integer type, DOUBLE, DECIMAL(p,s), VARCHAR or DATE",
            construct="CAST",
        )
    target = "DOUBLE" if target == "FLOAT" else target
    if inner.type == "NULL":  # CAST(NULL AS t): a NULL of that type (a scalar subquery with no row, public/scalars.py)
        return Scalar(exp.cast(exp.Null(), target), target, frozenset())
    if inner.kind == "boolean" or (inner.kind == "date" and types.kind(target) not in ("date", "string")):
        raise UnsupportedQuery(f"CAST of a {inner.type} to {target} is not supported", construct="CAST")
    return Scalar(exp.cast(inner.sql, target), target, inner.columns)


def _case(node: exp.Case | exp.If, names: Names) -> Scalar:
    """CASE WHEN <condition> THEN <literal> … [ELSE <literal>] END (and IF(c, a, b)): values are literals, so
    the key's values are public (the literals), whatever the conditions read."""
    if isinstance(node, exp.If):
        branches, default = [(node.this, node.args.get("true"))], node.args.get("false")
    else:
        subject = node.this
        branches = [(exp.EQ(this=subject.copy(), expression=b.this) if subject else b.this, b.args.get("true"))
                    for b in node.args.get("ifs") or ()]
        default = node.args.get("default")
    values = [v for _, v in branches] + ([default] if default is not None else [])
    constants = []
    for value in values:
        if not isinstance(value, exp.Literal | exp.Neg | exp.Boolean | exp.Null):
            raise UnsupportedQuery(f"CASE … THEN takes literals, not {value.sql()}; compute the value outside CASE",
                                   construct="CASE", hint=ALLOWED)
        constants.append(constant(value))
    result_type = _common_type([c for c in constants if c.type != "NULL"], "CASE")
    ifs = [exp.If(this=names.condition(condition), true=_as_constant(c, result_type))
           for (condition, _), c in zip(branches, constants, strict=False)]
    otherwise = _as_constant(constants[-1], result_type) if default is not None else None
    choices = tuple(dict.fromkeys(
        types.canonical(result_type, v) for c in constants for v in (c.choices or ())))
    columns = frozenset(names.column(c).name for c in node.find_all(exp.Column))
    return Scalar(exp.Case(ifs=ifs, default=otherwise), result_type, columns, choices)


def _as_constant(value: Scalar, type_name: str) -> exp.Expr:
    return exp.Null() if value.type == "NULL" else exp.cast(value.sql, type_name) if value.type != type_name \
        else value.sql


def _common_type(values: list[Scalar], construct: str) -> str:
    if not values:
        raise UnsupportedQuery(f"{construct} needs at least one non-NULL value", construct=construct)
    kinds = {v.kind for v in values}
    if kinds <= {"integer"}:
        return "BIGINT"
    if kinds <= {"integer", "float", "decimal"}:
        return "DOUBLE"
    if len(kinds) == 1:
        return values[0].type if len({v.type for v in values}) == 1 else values[0].type.split("(")[0]
    raise UnsupportedQuery(
        f"{construct} mixes {', '.join(sorted(kinds))} values; give every branch the same type", construct=construct
    )


def _coalesce(node: exp.Coalesce, names: Names) -> Scalar:
    args = [scalar(a, names) for a in [node.this, *node.expressions]]
    typed = [a for a in args if a.type != "NULL"]
    result_type = _common_type(typed, "COALESCE")
    if result_type.startswith("DECIMAL"):
        result_type = "DOUBLE"
    columns = frozenset().union(*(a.columns for a in args))
    return Scalar(exp.Coalesce(this=_as(args[0], result_type),
                               expressions=[_as(a, result_type) for a in args[1:]]), result_type, columns)
