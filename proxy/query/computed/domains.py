"""The public domain of a computed group key: every value it takes over its columns' declared finite domains.

A column's declared values are public (a `public_domain`, the integers of integer `bounds`, the days of DATE
`bounds`, TRUE and FALSE), and so is NULL; a key computed from such columns can take only the values of the
expression over their product. They are computed by DuckDB itself, on those declared values alone (an
in-memory database with no data and no external access), so the domain is exactly what the engine computes
for the same inputs: no second implementation of `FLOOR`, `date_trunc` or `LOWER` to drift from it. Rows whose
key falls outside the domain are dropped before bounding, as for any public domain (rewrite/per_query.py), so the
released groups never depend on the data.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import ColumnSpec
    >>> age = ColumnSpec("age", "INTEGER", bounds=(18, 90))
    >>> domain(parse_one('TRY(CAST(FLOOR("age" / 10) * 10 AS INT))'), "INTEGER", (age,))
    (10, 20, 30, 40, 50, 60, 70, 80, 90)
"""

from __future__ import annotations

import functools
import math
import threading

import duckdb
from sqlglot import exp

from proxy.query import types
from proxy.query.catalog import ColumnSpec, Literal_

MAX_INPUTS = 100_000  # rows of the product of the input domains evaluated at most
MAX_VALUES = 100_000  # a larger computed domain is not public (private partition selection instead)

_lock = threading.Lock()


def declared_values(spec: ColumnSpec) -> tuple[Literal_, ...] | None:
    """The column's public values, or None when it has no finite declared domain.

    Example:
        >>> declared_values(ColumnSpec("n", "SMALLINT", bounds=(1.5, 4)))
        (2, 3, 4)
    """
    if spec.domain is not None:
        return spec.domain
    if spec.kind == "boolean":
        return (False, True)
    if spec.kind == "integer" and spec.bounds is not None:
        lo, hi = math.ceil(spec.bounds[0]), math.floor(spec.bounds[1])
        if 0 <= hi - lo < MAX_INPUTS:
            return tuple(range(lo, hi + 1))
    return None


def domain(sql: exp.Expr, type_name: str, columns: tuple[ColumnSpec, ...], where: exp.Expr | None = None
           ) -> tuple[Literal_, ...] | None:
    """The distinct non-NULL values of `sql` (over `columns`) in `type_name`, in order; None when an input has
    no finite domain or there are too many. With `where` (a condition over `columns` only, in which NULL stands
    for what is unknown: computed/reach.py), only the inputs where it is not FALSE count.

    Example:
        >>> from sqlglot import parse_one
        >>> r = ColumnSpec("r", "VARCHAR", public_domain=("a", "b", "c"))
        >>> domain(parse_one('"r"'), "VARCHAR", (r,), parse_one("r IN ('a', 'c') OR NULL"))
        ('a', 'b', 'c')
        >>> domain(parse_one('"r"'), "VARCHAR", (r,), parse_one("r IN ('a', 'c') AND NULL"))
        ('a', 'c')
    """
    inputs = []
    for spec in columns:
        values = declared_values(spec)
        if values is None:
            return None
        inputs.append((spec.name, spec.type, values))
    if math.prod(len(v) + 1 for _, _, v in inputs) > MAX_INPUTS:
        return None
    condition = "" if where is None else f" AND ({where.sql(dialect='duckdb')}) IS NOT FALSE"
    found = _evaluate(sql.sql(dialect="duckdb"), type_name, tuple(inputs), condition)
    return found if found is None or len(found) <= MAX_VALUES else None


@functools.lru_cache(maxsize=256)
def _evaluate(
    sql: str, type_name: str, inputs: tuple[tuple[str, str, tuple[Literal_, ...]], ...], condition: str = ""
) -> tuple[Literal_, ...] | None:
    with _lock:
        connection = _connection()
        tables = []
        for i, (name, column_type, values) in enumerate(inputs):
            table = f"__d{i}"
            ident = exp.to_identifier(name, quoted=True).sql(dialect="duckdb")
            connection.execute(f"CREATE OR REPLACE TEMP TABLE {table} ({ident} {column_type})")
            # every value as text, cast once by DuckDB: exact for each type (floats as repr round-trip)
            texts = [None, *(_text(v) for v in values)]
            connection.execute(f"INSERT INTO {table} SELECT CAST(UNNEST(?::VARCHAR[]) AS {column_type})", [texts])
            tables.append(table)
        source = ", ".join(tables) if tables else "(SELECT 1)"
        query = f"SELECT DISTINCT {sql} AS v FROM {source} WHERE v IS NOT NULL{condition}"
        result = connection.execute(query).fetchall()
    read = types.reader(type_name)
    values = {types.canonical(type_name, read(v)) for (v,) in result}
    return tuple(sorted(values, key=lambda v: (type(v).__name__, v)))  # type: ignore[arg-type, return-value]


def binds(sql: exp.Expr, columns: tuple[ColumnSpec, ...]) -> str | None:
    """None when DuckDB can compute `sql` over columns of these declared types, else DuckDB's complaint.

    Checked on an empty table before any charge: an expression DuckDB refuses to bind (a format it does not
    know, say) would otherwise fail after admission. The table is empty, so the complaint holds no data.

    Example:
        >>> from sqlglot import parse_one
        >>> day = ColumnSpec("day", "DATE")
        >>> binds(parse_one("STRFTIME(day, '%Y')"), (day,)) is None, binds(parse_one("STRFTIME(day, '%q')"), (day,))
        (True, 'Failed to parse format specifier %q: Unrecognized format for strftime/strptime: %q')
    """
    return _binds(sql.sql(dialect="duckdb"), tuple((c.name, c.type) for c in columns))


@functools.lru_cache(maxsize=1024)
def _binds(sql: str, columns: tuple[tuple[str, str], ...]) -> str | None:
    definition = ", ".join(f"{exp.to_identifier(n, quoted=True).sql(dialect='duckdb')} {t}" for n, t in columns)
    with _lock:
        connection = _connection()
        try:
            connection.execute(f"CREATE OR REPLACE TEMP TABLE __probe ({definition or '__none INTEGER'})")
            connection.execute(f"SELECT {sql} FROM __probe LIMIT 0").fetchall()
        except duckdb.Error as err:
            first = str(err).splitlines()[0]
            return first.split(": ", 1)[1] if ": " in first else first
    return None


def _text(value: Literal_) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


@functools.cache
def _connection() -> duckdb.DuckDBPyConnection:
    # no data, no files, no extensions: only the declared values this module inserts
    return duckdb.connect(":memory:", config={"enable_external_access": False, "threads": 1,
                                              "autoload_known_extensions": False, "lock_configuration": True})
