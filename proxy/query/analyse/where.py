"""WHERE: row predicates, rebuilt from declared columns and checked literals (never the analyst's nodes).

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"), ColumnSpec("age", "INTEGER")))
    >>> predicate(parse_one("age > 29.5"), Names(t, None, Catalog((t,)))).sql()
    '"age" >= 30'
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.literals import literal
from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import unsupported
from proxy.query.catalog import ColumnSpec
from proxy.query.computed.filters import MAX_IN_LIST, computed_condition
from proxy.query.errors import UnsupportedQuery

_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIPPED = {exp.EQ: exp.EQ, exp.NEQ: exp.NEQ, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


_PREDICATE_LEAVES = (exp.Column, exp.Literal, exp.Neg, exp.Boolean, exp.Null)


def predicate(node: exp.Expr, names: Names) -> exp.Expr:
    match node:
        case exp.Paren():
            return exp.Paren(this=predicate(node.this, names))
        case exp.And():
            return exp.And(this=predicate(node.this, names), expression=predicate(node.expression, names))
        case exp.Or():
            return exp.Or(this=predicate(node.this, names), expression=predicate(node.expression, names))
        case exp.Not():
            return exp.Not(this=predicate(node.this, names))
        case exp.Boolean():
            return exp.Boolean(this=bool(node.this))
        case exp.Column():
            spec = names.column(node)
            if spec.kind != "boolean":
                raise UnsupportedQuery(
                    f"column {spec.name!r} alone is not a condition; compare it with a value",
                    construct="WHERE", column=spec.name,
                )
            return quoted(spec)
        case exp.Is():
            if isinstance(node.this, exp.Column) and isinstance(node.expression, exp.Null):
                test = exp.Is(this=quoted(names.column(node.this)), expression=exp.Null())
                # PostgreSQL's `IS NOT NULL` reads as Is(negate=True): dropping the flag answered IS NULL (#28)
                return exp.Not(this=test) if node.args.get("negate") else test
        case exp.In():
            extra = [k for k, v in node.args.items() if k not in ("this", "expressions") and v]
            if not extra and isinstance(node.this, exp.Column) and 0 < len(node.expressions) <= MAX_IN_LIST:
                spec = names.column(node.this)
                return types.member(spec.name, spec.type, [literal(v, spec) for v in node.expressions])
        case exp.Between() if node.args.get("symmetric"):
            raise UnsupportedQuery(
                "BETWEEN SYMMETRIC is not supported; write BETWEEN low AND high", construct="BETWEEN SYMMETRIC"
            )
        case exp.Between():
            if isinstance(node.this, exp.Column):
                spec = names.column(node.this)
                low, high = literal(node.args["low"], spec), literal(node.args["high"], spec)
                return types.between(spec.name, spec.type, low, high)
        case exp.Like() | exp.ILike():
            extra = [k for k, v in node.args.items() if k not in ("this", "expression", "negate") and v]
            if not extra and isinstance(node.this, exp.Column):
                spec = names.column(node.this)
                if spec.kind == "string":
                    pattern = exp.Literal.string(str(literal(node.expression, spec)))
                    like = type(node)(this=types.column(spec.name, spec.type), expression=pattern)
                    return exp.Not(this=like) if node.args.get("negate") else like
        case _ if type(node) in _COMPARISONS:
            left, right, cls = node.this, node.expression, type(node)
            if not isinstance(left, exp.Column) and isinstance(right, exp.Column):
                left, right, cls = right, left, _FLIPPED[cls]
            if isinstance(left, exp.Column):
                spec = names.column(left)
                return types.compare(spec.name, spec.type, cls, literal(right, spec))
    computed = computed_condition(node, names)
    if computed is not None:
        return computed
    offender = next((a for a in node.iter_expressions() if not isinstance(a, _PREDICATE_LEAVES)), node)
    raise unsupported(
        offender,
        "WHERE (allowed: a column or computed value compared with a literal or another, IN (literals), BETWEEN, "
        "IS [NOT] NULL, LIKE, AND, OR, NOT)",
    )


def quoted(spec: ColumnSpec) -> exp.Column:
    return exp.column(spec.name, quoted=True)
