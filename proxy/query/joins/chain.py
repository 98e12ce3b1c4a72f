"""A chain of joins as one virtual table: its records, its columns' rules and the SQL computing it.

The chain is one protected *base* table, at most one *partner* (another protected table of the same privacy
unit, joined on it) and any number of *public* tables, each joined on one of its declared keys to a column of
the base, of the partner or of a public table joined before it (a dimension chain: visits → pages → sections;
TPC-H's customer → nation → region). Each joined table is a `Part`; what reads a query's FROM into parts is
proxy/query/analyse/joins.py.

Columns: the base's under their own names, then each part's (renamed `<table>.<column>` when a name is taken,
and `<alias>.<column>` for a public table joined a second time).
A public table's column is unit-level only when the table declares its keys `unique` and the column it is
joined from is unit-level (or the unit): by induction, every link from the base is a `unique` key reached from a
unit-level column. A partner's columns keep their declarations.

Canonical values (docs/privacy.md §7): a base or partner column is read as its MIN over the unit's rows of its
own table before any join; a public column as its MIN over the unit's joined rows, with every protected column
its chain starts from canonical too (`canonical_links`), so that value is a function of the unit's canonical
values and of the public tables. The space of a chain with an axis outside the base names the whole chain
(`via`: its tables, ON columns and, past one join, INNER or LEFT, which decide which public rows of a chain meet).

Example:
    >>> v = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("page", "INTEGER", unit_level=True)))
    >>> pages = PublicTable("pages", (ColumnSpec("page", "INTEGER"), ColumnSpec("sec", "INTEGER")), ("page",), True)
    >>> secs = PublicTable("secs", (ColumnSpec("sec", "INTEGER"), ColumnSpec("name", "VARCHAR")), ("sec",), True)
    >>> j = virtual(v, "v", (Step(pages, "p", "page", pages.columns[0], False),
    ...                      Step(secs, "s", "sec", secs.columns[0], False)))
    >>> [(c.name, c.unit_level) for c in j.table.columns]
    [('u', False), ('page', True), ('pages.page', True), ('sec', True), ('secs.sec', True), ('name', True)]
    >>> j.via
    'JOIN pages.page = v.page; JOIN secs.sec = pages.sec'
    >>> canonical_links(j, ("name",))
    ('name', 'page')
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sqlglot import exp

from proxy.query import types
from proxy.query.catalog import ColumnSpec, PublicTable, TableSchema

BASE, OTHER = "__b", "__o"


@dataclass(frozen=True, slots=True)
class Step:
    """One JOIN as the query wrote it, resolved: the table, the alias the query names it by, the virtual column it
    is joined from (the unit for a partner), its own column in the equality, and whether it is a LEFT join."""

    table: TableSchema | PublicTable
    alias: str
    parent: str
    key: ColumnSpec
    left: bool
    # a protected table joined along a declared `unit_via` key (lineitem.l_orderkey = orders.o_orderkey): the SQL
    # joins on the key AND the unit, so rows of two units never pair (docs/privacy.md §13)
    path: bool = False


@dataclass(frozen=True, slots=True)
class Part:
    """A joined table in the virtual table: its step, its alias in the SQL that runs (`__o`, `__o1`, …) and its
    columns (virtual column → its own column; a partner's unit is the base's, never a column of its own)."""

    step: Step
    alias: str
    columns: dict[str, str]

    @property
    def public(self) -> bool:
        return isinstance(self.step.table, PublicTable)


@dataclass(frozen=True, slots=True)
class Joined:
    table: TableSchema  # the virtual table (see the module docstring)
    source: exp.Expr  # the FROM item computing it, from declared names only (no canonical values)
    qualifiers: dict[str, dict[str, str]]  # table name or alias (lower) → column (lower) → virtual column
    unqualified: dict[str, str | None]  # column (lower) → virtual column; None when two tables have it
    base: TableSchema
    parts: tuple[Part, ...]
    foreign: dict[str, str]  # virtual column → its own table's column, for every part's column
    via: str  # names the join in its cell space's fingerprint (scope.CellSpace.via)

    @property
    def public(self) -> bool:
        """Whether a public table is joined."""
        return any(p.public for p in self.parts)

    @property
    def partner(self) -> TableSchema | None:
        """The protected table joined on the unit, if any."""
        return next((p.step.table for p in self.parts if isinstance(p.step.table, TableSchema)), None)

    @property
    def public_columns(self) -> frozenset[str]:
        """The virtual columns of public tables."""
        return frozenset(name for p in self.parts if p.public for name in p.columns)

    def owner(self, column: str) -> Part | None:
        """The part a virtual column comes from; None for a base column."""
        return next((p for p in self.parts if column in p.columns), None)


def virtual(base: TableSchema, base_alias: str, steps: Sequence[Step]) -> Joined:
    """The virtual table of `base` joined by `steps`, in order (each step's parent a column of those before it)."""
    taken = {c.name.lower() for c in base.columns}
    columns = list(base.columns)
    specs = {c.name: c for c in base.columns}
    qualifiers = {base_alias.lower(): {c.name.lower(): c.name for c in base.columns}}
    unqualified: dict[str, str | None] = dict(qualifiers[base_alias.lower()])
    parts: list[Part] = []
    for i, step in enumerate(steps):
        table = step.table
        protected = isinstance(table, TableSchema)
        parent = specs[step.parent]
        # a public column is unit-level when its key is unique and reached from a unit-level column (or the unit)
        through = isinstance(table, PublicTable) and table.unique and (
            parent.unit_level or step.parent == base.privacy_unit)
        mapping: dict[str, str] = {}
        own: dict[str, str] = {}
        for spec in table.columns:
            if protected and spec.name == table.privacy_unit:  # equal to the base unit on every joined row
                mapping[spec.name.lower()] = base.privacy_unit
                continue
            name = _free(spec.name, table.name, step.alias, taken)
            taken.add(name.lower())
            mapping[spec.name.lower()] = name
            own[name] = spec.name
            specs[name] = dataclasses.replace(spec, name=name, unit_level=spec.unit_level if protected else through)
            columns.append(specs[name])
        for key, name in mapping.items():
            unqualified[key] = None if key in unqualified and unqualified[key] != name else name
        qualifiers[step.alias.lower()] = mapping
        parts.append(Part(step, OTHER if i == 0 else f"{OTHER}{i}", own))
    bounds = base
    for partner in (s.table for s in steps if isinstance(s.table, TableSchema)):
        if (bounds.one_row_per_unit or (partner.max_rows, partner.max_groups) > (
                bounds.max_rows, bounds.max_groups)) and not partner.one_row_per_unit:
            bounds = partner  # the joined rows are the partner's rows: `users JOIN visits` counts visits
    table = TableSchema(base.name, base.privacy_unit, tuple(columns), bounds.max_groups, bounds.max_rows,
                        auto_max_rows=bounds.auto_max_rows,
                        auto_max_groups=bounds.auto_max_groups)  # auto: refused, never run at the limit
    foreign = {name: column for p in parts for name, column in p.columns.items()}
    joined = Joined(table, exp.Subquery(this=exp.select(exp.Star()), alias=exp.TableAlias()), qualifiers,
                    unqualified, base, tuple(parts), foreign, "")
    joined = dataclasses.replace(joined, via=_via(joined))
    return dataclasses.replace(joined, source=canonical_source(joined, ()))


def _free(column: str, table: str, alias: str, taken: set[str]) -> str:
    """The virtual name of a joined table's column: its own, else `<table>.<column>`, else (a public table joined
    twice, TPC-H Q7's nation n1 and n2) `<alias>.<column>`, else that numbered."""
    names = (column, f"{table}.{column}", f"{alias}.{column}")
    return next((n for n in names if n.lower() not in taken), None) or next(
        n for i in range(2, len(taken) + 3) if (n := f"{alias}.{column}#{i}").lower() not in taken)


def _via(joined: Joined) -> str:
    """The join's name in its cell space's fingerprint. One join keeps the name it always had (its canonical values
    do not depend on INNER or LEFT: a unit with no match has no rows, or NULLs); a chain names every link with its
    kind, since an INNER link drops the public rows of the links before it that it does not match."""
    tables = [p.step.table.name.lower() for p in joined.parts]

    def label(step: Step) -> str:  # a public table joined twice is named by its alias too, as each link is
        return step.table.name if tables.count(step.table.name.lower()) == 1 else f"{step.table.name} {step.alias}"

    names = []
    for part in joined.parts:
        step = part.step
        if isinstance(step.table, TableSchema):
            key = f"{step.key.name} = {joined.base.name}.{step.parent}; " if step.path else ""
            names.append(f"{step.table.name}.{key}{step.table.privacy_unit}")
            continue
        owner = joined.owner(step.parent)
        source = (joined.base.name, step.parent) if owner is None else (label(owner.step),
                                                                       owner.columns[step.parent])
        link = f"{label(step)}.{step.key.name} = {source[0]}.{source[1]}"
        names.append(link if len(joined.parts) == 1 else f"{'LEFT JOIN' if step.left else 'JOIN'} {link}")
    return "; ".join(names)


def canonical_links(joined: Joined, canonical: Sequence[str]) -> tuple[str, ...]:
    """`canonical` with every protected column a canonical public column's chain starts from (the unit excepted):
    with it canonical, the unit's joined rows all meet the public rows of one key at each link, so the public
    column's MIN over them is a function of the unit's canonical values and the public tables, whatever `unique`
    claims."""
    out = list(canonical)
    for name in canonical:
        part = joined.owner(name)
        if part is None or not part.public:
            continue
        parent = part.step.parent
        while (up := joined.owner(parent)) is not None and up.public:
            parent = up.step.parent
        if parent != joined.base.privacy_unit and parent not in out:
            out.append(parent)
    return tuple(out)


def canonical_source(joined: Joined, canonical: Collection[str]) -> exp.Expr:
    """The FROM item computing the virtual table, with the virtual columns `canonical` read as each unit's
    canonical value (the smallest, text under binary collation): a base column over the unit's rows of the base
    table and a partner's column over the unit's rows of that table, both *before* the join; a public table's
    column over the unit's joined rows, after it (the analysis makes the protected column its chain starts from
    canonical too: `canonical_links`). What the join drops or multiplies cannot move a unit to another cell
    (docs/privacy.md §7).

    Example:
        >>> v = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("r", "VARCHAR", unit_level=True)))
        >>> z = PublicTable("z", (ColumnSpec("r", "VARCHAR"), ColumnSpec("zone", "VARCHAR")), ("r",), unique=True)
        >>> j = virtual(v, "v", (Step(z, "z", "r", z.columns[0], False),))
        >>> print(canonical_source(j, ("r", "zone")).sql("duckdb"))
        (SELECT "u" AS "u", "r" AS "r", "z.r" AS "z.r", MIN("zone" COLLATE "binary") OVER (PARTITION BY "u") AS "zone" \
FROM (SELECT __b.*, "__o"."r" AS "z.r", "__o"."zone" AS "zone" FROM (SELECT "u" AS "u", MIN("r" COLLATE "binary") OVER \
(PARTITION BY "u") AS "r" FROM "v") AS __b INNER JOIN "z" AS __o ON __b."r" COLLATE "binary" = __o."r" COLLATE \
"binary") AS __each) AS __joined
    """
    base = joined.base
    wanted = set(canonical)
    own = {c.name for c in base.columns} & wanted
    projections: list[exp.Expr] = [exp.Column(this=exp.Star(), table=exp.to_identifier(BASE))]
    projections += [exp.alias_(exp.column(column, table=part.alias, quoted=True), name, quoted=True)
                    for part in joined.parts for name, column in part.columns.items()]
    query = exp.select(*projections).from_(_canonical(base, own, BASE))
    for part in joined.parts:
        step, table = part.step, part.step.table
        if isinstance(table, TableSchema):
            theirs = {part.columns[name] for name in wanted if name in part.columns}
            right = _canonical(table, theirs, part.alias)
        else:
            right = exp.table_(table.name, quoted=True, alias=part.alias)
        on: exp.Expr = exp.EQ(this=_parent(joined, step.parent), expression=_typed(step.key, part.alias))
        if step.path and isinstance(table, TableSchema):
            on = exp.and_(on, exp.EQ(this=_typed(_unit(base), BASE), expression=_typed(_unit(table), part.alias)))
        side = {"side": "LEFT"} if step.left else {"kind": "INNER"}
        query = query.join(exp.Join(this=right, on=on, **side))  # built, not parsed from a join type
    publics = wanted & joined.public_columns
    if publics:
        unit = _typed(joined.table.column(base.privacy_unit), "")  # type: ignore[arg-type]
        outer: list[exp.Expr] = []
        for spec in joined.table.columns:
            ref: exp.Expr = exp.column(spec.name, quoted=True)
            if spec.name in publics:
                ref = exp.Window(this=exp.Min(this=_typed(spec, "")), partition_by=[unit.copy()])
            outer.append(exp.alias_(ref, exp.to_identifier(spec.name, quoted=True), copy=False))
        query = exp.select(*outer).from_(query.subquery("__each", copy=False), copy=False)
    return exp.Subquery(this=query, alias=exp.TableAlias(this=exp.to_identifier("__joined")))


def _unit(table: TableSchema) -> ColumnSpec:
    spec = table.column(table.privacy_unit)
    assert spec is not None
    return spec


def _parent(joined: Joined, name: str) -> exp.Expr:
    """The column a step is joined from, in the table it comes from (typed: text compares under binary collation)."""
    part = joined.owner(name)
    if part is None:
        spec = joined.base.column(name)
        assert spec is not None
        return _typed(spec, BASE)
    table = part.step.table
    spec = table.column(part.columns[name])
    assert spec is not None
    return _typed(spec, part.alias)


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
