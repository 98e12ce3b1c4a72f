"""Computed filters: WHERE conditions on computed values (`amount * 2 > duration_s`, `LOWER(region) = 'north'`,
`EXTRACT(month FROM day) IN (1, 2)`, `date_trunc('month', day) = DATE '2026-03-01'`).

Each side is rebuilt by computed/values.py (total: no data can make it fail) and compared with a literal read exactly
for the value's type, or with another computed value of the same family. The computed side is parenthesised,
so the per-cell scope (analyse/cell_space.py), which reasons only about a declared column compared with literals,
sees an expression it does not know and counts the condition as possibly TRUE in every cell: never a narrower scope.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("v", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("region", "VARCHAR")))
    >>> computed_condition(parse_one("LOWER(region) = 'north'"), Names(t, None, Catalog((t,)))).sql("duckdb")
    '(TRY(CAST(LOWER("region") AS TEXT))) COLLATE "binary" = \\'north\\''
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.analyse.literals import literal
from proxy.query.analyse.names import Names
from proxy.query.catalog import ColumnSpec
from proxy.query.computed.domains import binds
from proxy.query.computed.values import Scalar, scalar, total
from proxy.query.errors import UnsupportedQuery

MAX_IN_LIST = 1_000  # values in one IN list, in WHERE as in a computed condition

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_LITERALS = (exp.Literal, exp.Neg, exp.Boolean)
_FAMILY = {"integer": "number", "float": "number", "decimal": "number"}


def computed_condition(node: exp.Expr, names: Names) -> exp.Expr | None:
    """The rebuilt condition, or None when `node` is no comparison of a computed value."""
    match node:
        case _ if isinstance(node, _COMPARISONS):
            left, right = node.this, node.expression
            if _is_literal(left) and not _is_literal(right):
                left, right = right, left
                node = _flipped(node)
            value = scalar(left, names)
            if _is_literal(right):
                return type(node)(this=_side(value, names), expression=_typed(right, value))
            other = scalar(right, names)
            if _family(value) != _family(other):
                raise UnsupportedQuery(
                    f"cannot compare {value.type} with {other.type} in {node.sql()}", construct="WHERE",
                )
            return type(node)(this=_side(value, names), expression=_side(other, names))
        case exp.In() if not any(v for k, v in node.args.items() if k not in ("this", "expressions")):
            if not 0 < len(node.expressions) <= MAX_IN_LIST or not all(map(_is_literal, node.expressions)):
                return None
            value = scalar(node.this, names)
            return exp.In(this=_side(value, names), expressions=[_typed(v, value) for v in node.expressions])
        case exp.Between() if not node.args.get("symmetric"):
            value = scalar(node.this, names)
            low, high = node.args["low"], node.args["high"]
            if _is_literal(low) and _is_literal(high):
                return exp.Between(this=_side(value, names), low=_typed(low, value), high=_typed(high, value))
        case exp.Is() if isinstance(node.expression, exp.Null):
            test = exp.Is(this=_side(scalar(node.this, names), names), expression=exp.Null())
            return exp.Not(this=test) if node.args.get("negate") else test  # PostgreSQL's IS NOT NULL (#28)
        case exp.Like() | exp.ILike() if not any(v for k, v in node.args.items()
                                                 if k not in ("this", "expression", "negate")):
            value = scalar(node.this, names)
            pattern = node.expression
            if value.kind == "string" and isinstance(pattern, exp.Literal) and pattern.is_string:
                like = type(node)(this=_side(value, names), expression=exp.Literal.string(pattern.this))
                return exp.Not(this=like) if node.args.get("negate") else like
    return None


def _is_literal(node: exp.Expr) -> bool:
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.to.is_type("date"):
        return True
    return isinstance(node, _LITERALS) and (not isinstance(node, exp.Neg) or isinstance(node.this, exp.Literal))


def _side(value: Scalar, names: Names) -> exp.Expr:
    """The computed side, parenthesised: analyse/cell_space.py must not read it as a declared column (see above)."""
    if value.type == "NULL":
        raise UnsupportedQuery("a comparison with NULL is never TRUE; use IS NULL", construct="WHERE")
    computed = total(value)
    refused = binds(computed, tuple(s for c in sorted(value.columns) if (s := names.table.column(c))))
    if refused is not None:
        raise UnsupportedQuery(f"DuckDB cannot compute {value.sql.sql(dialect='duckdb')}: {refused}",
                               construct="WHERE")
    side = exp.Paren(this=computed)
    if value.kind == "string":  # text compares under binary collation, as declared columns do (types.column)
        return exp.Collate(this=side, expression=exp.Identifier(this="binary", quoted=True))
    return side


def _typed(node: exp.Expr, value: Scalar) -> exp.Expr:
    """The literal read exactly for the value's type (literals.py), as SQL."""
    if value.type == "NULL":
        raise UnsupportedQuery("a comparison with NULL is never TRUE; use IS NULL", construct="WHERE")
    read = literal(node, ColumnSpec("computed value", value.type))
    match value.kind:
        case "integer" | "float" | "decimal":
            return exp.Literal.number(format(read, "f"))  # an exact decimal literal: DuckDB compares exactly
        case "date":
            return exp.cast(exp.Literal.string(str(read)), "DATE")
        case "boolean":
            return exp.Boolean(this=bool(read))
    return exp.Literal.string(str(read))


def _family(value: Scalar) -> str:
    return _FAMILY.get(value.kind, value.kind)


def _flipped(node: exp.Expr) -> exp.Expr:
    flip = {exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}
    return flip.get(type(node), type(node))(this=node.expression, expression=node.this)
