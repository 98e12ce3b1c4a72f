"""What every engine promises the request path, and the errors it may raise (fixed messages only).

An engine runs the SQL the query layer generated, nothing else, under a time limit, and reports failures
with a fixed message per class: after admission the engine's own text can depend on the data, so that text
goes to the server log and never to the analyst (docs/architecture.md, the security boundary).

Example:
    >>> ExecutionTimeout().code, str(ExecutionTimeout()), str(ExecutionFailed())
    ('timeout', 'query exceeded the time limit', 'query execution failed')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from accountant.errors import ProxyError
from proxy.query import types
from proxy.query.catalog import Catalog
from proxy.query.rewrite.render import Target


class EngineError(ProxyError):
    """A failure inside the engine. The message is fixed per class: never the engine's own text."""

    code = "execution_failed"
    default_message = "query execution failed"


class ExecutionFailed(EngineError):
    code = "execution_failed"
    default_message = "query execution failed"


class ExecutionTimeout(EngineError):
    code = "timeout"
    status = 504
    default_message = "query exceeded the time limit"


class EngineMisconfigured(EngineError):
    """Raised at start-up only: the data cannot be opened, or a hardening setting did not take."""

    code = "engine_misconfigured"
    default_message = "the engine is misconfigured"


@dataclass(frozen=True, slots=True)
class Rows:
    """A query result: column names and rows, as the engine returned them."""

    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]


class QueryEngine(Protocol):
    """The engine of one dataset. `target` says how the query layer renders a generated query for it
    (proxy/query/rewrite/render.py); `run` takes that text (or a constant probe such as `SELECT 1`)."""

    @property
    def target(self) -> Target: ...

    def run(self, sql: str, timeout_s: float | None = None) -> Rows: ...

    def refresh(self) -> None: ...

    def columns(self, table: str) -> dict[str, str]: ...

    def check_catalog(self, catalog: Catalog) -> tuple[str, ...]: ...

    def close(self) -> None: ...


def catalog_problems(columns: Callable[[str], dict[str, str]], catalog: Catalog, source: str) -> tuple[str, ...]:
    """Human-readable mismatches between the policy's tables and what `columns(table)` (column -> type in
    DuckDB's names; {} for no such table) finds in `source`; () when they agree."""
    problems: list[str] = []
    for table in catalog.tables:
        actual = {name.lower(): type_ for name, type_ in columns(table.name).items()}
        if not actual:
            problems.append(f"table {table.name}: not found in {source}")
            continue
        for column in table.columns:
            if table.unit_via and column.name == table.privacy_unit:
                continue  # reached through keys: the bounding store materialises it (proxy/query/rewrite/unit_paths.py)
            found = actual.get(column.name.lower())
            where = f"table {table.name}: column {column.name}"
            if found is None:
                problems.append(f"{where}: not found in the database")
            elif (problem := type_problem(column.type, found)) is not None:
                problems.append(f"{where}: {problem}")
    return tuple(problems)


def type_problem(declared: str, found: str) -> str | None:
    """Why a column declared `declared` cannot be read as the database's `found` type, or None.

    Integers of any width compare exactly with integer literals, so only their family must match. FLOAT and
    DOUBLE round literals differently and DECIMAL(p, s) holds its own grid, so those must match exactly: the
    scope of a query (analyse/cell_space.py) evaluates comparisons as the declared type does.

    Example:
        >>> type_problem("DOUBLE", "FLOAT")
        'declared DOUBLE but the database has FLOAT; declare type = "FLOAT"'
        >>> type_problem("INTEGER", "BIGINT") is None, type_problem("VARCHAR", "TIMESTAMP")
        (True, 'database type TIMESTAMP is not supported')
    """
    try:
        actual = types.normalize(found)
    except ValueError:
        return f"database type {found} is not supported"
    same = types.kind(actual) == "integer" == types.kind(declared) or actual == declared
    return None if same else f'declared {declared} but the database has {actual}; declare type = "{actual}"'
