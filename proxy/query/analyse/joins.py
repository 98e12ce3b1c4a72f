"""Joins: one protected table joined to a public table on a declared key, or to another protected table of the
same privacy unit on that unit; INNER or LEFT, `ON a = b` or `USING (col)`, with aliases.

The join becomes one *virtual table* that the rest of the analysis treats like any protected table: the
protected (base) table's columns under their own names, then the other table's columns (renamed
`<table>.<column>` when a name is taken). Its privacy unit is the base table's, so the rewrite bounds
contributions per unit *after* the join: every joined row belongs to the unit of its protected row, a
one-to-many fan-out only gives a unit more rows, and the bounding caps them (docs/privacy.md §1). Removing a unit
removes exactly its joined rows, because the other side is either public (the same in every neighbour) or
joined on the unit itself.

What the other side's columns may be:
- a public table's columns are unit-level only when the base join column is unit-level (or the unit) and the
  public table declares its key `unique` (each unit then meets one value); otherwise row-level;
- a protected table's columns keep their declarations (`users.plan`, one row per user, is unit-level);
  its privacy unit is the base table's unit (they are equal on every joined row) and is never a key.
Bounds: of two protected tables, those of the one with more rows per unit (larger max_rows, then max_groups;
never one declared one row per unit): `users JOIN visits` counts visits under visits' bounds. Any choice is
private: the sensitivity follows the bounds the rewrite enforces.

Canonical values (docs/privacy.md §7) are a property of the unit, never of the query: `canonical_source` reads
a base column as its MIN over the unit's rows of the base table, and a protected table's column as its MIN over
the unit's rows of that table, each *before* the join, so an INNER join that drops some of a unit's rows cannot
move the unit to another cell. A unit-level column of a public table is read as its MIN over the unit's joined
rows, with the base join column itself canonical: a function of the unit's canonical key and the public table,
whatever `unique` claims. The join's cell space names the join (`via`) when it has an axis of the other table.

Example:
    >>> from sqlglot import parse_one
    >>> visits = TableSchema("visits", "user_id", (ColumnSpec("user_id", "BIGINT"),), max_rows=20)
    >>> users = TableSchema("users", "user_id", (ColumnSpec("user_id", "BIGINT"),
    ...     ColumnSpec("plan", "VARCHAR", unit_level=True, groupable=True)))
    >>> j = join(parse_one("SELECT COUNT(*) FROM visits v JOIN users u USING (user_id)"), Catalog((visits, users)))
    >>> [c.name for c in j.table.columns][-1], j.table.column("plan").unit_level, j.qualifiers["u"]["user_id"]
    ('plan', True, 'user_id')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.refusals import located, where
from proxy.query.analyse.resolve import check_qualifiers
from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import PolicyError, UnsupportedQuery

BASE, OTHER = "__b", "__o"
_HINT = ("supported: <protected> [INNER|LEFT] JOIN <public table> ON a = <its key>, or two protected tables of "
         "the same privacy unit joined on it (USING (unit))")


@dataclass(frozen=True, slots=True)
class Joined:
    table: TableSchema  # the virtual table (see the module docstring)
    source: exp.Expr  # the FROM item computing it, from declared names only (no canonical values)
    qualifiers: dict[str, dict[str, str]]  # table name or alias (lower) → column (lower) → virtual column
    unqualified: dict[str, str | None]  # column (lower) → virtual column; None when two tables have it
    base: TableSchema
    other: TableSchema | PublicTable
    pair: tuple[ColumnSpec, ColumnSpec]  # the ON equality: (base column, other column)
    left_join: bool
    foreign: dict[str, str]  # virtual column → the other table's column (its unit excepted)
    via: str  # names the join in its cell space's fingerprint (scope.CellSpace.via)

    @property
    def public(self) -> bool:
        return isinstance(self.other, PublicTable)


def join(select: exp.Select, catalog: Catalog) -> Joined:
    """The virtual table of `select`'s FROM … JOIN …, or a refusal naming what to write instead."""
    joins = select.args.get("joins") or []
    if len(joins) != 1:
        raise UnsupportedQuery(f"one JOIN per query is supported; {_HINT}", construct="JOIN")
    node = joins[0]
    _check_shape(node)
    source = select.args.get("from_")
    if source is None:
        raise UnsupportedQuery("the query needs FROM <protected table>", construct="FROM")
    left, left_alias = _side(source.this, catalog)
    right, right_alias = _side(node.this, catalog)
    if isinstance(left, PublicTable) and isinstance(right, PublicTable):
        raise PolicyError(f"{left.name} and {right.name} are both public: join one to a protected table",
                          construct="JOIN")
    if left.name.lower() == right.name.lower():
        raise UnsupportedQuery(f"joining {left.name} to itself is not supported", construct="JOIN")
    if node.args.get("side") == "LEFT" and isinstance(left, PublicTable):
        raise UnsupportedQuery(
            f"{left.name} LEFT JOIN {right.name} keeps rows of the public table with no privacy unit; put the "
            f"protected table first", construct="LEFT JOIN",
        )
    base, base_alias, other, other_alias = (
        (right, right_alias, left, left_alias) if isinstance(left, PublicTable) else
        (left, left_alias, right, right_alias))
    assert isinstance(base, TableSchema)
    pair = _condition(node, base, base_alias, other, other_alias)
    return _virtual(base, base_alias, other, other_alias, pair, left_join=node.args.get("side") == "LEFT")


def _check_shape(node: exp.Join) -> None:
    side, kind = (node.args.get("side") or "").upper(), (node.args.get("kind") or "").upper()
    extra = [k for k, v in node.args.items() if v and k not in ("this", "on", "using", "side", "kind")]
    construct = " ".join(x for x in (node.args.get("method") or "", side, kind, "JOIN") if x).upper()
    if extra or side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER") or (kind == "INNER" and side):
        raise UnsupportedQuery(f"{construct} is not supported; {_HINT}", construct=construct)
    if not any(v for k, v in node.args.items() if k != "this"):  # `FROM a, b`: no WHERE equality connected them
        raise UnsupportedQuery(
            f"FROM …, {node.this.sql()} with no equality in WHERE between a column of each table is a cross join, "
            f"which is not supported: compare the tables' join columns in WHERE, qualified (a.k = b.k), or write "
            f"JOIN … ON; {_HINT}", construct="CROSS JOIN")
    if bool(node.args.get("on")) == bool(node.args.get("using")):
        raise UnsupportedQuery(f"a JOIN needs ON a = b or USING (column); {_HINT}", construct=construct)


def _side(node: exp.Expr, catalog: Catalog) -> tuple[TableSchema | PublicTable, str]:
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier) or any(
        v for k, v in node.args.items() if k not in ("this", "alias", "db", "catalog")
    ):
        raise UnsupportedQuery(f"JOIN reads tables by name, not {node.sql()}; {_HINT}", construct="JOIN")
    check_qualifiers(node, catalog)
    alias = node.args.get("alias")
    if alias is not None and alias.args.get("columns"):
        raise UnsupportedQuery("column aliases in FROM are not supported", construct="TABLE ALIAS")
    table = catalog.table(node.name) or catalog.public_table(node.name)
    if table is None:
        known = [t.name for t in catalog.tables] + [t.name for t in catalog.public]
        raise PolicyError(f"unknown table {node.name!r}", construct="TABLE", table=node.name,
                          hint="tables: " + ", ".join(known))
    return table, (alias.name if alias is not None else table.name)


def _condition(node: exp.Join, base: TableSchema, base_alias: str, other: TableSchema | PublicTable,
               other_alias: str) -> tuple[ColumnSpec, ColumnSpec]:
    """The one equality the join is on, as (base column, other column)."""
    using = node.args.get("using")
    if using:
        if len(using) != 1:
            raise UnsupportedQuery(f"USING takes one column; {_HINT}", construct="USING")
        name = using[0].name
        a, b = base.column(name), other.column(name)
        if a is None or b is None:
            raise PolicyError(f"USING ({name}): both tables must declare {name!r}", construct="USING", column=name)
    else:
        condition = node.args["on"]
        while isinstance(condition, exp.Paren):
            condition = condition.this
        if not (isinstance(condition, exp.EQ) and isinstance(condition.this, exp.Column)
                and isinstance(condition.expression, exp.Column)):
            raise UnsupportedQuery(f"JOIN … ON takes one equality of two columns, not {condition.sql()}; {_HINT}",
                                   construct="JOIN ON")
        ends = [_owner(c, base, base_alias, other, other_alias) for c in (condition.this, condition.expression)]
        if {side for side, _ in ends} != {"base", "other"}:
            raise UnsupportedQuery(f"JOIN … ON must compare a column of each table: {condition.sql()}",
                                   construct="JOIN ON")
        a = next(spec for side, spec in ends if side == "base")
        b = next(spec for side, spec in ends if side == "other")
    if isinstance(other, PublicTable):
        if b.name.lower() not in {k.lower() for k in other.keys}:
            raise PolicyError(
                f"the public table {other.name} may be joined on {', '.join(other.keys)}, not {b.name!r}",
                construct="JOIN ON", column=b.name,
            )
    elif not (a.name == base.privacy_unit and b.name == other.privacy_unit):
        on = node.args.get("on") or node
        raise PolicyError(
            f"JOIN on {a.name} = {b.name}{where(on)} is not supported between two protected tables; join on "
            f"{base.privacy_unit} (their privacy unit), or declare {other.name!r} public",
            construct="JOIN ON", column=a.name, **located(on),
        )
    if _family(a) != _family(b):
        raise PolicyError(f"JOIN compares {a.name} ({a.type}) with {b.name} ({b.type})", construct="JOIN ON")
    return a, b


def _owner(column: exp.Column, base: TableSchema, base_alias: str, other: TableSchema | PublicTable,
           other_alias: str) -> tuple[str, ColumnSpec]:
    qualifier = column.table.lower()
    candidates = [("base", base, base_alias), ("other", other, other_alias)]
    found = [(side, spec) for side, table, alias in candidates
             if qualifier in ("", alias.lower()) and (spec := table.column(column.name)) is not None]
    if len(found) != 1:
        raise PolicyError(f"{column.sql()} in JOIN … ON names {'no' if not found else 'more than one'} declared "
                          "column; qualify it with a table alias", construct="JOIN ON", column=column.sql())
    return found[0]


def _family(spec: ColumnSpec) -> str:
    return "number" if spec.numeric else spec.kind


def _virtual(base: TableSchema, base_alias: str, other: TableSchema | PublicTable, other_alias: str,
             pair: tuple[ColumnSpec, ColumnSpec], *, left_join: bool) -> Joined:
    taken = {c.name.lower() for c in base.columns}
    protected = isinstance(other, TableSchema)
    through = pair[0].unit_level or pair[0].name == base.privacy_unit
    unit_level = protected or (through and isinstance(other, PublicTable) and other.unique)
    added: list[ColumnSpec] = []
    mapping = {c.name.lower(): c.name for c in base.columns}
    other_mapping: dict[str, str] = {}
    foreign: dict[str, str] = {}
    for spec in other.columns:
        if protected and spec.name == other.privacy_unit:  # equal to the base unit on every joined row
            other_mapping[spec.name.lower()] = base.privacy_unit
            continue
        name = spec.name if spec.name.lower() not in taken else f"{other.name}.{spec.name}"
        taken.add(name.lower())
        other_mapping[spec.name.lower()] = name
        foreign[name] = spec.name
        virtual = dataclasses.replace(spec, name=name, unit_level=spec.unit_level if protected else
                                      spec.unit_level or unit_level)
        if not protected and not unit_level:
            virtual = dataclasses.replace(virtual, unit_level=False)
        added.append(virtual)
    bounds = base
    if isinstance(other, TableSchema) and (base.one_row_per_unit or (other.max_rows, other.max_groups) > (
            base.max_rows, base.max_groups)) and not other.one_row_per_unit:
        bounds = other  # the joined rows are the other table's rows: `users JOIN visits` counts visits
    table = TableSchema(base.name, base.privacy_unit, base.columns + tuple(added), bounds.max_groups,
                        bounds.max_rows, auto_max_rows=bounds.auto_max_rows,
                        auto_max_groups=bounds.auto_max_groups)  # auto: refused, never run at the limit
    unqualified: dict[str, str | None] = dict(mapping)
    for key, name in other_mapping.items():
        if key in unqualified and unqualified[key] != name:
            unqualified[key] = None  # in both tables: qualify it
        else:
            unqualified[key] = name
    qualifiers = {base_alias.lower(): mapping, other_alias.lower(): other_mapping}
    # the other table's unit-level columns are read through this join: its tables and its ON (not INNER or LEFT,
    # which only decide whether a unit with no match has rows at all: its canonical values are the same)
    via = (f"{other.name}.{other.privacy_unit}" if isinstance(other, TableSchema) else
           f"{other.name}.{pair[1].name} = {base.name}.{pair[0].name}")
    joined = Joined(table, exp.Subquery(this=exp.select(exp.Star()), alias=exp.TableAlias()), qualifiers, unqualified,
                    base, other, pair, left_join, foreign, via)
    return dataclasses.replace(joined, source=canonical_source(joined, ()))


def joins_of(base: TableSchema, catalog: Catalog) -> tuple[Joined, ...]:
    """Every join a query on `base` may make whose other table can give its cell space an axis: to each protected
    table of the same unit, on it, and to each public table on each key, through each unit-level base column (or
    the unit) of its type family; with a public table not declared unique, its columns are row-level. What
    reports a joined space's cells finds it by (`proxy/http/views/budget.py`).

    Example:
        >>> v = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("r", "VARCHAR", unit_level=True)))
        >>> z = PublicTable("z", (ColumnSpec("r", "VARCHAR"), ColumnSpec("zone", "VARCHAR")), ("r",), unique=True)
        >>> [j.via for j in joins_of(v, Catalog((v,), public=(z,)))]
        ['z.r = v.r']
    """
    found: list[Joined] = []
    unit = base.column(base.privacy_unit)
    assert unit is not None
    for other in catalog.tables:
        spec = other.column(other.privacy_unit)
        if other.name.lower() != base.name.lower() and spec is not None and _family(spec) == _family(unit):
            found.append(_virtual(base, base.name, other, other.name, (unit, spec), left_join=False))
    for public in catalog.public:
        for key in public.keys:
            spec = public.column(key)
            assert spec is not None
            found += [_virtual(base, base.name, public, public.name, (column, spec), left_join=False)
                      for column in base.columns if (column.unit_level or column.name == base.privacy_unit)
                      and _family(column) == _family(spec)]
    return tuple(found)


def canonical_source(joined: Joined, canonical: Collection[str]) -> exp.Expr:
    """The FROM item computing the virtual table, with the virtual columns `canonical` read as each unit's
    canonical value (the smallest, text under binary collation): a base column over the unit's rows of the base
    table and a protected table's column over the unit's rows of that table, both *before* the join; a public
    table's column over the unit's joined rows, after it (the analysis makes the base join column canonical
    too, so those rows all meet the public rows of one key: analyse/analysis.py). What the join drops or multiplies
    cannot move a unit to another cell (docs/privacy.md §7).

    Example:
        >>> from sqlglot import parse_one
        >>> v = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("r", "VARCHAR", unit_level=True)))
        >>> z = PublicTable("z", (ColumnSpec("r", "VARCHAR"), ColumnSpec("zone", "VARCHAR")), ("r",), unique=True)
        >>> j = join(parse_one("SELECT COUNT(*) FROM v JOIN z USING (r)"), Catalog((v,), public=(z,)))
        >>> print(canonical_source(j, ("r", "zone")).sql("duckdb"))
        (SELECT "u" AS "u", "r" AS "r", "z.r" AS "z.r", MIN("zone" COLLATE "binary") OVER (PARTITION BY "u") AS "zone" \
FROM (SELECT __b.*, "__o"."r" AS "z.r", "__o"."zone" AS "zone" FROM (SELECT "u" AS "u", MIN("r" COLLATE "binary") OVER \
(PARTITION BY "u") AS "r" FROM "v") AS __b INNER JOIN "z" AS __o ON __b."r" COLLATE "binary" = __o."r" COLLATE \
"binary") AS __each) AS __joined
    """
    base, other, pair = joined.base, joined.other, joined.pair
    wanted = set(canonical)
    own = {c.name for c in base.columns} & wanted
    theirs = {joined.foreign[name] for name in wanted if name in joined.foreign}
    projections: list[exp.Expr] = [exp.Column(this=exp.Star(), table=exp.to_identifier(BASE))]
    projections += [exp.alias_(exp.column(column, table=OTHER, quoted=True), name, quoted=True)
                    for name, column in joined.foreign.items()]
    on = exp.EQ(this=_typed(pair[0], BASE), expression=_typed(pair[1], OTHER))
    right = (_canonical(other, theirs, OTHER) if isinstance(other, TableSchema) else
             exp.table_(other.name, quoted=True, alias=OTHER))
    side = {"side": "LEFT"} if joined.left_join else {"kind": "INNER"}
    join = exp.Join(this=right, on=on, **side)  # built, not parsed from a join type
    query = exp.select(*projections).from_(_canonical(base, own, BASE)).join(join)
    if joined.public and theirs:
        unit = _typed(joined.table.column(base.privacy_unit), "")  # type: ignore[arg-type]
        outer: list[exp.Expr] = []
        for spec in joined.table.columns:
            ref: exp.Expr = exp.column(spec.name, quoted=True)
            if spec.name in wanted and spec.name in joined.foreign:
                ref = exp.Window(this=exp.Min(this=_typed(spec, "")), partition_by=[unit.copy()])
            outer.append(exp.alias_(ref, exp.to_identifier(spec.name, quoted=True), copy=False))
        query = exp.select(*outer).from_(query.subquery("__each", copy=False), copy=False)
    return exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier("__joined")))


def _canonical(table: TableSchema, columns: set[str], alias: str) -> exp.Expr:
    """`table AS alias`, or, with `columns`, its rows with those columns read as the unit's MIN over its rows."""
    if not columns:
        return exp.table_(table.name, quoted=True, alias=alias)
    unit = _typed(table.column(table.privacy_unit), "")  # type: ignore[arg-type]
    projections: list[exp.Expr] = []
    for spec in table.columns:
        ref: exp.Expr = exp.column(spec.name, quoted=True)
        if spec.name in columns:
            ref = exp.Window(this=exp.Min(this=_typed(spec, "")), partition_by=[unit.copy()])
        projections.append(exp.alias_(ref, exp.to_identifier(spec.name, quoted=True), copy=False))
    return exp.select(*projections).from_(exp.table_(table.name, quoted=True), copy=False).subquery(alias, copy=False)


def _typed(spec: ColumnSpec, alias: str) -> exp.Expr:
    column = types.column(spec.name, spec.type)
    if alias:
        for ref in column.find_all(exp.Column):
            ref.set("table", exp.to_identifier(alias))
    return column
