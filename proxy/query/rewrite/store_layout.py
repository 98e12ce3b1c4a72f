"""What the bounding store holds for one protected table, and the SQL that builds it (docs/privacy.md §11).

The store is the table with its NULL-unit rows dropped, its unit-level columns replaced by each unit's
canonical value (the smallest over the unit's rows, text under binary collation), and rank columns:

    __row_rank            rank of the row within its unit
    __row_rank__<c>       rank of the row within (unit, value of c)     for each groupable row-level column c
    __group_rank__<c>     rank of the row's value of c among the unit's values of c (1, 2, … per value)
    __unit_rows           the unit's number of rows
    __cell_rows__<c>      the number of the unit's rows with this row's value of c     for each such column c
    __grid__<c>           for each column with clamp bounds: its value clamped to the bounds on the fixed-point
                          grid of measures.fixed_point, exactly as rewrite/per_query.py computes it per query
    __unit_total__<c>     for each `bounds = "auto"` column of a table with several rows per unit: Σ |__grid__<c>|
                          over all the unit's rows (DECIMAL(38, 0): exact on both engines), at least the total
                          of any rows a query keeps: what a capped SUM scales by (auto/total.py, §10.2)

Every rank orders by a keyed hash of the unit's own rows under the deployment's key, with the row's own
row-level values as tie-breakers (rows equal in all of them are stored equal: the unit and its unit-level
columns hold one value per unit): each rank, and each canonical value, is a function of the unit's rows alone. Removing
a unit therefore removes its rows from the store and leaves every other row as it was (docs/privacy.md §9).
A table declared one row per unit gets constant ranks (1): there is nothing to bound.
"""

from __future__ import annotations

import hashlib
from typing import Literal

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.measures import Measure, fixed_point
from proxy.query.catalog import ColumnSpec, PublicTable, TableSchema
from proxy.query.rewrite import keyed_hash
from proxy.query.rewrite.per_query import row_value

ROW_RANK = "__row_rank"
UNIT_ROWS = "__unit_rows"
Hash = Literal["duckdb", "keyed"]  # DuckDB's HASH, or the explicit keyed hash (keyed_hash.py) every engine computes
STORE_HASH: Hash = "keyed"  # the stores' hash, on DuckDB and Spark alike: the same rows and ranks on both engines


def grid_value(column: str) -> str:
    """The column's clamped fixed-point value (SUM and AVG read it instead of clamping per query)."""
    return f"__grid__{column.lower()}"
META = "__store_meta"


def unit_total(column: str) -> str:
    """Σ |clamped value of `column`| over all the unit's rows (a capped SUM's T_u, auto/total.py)."""
    return f"__unit_total__{column.lower()}"


def totalled(table: TableSchema) -> tuple[ColumnSpec, ...]:
    """The columns whose per-unit total the store holds: those whose SUM a query may cap (measures.capped)."""
    return tuple(c for c in table.columns if c.auto_bounds and c.bounds and not table.one_row_per_unit)


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


def build_sql(table: TableSchema, key: str, source: str = "src", hash: Hash = STORE_HASH) -> str:
    """`CREATE TABLE <table> AS …` reading `<source>.<table>`, with ranks keyed by `key` (the deployment's) through
    `hash` (`select_sql`; the example shows the structure with DuckDB's HASH, shorter to print).

    Two window levels, each sorting once (build time, bench/README.md): the first orders each unit's rows by
    their keyed hash (`__row_rank`, the unit's row count and canonical values); the second, per ranked column c,
    orders them by (hash of the value, value, `__row_rank`), which puts each value's rows together in
    `__row_rank` order: the dense rank of the value is `__group_rank__c`, the row's place within its value is
    `__row_rank__c`, and the value's rows are `__cell_rows__c` (functions sharing one sort, whose orders are
    prefixes of each other). The last window partitions by unit, so each unit's rows come out together and are
    stored so (unit-level columns compress to runs, and a scan reads them as fast as the source) without the
    cost of a final ORDER BY.

    Example:
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True)))
        >>> print(build_sql(t, "k1", hash="duckdb"))
        CREATE TABLE "t" AS SELECT * EXCLUDE (__unit), ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY HASH('k1', __unit, "g" COLLATE "binary"), "g" COLLATE "binary", __row_rank) - RANK() OVER (PARTITION BY __unit ORDER BY HASH('k1', __unit, "g" COLLATE "binary"), "g" COLLATE "binary") + 1 AS __row_rank__g, COUNT(*) OVER (PARTITION BY __unit ORDER BY HASH('k1', __unit, "g" COLLATE "binary"), "g" COLLATE "binary") - RANK() OVER (PARTITION BY __unit ORDER BY HASH('k1', __unit, "g" COLLATE "binary"), "g" COLLATE "binary") + 1 AS __cell_rows__g, DENSE_RANK() OVER (PARTITION BY __unit ORDER BY HASH('k1', __unit, "g" COLLATE "binary"), "g" COLLATE "binary") AS __group_rank__g FROM (SELECT "u", "g" COLLATE "binary" AS "g", MIN("r" COLLATE "binary") OVER (PARTITION BY __unit) AS "r", __unit, ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY __h, "g" COLLATE "binary") AS __row_rank, COUNT(*) OVER (PARTITION BY __unit) AS __unit_rows FROM (SELECT *, "u" AS __unit, HASH('k1', "u", "u", "g" COLLATE "binary", "r" COLLATE "binary") AS __h FROM "src"."t" WHERE NOT "u" IS NULL) AS __keyed) AS __ranked
    """
    return f"CREATE TABLE {_name(table.name)} AS {select_sql(table, key, f'{_name(source)}.{_name(table.name)}', hash)}"


def select_sql(table: TableSchema, key: str, source: str, hash: Hash = STORE_HASH) -> str:
    """The store's rows of `table` read from `source` (DuckDB SQL; render.py turns it into Spark's), ranked by
    `hash`: DuckDB's HASH keyed by `key`, or the explicit keyed hash salted by `key_salt(key)`, which DuckDB and
    Spark compute identically (keyed_hash.py), so a store built on either engine holds the same ranks.

    Example:
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "BOOLEAN", groupable=True)))
        >>> sql = select_sql(t, "k1", '"t"', "keyed")
        >>> print(sql[:34], "…", sql[sql.index('FROM (SELECT *, "u"'):])
        SELECT * EXCLUDE (__unit, __g__g), … FROM (SELECT *, "u" AS __unit, COALESCE((XOR(CAST("u" % 4611686018427387904 AS \
BIGINT) & 4294967295, (CAST("u" % 4611686018427387904 AS BIGINT) >> 32) & 4294967295)), 4294967295) AS __n0_0, \
COALESCE(CAST("g" AS BIGINT), 4294967295) AS __n1_0 FROM "t" WHERE NOT "u" IS NULL) AS __numbered) AS __keyed) AS __ranked
    """
    unit = _read(table.column(table.privacy_unit))
    literal_key = exp.Literal.string(key).sql(dialect="duckdb")
    every = [_read(c) for c in table.columns]
    # Ties of the keyed hash are broken by the row-level columns only: rows equal in all of them differ at most in
    # the unit and unit-level columns, which the store replaces by one value per unit, so they are stored equal.
    ties = [_read(c) for c in table.columns if not c.unit_level and c.name != table.privacy_unit]
    projections = []
    for c in table.columns:
        name = _name(c.name)
        if c.unit_level and c.name != table.privacy_unit:
            projections.append(f"MIN({_read(c)}) OVER (PARTITION BY __unit) AS {name}")
        elif c.kind == "string":
            projections.append(f"{_read(c)} AS {name}")  # binary collation in the store itself
        else:
            projections.append(name)
    projections.append("__unit")
    ranked = ranked_columns(table)
    ranks = []
    # the hash of the unit's rows and, per ranked column c, of (unit, value of c): expressions (DuckDB's HASH) or
    # columns computed once per row from each column's numbers (the keyed hash)
    group_hash = {c.name: hash_sql(literal_key, "__unit", _read(c)) for c in ranked}
    if hash == "keyed":
        group_hash = {c.name: f"__g__{c.name.lower()}" for c in ranked}
        projections += list(group_hash.values())
    if table.one_row_per_unit:  # checked against the data before this runs (proxy/store/duckdb_store.py)
        projections.append(f"1 AS {ROW_RANK}, 1 AS {UNIT_ROWS}")
        ranks += [f"1 AS {row_rank(c.name)}, 1 AS {cell_rows(c.name)}, 1 AS {group_rank(c.name)}" for c in ranked]
    else:
        projections.append(f"ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY {', '.join(['__h', *ties])}) AS {ROW_RANK}")
        projections.append(f"COUNT(*) OVER (PARTITION BY __unit) AS {UNIT_ROWS}")
        for c in ranked:
            value = _read(c)
            groups = f"PARTITION BY __unit ORDER BY {group_hash[c.name]}, {value}"
            first = f"RANK() OVER ({groups})"  # the place of the value's first row in the unit
            ranks.append(f"ROW_NUMBER() OVER ({groups}, {ROW_RANK}) - {first} + 1 AS {row_rank(c.name)}")
            ranks.append(f"COUNT(*) OVER ({groups}) - {first} + 1 AS {cell_rows(c.name)}")
            ranks.append(f"DENSE_RANK() OVER ({groups}) AS {group_rank(c.name)}")
    where = f"FROM {source} WHERE NOT {_name(table.privacy_unit)} IS NULL"
    if hash == "keyed":
        keyed = _keyed_sql(table, key_salt(key), unit, where)
    else:
        keyed = f"SELECT *, {unit} AS __unit, {hash_sql(literal_key, unit, *every)} AS __h {where}"
    ranked_sql = f"SELECT {', '.join(projections)} FROM ({keyed}) AS __keyed"
    grids = [f"{clamped(c).sql(dialect='duckdb')} AS {grid_value(c.name)}" for c in table.columns if c.bounds]
    grids += [f"SUM(CAST(ABS({clamped(c).sql(dialect='duckdb')}) AS DECIMAL(38, 0))) OVER (PARTITION BY __unit) "
              f"AS {unit_total(c.name)}" for c in totalled(table)]
    # clamped after the canonical value is taken: a unit-level column's grid value is one per unit
    hidden = ", ".join(["__unit", *(group_hash.values() if hash == "keyed" else ())])
    return f"SELECT {', '.join([f'* EXCLUDE ({hidden})', *ranks, *grids])} FROM ({ranked_sql}) AS __ranked"


def _keyed_sql(table: TableSchema, salt: int, unit: str, where: str) -> str:
    """The source rows with `__unit`, `__h` (the keyed hash of the unit and every column, as HASH reads them) and
    `__g__<c>` (of the unit and c) per ranked column c: each column's numbers computed once per row first."""
    numbered: dict[str, list[str]] = {}
    computed = [f"{unit} AS __unit"]
    for i, c in enumerate(table.columns):
        found = keyed_hash.numbers(exp.column(c.name, quoted=True), c.kind)
        numbered[c.name] = [f"__n{i}_{j}" for j in range(len(found))]
        computed += [f"{n.sql(dialect='duckdb')} AS {name}" for n, name in zip(found, numbered[c.name], strict=True)]
    own = numbered[table.privacy_unit]

    def hashed(names: list[str]) -> str:
        return keyed_hash.keyed_hash(salt, [exp.column(n) for n in names]).sql(dialect="duckdb")

    columns = [f"{hashed([*own, *(n for c in table.columns for n in numbered[c.name])])} AS __h"]
    columns += [f"{hashed([*own, *numbered[c.name]])} AS __g__{c.name.lower()}" for c in ranked_columns(table)]
    return f"SELECT *, {', '.join(columns)} FROM (SELECT *, {', '.join(computed)} {where}) AS __numbered"


def key_salt(key: str) -> int:
    """The keyed hash's 64-bit salt for the deployment key: the first 8 bytes of its SHA-256.

    Example:
        >>> key_salt("k1") == int("6ab9f1eb8f7d3388", 16)
        True
    """
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big")


def hash_sql(*parts: str) -> str:
    """DuckDB's HASH of the parts (the first is the key): the store's hash before the explicit keyed hash
    (`STORE_HASH`), kept to measure one against the other (bench/spark_latency.py).

    Example:
        >>> print(hash_sql("'k'", '"u"'))
        HASH('k', "u")
    """
    return f"HASH({', '.join(parts)})"


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
