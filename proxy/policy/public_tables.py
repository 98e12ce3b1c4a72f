"""Policy readers for public data: the public tables, `[datasets.<d>.public_tables.<name>]` with `keys` (the
columns it may be joined on), `unique` (each key value on one row) and `columns` read like a protected
table's (proxy/policy/load.py); and the `bounds` of a DATE column, whose days are then a public domain.

Example:
    >>> from proxy.policy.readers import _Problems
    >>> p = _Problems()
    >>> raw = {"public_tables": {"plans": {"keys": ["plan"], "unique": True, "columns": {"plan": {}, "tier": {}}}}}
    >>> read_public_tables(raw, "datasets.d", p, lambda n, r, loc, p: ColumnSpec(n, "VARCHAR", groupable=True))
    (PublicTable(name='plans', columns=(...), keys=('plan',), unique=True),)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from proxy.policy.readers import _bool, _check_keys, _named_tables, _Problems, _Raw
from proxy.query import types
from proxy.query.catalog import ColumnSpec, PublicTable

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

ColumnReader = Callable[[str, _Raw, str, _Problems], ColumnSpec | None]


def read_public_tables(raw: _Raw, loc: str, p: _Problems, column: ColumnReader) -> tuple[PublicTable, ...]:
    tables = []
    for name, table_raw in _named_tables(raw, "public_tables", loc, _IDENTIFIER, p):
        table_loc = f"{loc}.public_tables.{name}"
        before = len(p.items)
        _check_keys(table_raw, table_loc, ("keys", "unique", "columns"), p)
        keys = table_raw.get("keys")
        if not (isinstance(keys, list) and keys and all(isinstance(k, str) for k in keys)):
            p.add(f"{table_loc}.keys", f"must be a non-empty array of column names, got {keys!r}")
            keys = None
        unique = _bool(table_raw, "unique", table_loc, p, default=False)
        columns = tuple(c for n, r in _named_tables(table_raw, "columns", table_loc, _IDENTIFIER, p)
                        if (c := column(n, r, table_loc, p)))
        if len(p.items) > before or keys is None or unique is None:
            continue
        try:
            tables.append(PublicTable(name, columns, tuple(keys), unique))
        except ValueError as err:
            p.add(table_loc, str(err))
    return tuple(tables)


def read_date_bounds(value: object, loc: str, p: _Problems) -> tuple[str, str] | None:
    """[first, last] of a DATE column, as TOML dates or ISO text.

    Example:
        >>> import datetime as dt
        >>> read_date_bounds([dt.date(2026, 1, 1), "2026-12-31"], "x", _Problems())
        ('2026-01-01', '2026-12-31')
    """
    days: list[str] = []
    for item in value if isinstance(value, list) and len(value) == 2 else ():
        try:
            days.append(str(types.canonical("DATE", item)))
        except ValueError:
            break
    if len(days) != 2 or not days[0] <= days[1] or any(isinstance(v, datetime) for v in value):  # type: ignore[union-attr]
        p.add(loc, f"must be [first, last] dates (YYYY-MM-DD) with first <= last, got {value!r}")
        return None
    return days[0], days[1]


def public_table_problems(tables: tuple[PublicTable, ...], columns: Callable[[str], dict[str, str]]) -> tuple[str, ...]:
    """Mismatches between the declared public tables and the database (`columns(table)`: name → DuckDB type, {}
    when missing), checked at start-up: a join to a missing table would fail only after admission.

    Example:
        >>> t = PublicTable("plans", (ColumnSpec("plan", "VARCHAR"), ColumnSpec("tier", "INTEGER")), ("plan",))
        >>> public_table_problems((t,), lambda name: {"plan": "VARCHAR", "tier": "VARCHAR"})
        ('public table plans: column tier is VARCHAR in the database, declared INTEGER',)
    """
    problems: list[str] = []
    for table in tables:
        actual = {name.lower(): type_ for name, type_ in columns(table.name).items()}
        if not actual:
            problems.append(f"public table {table.name}: not found in the database")
            continue
        for column in table.columns:
            found = actual.get(column.name.lower())
            if found is None:
                problems.append(f"public table {table.name}: column {column.name} not found in the database")
                continue
            try:
                same = types.kind(found) == column.kind
            except (ValueError, KeyError):
                same = False
            if not same:
                problems.append(f"public table {table.name}: column {column.name} is {found} in the database, "
                                f"declared {column.type}")
    return tuple(problems)
