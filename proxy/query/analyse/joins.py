"""Joins: one protected table, at most one other protected table of the same privacy unit joined on it, and any
number of public tables, each joined on one of its declared keys to a column of a table before it; INNER or
LEFT, `ON a = b` or `USING (col)`, with aliases. This module reads the query's FROM … JOIN … into the steps of
a chain; proxy/query/joins/chain.py makes them one *virtual table* that the rest of the analysis treats like any
protected table, with the rules of its columns and its canonical values.

Its privacy unit is the base table's, so the rewrite bounds contributions per unit *after* the join: every
joined row belongs to the unit of its protected row, a one-to-many fan-out (a key a public table repeats, at
any link of a chain) only gives a unit more rows, and the bounding caps them (docs/privacy.md §1). Removing a
unit removes exactly its joined rows, because every other table is either public (the same in every neighbour)
or joined on the unit itself.

Bounds: of two protected tables, those of the one with more rows per unit (larger max_rows, then max_groups;
never one declared one row per unit): `users JOIN visits` counts visits under visits' bounds. Any choice is
private: the sensitivity follows the bounds the rewrite enforces.

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
import itertools

from sqlglot import exp

from proxy.query.analyse.refusals import located, where
from proxy.query.analyse.resolve import check_qualifiers
from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
from proxy.query.errors import PolicyError, UnsupportedQuery
from proxy.query.joins.chain import Joined, Step, canonical_links, canonical_source, virtual

__all__ = ["Joined", "canonical_links", "canonical_source", "join", "joins_of"]

_HINT = ("supported: <protected> [INNER|LEFT] JOIN <public table> ON <a column before it> = <one of its keys>, "
         "any number of times, and up to two more protected tables of the same privacy unit, each joined on it "
         "(USING (unit)) or on a key of its declared unit_via path")

Table = TableSchema | PublicTable
_DEPTH = 3  # the longest dimension chain whose cells `joins_of` lists
_PROTECTED = 3  # protected tables in one join (customer, orders, lineitem), each of the base's unit


def join(select: exp.Select, catalog: Catalog) -> Joined:
    """The virtual table of `select`'s FROM … JOIN …, or a refusal naming what to write instead."""
    nodes = list(select.args.get("joins") or [])
    for node in nodes:
        _check_shape(node)
    source = select.args.get("from_")
    if source is None:
        raise UnsupportedQuery("the query needs FROM <protected table>", construct="FROM")
    first = _side(source.this, catalog)
    sides = [_side(node.this, catalog) for node in nodes]
    _check_tables([first, *sides])
    if isinstance(first[0], PublicTable):
        second = sides[0][0]
        if isinstance(second, PublicTable):
            raise PolicyError(f"{first[0].name} and {second.name} are both public: join one to a protected table "
                              "first", construct="JOIN", hint=_HINT)
        if nodes[0].args.get("side") == "LEFT":
            raise UnsupportedQuery(
                f"{first[0].name} LEFT JOIN {second.name} keeps rows of the public table with no privacy unit; put "
                f"the protected table first", construct="LEFT JOIN",
            )
        base, base_alias = second, sides[0][1]
        steps = [_step(nodes[0], first, virtual(base, base_alias, ()))]  # `pub JOIN p ON …`: p is the base
        rest = list(zip(nodes[1:], sides[1:], strict=True))
    else:
        base, base_alias = first
        steps, rest = [], list(zip(nodes, sides, strict=True))
    assert isinstance(base, TableSchema)
    for node, side in rest:
        steps.append(_step(node, side, virtual(base, base_alias, steps)))
    return virtual(base, base_alias, steps)


def _check_tables(sides: list[tuple[Table, str]]) -> None:
    """A protected table at most once (a public one may be joined again under its own alias: TPC-H Q7's supplier
    nation n1 and customer nation n2), one alias at most once, and one to three protected tables."""
    names = [t.name.lower() for t, _ in sides]
    repeated = next((t for (t, _), n in zip(sides, names, strict=True)
                     if names.count(n) > 1 and isinstance(t, TableSchema)), None)
    if repeated is not None:
        raise UnsupportedQuery(f"joining the protected table {repeated.name} to itself (or twice) is not supported; "
                               f"{_HINT}",
                               construct="JOIN", hint=_HINT)
    aliases = [a.lower() for _, a in sides]
    if len(set(aliases)) != len(aliases):
        raise UnsupportedQuery("two joined tables have one alias: give each its own", construct="TABLE ALIAS")
    protected = [t.name for t, _ in sides if isinstance(t, TableSchema)]
    if not protected:
        raise PolicyError(f"{', '.join(t.name for t, _ in sides)} are all public: join them to a protected table",
                          construct="JOIN", hint=_HINT)
    if len(protected) > _PROTECTED:
        raise UnsupportedQuery(
            f"a join of {len(protected)} protected tables ({', '.join(protected)}) is not supported: at most "
            f"{_PROTECTED}, of the same privacy unit, each joined on it or along a declared unit_via key; {_HINT}",
            construct="JOIN", hint=_HINT)


def _step(node: exp.Join, side: tuple[Table, str], before: Joined) -> Step:
    """The step `node` joins `side` by: its equality resolved against the tables before it (`before`)."""
    table, alias = side
    left = node.args.get("side") == "LEFT"
    parent, own = _condition(node, before, table, alias)
    path = False
    spec = before.table.column(parent)
    assert spec is not None
    if isinstance(table, PublicTable):
        if own.name.lower() not in {k.lower() for k in table.keys}:
            raise PolicyError(
                f"the public table {table.name} may be joined on {', '.join(table.keys)}, not {own.name!r}",
                construct="JOIN ON", column=own.name,
                hint=f"join {table.name} ON <a column of a table before it> = {table.name}.{table.keys[0]}",
            )
    elif parent == before.base.privacy_unit and own.name == table.privacy_unit:
        pass
    elif along_path(before, parent, table, own.name):
        path = True
    else:
        on = node.args.get("on") or node
        raise PolicyError(
            f"JOIN on {spec.name} = {own.name}{where(on)} is not supported between two protected tables; join on "
            f"{before.base.privacy_unit} (their privacy unit), or declare {table.name!r} public",
            construct="JOIN ON", column=spec.name, hint=_HINT, **located(on),
        )
    if _family(spec) != _family(own):
        raise PolicyError(f"JOIN compares {spec.name} ({spec.type}) with {own.name} ({own.type})",
                          construct="JOIN ON")
    return Step(table, alias, parent, own, left, path)


def along_path(before: Joined, parent: str, table: TableSchema, own: str) -> bool:
    """Whether joining `table` on `before`'s column `parent` = its `own` follows a declared `unit_via` hop between
    two tables of one unit (the same unit column and type): the first hop of the protected table `parent` is a
    column of (the base, or a protected table joined before) into `table`, or `table`'s first hop into it. Each
    key then resolves to one parent row, whose unit is the child's (checked when the store is built), so the join
    on the key pairs only rows of one unit, and adding the unit to the ON (chain.py) changes no answer.

    Example:
        >>> from proxy.query.catalog import UnitHop
        >>> o = TableSchema("orders", "ck", (ColumnSpec("ok", "BIGINT"), ColumnSpec("ck", "BIGINT")))
        >>> li = TableSchema("li", "ck", (ColumnSpec("lk", "BIGINT"), ColumnSpec("ck", "BIGINT")),
        ...     unit_via=(UnitHop("lk", "orders", "ok"),))
        >>> along_path(virtual(li, "li", ()), "lk", o, "ok"), along_path(virtual(o, "o", ()), "ok", li, "lk")
        (True, True)
        >>> along_path(virtual(o, "o", ()), "ck", li, "lk")
        False
    """
    owner = before.owner(parent)
    base = before.base if owner is None else owner.step.table
    if not isinstance(base, TableSchema) or base.privacy_unit.lower() != table.privacy_unit.lower():
        return False  # a public table's column, or a table of another unit column
    column = parent if owner is None else owner.columns[parent]
    units = base.column(base.privacy_unit), table.column(table.privacy_unit)
    if units[0] is None or units[1] is None or units[0].type != units[1].type:
        return False

    def first(child: TableSchema, column: str, other: TableSchema, key: str) -> bool:
        hop = child.unit_via[0] if child.unit_via else None
        return hop is not None and (hop.column.lower(), hop.table.lower(), hop.key.lower()) == (
            column.lower(), other.name.lower(), key.lower())

    return first(base, column, table, own) or first(table, own, base, column)


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


def _side(node: exp.Expr, catalog: Catalog) -> tuple[Table, str]:
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


def _condition(node: exp.Join, before: Joined, table: Table, alias: str) -> tuple[str, ColumnSpec]:
    """The one equality `node` is on, as (the virtual column of a table before it, the joined table's column)."""
    using = node.args.get("using")
    if using:
        if len(using) != 1:
            raise UnsupportedQuery(f"USING takes one column; {_HINT}", construct="USING")
        name = using[0].name
        own = table.column(name)
        found = {m[name.lower()] for m in before.qualifiers.values() if name.lower() in m}
        if own is None or not found:
            raise PolicyError(f"USING ({name}): both tables must declare {name!r}", construct="USING", column=name)
        if len(found) > 1:
            raise PolicyError(f"USING ({name}): more than one table before {table.name} has {name!r}; write ON "
                              f"<alias>.{name} = {alias}.{name}", construct="USING", column=name)
        return found.pop(), own
    condition = node.args["on"]
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if not (isinstance(condition, exp.EQ) and isinstance(condition.this, exp.Column)
            and isinstance(condition.expression, exp.Column)):
        raise UnsupportedQuery(f"JOIN … ON takes one equality of two columns, not {condition.sql()}; {_HINT}",
                               construct="JOIN ON")
    ends = [_owner(c, before, table, alias) for c in (condition.this, condition.expression)]
    if sorted(side for side, _ in ends) != ["before", "joined"]:
        raise UnsupportedQuery(f"JOIN … ON must compare a column of {table.name} with one of a table before it: "
                               f"{condition.sql()}", construct="JOIN ON")
    parent = next(name for side, name in ends if side == "before")
    own = next(name for side, name in ends if side == "joined")
    spec = table.column(own)
    assert spec is not None
    return parent, spec


def _owner(column: exp.Column, before: Joined, table: Table, alias: str) -> tuple[str, str]:
    """("joined", its column) for a column of the joined table, ("before", the virtual column) for one before it."""
    qualifier, name = column.table.lower(), column.name.lower()
    found: set[tuple[str, str]] = set()
    if qualifier in ("", alias.lower()) and (spec := table.column(column.name)) is not None:
        found.add(("joined", spec.name))
    found |= {("before", mapping[name]) for key, mapping in before.qualifiers.items()
              if qualifier in ("", key) and name in mapping}
    if len(found) != 1:
        raise PolicyError(f"{column.sql()} in JOIN … ON names {'no' if not found else 'more than one'} declared "
                          "column; qualify it with a table alias", construct="JOIN ON", column=column.sql())
    return found.pop()


def _family(spec: ColumnSpec) -> str:
    return "number" if spec.numeric else spec.kind


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
            found.append(virtual(base, base.name, (Step(other, other.name, base.privacy_unit, spec, False),)))
    for public in catalog.public:
        for key in public.keys:
            spec = public.column(key)
            assert spec is not None
            found += [virtual(base, base.name, (Step(public, public.name, column.name, spec, False),))
                      for column in base.columns if (column.unit_level or column.name == base.privacy_unit)
                      and _family(column) == _family(spec)]
    chains = [j.parts[0].step for j in found if isinstance(t := j.parts[0].step.table, PublicTable) and t.unique]
    found += [j for step in chains for j in _chains(base, catalog, (step,))]
    return tuple(found)


def _chains(base: TableSchema, catalog: Catalog, steps: tuple[Step, ...]) -> list[Joined]:
    """Every dimension chain continuing `steps` through unique public tables (up to `_DEPTH` links, each INNER or
    LEFT): only unique tables reached from unit-level columns carry axes. Joins of other shapes (two links from one
    table, a partner and a chain) are charged in their own space all the same; only their cells are not listed."""
    if len(steps) == _DEPTH:
        return []
    last = virtual(base, base.name, steps)
    used = {s.table.name.lower() for s in steps} | {base.name.lower()}
    found: list[Joined] = []
    for public in catalog.public:
        if not public.unique or public.name.lower() in used:
            continue
        for key in public.keys:
            spec = public.column(key)
            assert spec is not None
            for name in last.parts[-1].columns:
                parent = last.table.column(name)
                if parent is None or _family(parent) != _family(spec):
                    continue
                longer = (*steps, Step(public, public.name, name, spec, False))
                found += [virtual(base, base.name, tuple(dataclasses.replace(s, left=k) for s, k in zip(
                    longer, kinds, strict=True))) for kinds in itertools.product((False, True), repeat=len(longer))]
                found += _chains(base, catalog, longer)
    return found
