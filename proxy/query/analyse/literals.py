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
