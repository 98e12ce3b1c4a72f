"""WHERE: row predicates, rebuilt from declared columns and checked literals (never the analyst's nodes).

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"), ColumnSpec("age", "INTEGER")))
    >>> predicate(parse_one("age > 29.5"), Names(t, None, Catalog((t,)))).sql()
    '"age" >= 30'
"""

from __future__ import annotations

import datetime as dt

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.literals import date_value, in_domain, literal
from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import unsupported
from proxy.query.analyse.subqueries import refused, semi_joins
from proxy.query.catalog import ColumnSpec
from proxy.query.computed.filters import MAX_IN_LIST, computed_condition
from proxy.query.errors import PolicyError, UnsupportedQuery

_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIPPED = {exp.EQ: exp.EQ, exp.NEQ: exp.NEQ, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


_PREDICATE_LEAVES = (exp.Column, exp.Literal, exp.Neg, exp.Boolean, exp.Null)


def predicate(node: exp.Expr, names: Names, *, subqueries: bool = False, negated: bool = False) -> exp.Expr:
    """`node` rebuilt as a row predicate. With `subqueries` (the top-level WHERE of a query over a protected table,
    analyse/analysis.py) a semi-join may stand as a condition (analyse/subqueries/); `negated`: under an odd
    number of NOTs, where an IN's NULL and FALSE differ."""
    def inside(child: exp.Expr, flip: bool = False) -> exp.Expr:
        return predicate(child, names, subqueries=subqueries, negated=negated != flip)

    match node:
        case exp.Paren():
            return exp.Paren(this=inside(node.this))
        case exp.And():
            return exp.And(this=inside(node.this), expression=inside(node.expression))
        case exp.Or():
            return exp.Or(this=inside(node.this), expression=inside(node.expression))
        case exp.Not():
            return exp.Not(this=inside(node.this, flip=True))
        case _ if semi_joins.is_semi_join(node):
            if not subqueries:
                raise refused.not_here(node, names)
            return semi_joins.semi_join(node, names, predicate, negated=negated)
        case _ if (type(node) in _COMPARISONS or isinstance(node, exp.Between)) and node.find(exp.Select):
            raise refused.scalar_subquery(node, names)
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
                items = list(node.expressions)
                if spec.kind == "date":  # a moment after midnight equals no day (DuckDB: the day at 00:00)
                    items = [v for v in items if (d := date_value(v, spec, names.today)) is None or d[1]]
                values = [literal(v, spec, names.today) for v in items]
                for value, item in zip(values, items, strict=True):
                    in_domain(spec, value, item)
                return types.member(spec.name, spec.type, values)
        case exp.Between() if any(_typed_null(node.args[end]) for end in ("low", "high")):
            # a folded scalar subquery with no row: BETWEEN is its two comparisons, one of them NULL (docs §3.2)
            low = exp.GTE(this=node.this.copy(), expression=node.args["low"].copy())
            return inside(exp.And(this=low, expression=exp.LTE(this=node.this.copy(), expression=node.args["high"])))
        case _ if type(node) in _COMPARISONS and (pair := _column_and_null(node)) is not None:
            column, null = pair
            spec = names.column(column)
            if _null_family(null) != _family(spec):
                raise PolicyError(f"cannot compare {spec.name} ({spec.type}) with {null.sql()}: compare values of one "
                                  "kind (numbers, dates, text or booleans)", construct="WHERE", column=spec.name)
            return exp.Null()  # NULL for every row, as DuckDB's comparison with NULL: no row passes (or its NOT)
        case exp.Between() if node.args.get("symmetric"):
            raise UnsupportedQuery(
                "BETWEEN SYMMETRIC is not supported; write BETWEEN low AND high", construct="BETWEEN SYMMETRIC"
            )
        case exp.Between():
            if isinstance(node.this, exp.Column):
                spec = names.column(node.this)
                low, high = (_day_bound(node.args[end], spec, names, end == "low") for end in ("low", "high"))
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
            if isinstance(left, exp.Column) and isinstance(right, exp.Column):
                return columns_compared(cls, names.column(left), names.column(right))
            if isinstance(left, exp.Column):
                spec = names.column(left)
                moment = _within_day(spec, cls, right, names)
                if moment is not None:
                    return moment
                value = literal(right, spec, names.today)
                if cls in (exp.EQ, exp.NEQ):  # equality with a value the domain lacks: a typo, refused
                    in_domain(spec, value, right)
                return types.compare(spec.name, spec.type, cls, value)
    computed = computed_condition(node, names)
    if computed is not None:
        return computed
    offender = next((a for a in node.iter_expressions() if not isinstance(a, _PREDICATE_LEAVES)), node)
    raise unsupported(
        offender,
        "WHERE (allowed: a column or computed value compared with a literal or another, IN (literals), BETWEEN, "
        "IS [NOT] NULL, LIKE, AND, OR, NOT, [NOT] EXISTS or IN (SELECT …) over the row's own unit or a public table)",
    )


def _within_day(spec: ColumnSpec, cls: type[exp.Expr], node: exp.Expr, names: Names) -> exp.Expr | None:
    """A DATE column compared with a moment strictly inside a day (`TIMESTAMP '2024-03-01 06:00:00'`, or
    `DATE '…' + INTERVAL 6 HOUR`), moved onto the days exactly as DuckDB compares them (the column as that day at
    00:00): `>`/`>=` is from the next day, `<`/`<=` up to the day itself, `=` holds for no day, `<>` for every one."""
    if spec.kind != "date":
        return None
    found = date_value(node, spec, names.today)
    if found is None or found[1]:
        return None
    day = found[0]
    if cls is exp.EQ:
        return types.member(spec.name, spec.type, [])  # FALSE for each day, NULL for NULL
    if cls is exp.NEQ:
        return exp.Not(this=types.member(spec.name, spec.type, []))
    if cls in (exp.GT, exp.GTE):
        return types.compare(spec.name, spec.type, exp.GTE, (day + dt.timedelta(days=1)).isoformat())
    return types.compare(spec.name, spec.type, exp.LTE, day.isoformat())


def _day_bound(node: exp.Expr, spec: ColumnSpec, names: Names, low: bool) -> object:
    """A BETWEEN end: on a DATE column, a moment inside a day bounds from the next day (low) or the day (high)."""
    if spec.kind == "date":
        found = date_value(node, spec, names.today)
        if found is not None and not found[1]:
            return (found[0] + dt.timedelta(days=1 if low else 0)).isoformat()
    return literal(node, spec, names.today)


def columns_compared(cls: type[exp.Expr], a: ColumnSpec, b: ColumnSpec) -> exp.Expr:
    """`a <op> b` for two declared columns of one comparable family (numbers, dates, text, booleans), as DuckDB
    compares them (its common type: an INTEGER with a DECIMAL as a DECIMAL, with a DOUBLE as a DOUBLE; text
    under binary collation, as every text comparison here), inside TRY: where DuckDB's common type cannot hold a
    row's value (a HUGEINT or a DECIMAL(38, s) beyond a DECIMAL of another scale) the comparison is NULL on that
    row, never an error after admission, as for computed values.

    Example:
        >>> columns_compared(exp.LT, ColumnSpec("shipped", "DATE"), ColumnSpec("received", "DATE")).sql("duckdb")
        'TRY("shipped" < "received")'
        >>> columns_compared(exp.EQ, ColumnSpec("a", "VARCHAR"), ColumnSpec("b", "VARCHAR")).sql("duckdb")
        'TRY("a" COLLATE "binary" = "b" COLLATE "binary")'
    """
    if _family(a) != _family(b):
        raise PolicyError(f"cannot compare {a.name} ({a.type}) with {b.name} ({b.type}): compare columns of one "
                          "kind (numbers, dates, text or booleans)", construct="WHERE", column=b.name)
    compared = cls(this=types.column(a.name, a.type), expression=types.column(b.name, b.type))
    return exp.Anonymous(this="TRY", expressions=[compared])


def _family(spec: ColumnSpec) -> str:
    return "number" if spec.numeric else spec.kind


def _column_and_null(node: exp.Expr) -> tuple[exp.Column, exp.Cast] | None:
    for column, other in ((node.this, node.expression), (node.expression, node.this)):
        if isinstance(column, exp.Column) and _typed_null(other):
            return column, other  # type: ignore[return-value]
    return None


def _typed_null(node: exp.Expr) -> bool:
    return isinstance(node, exp.Cast) and isinstance(node.this, exp.Null)


def _null_family(node: exp.Cast) -> str:
    to = node.to
    if to.is_type(*exp.DataType.INTEGER_TYPES, "decimal", "double", "float"):
        return "number"
    if to.is_type("date", *("timestamp", "timestampntz", "datetime")):
        return "date"
    return "boolean" if to.is_type("boolean") else "string" if to.is_type("text", "varchar") else to.sql()


def quoted(spec: ColumnSpec) -> exp.Column:
    return exp.column(spec.name, quoted=True)
