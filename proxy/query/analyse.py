"""Analyse a parsed SELECT against the catalog: a positive allow-list by position, then an Analysis.

The allow-list is positive: every node is checked against what may stand in its position (select list,
aggregate argument, WHERE, HAVING, ORDER BY), and anything else is rejected with its name. The analysis
keeps only resolved, declared names and rebuilt literals, never the analyst's nodes, so the SQL that
runs is generated from checked values alone (DESIGN.md §6).
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Literal

from sqlglot import exp

from proxy.query import types
from proxy.query.catalog import Catalog, ColumnSpec, Literal_, TableSchema
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.errors import construct_name as _construct
from proxy.query.expr import Agg, Const, Expr, Key, Op
from proxy.query.measures import Aggregate, Measure, measures_for
from proxy.query.resolve import check_qualifiers, resolve_table
from proxy.query.scope import Scope, canonical_columns, cell_space
from proxy.query.scope import scope as scope_of

MAX_PUBLIC_CELLS = 100_000
MAX_LIMIT = 100_000
MAX_IN_LIST = 1_000
MAX_ABS_LITERAL = 1e18

Partitions = Literal["none", "public", "private"]

_SELECT_ARGS = frozenset({"expressions", "from_", "where", "group", "having", "order", "limit"})
_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}
_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_FLIPPED = {exp.EQ: exp.EQ, exp.NEQ: exp.NEQ, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}
_HINTS: dict[type[exp.Expr], str] = {
    exp.Join: "JOIN is not supported; query one table",
    exp.Subquery: "subqueries are not supported; query the protected table directly",
    exp.Select: "subqueries are not supported; query the protected table directly",
    exp.Exists: "subqueries are not supported; query the protected table directly",
    exp.Window: "window functions are not supported; use GROUP BY with aggregates",
    exp.Star: "raw rows are never released; select group keys and aggregates",
    exp.Distinct: "DISTINCT is supported only as COUNT(DISTINCT <privacy unit>)",
}
_PREDICATE_LEAVES = (exp.Column, exp.Literal, exp.Neg, exp.Boolean, exp.Null)
_AGGREGATE_HINT = "the DP aggregates are COUNT(*), COUNT(col), COUNT(DISTINCT <privacy unit>), SUM(col), AVG(col)"


@dataclass(frozen=True, slots=True)
class Output:
    """One released column: its name and how it is computed from keys and noisy aggregates."""

    name: str
    expr: Expr


@dataclass(frozen=True, slots=True)
class Analysis:
    """What a query asks for, resolved against the policy; everything the price and rewrite steps need."""

    table: TableSchema
    keys: tuple[str, ...]  # declared names of the group key columns
    aggregates: tuple[Aggregate, ...]
    measures: tuple[Measure, ...]  # the noisy integer quantities computed in DuckDB
    outputs: tuple[Output, ...]
    where: exp.Expr | None  # rebuilt from declared columns and checked literals
    having: Expr | None
    order: tuple[tuple[Expr, bool], ...]  # (expression, descending)
    limit: int | None
    max_groups: int  # the L0 bound the rewrite enforces
    partitions: Partitions
    domains: tuple[tuple[Literal_, ...], ...]  # per key, when partitions == "public"
    scope: Scope  # the cells of the unit-attribute space the query can touch
    canonical: tuple[str, ...] = ()  # unit-level columns read as each unit's canonical value

    @property
    def disjoint(self) -> bool:
        """Every unit reaches at most one group, so groups compose in parallel (DESIGN.md §3)."""
        return self.max_groups == 1


def analyse(select: exp.Select, catalog: Catalog, *, canonical_units: bool = False) -> Analysis:
    """Check `select` against the allow-list and the policy, and describe it.

    With `canonical_units`, a query whose scope leaves some cell out reads the cell-space columns as each
    unit's canonical value (see scope.py): needed only where charges are accounted per cell, and it costs a
    window over the table, so it is off by default and never used for a query that reaches every cell.

    Example:
        >>> from proxy.query.parse import parse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"),
        ...     ColumnSpec("region", "VARCHAR", unit_level=True, groupable=True)), max_groups=3)
        >>> a = analyse(parse("SELECT region, COUNT(*) FROM orders GROUP BY region"), Catalog((t,)))
        >>> a.keys, a.max_groups, a.partitions
        (('region',), 1, 'private')
    """
    for name, value in select.args.items():
        if name not in _SELECT_ARGS and value:
            raise _unsupported_clause(name, value)
    table, alias = resolve_table(select, catalog)
    scope = _Scope(table, alias, catalog)
    keys = _group_keys(select, scope)
    scope.keys = keys
    outputs = tuple(_output(node, scope) for node in select.expressions)
    if not outputs:
        raise UnsupportedQuery("select at least one column", construct="SELECT")
    scope.outputs = outputs
    having = select.args.get("having")
    having_expr = _condition(having.this, scope, "HAVING") if having else None
    order = _order(select.args.get("order"), scope)
    limit = _limit(select.args.get("limit"))
    if not scope.aggregates:
        raise PolicyError(
            "the query has no aggregate; add COUNT(*), SUM(col) or AVG(col)",
            construct="SELECT", hint=_AGGREGATE_HINT,
        )
    where = select.args.get("where")
    where_expr = _predicate(where.this, scope) if where else None

    all_unit_level = all(_column(table, k).unit_level for k in keys)
    # One group per unit ⇒ parallel composition (§3). Unit-level keys are constant per unit by declaration;
    # the rewrite still enforces L0 = 1 for them, so a wrong declaration costs utility, never privacy.
    max_groups = 1 if all_unit_level else table.max_groups
    domains = tuple(_column(table, k).public_domain for k in keys)
    partitions: Partitions
    if not keys:
        partitions = "none"
    elif all(d is not None for d in domains) and math.prod(len(d) for d in domains if d) <= MAX_PUBLIC_CELLS:
        partitions = "public"
    else:
        partitions = "private"
    public_domains = tuple(d for d in domains if d is not None) if partitions == "public" else ()
    aggregates = tuple(scope.aggregates)
    space = cell_space(table)
    reach = scope_of(space, where_expr)
    return Analysis(
        table=table, keys=keys, aggregates=aggregates, measures=measures_for(aggregates, table),
        outputs=outputs, where=where_expr, having=having_expr, order=order, limit=limit,
        max_groups=max_groups, partitions=partitions, domains=public_domains,
        scope=reach,
        canonical=canonical_columns(space, where_expr, keys) if canonical_units and reach.cells is not None else (),
    )


def public_cells(analysis: Analysis) -> tuple[tuple[Literal_, ...], ...]:
    """Every cell of a public-domain GROUP BY, in domain order."""
    return tuple(itertools.product(*analysis.domains))


class _Scope:
    """Name resolution for one query: the table, its alias, the keys and the aggregates met so far."""

    def __init__(self, table: TableSchema, alias: str | None, catalog: Catalog) -> None:
        self.table = table
        self.alias = alias
        self.catalog = catalog
        self.keys: tuple[str, ...] = ()
        self.outputs: tuple[Output, ...] = ()
        self.aggregates: list[Aggregate] = []

    def column(self, node: exp.Column) -> ColumnSpec:
        if not isinstance(node.this, exp.Identifier):
            raise _unsupported(node.this, "a column reference")
        check_qualifiers(node, self.catalog)  # main.visits.region: the schema must be this dataset's
        qualifier = node.table
        if qualifier and qualifier.lower() not in {self.table.name.lower(), (self.alias or "").lower()}:
            raise PolicyError(
                f"unknown table or alias {qualifier!r} in {node.sql()}", construct="COLUMN", column=node.sql()
            )
        spec = self.table.column(node.name)
        if spec is None:
            raise PolicyError(
                f"unknown column {node.name!r} in table {self.table.name}",
                construct="COLUMN", column=node.name,
                hint="columns: " + ", ".join(c.name for c in self.table.columns),
            )
        return spec

    def aggregate(self, aggregate: Aggregate) -> Agg:
        if aggregate not in self.aggregates:
            self.aggregates.append(aggregate)
        return Agg(self.aggregates.index(aggregate))


def _group_keys(select: exp.Select, scope: _Scope) -> tuple[str, ...]:
    group = select.args.get("group")
    if not group:
        return ()
    for name, value in group.args.items():
        if name != "expressions" and value:
            construct = "GROUP BY ALL" if name == "all" else _arg_construct(name)
            raise UnsupportedQuery(
                f"{construct} is not supported; list the group key columns", construct=construct
            )
    keys: list[str] = []
    for node in group.expressions:
        if not isinstance(node, exp.Column):
            if isinstance(node, exp.Literal):
                raise UnsupportedQuery(
                    "GROUP BY by position is not supported; name the columns", construct="GROUP BY ordinal"
                )
            raise _unsupported(node, "GROUP BY (group keys are plain declared columns)")
        spec = scope.column(node)
        if spec.name == scope.table.privacy_unit:
            raise PolicyError(
                f"cannot GROUP BY the privacy unit {spec.name!r}: each group would be one person",
                construct="GROUP BY", column=spec.name,
            )
        if not spec.groupable:
            raise PolicyError(
                f"column {spec.name!r} may not be grouped on (policy: groupable = false)",
                construct="GROUP BY", column=spec.name,
            )
        if spec.name not in keys:
            keys.append(spec.name)
    return tuple(keys)


def _output(node: exp.Expr, scope: _Scope) -> Output:
    if isinstance(node, exp.Alias):
        value = _value(node.this, scope, "SELECT")
        name = node.alias
        shadowed = scope.table.column(name)
        is_same_column = isinstance(node.this, exp.Column) and node.this.name.lower() == name.lower()
        if shadowed is not None and not is_same_column:
            raise PolicyError(
                f"alias {name!r} renames another expression to a column name; choose a new name",
                construct="ALIAS", alias=name,
            )
        return Output(name, value)
    return Output(_label(node), _value(node, scope, "SELECT"))


def _label(node: exp.Expr) -> str:
    if isinstance(node, exp.Column):
        return node.name
    return node.sql(dialect="duckdb")


def _value(node: exp.Expr, scope: _Scope, position: str) -> Expr:
    """A numeric or key expression over group keys, aggregates and numeric literals."""
    match node:
        case exp.Paren():
            return _value(node.this, scope, position)
        case exp.Column():
            return _key_or_output(node, scope, position)
        case exp.Count() | exp.Sum() | exp.Avg():
            return scope.aggregate(_aggregate(node, scope))
        case exp.Neg():
            return Op("neg", (_numeric(node.this, scope, position),))
        case exp.Literal() if not node.is_string:
            return Const(_number(node))
        case _ if type(node) in _ARITHMETIC:
            op = _ARITHMETIC[type(node)]
            return Op(op, (_numeric(node.this, scope, position), _numeric(node.expression, scope, position)))
    raise _unsupported(node, f"{position} (allowed: group keys, aggregates, + - * / and numbers)")


def _numeric(node: exp.Expr, scope: _Scope, position: str) -> Expr:
    """An arithmetic operand: a number, an aggregate, or a numeric group key (never text or dates)."""
    value = _value(node, scope, position)
    if isinstance(value, Key):
        spec = _column(scope.table, scope.keys[value.index])
        if not spec.numeric:
            raise UnsupportedQuery(
                f"arithmetic on the {spec.kind} key {spec.name!r} is not supported; use numbers and aggregates",
                construct="ARITHMETIC", column=spec.name, position=position,
            )
    return value


def _key_or_output(node: exp.Column, scope: _Scope, position: str) -> Expr:
    if position != "SELECT" and not node.table:
        for output in scope.outputs:
            if output.name.lower() == node.name.lower() and scope.table.column(node.name) is None:
                return output.expr
    spec = scope.column(node)
    if spec.name not in scope.keys:
        raise PolicyError(
            f"column {spec.name!r} is neither a group key nor inside an aggregate; raw values are never "
            "released",
            construct="COLUMN", column=spec.name, hint="add it to GROUP BY or aggregate it",
        )
    return Key(scope.keys.index(spec.name))


def _aggregate(node: exp.Count | exp.Sum | exp.Avg, scope: _Scope) -> Aggregate:
    for name, value in node.args.items():
        if name not in ("this", "big_int") and value:
            raise _unsupported(node, "an aggregate (no extra arguments)")
    argument = node.this
    table = scope.table
    if isinstance(node, exp.Count):
        if isinstance(argument, exp.Star):
            return Aggregate("count", None)
        if isinstance(argument, exp.Distinct):
            inner = argument.expressions
            is_column = len(inner) == 1 and isinstance(inner[0], exp.Column)
            if is_column and scope.column(inner[0]).name == table.privacy_unit:
                return Aggregate("count_units", table.privacy_unit)
            raise UnsupportedQuery(
                f"COUNT(DISTINCT ...) is supported only on the privacy unit {table.privacy_unit!r}",
                construct="COUNT(DISTINCT)", hint=_AGGREGATE_HINT,
            )
        if isinstance(argument, exp.Column):
            return Aggregate("count_column", scope.column(argument).name)
        raise _inside_aggregate(argument, "COUNT")
    function = "SUM" if isinstance(node, exp.Sum) else "AVG"
    if not isinstance(argument, exp.Column):
        raise _inside_aggregate(argument, function)
    spec = scope.column(argument)
    if not spec.numeric:
        raise PolicyError(f"{function}({spec.name}) needs a numeric column", construct=function, column=spec.name)
    if spec.bounds is None:
        raise PolicyError(
            f"{function}({spec.name}) needs clamp bounds in the policy; the column has none",
            construct=function, column=spec.name, hint="declare bounds = [lo, hi] for the column",
        )
    return Aggregate("sum" if function == "SUM" else "avg", spec.name)


def _inside_aggregate(node: exp.Expr, function: str) -> UnsupportedQuery:
    return UnsupportedQuery(
        f"{function} takes a plain column; {_construct(node)} inside an aggregate would defeat clamping",
        construct=_construct(node), position=function, hint=_AGGREGATE_HINT,
    )


def _condition(node: exp.Expr, scope: _Scope, position: str) -> Expr:
    """A HAVING condition: evaluated on noisy values after release, never in the database."""
    match node:
        case exp.Paren():
            return _condition(node.this, scope, position)
        case exp.And() | exp.Or():
            op = "and" if isinstance(node, exp.And) else "or"
            return Op(op, (_condition(node.this, scope, position), _condition(node.expression, scope, position)))
        case exp.Not():
            return Op("not", (_condition(node.this, scope, position),))
        case _ if type(node) in _COMPARISONS:
            op = _COMPARISONS[type(node)]
            return Op(op, (_operand(node.this, scope, position), _operand(node.expression, scope, position)))
    raise _unsupported(node, f"{position} (allowed: comparisons of keys and aggregates, AND, OR, NOT)")


def _operand(node: exp.Expr, scope: _Scope, position: str) -> Expr:
    if isinstance(node, exp.Literal) and node.is_string:
        return Const(node.this)
    if isinstance(node, exp.Boolean):
        return Const(bool(node.this))
    return _value(node, scope, position)


def _order(order: exp.Order | None, scope: _Scope) -> tuple[tuple[Expr, bool], ...]:
    if not order:
        return ()
    items = []
    for item in order.expressions:
        if not isinstance(item, exp.Ordered):
            raise _unsupported(item, "ORDER BY")
        target = item.this
        if isinstance(target, exp.Literal) and not target.is_string:
            position = _number(target)
            if not (isinstance(position, int) and 1 <= position <= len(scope.outputs)):
                raise UnsupportedQuery(
                    f"ORDER BY {target.this} does not name an output column (1..{len(scope.outputs)})",
                    construct="ORDER BY",
                )
            expr = scope.outputs[position - 1].expr
        else:
            expr = _value(target, scope, "ORDER BY")
        items.append((expr, bool(item.args.get("desc"))))
    return tuple(items)


def _limit(limit: exp.Limit | None) -> int | None:
    if not limit:
        return None
    for name, extra in limit.args.items():
        if name != "expression" and extra:
            construct = "LIMIT BY" if name == "expressions" else "LIMIT " + (
                "PERCENT" if getattr(extra, "args", {}).get("percent") else "WITH TIES"
            ) if name == "limit_options" else f"LIMIT {name.upper()}"
            raise UnsupportedQuery(f"{construct} is not supported; use LIMIT n", construct=construct)
    value = limit.expression
    number = _number(value) if isinstance(value, exp.Literal) and not value.is_string else None
    if not isinstance(number, int) or not 0 <= number <= MAX_LIMIT:
        raise UnsupportedQuery(f"LIMIT takes a whole number from 0 to {MAX_LIMIT}", construct="LIMIT")
    return number


# --- WHERE: row predicates, rebuilt from declared columns and checked literals --------------------------


def _predicate(node: exp.Expr, scope: _Scope) -> exp.Expr:
    match node:
        case exp.Paren():
            return exp.Paren(this=_predicate(node.this, scope))
        case exp.And():
            return exp.And(this=_predicate(node.this, scope), expression=_predicate(node.expression, scope))
        case exp.Or():
            return exp.Or(this=_predicate(node.this, scope), expression=_predicate(node.expression, scope))
        case exp.Not():
            return exp.Not(this=_predicate(node.this, scope))
        case exp.Boolean():
            return exp.Boolean(this=bool(node.this))
        case exp.Column():
            spec = scope.column(node)
            if spec.kind != "boolean":
                raise UnsupportedQuery(
                    f"column {spec.name!r} alone is not a condition; compare it with a value",
                    construct="WHERE", column=spec.name,
                )
            return _quoted(spec)
        case exp.Is():
            if isinstance(node.this, exp.Column) and isinstance(node.expression, exp.Null):
                return exp.Is(this=_quoted(scope.column(node.this)), expression=exp.Null())
        case exp.In():
            extra = [k for k, v in node.args.items() if k not in ("this", "expressions") and v]
            if not extra and isinstance(node.this, exp.Column) and 0 < len(node.expressions) <= MAX_IN_LIST:
                spec = scope.column(node.this)
                return types.member(spec.name, spec.type, [_literal(v, spec) for v in node.expressions])
        case exp.Between() if node.args.get("symmetric"):
            raise UnsupportedQuery(
                "BETWEEN SYMMETRIC is not supported; write BETWEEN low AND high", construct="BETWEEN SYMMETRIC"
            )
        case exp.Between():
            if isinstance(node.this, exp.Column):
                spec = scope.column(node.this)
                low, high = _literal(node.args["low"], spec), _literal(node.args["high"], spec)
                return types.between(spec.name, spec.type, low, high)
        case exp.Like() | exp.ILike():
            extra = [k for k, v in node.args.items() if k not in ("this", "expression", "negate") and v]
            if not extra and isinstance(node.this, exp.Column):
                spec = scope.column(node.this)
                if spec.kind == "string":
                    pattern = exp.Literal.string(str(_literal(node.expression, spec)))
                    like = type(node)(this=types.column(spec.name, spec.type), expression=pattern)
                    return exp.Not(this=like) if node.args.get("negate") else like
        case _ if type(node) in _COMPARISONS:
            left, right, cls = node.this, node.expression, type(node)
            if not isinstance(left, exp.Column) and isinstance(right, exp.Column):
                left, right, cls = right, left, _FLIPPED[cls]
            if isinstance(left, exp.Column):
                spec = scope.column(left)
                return types.compare(spec.name, spec.type, cls, _literal(right, spec))
    offender = next((a for a in node.iter_expressions() if not isinstance(a, _PREDICATE_LEAVES)), node)
    raise _unsupported(
        offender,
        "WHERE (allowed: column compared with a literal, IN (literals), BETWEEN, IS [NOT] NULL, LIKE, "
        "AND, OR, NOT)",
    )


def _quoted(spec: ColumnSpec) -> exp.Column:
    return exp.column(spec.name, quoted=True)


def _literal(node: exp.Expr, spec: ColumnSpec) -> object:
    """The exact value of a literal of the column's kind (numbers as Decimals, dates as ISO text): the
    comparison is then rebuilt from it by types.py, so no comparison can fail on a cast at run time."""
    kind = spec.kind
    if spec.numeric:
        negative = isinstance(node, exp.Neg)
        inner = node.this if negative else node
        if isinstance(inner, exp.Literal) and not inner.is_string:
            number = _exact(inner)
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


def _exact(node: exp.Literal) -> Decimal:
    """A numeric literal's exact value: 2**53 + 1 must not become 2**53 on its way to a comparison."""
    try:
        number = Decimal(node.this)
    except InvalidOperation:
        raise UnsupportedQuery(f"{node.this!r} is not a number", construct="LITERAL") from None
    if not number.is_finite() or abs(number) > MAX_ABS_LITERAL:
        raise UnsupportedQuery(f"number {node.this} is out of range (|x| <= 1e18)", construct="LITERAL")
    return number


def _number(node: exp.Literal) -> int | float:
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


def _column(table: TableSchema, name: str) -> ColumnSpec:
    spec = table.column(name)
    assert spec is not None  # keys are resolved names
    return spec


# --- error construction --------------------------------------------------------------------------------


def _arg_construct(name: str) -> str:
    return {"from_": "FROM", "joins": "JOIN", "with_": "WITH", "qualify": "QUALIFY", "sample": "SAMPLE",
            "distinct": "DISTINCT", "windows": "WINDOW", "offset": "OFFSET", "laterals": "LATERAL",
            "pivots": "PIVOT", "rollup": "ROLLUP", "cube": "CUBE", "grouping_sets": "GROUPING SETS",
            "db": "schema-qualified table", "catalog": "catalog-qualified table"}.get(name, name.upper())


def _unsupported_clause(name: str, value: object) -> UnsupportedQuery:
    construct = _arg_construct(name)
    if name == "joins":
        return UnsupportedQuery(_HINTS[exp.Join], construct=construct)
    hint = _HINTS.get(type(value), "supported: SELECT keys, aggregates FROM table [WHERE] [GROUP BY] "
                                   "[HAVING] [ORDER BY] [LIMIT]")
    return UnsupportedQuery(f"{construct} is not supported; {hint}", construct=construct)


def _unsupported(node: exp.Expr, position: str) -> UnsupportedQuery:
    construct = _construct(node)
    hint = next((h for cls, h in _HINTS.items() if isinstance(node, cls)), None)
    if isinstance(node, exp.AggFunc):
        hint = _AGGREGATE_HINT
    message = f"{construct} is not allowed in {position}"
    return UnsupportedQuery(f"{message}; {hint}" if hint else message, construct=construct, position=position)
