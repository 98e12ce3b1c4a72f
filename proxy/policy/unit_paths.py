"""`unit_via`: a protected table whose privacy unit is reached through declared keys (docs/policy.md).

An order line has no customer column: it belongs to an order (`l_orderkey`), which belongs to a customer
(`o_custkey`). The table declares the path instead of a `privacy_unit`:

    unit_via = ["l_orderkey -> orders.o_orderkey", "orders.o_custkey"]

Each element but the last is a hop `<column of the table so far> -> <protected table>.<its key>`; the last
names the unit column of the table the hops end at, which must be that table's own `privacy_unit`. The table
then has a unit column of that name and type, which the bounding store materialises for every row (the key of
every hop is checked against the data when the store is built: each must resolve to exactly one parent row).

Reading happens in two steps: `read_path` parses the syntax while the table is read (its unit column is a
placeholder), `resolve_paths` checks each path against the dataset's other tables and gives the unit column
its type.

Example:
    >>> from proxy.policy.readers import _Problems
    >>> p = _Problems()
    >>> read_path(["l_orderkey -> orders.o_orderkey", "orders.o_custkey"], "t", p)
    ((UnitHop(column='l_orderkey', table='orders', key='o_orderkey'),), 'o_custkey')
    >>> read_path(["orders.o_custkey"], "t", p), p.items
    (None, ['t.unit_via: needs at least one hop "<column> -> <table>.<key>" before the unit "<table>.<column>"'])
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

from proxy.query.catalog import ColumnSpec, TableSchema, UnitHop

_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,63}"
_HOP = re.compile(rf"\s*({_NAME})\s*->\s*({_NAME})\s*\.\s*({_NAME})\s*")
_END = re.compile(rf"\s*({_NAME})\s*\.\s*({_NAME})\s*")
PLACEHOLDER = "BIGINT"  # the unit column's type until `resolve_paths` reads the parent's


def read_path(value: object, loc: str, p: object) -> tuple[tuple[UnitHop, ...], str] | None:
    """The hops and the unit column's name of a `unit_via` value, or None after reporting to `p` (a _Problems)."""
    add: Callable[[str, str], None] = p.add  # type: ignore[attr-defined]
    where = f"{loc}.unit_via"
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        add(where, f'must be an array of strings, e.g. ["l_orderkey -> orders.o_orderkey", "orders.o_custkey"], '
                   f"got {value!r}")
        return None
    if len(value) < 2:
        add(where, 'needs at least one hop "<column> -> <table>.<key>" before the unit "<table>.<column>"')
        return None
    hops = []
    for item in value[:-1]:
        match = _HOP.fullmatch(item)
        if match is None:
            add(where, f'{item!r} is not a hop "<column> -> <table>.<key>"')
            return None
        hops.append(UnitHop(*match.groups()))
    end = _END.fullmatch(value[-1])
    if end is None:
        add(where, f'the last element {value[-1]!r} must name the unit column "<table>.<column>"')
        return None
    if end.group(1).lower() != hops[-1].table.lower():
        add(where, f"the unit {value[-1]!r} must be a column of {hops[-1].table}, where the last hop lands")
        return None
    return tuple(hops), end.group(2)


def resolve_paths(tables: Sequence[TableSchema], loc: str, add: Callable[[str, str], None],
                  bounding: str | None, engine: str | None) -> tuple[TableSchema, ...]:
    """`tables` with each `unit_via` table's unit column typed as its parent's; problems go to `add`: a hop
    through an undeclared table or column, a key of another type family, a path that does not end at the last
    table's own privacy unit, a unit name the table already uses, or a dataset that is not bounded by a DuckDB
    store (only the store materialises the unit).

    Example:
        >>> orders = TableSchema("orders", "o_custkey", (ColumnSpec("o_orderkey", "BIGINT"),
        ...     ColumnSpec("o_custkey", "INTEGER")))
        >>> lines = TableSchema("lineitem", "o_custkey", (ColumnSpec("l_orderkey", "BIGINT"),
        ...     ColumnSpec("o_custkey", PLACEHOLDER)), unit_via=(UnitHop("l_orderkey", "orders", "o_orderkey"),))
        >>> problems = []
        >>> out = resolve_paths((orders, lines), "d", lambda k, v: problems.append(k), "store", "duckdb")
        >>> out[1].column("o_custkey").type, problems
        ('INTEGER', [])
    """
    by_name = {t.name.lower(): t for t in tables}
    out = []
    for table in tables:
        if not table.unit_via:
            out.append(table)
            continue
        where = f"{loc}.tables.{table.name}.unit_via"
        problem = _path_problem(table, by_name)
        if problem is None and (bounding != "store" or engine not in (None, "duckdb")):
            problem = ('needs bounding = "store" on a DuckDB dataset: the bounding store materialises the unit of '
                       "every row (the source has no unit column)")
        if problem is None and table.one_row_per_unit:
            problem = "cannot be combined with one_row_per_unit = true (rows reached through keys are many per unit)"
        if problem is not None:
            add(where, problem)
            out.append(table)
            continue
        final = by_name[table.unit_via[-1].table.lower()]
        unit = final.column(final.privacy_unit)
        assert unit is not None
        columns = tuple(dataclasses.replace(unit, name=table.privacy_unit, unit_level=False, groupable=False)
                        if c.name == table.privacy_unit else c for c in table.columns)
        out.append(dataclasses.replace(table, columns=columns))
    return tuple(out)


def _path_problem(table: TableSchema, by_name: dict[str, TableSchema]) -> str | None:
    current, seen = table, {table.name.lower()}
    for hop in table.unit_via:
        column = current.column(hop.column)
        if column is None or (column.name == table.privacy_unit and current is table):
            return f"{hop.column!r} is not a declared column of {current.name}"
        parent = by_name.get(hop.table.lower())
        if parent is None:
            return f"{hop.table!r} is not a protected table of the dataset (a hop goes to a declared protected table)"
        if parent.name.lower() in seen:
            return f"the path reaches {parent.name} twice"
        key = parent.column(hop.key)
        if key is None:
            return f"{hop.key!r} is not a declared column of {parent.name}"
        if _family(key) != _family(column):
            return (f"{current.name}.{column.name} ({column.type}) cannot be a key of {parent.name}.{key.name} "
                    f"({key.type})")
        seen.add(parent.name.lower())
        current = parent
    if current.unit_via:
        return f"the path ends at {current.name}, whose unit is itself reached through keys: continue the path to a " \
               f"table with its own privacy_unit"
    if current.privacy_unit.lower() != table.privacy_unit.lower():
        return (f"the last element must be {current.name}.{current.privacy_unit}, the privacy unit of "
                f"{current.name}, not {current.name}.{table.privacy_unit}")
    return None


def _family(spec: ColumnSpec) -> str:
    return "number" if spec.numeric else spec.kind
