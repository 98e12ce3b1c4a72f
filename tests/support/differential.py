"""The differential tester's machinery (tests/oracle/test_differential.py, docs/privacy.md §12): a small database in
a fresh in-memory DuckDB, the product's generated SQL run on it (per query, or on the bounding store built from
it), the exact release (the release of the measures with zero noise and every candidate group kept), and DuckDB's
own answer to the query as written (read in its dialect, transpiled to DuckDB by sqlglot).

Example:
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True)),
    ...     max_rows=100, max_groups=100)
    >>> db = Database({"t": ("u BIGINT, g VARCHAR", [(1, "a"), (1, "a"), (2, "b")])}, Catalog((t,)))
    >>> q = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"
    >>> sorted(product_rows(db, q, "duckdb", "store")), sorted(reference_rows(db, q, "duckdb"))
    ([('a', 2), ('b', 1)], [('a', 2), ('b', 1)])
    >>> db.close()
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Literal

import sqlglot
from sqlglot import exp

from mechanisms.sampling import FixedSampler
from proxy.query.catalog import Catalog
from proxy.query.expr import Agg, Key
from proxy.query.planner import QueryPlan, plan
from proxy.query.release.publish import release
from proxy.query.rewrite import store_layout
from tests.support import scratch_db

Rows = Sequence[tuple[object, ...]]
Bounding = Literal["per_query", "store"]
STORE_KEY = "differential"


class Database:
    """`tables` (name -> (column declarations, rows)) twice in one scratch database: as the source (schema
    `src`, which the reference reads through the search path) and as the bounding store built from it, as
    proxy/store/duckdb_store.py builds it (protected tables ranked under `STORE_KEY`, public ones copied)."""

    def __init__(self, tables: Mapping[str, tuple[str, Rows]], catalog: Catalog) -> None:
        self.catalog = catalog
        self.con = scratch_db.connect()
        # DuckDB raises on a division by zero where the product's computed values (inside TRY) give NULL: the
        # reference reads it as NULL too (docs/privacy.md §12, known gaps)
        self.con.execute("SET SESSION error_on_division_by_zero = false")  # this connection only
        self.con.execute("ATTACH ':memory:' AS src")
        for name, (columns, rows) in tables.items():
            self.con.execute(f"CREATE TABLE src.{name} ({columns})")
            if rows:
                marks = ", ".join("?" * len(rows[0]))
                self.con.executemany(f"INSERT INTO src.{name} VALUES ({marks})", rows)
        self.database = str(self.con.execute("SELECT current_database()").fetchone()[0])  # type: ignore[index]
        self.con.execute("CREATE SCHEMA store")
        self.con.execute("USE store")
        for table in catalog.tables:
            self.con.execute(store_layout.build_sql(table, STORE_KEY))
        for public in catalog.public:
            self.con.execute(store_layout.copy_public_sql(public))

    def run(self, sql: str, on: Literal["src", "store"]) -> list[tuple[object, ...]]:
        self.con.execute(f"USE {'src.main' if on == 'src' else f'{self.database}.store'}")
        return self.con.execute(sql).fetchall()

    def close(self) -> None:
        self.con.close()


def planned(sql: str, dialect: str, bounding: Bounding, catalog: Catalog, salt: int = 11) -> QueryPlan:
    """The plan as the pipeline makes it (Laplace, per-cell accounting on), for a query that must be accepted."""
    return plan(sql, catalog, epsilon=1.0, delta=1e-6, mechanism="laplace", dialect=dialect, bounding=bounding,
                salt=salt)


def exact_release(engine_rows: Rows, planned: QueryPlan, *, post: bool = True) -> list[tuple[object, ...]]:
    """The release of the engine's measures with zero noise (the values before noise, as publish.py turns them
    into aggregates), every candidate group of a private key kept (no threshold: the contract is about values);
    without `post`, HAVING, ORDER BY and LIMIT left out."""
    analysis, price = planned.analysis, planned.price
    if not post:
        analysis = dataclasses.replace(analysis, having=None, order=(), limit=None)
    if price.selection is not None:
        price = dataclasses.replace(price, selection=dataclasses.replace(price.selection, threshold=-(2**62)))
    return list(release(engine_rows, analysis, price, FixedSampler((0,))).rows)


def product_rows(db: Database, sql: str, dialect: str, bounding: Bounding, *, post: bool = True,
                 salt: int = 11) -> list[tuple[object, ...]]:
    """The product's exact answer: its generated SQL (what a preview shows) run on the source or on the store."""
    p = planned(sql, dialect, bounding, db.catalog, salt)
    return exact_release(db.run(p.sql, "store" if bounding == "store" else "src"), p, post=post)


def reference_sql(sql: str, dialect: str, *, post: bool = True) -> str:
    """The query as written, transpiled by sqlglot from its dialect to DuckDB's; without `post`, its HAVING,
    ORDER BY and LIMIT removed (from the outer query: a BI wrapper's inner query has none)."""
    tree = sqlglot.parse_one(sql, read=dialect)
    if not post:
        for arg in ("having", "order", "limit"):
            tree.set(arg, None)
    return tree.sql(dialect="duckdb")


def reference_rows(db: Database, sql: str, dialect: str, *, post: bool = True) -> list[tuple[object, ...]]:
    """DuckDB's own answer to the query, on the source."""
    return db.run(reference_sql(sql, dialect, post=post), "src")


def key_positions(planned: QueryPlan) -> list[int]:
    """The output columns that are group keys."""
    return [i for i, o in enumerate(planned.analysis.outputs) if isinstance(o.expr, Key)]


def normal(value: object) -> object:
    """A value as both sides are compared: numbers as floats (DECIMAL, HUGEINT, int), a midnight timestamp as
    its date (date_trunc of a DATE), NaN as a marker."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):  # the release writes dates and timestamps as ISO text
        midnight = value.time() == datetime.time() and value.tzinfo is None
        return value.date().isoformat() if midnight else value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, int | float | Decimal):
        number = float(value)
        return "NaN" if math.isnan(number) else number
    return value


def close(a: object, b: object) -> bool:
    """Equal, or equal numbers up to floating-point rounding (AVG is a centred sum over a count)."""
    a, b = normal(a), normal(b)
    if isinstance(a, float) and isinstance(b, float):
        return a == b or abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))
    return a == b


def sums(planned: QueryPlan) -> set[int]:
    """The output columns that are a SUM: SQL's SUM of no values is NULL, a released sum is a number (noise
    around 0: the release cannot tell that no row had a value without spending on it), so NULL there reads 0."""
    aggregates = planned.analysis.aggregates
    return {i for i, o in enumerate(planned.analysis.outputs)
            if isinstance(o.expr, Agg) and aggregates[o.expr.index].kind == "sum"}


def rows_match(product: Sequence[tuple[object, ...]], reference: Sequence[tuple[object, ...]],
               null_is_zero: set[int] = frozenset()) -> bool:  # type: ignore[assignment]
    """Row by row, `close` in every column; in the columns `null_is_zero`, the reference's NULL is 0."""
    def value(row: tuple[object, ...], i: int) -> object:
        return 0 if row[i] is None and i in null_is_zero else row[i]
    return len(product) == len(reference) and all(
        len(p) == len(r) and all(close(p[i], value(r, i)) for i in range(len(p)))
        for p, r in zip(product, reference, strict=True))


def sort_rows(rows: Sequence[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Rows in a total order of their normalised values (NULL first, then by type name and value)."""
    return sorted(rows, key=lambda row: tuple((v is not None, type(normal(v)).__name__, normal(v) if v is not None
                                               else 0) for v in row))


def empty(row: tuple[object, ...], keys: Sequence[int]) -> bool:
    """A released row of a group with no rows: every aggregate 0 (a count, a sum of nothing) or NULL (an AVG)."""
    return all(v in (0, None) for i, v in enumerate(row) if i not in keys)


def in_domain(key: tuple[object, ...], cells: set[tuple[object, ...]]) -> bool:
    return key in cells


def normal_key(row: tuple[object, ...], keys: Sequence[int]) -> tuple[object, ...]:
    return tuple(normal(row[i]) for i in keys)


def without_null_keys(rows: Sequence[tuple[object, ...]], keys: Sequence[int], nullable: Sequence[bool]
                      ) -> list[tuple[object, ...]]:
    """Rows whose keys hold no NULL where the key's public domain has none (a declared domain: the product drops
    the rows outside it before bounding, docs/privacy.md §3)."""
    return [row for row in rows if all(row[i] is not None or ok for i, ok in zip(keys, nullable, strict=True))]


def column_names(sql: str, dialect: str) -> list[str]:
    """The select list's output names (for failure messages)."""
    tree = sqlglot.parse_one(sql, read=dialect)
    return [e.alias_or_name for e in tree.find(exp.Select).expressions]  # type: ignore[union-attr]
