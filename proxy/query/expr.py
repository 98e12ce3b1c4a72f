"""A tiny expression language for what happens after noise: output arithmetic, HAVING and ORDER BY.

These run in Python on released (noisy) values only, so they can never act before noise (DESIGN.md §6).
SQL semantics where it matters: NULL propagates, division by zero gives NULL, a NULL condition is false.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass

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

_BINARY: dict[str, Callable[[object, object], object]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul,
    "=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}


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
            return None if value is None else -value  # type: ignore[operator]
        case Op("/", (left, right)):
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            if a is None or b is None or b == 0:
                return None
            return a / b  # type: ignore[operator]
        case Op(op, (left, right)) if op in _BINARY:
            a, b = evaluate(left, keys, aggregates), evaluate(right, keys, aggregates)
            if a is None or b is None:
                return None
            try:
                return _BINARY[op](a, b)  # type: ignore[return-value]
            except TypeError:  # e.g. a string key compared with a number: SQL would refuse; we say NULL
                return None
    raise ValueError(f"cannot evaluate {expr!r}")
