"""Expressions of a query over public tables, rebuilt node by node from a positive allow-list.

Allowed: declared columns (scope.py), checked literals (numbers, strings, NULL, TRUE/FALSE, `DATE 'yyyy-mm-dd'`,
`TIMESTAMP '…'`, `INTERVAL 'n' DAY|WEEK|MONTH|QUARTER|YEAR`), comparisons, AND/OR/NOT, IS [NOT] NULL,
[NOT] IN (a list or a subquery), [NOT] EXISTS, scalar subqueries, [NOT] LIKE/ILIKE, BETWEEN, CASE, + - * / // %,
unary minus, and, where the clause allows them, COUNT(*), COUNT([DISTINCT] x), SUM, AVG, MIN, MAX. Every node
is a new node of the same class built from rebuilt children, so no analyst node (a function, a table function,
a file path) reaches the engine; a subquery is rebuilt by the caller's `subquery` (select.py).

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.public.scope import Frame, Relation
    >>> f = Frame((Relation("t1", ("p",), {"p_size": "p_size", "p_type": "p_type"}),), None)
    >>> rebuild(parse_one("p_size IN (1, 2) AND p.p_type NOT LIKE '%BRASS'"), f, Rules("WHERE", False, None)).sql()
    '"t1"."p_size" IN (1, 2) AND NOT "t1"."p_type" LIKE \\'%BRASS\\''
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from sqlglot import exp

from proxy.query.analyse.refusals import unsupported
from proxy.query.computed.filters import MAX_IN_LIST
from proxy.query.errors import UnsupportedQuery
from proxy.query.public.scope import Frame

_NUMBER = re.compile(r"^(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_BINARY = (exp.And, exp.Or, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Add, exp.Sub, exp.Mul,
           exp.IntDiv, exp.Mod)
_AGGREGATES = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
_UNITS = frozenset({"DAY", "WEEK", "MONTH", "QUARTER", "YEAR"})
_MOMENTS = {exp.DataType.Type.DATE: dt.date.fromisoformat, exp.DataType.Type.TIMESTAMP: dt.datetime.fromisoformat}
HINT = ("over public tables: columns, literals, comparisons, AND/OR/NOT, IN, EXISTS, subqueries over public tables, "
        "LIKE, BETWEEN, CASE, arithmetic, COUNT/SUM/AVG/MIN/MAX")

Subquery = Callable[[exp.Select, Frame, str], exp.Select]


@dataclass(frozen=True, slots=True)
class Rules:
    """Where an expression stands: its clause (for messages), whether aggregates are allowed there, and how a
    subquery in it is rebuilt (None: no subquery)."""

    clause: str
    aggregates: bool
    subquery: Subquery | None


def rebuild(node: exp.Expr, frame: Frame, rules: Rules) -> exp.Expr:
    """`node` rebuilt from allowed nodes, its columns resolved in `frame`; a refusal for anything else."""
    def again(child: exp.Expr) -> exp.Expr:
        return rebuild(child, frame, rules)

    match node:
        case exp.Column():
            return frame.column(node)
        case exp.Literal():
            return _literal(node, rules)
        case exp.Null():
            return exp.Null()
        case exp.Boolean():
            return exp.Boolean(this=bool(node.this))
        case exp.Paren() | exp.Neg() | exp.Not():
            return type(node)(this=again(node.this))
        case exp.Div():
            return exp.Div(this=again(node.this), expression=again(node.expression),
                           typed=bool(node.args.get("typed")), safe=bool(node.args.get("safe")))
        case _ if type(node) in _BINARY and _only(node, "this", "expression"):
            return type(node)(this=again(node.this), expression=again(node.expression))
        case exp.Is() if isinstance(node.expression, exp.Null) and _only(node, "this", "expression", "negate"):
            test = exp.Is(this=again(node.this), expression=exp.Null())
            return exp.Not(this=test) if node.args.get("negate") else test  # PostgreSQL's IS NOT NULL
        case exp.In() if _only(node, "this", "expressions", "query"):
            return _in(node, frame, rules)
        case exp.Between() if _only(node, "this", "low", "high"):
            return exp.Between(this=again(node.this), low=again(node.args["low"]), high=again(node.args["high"]))
        case exp.Like() | exp.ILike() if _only(node, "this", "expression", "negate"):
            like = type(node)(this=again(node.this), expression=again(node.expression))
            return exp.Not(this=like) if node.args.get("negate") else like
        case exp.Case() if _only(node, "this", "ifs", "default"):
            return _case(node, again)
        case exp.Cast() | exp.Interval():
            return _constant(node, rules)
        case exp.Subquery() if rules.subquery is not None and _only(node, "this"):
            return exp.Subquery(this=_select(node.this, frame, rules))
        case exp.Exists() if rules.subquery is not None and _only(node, "this"):
            return exp.Exists(this=_select(node.this, frame, rules))
        case _ if isinstance(node, _AGGREGATES) and rules.aggregates:
            return _aggregate(node, frame, replace(rules, aggregates=False))
    raise _refused(node, rules.clause)


def _only(node: exp.Expr, *names: str) -> bool:
    """No argument of `node` is set but `names` (a flag or an option this allow-list does not know is refused)."""
    return not any(v for k, v in node.args.items() if k not in names)


def _refused(node: exp.Expr, clause: str) -> UnsupportedQuery:
    error = unsupported(node, clause)
    message = f"{error.message.split('; ')[0]} of a query over public tables; {HINT}"
    return UnsupportedQuery(message, **{**error.detail, "hint": HINT})


def _literal(node: exp.Literal, rules: Rules) -> exp.Literal:
    if node.is_string:
        return exp.Literal.string(str(node.this))
    if not _NUMBER.match(str(node.this)):
        raise _refused(node, rules.clause)
    return exp.Literal.number(str(node.this))


def _constant(node: exp.Expr, rules: Rules) -> exp.Expr:
    """`DATE '…'`/`TIMESTAMP '…'` of a valid moment, or `INTERVAL 'n' unit` of a whole n and a calendar unit."""
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string:
        kind = node.to.this
        parse = _MOMENTS.get(kind)
        if parse is not None and _only(node, "this", "to", "_type"):
            try:
                value = parse(str(node.this.this))
            except ValueError:
                raise UnsupportedQuery(f"{node.sql()} is not a valid {kind.value}", construct=kind.value) from None
            return exp.cast(exp.Literal.string(value.isoformat(sep=" ") if isinstance(value, dt.datetime)
                                               else value.isoformat()), exp.DataType.build(kind.value))
    if isinstance(node, exp.Interval) and isinstance(node.this, exp.Literal) and _only(node, "this", "unit"):
        unit = node.args.get("unit")
        count = str(node.this.this)
        if isinstance(unit, exp.Var) and unit.name.upper() in _UNITS and count.isdigit():
            return exp.Interval(this=exp.Literal.string(count), unit=exp.var(unit.name.upper()))
    raise _refused(node, rules.clause)


def _in(node: exp.In, frame: Frame, rules: Rules) -> exp.Expr:
    this = rebuild(node.this, frame, rules)
    query = node.args.get("query")
    if query is not None:
        if rules.subquery is None or not isinstance(query, exp.Subquery) or not _only(query, "this"):
            raise _refused(query, rules.clause)
        return exp.In(this=this, query=exp.Subquery(this=_select(query.this, frame, rules)))
    if not 0 < len(node.expressions) <= MAX_IN_LIST:
        raise UnsupportedQuery(f"an IN list holds 1 to {MAX_IN_LIST} values", construct="IN", limit=MAX_IN_LIST)
    return exp.In(this=this, expressions=[rebuild(e, frame, rules) for e in node.expressions])


def _case(node: exp.Case, again: Callable[[exp.Expr], exp.Expr]) -> exp.Case:
    ifs = []
    for branch in node.args.get("ifs") or []:
        if not isinstance(branch, exp.If) or not _only(branch, "this", "true"):
            raise UnsupportedQuery("CASE takes WHEN … THEN … branches", construct="CASE")
        ifs.append(exp.If(this=again(branch.this), true=again(branch.args["true"])))
    operand, default = node.args.get("this"), node.args.get("default")
    return exp.Case(this=again(operand) if operand is not None else None, ifs=ifs,
                    default=again(default) if default is not None else None)


def _aggregate(node: exp.Expr, frame: Frame, inner: Rules) -> exp.Expr:
    """COUNT(*), COUNT([DISTINCT] x), SUM/AVG/MIN/MAX(x); no aggregate inside (`inner` forbids it)."""
    arg = node.this
    if not _only(node, "this", "big_int") or arg is None:
        raise _refused(node, inner.clause)
    if isinstance(node, exp.Count) and isinstance(arg, exp.Star) and _only(arg):
        return exp.Count(this=exp.Star(), big_int=True)
    if isinstance(node, exp.Count) and isinstance(arg, exp.Distinct) and len(arg.expressions) == 1 \
            and _only(arg, "expressions"):
        return exp.Count(this=exp.Distinct(expressions=[rebuild(arg.expressions[0], frame, inner)]), big_int=True)
    rebuilt = rebuild(arg, frame, inner)
    return exp.Count(this=rebuilt, big_int=True) if isinstance(node, exp.Count) else type(node)(this=rebuilt)


def _select(node: exp.Expr, frame: Frame, rules: Rules) -> exp.Select:
    if not isinstance(node, exp.Select) or rules.subquery is None:
        raise _refused(node, rules.clause)
    return rules.subquery(node, frame, rules.clause)
