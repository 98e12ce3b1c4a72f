"""Semi-joins in WHERE: `[NOT] EXISTS (SELECT … FROM t WHERE …)` and `col [NOT] IN (SELECT c FROM t WHERE …)`.

A subquery in WHERE is admitted as a per-row filter only when its outcome for a row is a function of that row's
own privacy unit's rows and of public data (docs/privacy.md §13.4):

- over a **public table**: any condition, correlated or not (public data is the same in every neighbour);
- over a **protected table**: its WHERE (for IN: the IN's own equality too) must hold an equality between one of
  its columns and one of the outer row's that *pins* every inner row to the outer row's unit (`pins`): both the
  unit column; both the first `unit_via` hop of their tables into one parent key (`l2.l_orderkey = l1.l_orderkey`:
  each key resolves to one parent row, checked when the store is built); or a first hop and the very key it lands
  on (`l_orderkey = o_orderkey`).

The inner WHERE is read by the same allow-list as any WHERE (`read`, where.predicate), over declared columns
only; a condition that compares an inner column with an outer one is a column-to-column comparison. Nothing of
the analyst's subquery is kept: the rendering reads the inner table under the alias `__semi`, each column it
reads renamed `__s<i>`, so an outer column (left unqualified, as every outer WHERE column is) can never be
captured by an inner one of the same name. The inner table is read unbounded: the filter is defined on the
rows as they are (the fidelity contract), and bounding happens per unit after it.

Scalar subqueries (`x < (SELECT AVG(…) …)`) and aggregates inside a subquery are refused (`scalar_subquery`):
over protected rows they are an exact release inside the WHERE.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema, UnitHop
    >>> from proxy.query.analyse.names import Names
    >>> from proxy.query.analyse.where import predicate
    >>> o = TableSchema("orders", "ck", (ColumnSpec("ok", "BIGINT"), ColumnSpec("ck", "BIGINT")))
    >>> li = TableSchema("li", "ck", (ColumnSpec("lk", "BIGINT"), ColumnSpec("ck", "BIGINT"),
    ...     ColumnSpec("a", "DATE"), ColumnSpec("b", "DATE")), unit_via=(UnitHop("lk", "orders", "ok"),))
    >>> node = parse_one("EXISTS (SELECT * FROM li WHERE lk = ok AND a < b)")
    >>> print(semi_join(node, Names(o, None, Catalog((o, li))), predicate).sql("duckdb"))
    EXISTS(SELECT 1 FROM (SELECT "lk" AS "__s0", "a" AS "__s1", "b" AS "__s2" FROM "li") AS "__semi" \
WHERE "__semi"."__s0" = "ok" AND TRY("__semi"."__s1" < "__semi"."__s2"))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.names import Names
from proxy.query.analyse.refusals import located, where
from proxy.query.analyse.resolve import check_qualifiers
from proxy.query.analyse.subqueries.refused import HINT, PINS, aggregate, null_in, scalar_subquery, shape
from proxy.query.catalog import ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.parse.normalise import conjuncts

ALIAS = "__semi"
Reader = Callable[[exp.Expr, Names], exp.Expr]

_COMPARE = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_FLIPPED = {exp.EQ: exp.EQ, exp.NEQ: exp.NEQ, exp.GT: exp.LT, exp.GTE: exp.LTE, exp.LT: exp.GT, exp.LTE: exp.GTE}


def is_semi_join(node: exp.Expr) -> bool:
    """`EXISTS (SELECT …)` or `x IN (SELECT …)`."""
    return isinstance(node, exp.Exists) or (isinstance(node, exp.In) and node.args.get("query") is not None)


@dataclasses.dataclass(frozen=True, slots=True)
class _Inner:
    """The subquery's table as read: its declaration, its alias (its name when it has none), its columns' names."""

    table: TableSchema | PublicTable
    alias: str
    names: Names

    def owns(self, column: exp.Column) -> bool:
        """Whether `column` is the inner table's (SQL's rule: the innermost scope that declares it). The unit
        column of a `unit_via` table is the store's, not a column of the table as written (parse/qualify.py)."""
        table = self.table
        if isinstance(table, TableSchema) and table.unit_via and column.name.lower() == table.privacy_unit.lower():
            return False
        if column.table:  # an alias hides its table's name, as in SQL
            return column.table.lower() == self.alias.lower()
        return table.column(column.name) is not None


def semi_join(node: exp.Expr, names: Names, read: Reader, *, negated: bool = False) -> exp.Expr:
    """The semi-join `node` rebuilt from declared names (see the module docstring), or a refusal naming why not.
    `negated`: `node` stands under an odd number of NOTs (`refused.null_in`)."""
    select = node.this if isinstance(node, exp.Exists) else node.args["query"]
    while isinstance(select, exp.Subquery | exp.Paren):
        select = select.this
    if not isinstance(select, exp.Select):
        raise shape(node, "a subquery that is a single SELECT")
    inner = _inner(select, node, names, read)
    renamed: dict[str, str] = {}

    def inner_ref(spec: ColumnSpec) -> exp.Expr:
        name = renamed.setdefault(spec.name, f"__s{len(renamed)}")
        return _typed(exp.column(name, table=ALIAS, quoted=True), spec)

    conditions: list[exp.Expr] = []
    pinned = isinstance(inner.table, PublicTable)
    selected: ColumnSpec | None = None  # an IN's: the inner column, and the outer operand it is compared with
    operand: exp.Expr | None = None
    if isinstance(node, exp.In):
        selected = _selected(select, inner, node)
        if not isinstance(node.this, exp.Column):
            raise shape(node, "IN (SELECT …) after a column")
        outer = names.column(node.this)
        _same_family(outer, selected, node)
        if outer.type != selected.type and "decimal" in (outer.kind, selected.kind):
            # DuckDB's common type of two DECIMALs may not hold a value: an error after admission; EXISTS has TRY
            raise UnsupportedQuery(
                f"IN compares {outer.name} ({outer.type}) with {selected.name} ({selected.type}){where(node)}: "
                "write EXISTS (SELECT * FROM … WHERE <its column> = <outer column> …) to compare DECIMALs of two "
                "types", construct="SUBQUERY", hint=HINT, **located(node))
        if negated and isinstance(inner.table, TableSchema):
            raise null_in(node, inner.table, selected)
        pinned = pinned or pins(_origin(names, outer), (inner.table, selected.name))
        operand = types.column(outer.name, outer.type)
    else:
        _projection(select, inner, node)
    where_node = select.args.get("where")
    for conjunct in conjuncts(where_node.this) if where_node is not None else []:
        columns = list(conjunct.find_all(exp.Column))
        if conjunct.find(exp.Select):
            if type(conjunct) in _COMPARE or isinstance(conjunct, exp.Between):
                raise scalar_subquery(conjunct, names)  # TPC-H Q20: `ps_availqty > (SELECT 0.5 * SUM(…) …)`
            raise shape(conjunct, "a subquery without a subquery inside it")
        mine = [c for c in columns if inner.owns(c)]
        if len(mine) == len(columns):  # the inner table's own condition: WHERE's allow-list, then renamed
            rebuilt = read(conjunct, inner.names)
            conditions.append(_renamed(rebuilt, inner, inner_ref))
        elif not mine:  # the outer row's own condition, read as the outer WHERE reads it
            conditions.append(read(conjunct, names))
        else:
            compared, pin = _correlation(conjunct, inner, names, inner_ref)
            pinned = pinned or pin
            conditions.append(compared)
    if not pinned:
        assert isinstance(inner.table, TableSchema)
        raise PolicyError(
            f"the subquery over the protected table {inner.table.name}{where(node)} is not correlated by an equality "
            f"that pins its rows to the outer row's privacy unit: {PINS}", construct="SUBQUERY",
            table=inner.table.name, hint=HINT, **located(node))
    projected = exp.Literal.number(1) if selected is None else inner_ref(selected)
    columns_read = [exp.alias_(exp.column(inner.table.column(name).name, quoted=True), alias, quoted=True)  # type: ignore[union-attr]
                    for name, alias in renamed.items()] or [exp.Literal.number(1)]
    source = exp.select(*columns_read).from_(exp.table_(inner.table.name, quoted=True)).subquery(ALIAS)
    source.set("alias", exp.TableAlias(this=exp.to_identifier(ALIAS, quoted=True)))
    query = exp.select(projected).from_(source)
    if conditions:
        query = query.where(exp.and_(*conditions))
    if operand is None:
        return exp.Exists(this=query)
    # the outer operand in parentheses: an atom `column IN (…)` is read as a list of literals by the scope rules
    # (analyse/cell_space.py), which must see this one as restricting nothing (tests/query/test_semi_join.py)
    return exp.In(this=exp.Paren(this=operand), query=exp.Subquery(this=query))


def _typed(ref: exp.Column, spec: ColumnSpec) -> exp.Expr:
    """`ref` read as types.column reads a column of `spec`'s type (binary collation for text, DOUBLE for REAL)."""
    built = types.column("__x", spec.type)
    return built.transform(lambda n: ref.copy() if isinstance(n, exp.Column) else n)


def _inner(select: exp.Select, node: exp.Expr, names: Names, read: Reader) -> _Inner:
    extra = [k for k, v in select.args.items() if v and k not in ("expressions", "from_", "where", "distinct")]
    if extra:
        raise shape(node, f"{extra[0].upper()} inside a subquery")
    source = select.args.get("from_")
    table_node = source.this if source is not None else None
    if not isinstance(table_node, exp.Table) or not isinstance(table_node.this, exp.Identifier) or any(
            v for k, v in table_node.args.items() if k not in ("this", "alias", "db", "catalog")):
        raise shape(node, "a subquery reading one declared table by name")
    check_qualifiers(table_node, names.catalog)
    alias_node = table_node.args.get("alias")
    if alias_node is not None and alias_node.args.get("columns"):
        raise shape(node, "a subquery without column aliases")
    table = names.catalog.table(table_node.name) or names.catalog.public_table(table_node.name)
    if table is None:
        known = [t.name for t in names.catalog.tables] + [t.name for t in names.catalog.public]
        raise PolicyError(f"unknown table {table_node.name!r} in a subquery", construct="TABLE",
                          table=table_node.name, hint="tables: " + ", ".join(known))
    alias = alias_node.name if alias_node is not None else table.name
    inner_names = Names(table, alias, names.catalog, conditions=read)  # type: ignore[arg-type]  # as public.py
    inner_names.today = names.today
    return _Inner(table, alias, inner_names)


def _selected(select: exp.Select, inner: _Inner, node: exp.Expr) -> ColumnSpec:
    """The one column an IN's subquery selects."""
    projections = select.expressions
    if len(projections) != 1 or not isinstance(projections[0], exp.Column) or not inner.owns(projections[0]):
        if any(p.find(exp.AggFunc) for p in projections):
            raise aggregate(node, inner.table)
        raise shape(node, "IN (SELECT <one column of the subquery's table> …)")
    return inner.names.column(projections[0])


def _projection(select: exp.Select, inner: _Inner, node: exp.Expr) -> None:
    """EXISTS ignores what it selects; it may still only name the inner table's columns, `*` or a literal."""
    for projection in select.expressions:
        if projection.find(exp.AggFunc):
            raise aggregate(node, inner.table)
        if isinstance(projection, exp.Column) and inner.owns(projection):
            inner.names.column(projection)
        elif not isinstance(projection, exp.Star | exp.Literal):
            raise shape(node, "EXISTS (SELECT * | 1 | <columns of its table> …)")


def _correlation(conjunct: exp.Expr, inner: _Inner, names: Names,
                 inner_ref: Callable[[ColumnSpec], exp.Expr]) -> tuple[exp.Expr, bool]:
    """An inner column compared with an outer one: the comparison and whether it pins the inner rows' unit."""
    sides = (conjunct.this, conjunct.expression)
    if type(conjunct) not in _COMPARE or not all(isinstance(s, exp.Column) for s in sides):
        raise shape(conjunct, "a condition comparing a column of the subquery's table with one of the outer row "
                               "(a = b, a <> b, a < b …), AND-ed with the subquery's own conditions")
    cls, left, right = type(conjunct), conjunct.this, conjunct.expression
    if not inner.owns(left):
        left, right, cls = right, left, _FLIPPED[cls]
    mine, outer = inner.names.column(left), names.column(right)
    _same_family(mine, outer, conjunct)
    a, b = inner_ref(mine), types.column(outer.name, outer.type)
    compared: exp.Expr = cls(this=a, expression=b)
    if mine.type != outer.type:  # DuckDB's common type may not hold a row's value: NULL there, never an error
        compared = exp.Anonymous(this="TRY", expressions=[compared])
    return compared, cls is exp.EQ and pins(_origin(names, outer), (inner.table, mine.name))


def _renamed(rebuilt: exp.Expr, inner: _Inner, inner_ref: Callable[[ColumnSpec], exp.Expr]) -> exp.Expr:
    """The inner condition (over unqualified declared columns) reading the renamed columns of `__semi`."""
    def rename(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column) and not node.table:
            spec = inner.table.column(node.name)
            assert spec is not None  # rebuilt from the inner table's declared columns
            ref = inner_ref(spec)
            return ref.find(exp.Column).copy()  # type: ignore[union-attr]  # its wrapper is already in `rebuilt`
        return node
    return rebuilt.transform(rename)


Origin = tuple[TableSchema | PublicTable, str]


def _origin(names: Names, spec: ColumnSpec) -> Origin:
    """The declared table and column an outer column reads (through the join's parts, when there is one)."""
    joined = names.joined
    if joined is None:
        return names.table, spec.name
    part = joined.owner(spec.name)
    if part is None:
        return joined.base, spec.name
    return part.step.table, part.columns[spec.name]


def pins(outer: Origin, inner: Origin) -> bool:
    """Whether `outer = inner` holds only between rows of one privacy unit: both the unit column; both the first
    unit_via hop of their tables into one parent key; or one table's first hop and the key it lands on.

    Example:
        >>> from proxy.query.catalog import UnitHop
        >>> o = TableSchema("orders", "ck", (ColumnSpec("ok", "BIGINT"), ColumnSpec("ck", "BIGINT")))
        >>> li = TableSchema("li", "ck", (ColumnSpec("lk", "BIGINT"), ColumnSpec("pk", "BIGINT"),
        ...     ColumnSpec("ck", "BIGINT")), unit_via=(UnitHop("lk", "orders", "ok"),))
        >>> [pins(a, b) for a, b in [((o, "ok"), (li, "lk")), ((li, "lk"), (li, "lk")), ((o, "ck"), (o, "ck")),
        ...     ((li, "pk"), (li, "pk")), ((o, "ok"), (o, "ok"))]]
        [True, True, True, False, False]
    """
    (a, x), (b, y) = outer, inner
    if not isinstance(a, TableSchema) or not isinstance(b, TableSchema):
        return False
    units = a.column(a.privacy_unit), b.column(b.privacy_unit)
    if units[0] is None or units[1] is None or units[0].type != units[1].type:
        return False
    if x.lower() == a.privacy_unit.lower() and y.lower() == b.privacy_unit.lower():
        return True

    def hop(table: TableSchema, column: str) -> tuple[str, str] | None:
        first = table.unit_via[0] if table.unit_via else None
        if first is None or first.column.lower() != column.lower():
            return None
        return first.table.lower(), first.key.lower()

    ha, hb = hop(a, x), hop(b, y)
    return (ha is not None and ha == hb) or ha == (b.name.lower(), y.lower()) or hb == (a.name.lower(), x.lower())


def _same_family(a: ColumnSpec, b: ColumnSpec, node: exp.Expr) -> None:
    if _family(a) != _family(b):
        raise PolicyError(f"cannot compare {a.name} ({a.type}) with {b.name} ({b.type}) in {node.sql()}: compare "
                          "columns of one kind (numbers, dates, text or booleans)", construct="SUBQUERY", hint=HINT)


def _family(spec: ColumnSpec) -> str:
    return "number" if spec.numeric else spec.kind

