"""DuckDB, opened read-only and hardened: the default engine, and the only module that imports duckdb outside
the bounding store (docs/architecture.md, the security boundary).

Promises: the database file is never written; no file, network or extension access; the configuration is
locked and verified at start-up; every query has a time limit; errors after admit carry fixed messages only,
because the engine's text can depend on the data (the text goes to the server log instead).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

import duckdb

from proxy.engines.base import EngineMisconfigured, ExecutionFailed, ExecutionTimeout, Rows, catalog_problems
from proxy.engines.interrupts import running
from proxy.engines.watchdog import WATCHDOG
from proxy.query.catalog import Catalog
from proxy.query.rewrite.render import DUCKDB

log = logging.getLogger(__name__)


_COLUMNS_SQL = (
    "SELECT column_name, data_type FROM information_schema.columns"
    " WHERE table_catalog = current_database() AND table_schema = current_schema()"
    " AND lower(table_name) = lower(?) ORDER BY ordinal_position"
)


METADATA_TIMEOUT_S = 60.0  # catalog introspection at start-up, however small the per-query limit

class Engine:
    """A read-only, locked-down DuckDB database. Thread-safe: each call uses its own cursor."""

    target = DUCKDB  # generated queries are rendered for it as DuckDB SQL

    def __init__(
        self, path: Path, *, threads: int = 2, memory_limit: str = "8GB", timeout_s: float = 30.0
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._lock = threading.Lock()  # guards cursor creation/closing on the shared connection
        self._temp_dir = tempfile.mkdtemp(prefix="dpproxy-duckdb-")
        config: dict[str, str | bool | int] = {
            "enable_external_access": False,
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
            "allow_community_extensions": False,
            "allow_unsigned_extensions": False,
            "temp_directory": self._temp_dir,
            "threads": threads,
            "memory_limit": memory_limit,
        }
        try:
            self._conn = duckdb.connect(str(self.path), read_only=True, config=config)
            # enable_progress_bar is a per-connection option (cursors inherit it), so it cannot go in the
            # config above; the lock is therefore set here, last, before the connection is used.
            self._conn.execute("SET enable_progress_bar = false")  # a server must not draw on stdout
            self._conn.execute("SET lock_configuration = true")
        except duckdb.Error as err:
            self.close()
            raise EngineMisconfigured(f"cannot open {self.path}: {err}") from err
        expected = {
            **{k: str(v).lower() for k, v in config.items() if isinstance(v, bool)},
            "enable_progress_bar": "false",
            "lock_configuration": "true",
            "temp_directory": self._temp_dir,
            "threads": str(threads),
            "memory_limit": _normalised_memory_limit(memory_limit),
            "access_mode": "read_only",
        }
        problems = self._setting_problems(expected)
        if problems:
            self.close()
            raise EngineMisconfigured("engine settings did not take: " + "; ".join(problems))

    def _setting_problems(self, expected: dict[str, str]) -> tuple[str, ...]:
        rows = self._conn.execute(
            "SELECT name, value FROM duckdb_settings() WHERE list_contains(?, name)", [list(expected)]
        ).fetchall()
        actual = {str(name): str(value) for name, value in rows}
        return tuple(
            f"{name} is {actual.get(name)!r}, expected {want!r}"
            for name, want in expected.items()
            if actual.get(name) != want
        )

    def run(self, sql: str, timeout_s: float | None = None) -> Rows:
        """Run one query on a fresh cursor, interrupting it after `timeout_s` (default: the engine's).

        Raises:
            ExecutionTimeout: the time limit interrupted the query.
            ExecutionFailed: any other engine error (its text is logged, never raised).
        """
        return self._fetch(sql, (), self.timeout_s if timeout_s is None else timeout_s)

    def refresh(self) -> None:
        """Nothing to do: the source is read as it is (a bounding store refreshes, proxy/store/duckdb_store.py)."""

    def columns(self, table: str) -> dict[str, str]:
        """Column name -> DuckDB type of `table` in the default schema; {} when there is no such table."""
        # metadata for the operator's start-up checks, not an analyst's query: the per-query limit does not apply
        rows = self._fetch(_COLUMNS_SQL, (table,), max(self.timeout_s, METADATA_TIMEOUT_S)).rows
        return {str(name): str(type_) for name, type_ in rows}

    def check_catalog(self, catalog: Catalog) -> tuple[str, ...]:
        """Human-readable mismatches between the policy's tables and the database; () when they agree."""
        return catalog_problems(self.columns, catalog, self.path.name)

    def close(self) -> None:
        """Close the connection and remove the temporary directory. Safe to call twice."""
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
        shutil.rmtree(self._temp_dir, ignore_errors=True)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fetch(self, sql: str, params: tuple[object, ...], timeout_s: float) -> Rows:
        with self._lock:
            cursor = self._conn.cursor()
        timed_out, finished, guard = threading.Event(), threading.Event(), threading.Lock()

        def interrupt() -> None:
            with guard:  # never interrupt a cursor that has finished (or been closed)
                if not finished.is_set():
                    timed_out.set()
                    cursor.interrupt()

        alarm = WATCHDOG.after(timeout_s, interrupt)
        try:
            with running(interrupt):  # a client's cancel interrupts it too (proxy/engines/interrupts.py)
                cursor.execute(sql, list(params) if params else None)
                columns = tuple(str(d[0]) for d in cursor.description or ())
                rows = tuple(tuple(row) for row in cursor.fetchall())
        except duckdb.Error as err:
            if timed_out.is_set() or isinstance(err, duckdb.InterruptException):
                log.warning("query interrupted (its limit %.3gs, or a cancel)", timeout_s)
                raise ExecutionTimeout() from None
            # Engine text may quote data (e.g. a failed cast): log it, raise only the fixed message.
            log.warning("query failed: %s: %s", type(err).__name__, err)
            raise ExecutionFailed() from None
        finally:
            alarm.cancel()
            with guard:
                finished.set()
            with self._lock:
                cursor.close()
        return Rows(columns, rows)


def write_database(path: Path, statements: tuple[str, ...]) -> None:
    """Build a new DuckDB file at `path` by running `statements`, replacing any file there atomically.

    For offline tools (the demo builder), never for serving: the connection is writable and unhardened.
    """
    path = Path(path)
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}-", suffix=".tmp", dir=path.parent)
    os.close(fd)
    temp = Path(temp_name)
    temp.unlink()  # DuckDB creates the file itself
    try:
        conn = duckdb.connect(str(temp))
        try:
            conn.execute("SET enable_progress_bar = false")
            for statement in statements:
                conn.execute(statement)
        finally:
            conn.close()
        Path(f"{path}.wal").unlink(missing_ok=True)  # a stale WAL would be replayed into the new file
        temp.replace(path)
    finally:
        temp.unlink(missing_ok=True)
        Path(f"{temp}.wal").unlink(missing_ok=True)


@functools.lru_cache(maxsize=16)  # a new DuckDB instance is 40-50 ms on a small VM: once per limit and process
def _normalised_memory_limit(memory_limit: str) -> str:
    # DuckDB reports memory_limit in its own units ("2GB" reads back as "1.8 GiB"): let it normalise ours.
    probe = duckdb.connect(":memory:", config={"enable_external_access": False, "memory_limit": memory_limit})
    try:
        return str(probe.execute("SELECT current_setting('memory_limit')").fetchone()[0])  # type: ignore[index]
    finally:
        probe.close()
