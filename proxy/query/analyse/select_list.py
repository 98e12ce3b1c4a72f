"""The select list, HAVING, ORDER BY and LIMIT: expressions over group keys, aggregates and numbers.

HAVING and ORDER BY are evaluated on the noisy values after release, never in the database.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("orders", "customer_id", (ColumnSpec("customer_id", "BIGINT"),))
    >>> names = Names(t, None, Catalog((t,)))
    >>> output(parse_one("COUNT(*) * 2 AS twice"), names)
    Output(name='twice', expr=Op(op='*', args=(Agg(index=0), Const(value=2))))
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.analyse.aggregates import MORE_AGGREGATES, aggregate
from proxy.query.analyse.literals import number
from proxy.query.analyse.names import Names, Output
from proxy.query.analyse.refusals import unsupported
from proxy.query.computed.keys import match
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.expr import CAST_TARGETS, Const, Expr, Key, Op

MAX_LIMIT = 1_048_576  # BI tools send their row caps (Metabase exports 1048575, Superset 50000): post-processing only

_ARITHMETIC = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/"}


_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}


def output(node: exp.Expr, names: Names) -> Output:
    if isinstance(node, exp.Alias):
        expr = value(node.this, names, "SELECT")
        name = node.alias
        shadowed = names.table.column(name)
        is_same_column = isinstance(node.this, exp.Column) and node.this.name.lower() == name.lower()
        # BI tools name a computed key after its column (`date_trunc('month', day) AS day`): allowed for a
        # computed key, which HAVING and ORDER BY then read by that name (key_or_output)
        computed_key = isinstance(expr, Key) and names.table.column(names.keys[expr.index]) is None
        if shadowed is not None and not is_same_column and not computed_key:
            raise PolicyError(
                f"alias {name!r} renames another expression to a column name; choose a new name",
                construct="ALIAS", alias=name,
            )
        return Output(name, expr)
    return Output(label(node), value(node, names, "SELECT"))


def label(node: exp.Expr) -> str:
    if isinstance(node, exp.Column):
        return node.name
    return node.sql(dialect="duckdb")


def value(node: exp.Expr, names: Names, position: str) -> Expr:
    """A numeric or key expression over group keys, aggregates and numeric literals."""
    key = match(node, names)  # the same expression as a computed GROUP BY key
    if key is not None:
        return Key(names.keys.index(key))
    match node:
        case exp.Paren():
            return value(node.this, names, position)
        case exp.Column():
            return key_or_output(node, names, position)
        case exp.Count() | exp.Sum() | exp.Avg():
            return names.aggregate(aggregate(node, names))
        case _ if isinstance(node, MORE_AGGREGATES):
            return names.aggregate(aggregate(node, names))
        case exp.Neg():
            return Op("neg", (numeric(node.this, names, position),))
        case exp.Literal() if not node.is_string:
            return Const(number(node))
        case _ if type(node) in _ARITHMETIC:
            op = _ARITHMETIC[type(node)]
            return Op(op, (numeric(node.this, names, position), numeric(node.expression, names, position)))
    post = post_processing(node, names, position)
    if post is not None:
        return post
    raise unsupported(node, f"{position} (allowed: {POST_HINT})")


POST_HINT = ("group keys, aggregates, numbers, + - * /, and over them CAST(… AS INTEGER|BIGINT|DOUBLE|VARCHAR|DATE …), "
             "ROUND(x[, n]), FLOOR, CEIL, COALESCE, NULLIF, CASE WHEN … THEN … END, IF, CONCAT, ||")
_TYPE_NAMES = {"INT": "INTEGER", "INT4": "INTEGER", "INT8": "BIGINT", "INT2": "SMALLINT", "INT1": "TINYINT",
               "LONG": "BIGINT", "SHORT": "SMALLINT", "FLOAT8": "DOUBLE", "FLOAT": "REAL", "FLOAT4": "REAL",
               "TEXT": "VARCHAR", "STRING": "VARCHAR", "CHAR": "VARCHAR", "BPCHAR": "VARCHAR",
               "DOUBLE PRECISION": "DOUBLE", "NUMERIC": "DOUBLE"}


def post_processing(node: exp.Expr, names: Names, position: str) -> Expr | None:
    """A function over released values (expr.py computes it after noise: free), or None when `node` is none."""
    match node:
        case exp.Cast() | exp.TryCast():
            target = _cast_target(node)
            return Op("cast", (operand(node.this, names, position), Const(target)))
        case exp.Round():
            digits = node.args.get("decimals")
            places = 0 if digits is None else _whole(digits, "ROUND")
            return Op("round", (numeric(node.this, names, position), Const(places)))
        case exp.Floor() | exp.Ceil():
            if node.args.get("decimals") is not None:
                raise UnsupportedQuery(f"{type(node).__name__.upper()} takes one argument here; use ROUND(x, n)",
                                       construct=f"{type(node).__name__.upper()}()", position=position)
            return Op("ceil" if isinstance(node, exp.Ceil) else "floor", (numeric(node.this, names, position),))
        case exp.Coalesce():
            args = [node.this, *(node.expressions or [])]
            return Op("coalesce", tuple(operand(a, names, position) for a in args))
        case exp.Nullif():
            return Op("nullif", (operand(node.this, names, position), operand(node.expression, names, position)))
        case exp.If():
            otherwise = node.args.get("false")
            return Op("case", (condition(node.this, names, position), operand(node.args["true"], names, position),
                               Const(None) if otherwise is None else operand(otherwise, names, position)))
        case exp.Case():
            subject = node.this
            args: list[Expr] = []
            for branch in node.args.get("ifs") or []:
                when = (condition(branch.this, names, position) if subject is None else
                        Op("=", (operand(subject, names, position), operand(branch.this, names, position))))
                args += [when, operand(branch.args["true"], names, position)]
            default = node.args.get("default")
            args.append(Const(None) if default is None else operand(default, names, position))
            return Op("case", tuple(args))
        case exp.Concat():
            return Op("concat", tuple(operand(a, names, position) for a in node.expressions))
        case exp.DPipe():
            return Op("||", (operand(node.this, names, position), operand(node.expression, names, position)))
    return None


def _cast_target(node: exp.Cast) -> str:
    to = node.to
    name = to.sql(dialect="duckdb").upper()
    name = _TYPE_NAMES.get(name, name)
    if name not in CAST_TARGETS or to.expressions:
        raise UnsupportedQuery(
            f"CAST(… AS {to.sql(dialect='duckdb')}) is not supported over released values; cast to INTEGER, BIGINT, "
            "DOUBLE, REAL, VARCHAR or DATE (ROUND(x, n) rounds to n places)",
            construct="CAST", type=to.sql(dialect="duckdb"),
        )
    return name


def _whole(node: exp.Expr, function: str) -> int:
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    places = number(inner) if isinstance(inner, exp.Literal) and not inner.is_string else None
    if not isinstance(places, int) or abs(places) > 30:
        raise UnsupportedQuery(f"{function}'s second argument is a whole number literal from -30 to 30",
                               construct=f"{function}()")
    return -places if negative else places


def numeric(node: exp.Expr, names: Names, position: str) -> Expr:
    """An arithmetic operand: a number, an aggregate, or a numeric group key (never text or dates)."""
    result = value(node, names, position)
    if _text(result):
        raise UnsupportedQuery(
            f"{node.sql(dialect='duckdb')[:80]} is text; arithmetic and rounding take numbers",
            construct="ARITHMETIC", position=position,
        )
    if isinstance(result, Key):
        spec = names.key_spec(names.keys[result.index])
        if not spec.numeric:
            raise UnsupportedQuery(
                f"arithmetic on the {spec.kind} key {spec.name!r} is not supported; use numbers and aggregates",
                construct="ARITHMETIC", column=spec.name, position=position,
            )
    return result


def _text(expr: Expr) -> bool:
    """Whether `expr` is text by construction (a cast to VARCHAR, a concatenation): DuckDB would not bind
    arithmetic on it, so neither do we."""
    return isinstance(expr, Op) and (expr.op in ("concat", "||") or (
        expr.op == "cast" and expr.args[1] in (Const("VARCHAR"), Const("DATE"))))


def key_or_output(node: exp.Column, names: Names, position: str) -> Expr:
    if position != "SELECT" and not node.table:
        for output in names.outputs:
            if output.name.lower() == node.name.lower() and names.table.column(node.name) is None:
                return output.expr
    spec = names.column(node)
    if spec.name not in names.keys and not node.table:
        renamed = next((o.expr for o in names.outputs if o.name.lower() == node.name.lower()
                        and isinstance(o.expr, Key)), None)
        if position != "SELECT" and renamed is not None:
            return renamed  # a computed key aliased to its column's name (see `output`)
    if spec.name not in names.keys:
        raise PolicyError(
            f"column {spec.name!r} is neither a group key nor inside an aggregate; raw values are never "
            "released",
            construct="COLUMN", column=spec.name, hint="add it to GROUP BY or aggregate it",
        )
    return Key(names.keys.index(spec.name))


def condition(node: exp.Expr, names: Names, position: str) -> Expr:
    """A HAVING condition: evaluated on noisy values after release, never in the database."""
    match node:
        case exp.Paren():
            return condition(node.this, names, position)
        case exp.And() | exp.Or():
            op = "and" if isinstance(node, exp.And) else "or"
            return Op(op, (condition(node.this, names, position), condition(node.expression, names, position)))
        case exp.Not():
            return Op("not", (condition(node.this, names, position),))
        case _ if type(node) in _COMPARISONS:
            op = _COMPARISONS[type(node)]
            return Op(op, (operand(node.this, names, position), operand(node.expression, names, position)))
    raise unsupported(node, f"{position} (allowed: comparisons of keys and aggregates, AND, OR, NOT)")


def operand(node: exp.Expr, names: Names, position: str) -> Expr:
    if isinstance(node, exp.Literal) and node.is_string:
        return Const(node.this)
    if isinstance(node, exp.Boolean):
        return Const(bool(node.this))
    return value(node, names, position)


def order(order: exp.Order | None, names: Names) -> tuple[tuple[Expr, bool], ...]:
    if not order:
        return ()
    items = []
    for item in order.expressions:
        if not isinstance(item, exp.Ordered):
            raise unsupported(item, "ORDER BY")
        target = item.this
        if isinstance(target, exp.Literal) and not target.is_string:
            position = number(target)
            if not (isinstance(position, int) and 1 <= position <= len(names.outputs)):
                raise UnsupportedQuery(
                    f"ORDER BY {target.this} does not name an output column (1..{len(names.outputs)})",
                    construct="ORDER BY",
                )
            expr = names.outputs[position - 1].expr
        else:
            expr = value(target, names, "ORDER BY")
        items.append((expr, bool(item.args.get("desc"))))
    return tuple(items)


def limit(limit: exp.Limit | None) -> int | None:
    if not limit:
        return None
    for name, extra in limit.args.items():
        if name != "expression" and extra:
            construct = "LIMIT BY" if name == "expressions" else "LIMIT " + (
                "PERCENT" if getattr(extra, "args", {}).get("percent") else "WITH TIES"
            ) if name == "limit_options" else f"LIMIT {name.upper()}"
            raise UnsupportedQuery(f"{construct} is not supported; use LIMIT n", construct=construct)
    value = limit.expression
    count = number(value) if isinstance(value, exp.Literal) and not value.is_string else None
    if not isinstance(count, int) or not 0 <= count <= MAX_LIMIT:
        raise UnsupportedQuery(f"LIMIT takes a whole number from 0 to {MAX_LIMIT}", construct="LIMIT")
    return count
