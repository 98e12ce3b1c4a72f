"""A tiny expression language for what happens after noise: output arithmetic, HAVING and ORDER BY.

These run in Python on released (noisy) values only, so they can never act before noise
(docs/architecture.md, the security boundary), and cost nothing (post-processing).
SQL semantics where it matters: NULL propagates, division by zero gives NULL, a NULL condition is false.
The functions follow DuckDB on the same numbers (tests/query/test_post_processing.py checks each against it):
`CAST` to an integer rounds half to even, `ROUND` rounds half away from zero on `x * 10^n` in doubles, `FLOOR`
and `CEIL` return doubles, `CONCAT` skips NULLs while `||` propagates them. Where DuckDB would raise (a cast
out of range, text that is no number), the value is NULL: nothing computed after admission may fail.
"""

from __future__ import annotations

import datetime as dt
import math
import operator
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Value = int | float | str | bool | None


@dataclass(frozen=True, slots=True)
class Const:
    value: Value


@dataclass(frozen=True, slots=True)
class Key:
    index: int  # position in Analysis.keys


@dataclass(frozen=True, slots=True)
class Agg:
    index: int  # position in Analysis.aggregates


@dataclass(frozen=True, slots=True)
class Op:
    op: str
    args: tuple[Expr, ...]


Expr = Const | Key | Agg | Op

_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_INT_LIMIT = 2**63


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bounded(value: int | float) -> int | float:
    """Keep integers machine-sized: a huge product becomes a float (possibly inf), never a huge int."""
    if isinstance(value, int) and not -_INT_LIMIT < value < _INT_LIMIT:
        return float(value) if value.bit_length() < 1024 else math.copysign(math.inf, value)
    return value


INTEGER_RANGES = {"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64, "HUGEINT": 128, "UTINYINT": -8,
                  "USMALLINT": -16, "UINTEGER": -32, "UBIGINT": -64}  # bits; negative: unsigned
CAST_TARGETS = (*INTEGER_RANGES, "DOUBLE", "REAL", "VARCHAR", "DATE")


def cast(value: Value, target: str) -> Value:
    """`CAST(value AS target)` as DuckDB computes it, NULL where DuckDB would fail.

    Example:
        >>> cast(2.5, "INTEGER"), cast(3.5, "BIGINT"), cast(300, "TINYINT"), cast(7, "DOUBLE"), cast(1e20, "VARCHAR")
        (2, 4, None, 7.0, '1e+20')
    """
    if value is None:
        return None
    if target == "VARCHAR":
        return text(value)
    if target == "DATE":  # a DATE key is released as its ISO text; anything else is no date here
        try:
            return dt.date.fromisoformat(value).isoformat() if isinstance(value, str) and len(value) == 10 else None
        except ValueError:
            return None
    number: Value = value
    if isinstance(value, str):
        try:
            number = int(value.strip()) if target in INTEGER_RANGES else float(value.strip())
        except ValueError:
            return None
    if isinstance(number, bool):
        number = int(number)
    if not isinstance(number, int | float):
        return None
    if target in INTEGER_RANGES:
        if isinstance(number, float):
            if not math.isfinite(number):
                return None
            number = round(number)  # half to even on the double's exact value, as DuckDB's cast
        bits = INTEGER_RANGES[target]
        low, high = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if bits > 0 else (0, 2 ** -bits - 1)
        return number if low <= number <= high else None
    if target == "REAL":
        try:
            single: float = struct.unpack("f", struct.pack("f", float(number)))[0]
        except OverflowError:
            return None
        return single if math.isfinite(single) or not math.isfinite(float(number)) else None  # DuckDB: out of range
    return float(number)


def text(value: Value) -> str:
    """A released value as DuckDB's `CAST(… AS VARCHAR)` prints it: doubles in the shortest form that reads
    back, with `e+NN` beyond 1e16 (Python's repr shares both rules), booleans as `true`/`false`.

    Example:
        >>> text(3.0), text(7), text(True), text(1e-07), text(float("inf"))
        ('3.0', '7', 'true', '1e-07', 'inf')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _half_away(x: float) -> float:
    """C's `round`: half away from zero, on the double's exact value (its fraction is exact)."""
    whole = math.floor(abs(x))
    if abs(x) - whole >= 0.5:
        whole += 1
    return math.copysign(whole, x)


def round_to(value: Value, digits: int) -> Value:
    """DuckDB's `ROUND(value, digits)`: integers stay integers, doubles round `x · 10^digits` half away from zero.

    Example:
        >>> round_to(2.5, 0), round_to(1.005, 2), round_to(0.125, 2), round_to(1250, -2), round_to(7, 2)
        (3.0, 1.0, 0.13, 1300, 7)
    """
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int):
        if digits >= 0:
            return value
        power = 10 ** -digits
        magnitude = (abs(value) + power // 2) // power * power
        return _bounded(magnitude if value >= 0 else -magnitude)
    if not math.isfinite(value):
        return value
    if digits < 0:
        modifier = 10.0 ** -digits
        rounded = _half_away(value / modifier) * modifier
        return 0.0 if not math.isfinite(rounded) else rounded
    modifier = 10.0 ** digits
    scaled = value * modifier
    if not math.isfinite(scaled):
        return value
    rounded = _half_away(scaled) / modifier
    return value if not math.isfinite(rounded) else rounded


def _floor_ceil(value: Value, up: bool) -> Value:
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return value
    whole = float(math.ceil(value) if up else math.floor(value))
    return math.copysign(0.0, value) if whole == 0 else whole  # C's floor and ceil keep the sign of zero


def evaluate(expr: Expr, keys: Sequence[Value], aggregates: Sequence[Value]) -> Value:
    """Evaluate `expr` for one released row.

    Example:
        >>> evaluate(Op("/", (Agg(0), Const(2))), ("N",), (10,))
        5.0
        >>> evaluate(Op("/", (Agg(0), Const(0))), ("N",), (10,)) is None
        True
    """
    match expr:
        case Const(value):
            return value
        case Key(index):
            return keys[index]
        case Agg(index):
            return aggregates[index]
        case Op("and", (left, right)):
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            return bool(a) and bool(b)
        case Op("or", (left, right)):
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            return bool(a) or bool(b)
        case Op("not", (inner,)):
            value = evaluate(inner, keys, aggregates)
            return None if value is None else not value
        case Op("cast", (inner, Const(str() as target))):
            return cast(evaluate(inner, keys, aggregates), target)
        case Op("round", (inner, Const(int() as digits))):
            return round_to(evaluate(inner, keys, aggregates), digits)
        case Op("floor" | "ceil" as name, (inner,)):
            return _floor_ceil(evaluate(inner, keys, aggregates), name == "ceil")
        case Op("coalesce", args):
            values = [evaluate(a, keys, aggregates) for a in args]
            found = next((v for v in values if v is not None), None)
            if isinstance(found, int) and not isinstance(found, bool) and any(isinstance(v, float) for v in values):
                return float(found)  # DuckDB's COALESCE of a DOUBLE and an integer is a DOUBLE
            return found
        case Op("nullif", (left, right)):
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            if a is None or b is None:
                return a
            try:
                return None if a == b else a
            except TypeError:
                return a
        case Op("case", args):  # (condition, value)*, default
            for condition, result in zip(args[:-1:2], args[1:-1:2], strict=True):
                if evaluate(condition, keys, aggregates):
                    return evaluate(result, keys, aggregates)
            return evaluate(args[-1], keys, aggregates)
        case Op("concat", args):
            return "".join(text(v) for a in args if (v := evaluate(a, keys, aggregates)) is not None)
        case Op("||", (left, right)):
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            return None if a is None or b is None else text(a) + text(b)
        case Op("neg", (inner,)):
            value = evaluate(inner, keys, aggregates)
            return -value if _is_number(value) else None  # type: ignore[operator]
        case Op("/", (left, right)):
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            if not (_is_number(a) and _is_number(b)) or b == 0:
                return None
            return _bounded(a / b)  # type: ignore[operator]
        case Op(op, (left, right)) if op in _ARITHMETIC:
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            if not (_is_number(a) and _is_number(b)):
                return None  # arithmetic only on numbers: never Python's str * int
            return _bounded(_ARITHMETIC[op](a, b))
        case Op(op, (left, right)) if op in _COMPARE:
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            if a is None or b is None:
                return None
            try:
                return bool(_COMPARE[op](a, b))
            except TypeError:  # e.g. a string key compared with a number: SQL would refuse; we say NULL
                return None
    raise ValueError(f"cannot evaluate {expr!r}")
