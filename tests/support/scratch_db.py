"""A fresh, empty in-memory DuckDB database for one oracle run, without DuckDB's start-up.

`duckdb.connect()` starts a new database instance: 40-50 ms on a 2-core VM, most of a small oracle example (the
suite's oracles draw thousands). `connect()` instead attaches a new in-memory catalog to one instance per
process and makes it the default (about 5 ms); `close()`, or dropping the last reference, detaches it and
whatever the run attached (a `src` schema, say), so every run starts empty, as with its own instance. (Another
run that is still open in the same process stays attached, so catalog functions such as `duckdb_tables()` list
its tables too: filter them by `current_database()`.)

Example:
    >>> con = connect()
    >>> con.execute("CREATE TABLE t AS SELECT 1 AS x").fetchall()
    [(1,)]
    >>> con.close()
    >>> con = connect()
    >>> con.execute("SELECT COUNT(*) FROM duckdb_tables() WHERE database_name = current_database()").fetchall()
    [(0,)]
    >>> con.close()
"""

from __future__ import annotations

import itertools
from typing import Any

import duckdb

_INSTANCE: duckdb.DuckDBPyConnection | None = None
_NAMES = itertools.count()
_LIVE: set[str] = set()  # the scratch databases in use: another one's close leaves them attached


class Scratch:
    """A connection to a fresh database (`duckdb.DuckDBPyConnection`'s methods), detached on `close`."""

    def __init__(self) -> None:
        global _INSTANCE
        if _INSTANCE is None:
            _INSTANCE = duckdb.connect()
        self._con = _INSTANCE.cursor()
        self._closed = False
        self._before = self._databases()
        self._name = f"scratch_{next(_NAMES)}"
        self._con.execute(f"ATTACH ':memory:' AS {self._name}")
        self._con.execute(f"USE {self._name}")
        _LIVE.add(self._name)

    def _databases(self) -> set[str]:
        return {str(row[0]) for row in self._con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        _LIVE.discard(self._name)
        self._con.execute("USE memory")
        for name in sorted(self._databases() - self._before - _LIVE):
            self._con.execute(f'DETACH "{name}"')
        self._con.close()

    def __del__(self) -> None:  # a test that never closes its connection: detached when it is dropped
        if not getattr(self, "_closed", True):
            self.close()

    def __enter__(self) -> Scratch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect() -> Scratch:
    """A fresh, empty database (see the module docstring); close it when done."""
    return Scratch()
