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
import math
from decimal import Decimal, InvalidOperation

from sqlglot import exp

from proxy.query.catalog import ColumnSpec
from proxy.query.errors import PolicyError, UnsupportedQuery

MAX_ABS_LITERAL = 1e18


def literal(node: exp.Expr, spec: ColumnSpec) -> object:
    """The exact value of a literal of the column's kind (numbers as Decimals, dates as ISO text): the
    comparison is then rebuilt from it by types.py, so no comparison can fail on a cast at run time."""
    kind = spec.kind
    if spec.numeric:
        negative = isinstance(node, exp.Neg)
        inner = node.this if negative else node
        if isinstance(inner, exp.Literal) and not inner.is_string:
            number = exact(inner)
            return -number if negative else number
    elif kind == "string":
        if isinstance(node, exp.Literal) and node.is_string:
            return node.this
    elif kind == "boolean":
        if isinstance(node, exp.Boolean):
            return bool(node.this)
    elif kind == "date":
        text = node.this if isinstance(node, exp.Cast) and node.to.is_type("date") else node
        if isinstance(text, exp.Literal) and text.is_string:
            try:
                return dt.date.fromisoformat(text.this).isoformat()
            except ValueError:
                raise PolicyError(
                    f"{text.this!r} is not a date (YYYY-MM-DD) for column {spec.name!r}",
                    construct="LITERAL", column=spec.name,
                ) from None
    raise PolicyError(
        f"column {spec.name!r} ({spec.type}) must be compared with a {kind} literal, not {node.sql()}",
        construct="LITERAL", column=spec.name,
    )


def exact(node: exp.Literal) -> Decimal:
    """A numeric literal's exact value: 2**53 + 1 must not become 2**53 on its way to a comparison."""
    try:
        number = Decimal(node.this)
    except InvalidOperation:
        raise UnsupportedQuery(f"{node.this!r} is not a number", construct="LITERAL") from None
    if not number.is_finite() or abs(number) > MAX_ABS_LITERAL:
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
