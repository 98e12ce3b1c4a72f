"""A tiny expression language for what happens after noise: output arithmetic, HAVING and ORDER BY.

These run in Python on released (noisy) values only, so they can never act before noise
(docs/architecture.md, the security boundary).
SQL semantics where it matters: NULL propagates, division by zero gives NULL, a NULL condition is false.
"""

from __future__ import annotations

import math
import operator
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
