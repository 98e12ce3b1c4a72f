"""What the bounding store holds for one protected table, and the SQL that builds it (DESIGN.md §7).

The store is the table with its NULL-unit rows dropped, its unit-level columns replaced by each unit's
canonical value (the smallest over the unit's rows, text under binary collation), and rank columns:

    __row_rank            rank of the row within its unit
    __row_rank__<c>       rank of the row within (unit, value of c)     for each groupable row-level column c
    __group_rank__<c>     rank of the row's value of c among the unit's values of c (1, 2, … per value)
    __unit_rows           the unit's number of rows
    __cell_rows__<c>      the number of the unit's rows with this row's value of c     for each such column c
    __grid__<c>           for each column with clamp bounds: its value clamped to the bounds on the fixed-point
                          grid of measures.fixed_point, exactly as rewrite.py computes it per query

Every rank orders by a keyed hash of the unit's own rows under the deployment's key, with the row's own
values as tie-breakers: each rank, and each canonical value, is a function of the unit's rows alone. Removing
a unit therefore removes its rows from the store and leaves every other row as it was (docs/privacy.md §9).
A table declared one row per unit gets constant ranks (1): there is nothing to bound.
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query import types
from proxy.query.catalog import ColumnSpec, PublicTable, TableSchema
from proxy.query.measures import Measure, fixed_point
from proxy.query.rewrite import row_value

ROW_RANK = "__row_rank"
UNIT_ROWS = "__unit_rows"


def grid_value(column: str) -> str:
    """The column's clamped fixed-point value (SUM and AVG read it instead of clamping per query)."""
    return f"__grid__{column.lower()}"
META = "__store_meta"


def row_rank(column: str) -> str:
    """The rank of a row within (unit, value of `column`)."""
    return f"__row_rank__{column.lower()}"


def cell_rows(column: str) -> str:
    """The number of the unit's rows with the row's value of `column` (a cell of at most k rows needs no bound)."""
    return f"__cell_rows__{column.lower()}"


def group_rank(column: str) -> str:
    """The rank of a row's value of `column` among its unit's values of `column`."""
    return f"__group_rank__{column.lower()}"


def ranked_columns(table: TableSchema) -> tuple[ColumnSpec, ...]:
    """The groupable row-level columns: each has a row rank and a group rank in the store.

    Example:
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True)))
        >>> [c.name for c in ranked_columns(t)]
        ['g']
    """
    return tuple(c for c in table.columns if c.groupable and not c.unit_level and c.name != table.privacy_unit)


def build_sql(table: TableSchema, key: str, source: str = "src") -> str:
    """`CREATE TABLE <table> AS …` reading `<source>.<table>`, with ranks keyed by `key` (the deployment's).

    Example:
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True)))
        >>> print(build_sql(t, "k1"))
        CREATE TABLE "t" AS SELECT "u", "g" COLLATE "binary" AS "g", MIN("r" COLLATE "binary") OVER (PARTITION BY __unit) AS "r", ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY __h, "u", "g" COLLATE "binary", "r" COLLATE "binary") AS __row_rank, COUNT(*) OVER (PARTITION BY __unit) AS __unit_rows, ROW_NUMBER() OVER (PARTITION BY __unit, "g" COLLATE "binary" ORDER BY __h, "u", "g" COLLATE "binary", "r" COLLATE "binary") AS __row_rank__g, COUNT(*) OVER (PARTITION BY __unit, "g" COLLATE "binary") AS __cell_rows__g, DENSE_RANK() OVER (PARTITION BY __unit ORDER BY HASH('k1', __unit, "g" COLLATE "binary"), "g" COLLATE "binary") AS __group_rank__g FROM (SELECT *, "u" AS __unit, HASH('k1', "u", "u", "g" COLLATE "binary", "r" COLLATE "binary") AS __h FROM "src"."t" WHERE NOT "u" IS NULL) AS __keyed ORDER BY "u", __row_rank
    """
    unit = _read(table.column(table.privacy_unit))
    literal_key = exp.Literal.string(key).sql(dialect="duckdb")
    every = [_read(c) for c in table.columns]
    order = ", ".join(["__h", *every])
    projections = []
    for c in table.columns:
        name = _name(c.name)
        if c.unit_level and c.name != table.privacy_unit:
            projections.append(f"MIN({_read(c)}) OVER (PARTITION BY __unit) AS {name}")
        elif c.kind == "string":
            projections.append(f"{_read(c)} AS {name}")  # binary collation in the store itself
        else:
            projections.append(name)
    ranked = ranked_columns(table)
    if table.one_row_per_unit:  # checked against the data before this runs (proxy/store.py)
        projections.append(f"1 AS {ROW_RANK}, 1 AS {UNIT_ROWS}")
        projections += [f"1 AS {row_rank(c.name)}, 1 AS {group_rank(c.name)}, 1 AS {cell_rows(c.name)}"
                        for c in ranked]
    else:
        projections.append(f"ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY {order}) AS {ROW_RANK}")
        projections.append(f"COUNT(*) OVER (PARTITION BY __unit) AS {UNIT_ROWS}")
        for c in ranked:
            value = _read(c)
            projections.append(
                f"ROW_NUMBER() OVER (PARTITION BY __unit, {value} ORDER BY {order}) AS {row_rank(c.name)}"
            )
            projections.append(f"COUNT(*) OVER (PARTITION BY __unit, {value}) AS {cell_rows(c.name)}")
            projections.append(
                f"DENSE_RANK() OVER (PARTITION BY __unit ORDER BY HASH({literal_key}, __unit, {value}), {value})"
                f" AS {group_rank(c.name)}"
            )
    keyed = (
        f"SELECT *, {unit} AS __unit, HASH({', '.join([literal_key, unit, *every])}) AS __h "
        f"FROM {_name(source)}.{_name(table.name)} WHERE NOT {_name(table.privacy_unit)} IS NULL"
    )
    windowed = f"SELECT {', '.join(projections)} FROM ({keyed}) AS __keyed"
    grids = [f"{clamped(c).sql(dialect='duckdb')} AS {grid_value(c.name)}" for c in table.columns if c.bounds]
    if grids:  # clamped after the canonical value is taken: a unit-level column's grid value is one per unit
        windowed = f"SELECT *, {', '.join(grids)} FROM ({windowed}) AS __windowed"
    # Stored in unit order: unit-level columns then compress to runs, and a scan reads them as fast as the source.
    return f"CREATE TABLE {_name(table.name)} AS {windowed} ORDER BY {unit}, {ROW_RANK}"


def clamped(spec: ColumnSpec) -> exp.Expr:
    """The clamped fixed-point value of a bounded column, as the per-query rewrite computes it for SUM.

    Example:
        >>> clamped(ColumnSpec("n", "INTEGER", bounds=(0, 10))).sql("duckdb")
        'CASE WHEN "n" IS NULL THEN NULL ELSE LEAST(GREATEST(CAST(ROUND(LEAST(GREATEST(CAST("n" AS DOUBLE), 0), 10) * 1) AS BIGINT), 0), 10) END'
    """
    grid, lo, hi = fixed_point(spec)
    return row_value(Measure("sum", spec.name, grid, lo, hi), 0).this


def duplicate_units_sql(table: TableSchema, source: str = "src") -> str:
    """How many rows beyond the first each unit has, in total: 0 exactly when the table is one row per unit.

    Example:
        >>> t = TableSchema("users", "u", (ColumnSpec("u", "VARCHAR"),))
        >>> duplicate_units_sql(t)
        'SELECT COUNT(*) - COUNT(DISTINCT "u" COLLATE "binary") FROM "src"."users" WHERE NOT "u" IS NULL'
    """
    unit = _read(table.column(table.privacy_unit))
    return (f"SELECT COUNT(*) - COUNT(DISTINCT {unit}) FROM {_name(source)}.{_name(table.name)} "
            f"WHERE NOT {_name(table.privacy_unit)} IS NULL")


def _read(spec: ColumnSpec | None) -> str:
    assert spec is not None
    return types.column(spec.name, spec.type).sql(dialect="duckdb") if spec.kind == "string" else _name(spec.name)


def _name(name: str) -> str:
    return exp.to_identifier(name, quoted=True).sql(dialect="duckdb")


def copy_public_sql(table: PublicTable, source: str = "src") -> str:
    """`CREATE TABLE <table> AS …`: a public table's declared columns copied into the store, so that a join to it
    runs on the store like the protected side (a public table needs no ranks: it is the same in every pair of
    neighbouring datasets).

    Example:
        >>> from proxy.query.catalog import ColumnSpec, PublicTable
        >>> copy_public_sql(PublicTable("products", (ColumnSpec("sku", "VARCHAR"), ColumnSpec("kind", "VARCHAR")), ("sku",)))
        'CREATE TABLE "products" AS SELECT "sku", "kind" FROM "src"."products"'
    """
    columns = ", ".join(_name(c.name) for c in table.columns)
    return f"CREATE TABLE {_name(table.name)} AS SELECT {columns} FROM {_name(source)}.{_name(table.name)}"
