"""How a dataset reads the SQL it is sent, as the policy file declares it (`[datasets.<name>]`, docs/policy.md).

    dialect = "postgres"            # the default dialect of its queries (a request's `dialect` overrides it)
    schemas = ["main", "public"]    # schema names a query may qualify its tables with (`public.visits`)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from proxy.query.parse.statement import DIALECTS

READING_KEYS = ("dialect", "schemas")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


@dataclass(frozen=True, slots=True)
class SqlReading:
    dialect: str = "duckdb"
    schemas: tuple[str, ...] = ("main",)


def read_sql_reading(raw: Mapping[str, object], loc: str, add: Callable[[str, str], None]) -> SqlReading | None:
    """The dialect and schema names of one `[datasets.<name>]` table, or None after `add`ing each problem.

    Example:
        >>> read_sql_reading({"dialect": "tsql", "schemas": ["main", "dbo"]}, "datasets.d", print)
        SqlReading(dialect='tsql', schemas=('main', 'dbo'))
        >>> read_sql_reading({"dialect": "oracle"}, "datasets.d", lambda at, p: print(f"{at}: {p}"))
        datasets.d.dialect: must be one of duckdb, postgres, mysql, bigquery, snowflake, tsql, got 'oracle'
    """
    ok = True
    dialect = raw.get("dialect", "duckdb")
    if dialect not in DIALECTS:
        add(f"{loc}.dialect", f"must be one of {', '.join(DIALECTS)}, got {dialect!r}")
        ok = False
    schemas = raw.get("schemas", ["main"])
    if not (isinstance(schemas, list) and schemas and all(isinstance(s, str) and _NAME.fullmatch(s) for s in schemas)):
        add(f"{loc}.schemas", f"must be a non-empty array of plain SQL names, got {schemas!r}")
        ok = False
    return SqlReading(str(dialect), tuple(schemas)) if ok else None  # type: ignore[arg-type]
