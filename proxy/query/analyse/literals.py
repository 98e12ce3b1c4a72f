"""Literals read exactly: numbers as Decimals or ints, dates as ISO text, each checked against its column.

Example:
    >>> from sqlglot import exp
    >>> from proxy.query.catalog import ColumnSpec
    >>> literal(exp.Literal.number("29.5"), ColumnSpec("age", "INTEGER"))
    Decimal('29.5')
    >>> number(exp.Literal.number("7"))
    7
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
from decimal import Decimal, InvalidOperation

from sqlglot import exp

from proxy.query import types
from proxy.query.catalog import ColumnSpec, Literal_
from proxy.query.errors import LiteralOutsideDomain, PolicyError, UnsupportedQuery

MAX_ABS_LITERAL = 1e18


def literal(node: exp.Expr, spec: ColumnSpec, today: dt.date | None = None) -> object:
    """The exact value of a literal of the column's kind (numbers as Decimals, dates as ISO text): the
    comparison is then rebuilt from it by types.py, so no comparison can fail on a cast at run time."""
    kind = spec.kind
    typed = _typed(node)
    if spec.numeric:
        negative = isinstance(node, exp.Neg)
        inner = node.this if negative else node
        if isinstance(inner, exp.Literal) and not inner.is_string:
            number = exact(inner)
            return -number if negative else number
        if typed is not None and typed[0].is_type(*exp.DataType.INTEGER_TYPES, "decimal"):
            return _bounded(_of_type(typed, node), spec)  # exactly, as DuckDB compares
        if typed is not None and typed[0].is_type("double"):
            try:
                value = float(typed[1])
            except ValueError:
                raise PolicyError(f"{node.sql()} is not a number", construct="LITERAL", column=spec.name) from None
            return double_value(value, spec, node)
    elif kind == "string":
        if isinstance(node, exp.Literal) and node.is_string:
            return node.this
        if typed is not None and typed[0].is_type("text", "varchar"):
            return typed[1]
    elif kind == "boolean":
        if isinstance(node, exp.Boolean):
            return bool(node.this)
    elif kind == "date":
        found = date_value(node, spec, today)
        if found is not None and found[1]:
            return found[0].isoformat()
        if found is not None:  # a time after midnight: where.py moves the comparison onto the days
            raise PolicyError(f"{node.sql()} is a moment within a day; compare column {spec.name!r} with a date",
                              construct="LITERAL", column=spec.name)
    raise PolicyError(
        f"column {spec.name!r} ({spec.type}) must be compared with a {kind} literal, not {node.sql()}",
        construct="LITERAL", column=spec.name,
    )


def _typed(node: exp.Expr) -> tuple[exp.DataType, str] | None:
    """`CAST('text' AS type)`: a value of that type (a scalar subquery's value folded in, public/scalars.py)."""
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        return node.to, node.this.this
    return None


def _of_type(typed: tuple[exp.DataType, str], node: exp.Expr) -> Decimal:
    """The exact value of `CAST('text' AS <integer or DECIMAL type>)` when the text is already a value of the type
    (as a folded subquery's is); other text (DuckDB would round '12.7' to 13) is refused: write the value."""
    try:
        number = Decimal(typed[1].strip())
        written = typed[0].sql(dialect="duckdb")
        box = types.grid(types.normalize({"INT128": "HUGEINT", "UINT128": "UHUGEINT"}.get(written, written)))
    except (InvalidOperation, ValueError):
        box, number = None, Decimal(0)
    if box is None or not number.is_finite() or number != number.quantize(Decimal(1).scaleb(-box[0])) \
            or not box[1] <= number <= box[2]:
        raise PolicyError(f"{node.sql()} is not a value of {typed[0].sql()}: write the number itself",
                          construct="LITERAL")
    return number


def _bounded(number: Decimal, spec: ColumnSpec) -> Decimal:
    """An exact value beyond the column's range moved just outside it (every comparison reads it alike), so a
    large value computed from public data compares as DuckDB compares it instead of being refused."""
    box = types.grid(spec.type)
    if box is None or box[1] - 1 <= number <= box[2] + 1:
        return number
    return box[2] + 1 if number > 0 else box[1] - 1


def double_value(value: float, spec: ColumnSpec, node: exp.Expr) -> Decimal:
    """A DOUBLE compared with a numeric column, as DuckDB compares them: in DOUBLE, the column's value cast to it (a
    correctly rounded cast). A FLOAT or DOUBLE column compares with the value itself. An integer or DECIMAL column
    whose values are each alone in their DOUBLE's rounding interval (magnitudes times 10^scale below 2^52: INTEGER,
    DECIMAL(15, s)) compares with the one grid value that rounds to `value`, if any, else with `value` exactly:
    for every other grid value a, CAST(a AS DOUBLE) <op> value holds exactly when a <op> value does (the cast is
    monotone), so the comparison is exact on the column's grid (types.compare). A wider column (BIGINT,
    DECIMAL(18, 2)) would need a different bound per operator: refused, with the cast that makes it exact.

    Example:
        >>> money = ColumnSpec("m", "DECIMAL(15,2)")
        >>> double_value(0.1, money, exp.Null()), double_value(0.105, money, exp.Null())
        (Decimal('0.10'), Decimal('0.10499999999999999611421941381195210851728916168212890625'))
        >>> double_value(2.5, ColumnSpec("x", "DOUBLE"), exp.Null())
        Decimal('2.5')
    """
    if not math.isfinite(value):
        raise PolicyError(f"{node.sql()} is not a finite number: compare column {spec.name!r} with a number",
                          construct="LITERAL", column=spec.name)
    box = types.grid(spec.type)
    if box is None:
        return Decimal(repr(value))  # a FLOAT or DOUBLE column: compared in DOUBLE (types.compare rounds to it)
    scale, low, high = box
    if max(-low, high).scaleb(scale) >= 2**52:
        raise PolicyError(
            f"column {spec.name!r} ({spec.type}) compared with the DOUBLE {node.sql()} is compared in DOUBLE, which "
            "rounds the column's values: cast the value to DECIMAL (e.g. CAST(AVG(x) AS DECIMAL(18, 4))) or to the "
            "column's type", construct="LITERAL", column=spec.name)
    x = Decimal(value)  # exact
    if not low - 1 <= x <= high + 1:
        return high + 1 if x > 0 else low - 1
    step = Decimal(1).scaleb(-scale)
    for candidate in (x.quantize(step, rounding="ROUND_FLOOR"), x.quantize(step, rounding="ROUND_CEILING")):
        if low <= candidate <= high and float(candidate) == value:
            return candidate
    return x


_TIME_UNITS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400, "WEEK": 7 * 86400}
_MONTH_UNITS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_TIMESTAMPS = ("timestamp", "timestampntz", "datetime")


def date_value(node: exp.Expr, spec: ColumnSpec, today: dt.date | None = None) -> tuple[dt.date, bool] | None:
    """The day a DATE column is compared with, and whether the literal is that day's midnight (DuckDB compares
    a DATE with a TIMESTAMP as that day at 00:00); None when `node` is no constant date.

    A text literal is cast to DATE as DuckDB does, its time of day dropped (`'2024-03-01T12:00:00'` is
    2024-03-01); `TIMESTAMP '…'` keeps its time; constant arithmetic is folded: `DATE '…' ± INTERVAL n DAY|WEEK|
    MONTH|QUARTER|YEAR|HOUR|MINUTE|SECOND` (months clamp to the month's last day, as DuckDB), `± n` days, and
    `CURRENT_DATE` as `today` (fixed at planning: the planner's repeat identity then holds the day).

    Example:
        >>> day = ColumnSpec("day", "DATE")
        >>> date_value(exp.Literal.string("2024-03-01T12:00:00"), day)
        (datetime.date(2024, 3, 1), True)
        >>> from sqlglot import parse_one
        >>> date_value(parse_one("DATE '2024-01-31' + INTERVAL 1 MONTH"), day)
        (datetime.date(2024, 2, 29), True)
        >>> date_value(parse_one("TIMESTAMP '2024-03-01 06:00:00'"), day)
        (datetime.date(2024, 3, 1), False)
    """
    if isinstance(node, exp.Literal) and node.is_string:
        moment = _text_moment(node.this, spec)
        return None if moment is None else (moment.date(), True)
    moment = _moment(node, spec, today)
    if moment is None:
        return None
    return moment.date(), moment.time() == dt.time()


def _moment(node: exp.Expr, spec: ColumnSpec, today: dt.date | None) -> dt.datetime | None:
    while isinstance(node, exp.Paren):
        node = node.this
    match node:
        case exp.Cast() if isinstance(node.this, exp.Literal) and node.this.is_string:
            if node.to.is_type("date"):
                moment = _text_moment(node.this.this, spec)
                return None if moment is None else dt.datetime.combine(moment.date(), dt.time())
            if node.to.is_type(*_TIMESTAMPS):
                return _text_moment(node.this.this, spec)
        case exp.CurrentDate() if not node.args.get("this"):
            if today is None:
                raise UnsupportedQuery("CURRENT_DATE is not available here", construct="CURRENT_DATE")
            return dt.datetime.combine(today, dt.time())
        case exp.Add() | exp.Sub():
            sign = 1 if isinstance(node, exp.Add) else -1
            base, step = node.this, node.expression
            if isinstance(base, exp.Interval) and sign == 1:
                base, step = step, base
            start = _moment(base, spec, today)
            if start is None:
                return None
            if isinstance(step, exp.Interval):
                return _shifted(start, step, sign, spec)
            if isinstance(step, exp.Literal) and not step.is_string and start.time() == dt.time():
                days = number(step)  # DATE ± integer is a DATE
                if isinstance(days, int):
                    return _checked(lambda: start + dt.timedelta(days=sign * days), node, spec)
    return None


def _shifted(start: dt.datetime, interval: exp.Interval, sign: int, spec: ColumnSpec) -> dt.datetime | None:
    amount, unit = interval.this, interval.args.get("unit")
    unit_name = unit.name.upper().rstrip("S") if unit is not None else ""
    text = amount.this if isinstance(amount, exp.Literal) else None
    if text is None or not unit_name:
        return None
    try:
        count = int(str(text).strip())
    except ValueError:
        return None
    if unit_name in _TIME_UNITS:
        return _checked(lambda: start + dt.timedelta(seconds=sign * count * _TIME_UNITS[unit_name]), interval, spec)
    if unit_name in _MONTH_UNITS:
        months = start.year * 12 + start.month - 1 + sign * count * _MONTH_UNITS[unit_name]
        year, month = divmod(months, 12)
        month += 1
        if not 1 <= year <= 9999:
            return None
        last = (dt.date(year + month // 12, month % 12 + 1, 1) - dt.timedelta(days=1)).day
        return start.replace(year=year, month=month, day=min(start.day, last))
    return None


def _checked(compute: object, node: exp.Expr, spec: ColumnSpec) -> dt.datetime | None:
    try:
        return compute()  # type: ignore[operator, no-any-return]
    except OverflowError:
        raise PolicyError(f"{node.sql()} is beyond the calendar for column {spec.name!r}", construct="LITERAL",
                          column=spec.name) from None


def _text_moment(text: str, spec: ColumnSpec) -> dt.datetime | None:
    """An ISO date or timestamp text (`T` or a space between, optional seconds, fraction and offset)."""
    try:
        if len(text) == 10:
            return dt.datetime.combine(dt.date.fromisoformat(text), dt.time())
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise PolicyError(
            f"{text!r} is not a date (YYYY-MM-DD, or an ISO timestamp) for column {spec.name!r}",
            construct="LITERAL", column=spec.name,
        ) from None
    return moment.replace(tzinfo=None)  # DuckDB's cast of text to DATE or TIMESTAMP drops the offset


def in_domain(spec: ColumnSpec, value: object, node: exp.Expr) -> None:
    """Refuse an equality literal that no value of the column's declared `public_domain` equals: a typo
    (`'North'` for `north`) would otherwise be charged and answer noise alone (issue #28).

    Example:
        >>> r = ColumnSpec("region", "VARCHAR", public_domain=("north", "south"))
        >>> in_domain(r, "north", exp.Literal.string("north"))
        >>> try:
        ...     in_domain(r, "North", exp.Literal.string("North"))
        ... except LiteralOutsideDomain as refused:
        ...     print(refused.code, refused.detail["nearest"])
        literal_outside_domain ['north']
    """
    declared = spec.public_domain
    if declared is None:
        return
    try:
        held = types.canonical(spec.type, value)
    except (ValueError, TypeError, ArithmeticError):
        held = None
    if held is not None and held in declared:
        return
    nearest = _nearest(value, declared)
    shown = node.sql(dialect="duckdb")
    hint = f"did you mean {', '.join(_shown(v) for v in nearest)}?" if nearest else (
        f"the declared values are {', '.join(_shown(v) for v in declared[:10])}"
        + (" …" if len(declared) > 10 else ""))
    raise LiteralOutsideDomain(
        f"{shown} is not a declared value of column {spec.name!r} (its public domain): the condition can match no "
        f"declared value; {hint}",
        construct="LITERAL", column=spec.name, literal=shown, nearest=[_json(v) for v in nearest], hint=hint,
    )


def _nearest(value: object, declared: tuple[Literal_, ...]) -> list[Literal_]:
    """The declared values closest to `value`: those equal to it ignoring case, else the most alike texts,
    or for a number the closest numbers."""
    if isinstance(value, str):
        folded = [v for v in declared if isinstance(v, str) and v.casefold() == value.casefold()]
        if folded:
            return folded
        texts = {str(v).casefold(): v for v in declared}
        return [texts[t] for t in difflib.get_close_matches(value.casefold(), list(texts), n=3, cutoff=0.6)]
    if isinstance(value, int | Decimal) and not isinstance(value, bool):
        numbers = [v for v in declared if isinstance(v, int | float | Decimal) and not isinstance(v, bool)]
        return sorted(numbers, key=lambda v: abs(Decimal(str(v)) - Decimal(value)))[:2]
    return []


def _shown(value: Literal_) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def _json(value: Literal_) -> object:
    return int(value) if isinstance(value, Decimal) and value == value.to_integral_value() else (
        float(value) if isinstance(value, Decimal) else value)


def exact(node: exp.Literal, *, limit: bool = True) -> Decimal:
    """A numeric literal's exact value: 2**53 + 1 must not become 2**53 on its way to a comparison. An analyst's
    literal is at most 1e18 in magnitude; a value folded in (`limit` off) is any finite number."""
    try:
        number = Decimal(node.this)
    except InvalidOperation:
        raise UnsupportedQuery(f"{node.this!r} is not a number", construct="LITERAL") from None
    if not number.is_finite() or (limit and abs(number) > MAX_ABS_LITERAL):
        raise UnsupportedQuery(f"number {node.this} is out of range (|x| <= 1e18)", construct="LITERAL")
    return number


def number(node: exp.Literal) -> int | float:
    text = node.this
    try:
        number: int | float = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise UnsupportedQuery(f"{text!r} is not a number", construct="LITERAL") from None
    if not math.isfinite(number) or abs(number) > MAX_ABS_LITERAL:
        raise UnsupportedQuery(f"number {text} is out of range (|x| <= 1e18)", construct="LITERAL")
    return number
