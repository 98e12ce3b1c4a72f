"""Declared column types, and values and comparisons exactly as DuckDB holds and evaluates them.

The per-cell ledger proves two queries disjoint by evaluating their WHERE clauses in Python (analyse/cell_space.py)
while DuckDB evaluates the same clauses on the data. The two agree only if both compare the same values in
the same way, so every comparison the rewrite emits is exact by construction:
- an integer or DECIMAL(p, s) column is compared with a literal on its own grid and in its own range; a
  literal off the grid or out of range is rewritten exactly (`age > 29.5` is `age >= 30`);
- a FLOAT (REAL) or DOUBLE column is compared in DOUBLE (a REAL widens exactly) with a DOUBLE literal,
  first rounded to the column's precision as DuckDB itself rounds it;
- text is compared under binary collation: a column declared COLLATE NOCASE would make 'N' equal 'n';
- dates are compared as dates; in Python a date is its ISO text, which orders like the date.
`canonical(type, value)` gives one Python value per type for a policy value and for an engine value alike,
so public-domain keys match the groups DuckDB returns (a DATE is a `datetime.date` there, a REAL a float32).
"""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import re
import struct
from collections.abc import Callable
from decimal import Decimal
from typing import Literal

from sqlglot import exp

Kind = Literal["integer", "float", "decimal", "string", "date", "boolean"]
Value = str | int | float | bool | Decimal  # a canonical value (dates are ISO text)

# The types a policy may declare, by DuckDB's own name, with the aliases DuckDB accepts for them.
TYPE_KINDS: dict[str, Kind] = {
    "TINYINT": "integer", "SMALLINT": "integer", "INTEGER": "integer", "BIGINT": "integer", "HUGEINT": "integer",
    "UTINYINT": "integer", "USMALLINT": "integer", "UINTEGER": "integer", "UBIGINT": "integer",
    "FLOAT": "float", "DOUBLE": "float", "DECIMAL": "decimal",
    "VARCHAR": "string", "DATE": "date", "BOOLEAN": "boolean",
}
ALIASES = {"INT": "INTEGER", "INT4": "INTEGER", "INT8": "BIGINT", "INT2": "SMALLINT", "INT1": "TINYINT",
           "REAL": "FLOAT", "FLOAT4": "FLOAT", "FLOAT8": "DOUBLE", "NUMERIC": "DECIMAL",
           "TEXT": "VARCHAR", "STRING": "VARCHAR", "BOOL": "BOOLEAN"}
_INTEGER_BITS = {"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64, "HUGEINT": 128}
_DECIMAL = re.compile(r"(?:DECIMAL|NUMERIC)\s*\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\)")
_BINARY = exp.Identifier(this="binary", quoted=True)


@functools.lru_cache(maxsize=256)  # a pure function of a declared name, read ~25 times per query
def normalize(type_name: str) -> str:
    """DuckDB's own name for a declared type: aliases resolved, DECIMAL with its precision and scale.

    Example:
        >>> normalize("real"), normalize("Decimal"), normalize("numeric(10, 2)"), normalize("TEXT")
        ('FLOAT', 'DECIMAL(18,3)', 'DECIMAL(10,2)', 'VARCHAR')
    """
    text = " ".join(type_name.strip().upper().split())
    if match := _DECIMAL.fullmatch(text):
        precision, scale = int(match[1]), int(match[2] or 0)
        if not (1 <= precision <= 38 and 0 <= scale <= precision):
            raise ValueError(f"type {type_name!r}: DECIMAL(p, s) needs 1 <= p <= 38 and 0 <= s <= p")
        return f"DECIMAL({precision},{scale})"
    base = ALIASES.get(text, text)
    if base == "DECIMAL":
        return "DECIMAL(18,3)"  # DuckDB's default
    if base not in TYPE_KINDS:
        raise ValueError(f"unsupported type {type_name!r}; use one of {', '.join(sorted(TYPE_KINDS))}, "
                         "DECIMAL(p,s)")
    return base


@functools.lru_cache(maxsize=256)
def kind(type_name: str) -> Kind:
    """The family our checks reason about.

    Example:
        >>> kind("DECIMAL(10,2)"), kind("FLOAT"), kind("UBIGINT")
        ('decimal', 'float', 'integer')
    """
    return TYPE_KINDS[normalize(type_name).split("(")[0]]


def grid(type_name: str) -> tuple[int, Decimal, Decimal] | None:
    """(scale, smallest, largest) of an integer or DECIMAL type: its values are the multiples of 10^-scale
    in [smallest, largest]; None for the other types.

    Example:
        >>> grid("TINYINT"), grid("DECIMAL(3,1)")
        ((0, Decimal('-128'), Decimal('127')), (1, Decimal('-99.9'), Decimal('99.9')))
    """
    name = normalize(type_name)
    if name.startswith("DECIMAL"):
        precision, scale = (int(x) for x in name[8:-1].split(","))
        top = Decimal(10**precision - 1).scaleb(-scale, context=_LOOSE)  # exact: 28 digits would round p > 28 up
        return scale, -top, top
    if name in _INTEGER_BITS:
        bits = _INTEGER_BITS[name]
        return 0, Decimal(-(2 ** (bits - 1))), Decimal(2 ** (bits - 1) - 1)
    if name.startswith("U") and name[1:] in _INTEGER_BITS:
        return 0, Decimal(0), Decimal(2 ** _INTEGER_BITS[name[1:]] - 1)
    return None


def grid_span(type_name: str, lo: float, hi: float) -> tuple[float, float] | None:
    """The least and greatest values of the type within [lo, hi], as the DOUBLEs a clamp compares them as, or
    None when there is none; (lo, hi) itself for a floating type (every DOUBLE is one of its values).

    Example:
        >>> grid_span("BIGINT", -2.5, 7.0), grid_span("BIGINT", 1e-300, 0.5), grid_span("UTINYINT", -5.0, 3.0)
        ((-2.0, 7.0), None, (0.0, 3.0))
        >>> grid_span("DECIMAL(5,2)", 0.001, 0.019), grid_span("DOUBLE", 1e-300, 2e-300)
        ((0.01, 0.01), (1e-300, 2e-300))
    """
    found = grid(type_name)
    if found is None:
        return lo, hi
    scale, least, most = found
    if Decimal(lo) > most or Decimal(hi) < least:
        return None
    first = max(Decimal(lo), least).scaleb(scale, context=_EXACT).to_integral_value(rounding=decimal.ROUND_CEILING)
    last = min(Decimal(hi), most).scaleb(scale, context=_EXACT).to_integral_value(rounding=decimal.ROUND_FLOOR)
    # as DOUBLEs: n·10^-scale rounds, so the one below the exact first may round onto lo (the map is monotone)
    low = next(v for n in (first - 1, first) if (v := grid_double(n, scale)) >= lo and n >= least.scaleb(scale))
    high = next(v for n in (last + 1, last) if (v := grid_double(n, scale)) <= hi and n <= most.scaleb(scale))
    return (low, high) if low <= high else None


def grid_double(n: Decimal | int, scale: int) -> float:
    """n·10^-scale as the nearest DOUBLE (what CAST(x AS DOUBLE) gives for that DECIMAL value).

    Example:
        >>> grid_double(7, 0), grid_double(1, 3)
        (7.0, 0.001)
    """
    return float(Decimal(n).scaleb(-scale, context=_EXACT))


def canonical(type_name: str, value: object) -> Value | None:
    """The one Python value standing for `value` in a column of this type (None stays None).

    Raises:
        ValueError: `value` is not a value of the type (a policy's domain value, say).

    Example:
        >>> canonical("FLOAT", 0.1), canonical("DOUBLE", -0.0), canonical("DECIMAL(5,2)", 0.1)
        (0.10000000149011612, 0.0, Decimal('0.10'))
        >>> canonical("DATE", dt.date(2024, 1, 31)), canonical("DATE", "2024-01-31")
        ('2024-01-31', '2024-01-31')
    """
    if value is None:
        return None
    name, family = normalize(type_name), kind(type_name)
    number = isinstance(value, int | float | Decimal) and not isinstance(value, bool)
    if family == "integer" and number and _integral(value):
        return _in_range(name, int(value))
    if family == "decimal" and number:
        scale, _, _ = grid(name)  # type: ignore[misc]
        exact = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)  # type: ignore[arg-type]
        if exact.is_finite() and exact == exact.quantize(Decimal(1).scaleb(-scale), context=_LOOSE):
            return _in_range(name, exact.quantize(Decimal(1).scaleb(-scale), context=_LOOSE))
    if family == "float" and number:
        wide = float(value)  # type: ignore[arg-type]
        return (_float32(wide) if name == "FLOAT" else wide) + 0.0  # + 0.0: -0.0 is 0.0 (no sign released)
    if family == "string" and isinstance(value, str):
        return value
    if family == "boolean" and isinstance(value, bool):
        return value
    if family == "date" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return value.isoformat()
    if family == "date" and isinstance(value, str):
        try:
            return dt.date.fromisoformat(value).isoformat()
        except ValueError:
            pass
    raise ValueError(f"{value!r} is not a {name} value")


def reader(type_name: str) -> Callable[[object], Value | None]:
    """`canonical` for the values DuckDB returns from a column read as `column` reads it, without the checks
    a policy value needs: one call per released cell, so it stays a cheap conversion.

    Example:
        >>> reader("DATE")(dt.date(2024, 1, 31)), reader("DOUBLE")(-0.0), reader("VARCHAR")(None)
        ('2024-01-31', 0.0, None)
    """
    match kind(type_name):
        case "float":  # a REAL is read as CAST(col AS DOUBLE): already a float32 value, widened exactly
            return lambda v: None if v is None else float(v) + 0.0  # type: ignore[arg-type]
        case "date":
            return lambda v: None if v is None else v.isoformat()  # type: ignore[attr-defined]
    return lambda v: v  # type: ignore[return-value]  # int, Decimal (on the column's grid), str, bool


def column(name: str, type_name: str) -> exp.Expr:
    """The column as every comparison reads it: text under binary collation, a REAL widened to DOUBLE.

    Example:
        >>> column("region", "VARCHAR").sql("duckdb"), column("f", "REAL").sql("duckdb")
        ('"region" COLLATE "binary"', 'CAST("f" AS DOUBLE)')
    """
    ref = exp.column(name, quoted=True)
    match kind(type_name), normalize(type_name):
        case "string", _:
            return exp.Collate(this=ref, expression=_BINARY.copy())
        case "float", "FLOAT":
            return exp.cast(ref, exp.DataType.Type.DOUBLE)
    return ref


def literal(type_name: str, value: Value) -> exp.Expr:
    """SQL for a canonical value, read back by DuckDB as exactly that value (see `read_literal`).

    Example:
        >>> [literal(t, canonical(t, v)).sql("duckdb") for t, v in (("INTEGER", 7), ("DOUBLE", 0.1),
        ...     ("DECIMAL(5,2)", 1.5), ("DATE", "2024-01-31"), ("VARCHAR", "N"))]
        ['7', "CAST('0.1' AS DOUBLE)", "CAST('1.50' AS DECIMAL(5, 2))", "CAST('2024-01-31' AS DATE)", "'N'"]
    """
    match kind(type_name):
        case "integer":
            return exp.Literal.number(int(value))
        case "decimal":
            return exp.cast(exp.Literal.string(str(value)), exp.DataType.build(normalize(type_name)))
        case "float":
            return exp.cast(exp.Literal.string(repr(float(value))), exp.DataType.Type.DOUBLE)
        case "date":
            return exp.cast(exp.Literal.string(str(value)), exp.DataType.Type.DATE)
        case "boolean":
            return exp.Boolean(this=bool(value))
    return exp.Literal.string(str(value))


UNKNOWN = object()


def read_literal(node: exp.Expr) -> object:
    """The value of a literal `literal` emitted, or UNKNOWN for anything else.

    Example:
        >>> read_literal(literal("DECIMAL(38,0)", 2**53 + 1)), read_literal(literal("FLOAT", 0.5))
        (9007199254740993, 0.5)
    """
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        return node.this if node.is_string else _number(node.this)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        number = _number(node.this.this)
        return UNKNOWN if number is UNKNOWN else -number  # type: ignore[operator]
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        text, to = node.this.this, node.to
        if to.is_type("double"):
            return float(text)
        if to.is_type("date"):
            return text
        if to.is_type(*exp.DataType.INTEGER_TYPES, "decimal"):
            return _number(text)
    return UNKNOWN


# --- exact comparisons ---------------------------------------------------------------------------------

_OPS: dict[type[exp.Expr], str] = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">",
                                   exp.GTE: ">="}


def compare(name: str, type_name: str, op: type[exp.Expr], value: object) -> exp.Expr:
    """`name <op> value` for an analyst's literal (numbers as exact Decimals), as an exact typed comparison.

    Example:
        >>> [compare("age", "INTEGER", op, Decimal(v)).sql("duckdb")
        ...  for op, v in ((exp.GT, "29.5"), (exp.LT, "29.5"), (exp.EQ, "29.5"), (exp.LTE, "1e30"))]
        ['"age" >= 30', '"age" <= 29', '"age" <> "age"', '"age" <= 2147483647']
    """
    ref = column(name, type_name)
    box = grid(type_name)
    if box is None:
        return op(this=ref, expression=literal(type_name, _rounded(type_name, value)))
    scale, low, high = box
    x = Decimal(value)  # type: ignore[arg-type]
    if _on(x, scale) and low <= x <= high:
        return op(this=ref, expression=literal(type_name, _grid_value(x)))
    if op is exp.EQ:
        return _never(ref)
    if op is exp.NEQ:
        return exp.EQ(this=ref, expression=ref.copy())  # TRUE unless NULL, as `col <> x` is
    step = Decimal(1).scaleb(-scale)
    if op in (exp.LT, exp.LTE):  # col <= the largest grid value below (or at) x
        bound = _floor(x, scale) if op is exp.LTE or not _on(x, scale) else x - step
        if bound < low:
            return exp.LT(this=ref, expression=literal(type_name, _grid_value(low)))
        return exp.LTE(this=ref, expression=literal(type_name, _grid_value(min(bound, high))))
    bound = _ceil(x, scale) if op is exp.GTE or not _on(x, scale) else x + step
    if bound > high:
        return exp.GT(this=ref, expression=literal(type_name, _grid_value(high)))
    return exp.GTE(this=ref, expression=literal(type_name, _grid_value(max(bound, low))))


def member(name: str, type_name: str, values: list[object]) -> exp.Expr:
    """`name IN (values)`, keeping only values the column can hold.

    Example:
        >>> member("n", "TINYINT", [Decimal(1), Decimal("1.5"), Decimal(999)]).sql("duckdb")
        '"n" IN (1)'
    """
    ref = column(name, type_name)
    box = grid(type_name)
    if box is None:
        kept = [_rounded(type_name, v) for v in values]
    else:
        scale, low, high = box
        kept = [_grid_value(x) for x in map(Decimal, values) if _on(x, scale) and low <= x <= high]  # type: ignore[arg-type]
    if not kept:
        return _never(ref)
    unique = list(dict.fromkeys(kept))
    return exp.In(this=ref, expressions=[literal(type_name, v) for v in unique])


def between(name: str, type_name: str, low_value: object, high_value: object) -> exp.Expr:
    """`name BETWEEN low AND high`, its ends moved onto the column's grid and range.

    Example:
        >>> between("n", "TINYINT", Decimal("0.5"), Decimal(1000)).sql("duckdb")
        '"n" BETWEEN 1 AND 127'
    """
    ref = column(name, type_name)
    box = grid(type_name)
    if box is None:
        return exp.Between(this=ref, low=literal(type_name, _rounded(type_name, low_value)),
                           high=literal(type_name, _rounded(type_name, high_value)))
    scale, low, high = box
    lo = max(_ceil(Decimal(low_value), scale), low)  # type: ignore[arg-type]
    hi = min(_floor(Decimal(high_value), scale), high)  # type: ignore[arg-type]
    if lo > hi:
        return _never(ref)
    return exp.Between(this=ref, low=literal(type_name, _grid_value(lo)), high=literal(type_name, _grid_value(hi)))


def _never(ref: exp.Expr) -> exp.Expr:
    """FALSE for every value and NULL for NULL, exactly as `col = <a value it cannot hold>`."""
    return exp.NEQ(this=ref, expression=ref.copy())


def _rounded(type_name: str, value: object) -> Value:
    """A literal as DuckDB converts it to the column's type (numbers rounded to FLOAT/DOUBLE precision)."""
    if kind(type_name) == "float" and isinstance(value, Decimal):
        return canonical(type_name, float(value))  # type: ignore[return-value]  # float(Decimal) rounds once
    result = canonical(type_name, value)
    assert result is not None
    return result


_LOOSE = decimal.Context(prec=200)
_EXACT = decimal.Context(prec=800)  # a DOUBLE's exact decimal expansion has at most 767 digits: none rounds


def _on(x: Decimal, scale: int) -> bool:
    return x == x.quantize(Decimal(1).scaleb(-scale), context=_LOOSE)


def _floor(x: Decimal, scale: int) -> Decimal:
    return x.quantize(Decimal(1).scaleb(-scale), rounding=decimal.ROUND_FLOOR, context=_LOOSE)


def _ceil(x: Decimal, scale: int) -> Decimal:
    return x.quantize(Decimal(1).scaleb(-scale), rounding=decimal.ROUND_CEILING, context=_LOOSE)


def _grid_value(x: Decimal) -> int | Decimal:
    return int(x) if x == x.to_integral_value() else x


def _integral(value: object) -> bool:
    if isinstance(value, int):
        return True
    return isinstance(value, float | Decimal) and math.isfinite(value) and value == int(value)


def _in_range(type_name: str, value: int | Decimal) -> int | Decimal:
    box = grid(type_name)
    assert box is not None
    if not box[1] <= value <= box[2]:
        raise ValueError(f"{value} is out of range for {type_name}")
    return value


def _float32(value: float) -> float:
    """`value` rounded to the nearest float32 (to nearest, ties to even), as a Python float."""
    if not math.isfinite(value):
        return value
    try:
        return float(struct.unpack("<f", struct.pack("<f", value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def _number(text: str) -> object:
    try:
        number = Decimal(text)
    except decimal.InvalidOperation:
        return UNKNOWN
    if not number.is_finite():
        return UNKNOWN
    return int(number) if number == number.to_integral_value() else number
