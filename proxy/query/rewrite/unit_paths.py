"""The unit of a `unit_via` table (docs/policy.md), resolved when the bounding store is built (the SQL text;
proxy/store/duckdb_store.py runs it).

Two SQL texts over the attached source (`src`):

- `unresolved_sql`: per hop, how many rows of the hop's table have a key that does not resolve to exactly one row
  of the parent (no row, several rows, or a NULL key). The build fails unless every count is 0: then every row
  of the table belongs to exactly one unit, the unit of the one parent row its path reaches, and removing a unit
  with every row reachable through the path removes exactly the rows whose materialised unit it is
  (docs/privacy.md §13).
- `source_sql`: the table's rows, each with its unit column (`privacy_unit`) read through the path's joins:
  what `store_layout.select_sql` ranks, as it ranks any protected table.

Every hop's table is checked in full (not only the rows a path reaches): a stricter check, and one that does not
depend on the order of the hops.

Example:
    >>> from proxy.query.catalog import ColumnSpec, TableSchema, UnitHop
    >>> t = TableSchema("lineitem", "o_custkey", (ColumnSpec("l_orderkey", "BIGINT"), ColumnSpec("o_custkey",
    ...     "BIGINT")), unit_via=(UnitHop("l_orderkey", "orders", "o_orderkey"),))
    >>> print(source_sql(t))
    (SELECT __t.*, __p0."o_custkey" AS "o_custkey" FROM "src"."lineitem" AS __t JOIN "src"."orders" AS __p0 \
ON __t."l_orderkey" = __p0."o_orderkey") AS __via
    >>> print(unresolved_sql(t)[0])
    SELECT COUNT(*) FROM "src"."lineitem" AS __c LEFT JOIN (SELECT "o_orderkey" AS __k, COUNT(*) AS __n FROM \
"src"."orders" GROUP BY __k) AS __m ON __c."l_orderkey" = __m.__k WHERE __m.__n IS DISTINCT FROM 1
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.catalog import TableSchema


def _name(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")


def _tables(table: TableSchema) -> list[str]:
    """The table, then each hop's parent: hop i reads a column of tables[i] and a key of tables[i + 1]."""
    return [table.name, *(hop.table for hop in table.unit_via)]


def unresolved_sql(table: TableSchema, source: str = "src") -> tuple[str, ...]:
    """One count per hop: the rows of its table whose key meets no parent row or several (NULL keys included)."""
    tables = _tables(table)
    out = []
    for i, hop in enumerate(table.unit_via):
        child, parent = f"{_name(source)}.{_name(tables[i])}", f"{_name(source)}.{_name(hop.table)}"
        out.append(f"SELECT COUNT(*) FROM {child} AS __c LEFT JOIN (SELECT {_name(hop.key)} AS __k, COUNT(*) AS __n "
                   f"FROM {parent} GROUP BY __k) AS __m ON __c.{_name(hop.column)} = __m.__k "
                   f"WHERE __m.__n IS DISTINCT FROM 1")
    return tuple(out)


def source_sql(table: TableSchema, source: str = "src") -> str:
    """The table's source rows with the unit reached through the path, as a FROM item (every key resolves to one
    parent row, checked by `unresolved_sql` first: the joins neither drop nor repeat a row)."""
    tables = _tables(table)
    joins = []
    for i, hop in enumerate(table.unit_via):
        child = "__t" if i == 0 else f"__p{i - 1}"
        joins.append(f"JOIN {_name(source)}.{_name(hop.table)} AS __p{i} ON {child}.{_name(hop.column)} = "
                     f"__p{i}.{_name(hop.key)}")
    last = f"__p{len(table.unit_via) - 1}"
    unit = _name(table.privacy_unit)
    return (f"(SELECT __t.*, {last}.{unit} AS {unit} FROM {_name(source)}.{_name(tables[0])} AS __t "
            f"{' '.join(joins)}) AS __via")


def unresolved_message(dataset: str, table: TableSchema, hop: int, rows: int) -> str:
    """Why the store of `dataset` cannot be built: `rows` rows of hop `hop`'s table do not resolve."""
    link = table.unit_via[hop]
    return (f"dataset {dataset}: table {table.name} declares its unit through {link.column} -> {link.table}."
            f"{link.key}, but {rows} rows of {_tables(table)[hop]} have a {link.column} that matches no row or "
            f"several rows of {link.table}.{link.key} (or is NULL); fix the data or the declaration")
