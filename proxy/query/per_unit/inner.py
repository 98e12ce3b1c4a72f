"""The per-unit query: checked against the policy and described as the one-row-per-unit table it computes.

It reads one protected table, or one joined on the privacy unit to a second protected table (INNER, or LEFT from
the first: `customer LEFT JOIN orders` keeps a customer with no order, whose COUNT(o_orderkey) is 0); it groups by
exactly the unit; it selects the unit and per-unit aggregates COUNT(*), COUNT(col) and SUM(col) of a column with
declared bounds. Its WHERE and the ON's other conditions are row filters, each on the rows of one table (for a
LEFT JOIN: WHERE on the first table, ON on the joined one, which is what they mean there). Each aggregate's value
is clamped to a public range (docs/privacy.md §14): a count to [0, C], a sum to [C·min(lo, 0), C·max(hi, 0)],
where C is the product of the tables' max_rows (a one-row-per-unit table has 1) and [lo, hi] the column's bounds.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> v = TableSchema("visits", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("ms", "INTEGER", bounds=(0, 9))),
    ...     max_rows=5)
    >>> found = per_unit(parse_one("SELECT uid, COUNT(*) AS n, SUM(ms) AS t FROM visits GROUP BY uid"), (),
    ...     Catalog((v,)))
    >>> [(x.name, x.kind, x.low, x.high) for x in found.values], found.unit
    ([('n', 'count', 0, 5), ('t', 'sum', 0, 45)], 'uid')
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Literal

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.names import Names
from proxy.query.analyse.resolve import check_qualifiers
from proxy.query.analyse.where import predicate
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.parse.normalise import conjuncts

_INNER_ARGS = frozenset({"expressions", "from_", "joins", "where", "group"})
HINT = ("the per-unit query: SELECT <unit>, COUNT(*) | COUNT(col) | SUM(bounded col) AS <name> FROM <protected "
        "table> [[LEFT] JOIN <protected table> ON <unit> = <unit> [AND <filter of the joined table>]] [WHERE …] "
        "GROUP BY <unit>")


@dataclass(frozen=True, slots=True)
class Side:
    """One table of the per-unit query: its alias and its row filters, rebuilt over its declared columns."""

    table: TableSchema
    alias: str
    filters: tuple[exp.Expr, ...]


@dataclass(frozen=True, slots=True)
class Value:
    """One per-unit aggregate: its output name, what it aggregates (a column of `sides[side]`, or every joined
    row), its public clamp [low, high] and the type of its value."""

    name: str
    kind: Literal["count", "sum"]
    side: int | None  # the table whose `column` it reads; None: COUNT(*)
    column: str | None
    low: int | Decimal
    high: int | Decimal
    type: str


@dataclass(frozen=True, slots=True)
class PerUnit:
    """The per-unit query: its tables (the first, then the one joined to it), the join, the unit's output name
    (the virtual table's privacy unit) and the aggregates, in output order."""

    sides: tuple[Side, ...]
    left: bool
    unit: str
    values: tuple[Value, ...]

    @property
    def rows(self) -> int:
        """C: the most joined rows per unit the clamps allow (the product of the tables' max_rows)."""
        product = 1
        for side in self.sides:
            product *= 1 if side.table.one_row_per_unit else side.table.max_rows
        return product


def per_unit(inner: exp.Select, columns: tuple[str, ...], catalog: Catalog,
             today: dt.date | None = None) -> PerUnit:
    """`inner` checked and described (a refusal naming the construct for anything else); `columns` are the
    derived table's column-alias list, renaming the outputs by position."""
    for name, value in inner.args.items():
        if name not in _INNER_ARGS and value:
            construct = {"having": "HAVING", "order": "ORDER BY", "limit": "LIMIT", "distinct": "DISTINCT"}.get(
                name, name.upper())
            raise UnsupportedQuery(f"{construct} inside a per-unit subquery is not supported; {HINT}",
                                   construct=construct, hint=HINT)
    joins = list(inner.args.get("joins") or [])
    if len(joins) > 1:
        raise UnsupportedQuery(f"a per-unit subquery joins at most two protected tables; {HINT}", construct="JOIN",
                               hint=HINT)
    tables = [_table(inner.args["from_"].this, catalog)] + [_table(j.this, catalog) for j in joins]
    if len(tables) == 2 and tables[0][1].lower() == tables[1][1].lower():
        raise UnsupportedQuery("two joined tables have one alias: give each its own", construct="TABLE ALIAS")
    left = bool(joins) and _side_of(joins[0]) == "LEFT"
    on: list[exp.Expr] = _join_filters(joins[0], tables) if joins else []
    where = inner.args.get("where")
    filters: list[list[exp.Expr]] = [[] for _ in tables]
    for conjunct, in_on in [(c, False) for c in (conjuncts(where.this) if where else [])] + [(c, True) for c in on]:
        owner = _owner(conjunct, tables)
        if left and owner != (1 if in_on else 0):
            raise UnsupportedQuery(
                f"{conjunct.sql()} in the {'ON' if in_on else 'WHERE'} of a LEFT JOIN changes which rows are kept "
                f"unmatched, not just which rows are counted; filter the first table in WHERE and the joined table "
                f"in ON; {HINT}", construct="LEFT JOIN", hint=HINT)
        names = Names(tables[owner][0], tables[owner][1], catalog, conditions=predicate)
        names.today = today
        filters[owner].append(predicate(conjunct, names))
    sides = tuple(Side(t, alias, tuple(f)) for (t, alias), f in zip(tables, filters, strict=True))
    _check_group(inner, sides, left)
    unit_name, values = _outputs(inner, columns, sides, left)
    found = PerUnit(sides, left, unit_name, ())
    return PerUnit(sides, left, unit_name, tuple(_clamped(v, found) for v in values))


def _table(node: exp.Expr, catalog: Catalog) -> tuple[TableSchema, str]:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
        raise UnsupportedQuery(f"a per-unit subquery reads protected tables by name, not {node.sql()}; {HINT}",
                               construct="SUBQUERY", hint=HINT)
    check_qualifiers(node, catalog)
    alias = node.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise UnsupportedQuery("column aliases in FROM are not supported", construct="TABLE ALIAS")
    table = catalog.table(node.name)
    if table is None:
        public = catalog.public_table(node.name) is not None
        raise PolicyError(  # a GROUP BY inside a subquery is only ever an aggregate per unit: name the GROUP BY
            f"{node.name!r} is {'a public table' if public else 'not a declared table'}: a GROUP BY inside a "
            "subquery is an aggregate per privacy unit, over protected tables holding the unit",
            construct="GROUP BY" if public else "TABLE", table=node.name,
            hint="tables: " + ", ".join(t.name for t in catalog.tables))
    if table.unit_via:
        raise UnsupportedQuery(
            f"{table.name} reaches its privacy unit through keys (unit_via): a per-unit subquery groups a table "
            f"holding the unit column; {HINT}", construct="unit_via", table=table.name, hint=HINT)
    return table, alias.name if alias is not None else table.name


def _side_of(node: exp.Join) -> str:
    side, kind = (node.args.get("side") or "").upper(), (node.args.get("kind") or "").upper()
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER") or (kind == "INNER" and side) or any(
            v for k, v in node.args.items() if k not in ("this", "on", "using", "side", "kind")):
        construct = " ".join(x for x in (side, kind, "JOIN") if x)
        raise UnsupportedQuery(f"{construct} is not supported in a per-unit subquery; {HINT}", construct=construct,
                               hint=HINT)
    return side


def _join_filters(node: exp.Join, tables: list[tuple[TableSchema, str]]) -> list[exp.Expr]:
    """The ON's conditions besides the one equality of the two units (USING: the unit's name in both)."""
    (first, _), (second, _) = tables
    if first.column(first.privacy_unit).type != second.column(second.privacy_unit).type:  # type: ignore[union-attr]
        raise PolicyError(f"{first.name}.{first.privacy_unit} and {second.name}.{second.privacy_unit} have different "
                          "types: they are not one privacy unit", construct="JOIN ON")
    using = node.args.get("using")
    if using:
        if [u.name.lower() for u in using] != [first.privacy_unit.lower()] or \
                first.privacy_unit.lower() != second.privacy_unit.lower():
            raise UnsupportedQuery(f"a per-unit subquery joins on the privacy unit; {HINT}", construct="USING",
                                   hint=HINT)
        return []
    if not node.args.get("on"):
        raise UnsupportedQuery(f"the JOIN needs ON <unit> = <unit>; {HINT}", construct="JOIN", hint=HINT)
    rest, units = [], 0
    for conjunct in conjuncts(node.args["on"]):
        if isinstance(conjunct, exp.EQ) and _unit_equality(conjunct, tables):
            units += 1
        else:
            rest.append(conjunct)
    if units != 1:
        raise PolicyError(f"a per-unit subquery joins its two tables on their privacy unit "
                          f"({tables[0][1]}.{first.privacy_unit} = {tables[1][1]}.{second.privacy_unit}), once; "
                          f"{HINT}", construct="JOIN ON", hint=HINT)
    return rest


def _unit_equality(node: exp.EQ, tables: list[tuple[TableSchema, str]]) -> bool:
    """Whether `node` compares the first table's unit with the joined table's."""
    ends = [e for e in (node.this, node.expression) if isinstance(e, exp.Column)]
    sides = [_column_side(e, tables, quiet=True) for e in ends]
    return len(ends) == 2 and sorted(sides) == [0, 1] and all(
        e.name.lower() == tables[side][0].privacy_unit.lower() for e, side in zip(ends, sides, strict=True))



def _column_side(column: exp.Column, tables: list[tuple[TableSchema, str]], quiet: bool = False) -> int:
    """The index of the table `column` belongs to (by its qualifier, else by its name), or a refusal."""
    qualifier = column.table.lower()
    found = [i for i, (t, alias) in enumerate(tables) if qualifier in ("", alias.lower(), t.name.lower())
             and t.column(column.name) is not None]
    if len(found) == 2 and column.name.lower() == tables[0][0].privacy_unit.lower() == \
            tables[1][0].privacy_unit.lower():
        return 0  # the unit, by one name in both tables: equal on every joined row (the first's for a LEFT JOIN)
    if len(found) != 1:
        if quiet:
            return -1
        raise PolicyError(f"{column.sql()} in the per-unit subquery names {'no' if not found else 'more than one'} "
                          "declared column; qualify it with a table alias", construct="COLUMN", column=column.sql())
    return found[0]


def _owner(condition: exp.Expr, tables: list[tuple[TableSchema, str]]) -> int:
    owners = {_column_side(c, tables) for c in condition.find_all(exp.Column)}
    if len(owners) != 1:
        raise UnsupportedQuery(
            f"{condition.sql()} in a per-unit subquery must read the columns of one table: each condition is a row "
            f"filter of one table; {HINT}", construct="WHERE", hint=HINT)
    return owners.pop()


def _check_group(inner: exp.Select, sides: tuple[Side, ...], left: bool) -> None:
    group = inner.args["group"]
    keys = list(group.expressions)
    extra = [k for k, v in group.args.items() if v and k != "expressions"]
    tables = [(s.table, s.alias) for s in sides]
    if extra or len(keys) != 1 or not isinstance(keys[0], exp.Column) or not _is_unit(keys[0], tables, left):
        shown = ", ".join(k.sql() for k in keys) or group.sql()
        unit = f"{sides[0].alias}.{sides[0].table.privacy_unit}"
        raise PolicyError(
            f"the per-unit subquery groups by {shown}: it must group by the privacy unit ({unit}) and nothing "
            f"else, so that each unit is one row of it", construct="GROUP BY", hint=HINT)


def _is_unit(column: exp.Column, tables: list[tuple[TableSchema, str]], left: bool) -> bool:
    side = _column_side(column, tables, quiet=True)
    # a LEFT JOIN's joined unit is NULL on a unit with no joined row: only the first table's unit is every unit's
    return side >= 0 and column.name.lower() == tables[side][0].privacy_unit.lower() and not (left and side == 1)


def _outputs(inner: exp.Select, columns: tuple[str, ...], sides: tuple[Side, ...],
             left: bool) -> tuple[str, list[Value]]:
    projections = list(inner.expressions)
    if columns and len(columns) != len(projections):
        raise UnsupportedQuery(f"the derived table names {len(columns)} columns for {len(projections)} outputs",
                               construct="TABLE ALIAS")
    tables = [(s.table, s.alias) for s in sides]
    unit: str | None = None
    values: list[Value] = []
    for i, projection in enumerate(projections):
        node = projection.this if isinstance(projection, exp.Alias) else projection
        name = columns[i] if columns else (projection.alias if isinstance(projection, exp.Alias) else None)
        if isinstance(node, exp.Column) and _is_unit(node, tables, left):
            unit = name or node.name
            continue
        if name is None:
            raise UnsupportedQuery(f"name {node.sql()} in the per-unit subquery (… AS <name>): the outer query reads "
                                   "it by name", construct="SELECT", hint=HINT)
        values.append(_value(node, name, sides))
    if unit is None:
        unit = "__unit"  # not selected: the virtual table still has it, under a name no query can write
    names = [unit] + [v.name for v in values]
    if len({n.lower() for n in names}) != len(names):
        raise UnsupportedQuery("two outputs of the per-unit subquery have one name", construct="SELECT")
    if not values:
        raise UnsupportedQuery(f"the per-unit subquery computes no aggregate; {HINT}", construct="SELECT", hint=HINT)
    return unit, values


def _value(node: exp.Expr, name: str, sides: tuple[Side, ...]) -> Value:
    tables = [(s.table, s.alias) for s in sides]
    argument = node.this if isinstance(node, exp.Count | exp.Sum) else None
    if isinstance(node, exp.Count) and isinstance(argument, exp.Star):
        return Value(name, "count", None, None, 0, 0, "BIGINT")
    if isinstance(node, exp.Count | exp.Sum) and isinstance(argument, exp.Column) and not node.args.get("distinct"):
        side = _column_side(argument, tables)
        spec = sides[side].table.column(argument.name)
        assert spec is not None
        if isinstance(node, exp.Count):
            return Value(name, "count", side, spec.name, 0, 0, "BIGINT")
        if not spec.numeric or spec.bounds is None:
            raise PolicyError(
                f"SUM({argument.sql()}) in the per-unit subquery: {spec.name} has no declared bounds, so a unit's "
                "total has no public range to clamp it to", construct="SUM", column=spec.name,
                hint=f"declare bounds for {sides[side].table.name}.{spec.name} in the policy")
        return Value(name, "sum", side, spec.name, 0, 0, _sum_type(spec))
    raise UnsupportedQuery(
        f"{node.sql()} in the per-unit subquery is not supported: per unit, COUNT(*), COUNT(col) or SUM(col) of a "
        f"bounded column; {HINT}", construct="SELECT", hint=HINT)


def _sum_type(spec: ColumnSpec) -> str:
    if spec.kind == "integer":
        return "BIGINT"
    if spec.kind == "decimal":
        scale, _, _ = types.grid(spec.type)  # type: ignore[misc]
        return f"DECIMAL(38,{scale})"
    return "DOUBLE"


def _clamped(value: Value, found: PerUnit) -> Value:
    """`value` with its public clamp: [0, C] for a count, [C·min(lo, 0), C·max(hi, 0)] for a sum of [lo, hi]."""
    rows = found.rows
    if value.kind == "count":
        return Value(value.name, value.kind, value.side, value.column, 0, rows, value.type)
    assert value.side is not None and value.column is not None
    spec = found.sides[value.side].table.column(value.column)
    assert spec is not None and spec.bounds is not None
    span = types.grid_span(spec.type, *spec.bounds)
    assert span is not None  # the policy checks that the bounds hold a value of the type
    scale = (types.grid(value.type) or (0,))[0]
    low, high = (Decimal(repr(b)) * rows for b in (min(span[0], 0.0), max(span[1], 0.0)))
    if value.type != "DOUBLE":
        low, high = (b.quantize(Decimal(1).scaleb(-scale)) for b in (low, high))
    low, high = (int(b) if scale == 0 and value.type != "DOUBLE" else b for b in (low, high))
    return Value(value.name, value.kind, value.side, value.column, low, high, value.type)
