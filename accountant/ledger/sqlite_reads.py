"""Read-only connections to a SQLite ledger's file, one per concurrent reader: the pool of
accountant/ledger/sqlite.py's lookups. It opens no file itself: sqlite.py hands it the function that connects
(the one module that speaks to SQLite, with accountant/audit/log.py).

Example:
    >>> import sqlite3, tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = pathlib.Path(tmp) / "l.db"
    ...     writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    ...     _ = writer.execute("PRAGMA journal_mode = WAL")
    ...     _ = writer.execute("CREATE TABLE t (x)"); _ = writer.execute("INSERT INTO t VALUES (1)")
    ...     reads = Readers(lambda: sqlite3.connect(path, check_same_thread=False), writer, threading.Lock(),
    ...                     shared=False)
    ...     found = reads.read("SELECT x FROM t", ())
    ...     reads.close(); writer.close()
    >>> found
    [(1,)]
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class LedgerClosed(RuntimeError):
    """A read after the ledger was closed."""


class Readers:
    """Read-only connections to the ledger's file, one per concurrent reader, kept for reuse (issue #32).

    In WAL mode a reader sees the last committed state of the file when its statement starts and never waits
    for a writer, so a repeat's lookup no longer queues behind an admit's fsync on the writer's connection; it
    never sees a transaction that has not committed. Each read is one statement, stepped to its end
    (`fetchall`), so no snapshot stays open between reads. An in-memory file has no second connection: there
    `read` uses the writer's, under its lock, as every read did before."""

    def __init__(self, connect: Callable[[], Any], writer: Any, lock: threading.Lock, *, shared: bool) -> None:
        self._connect = connect  # a new read-only connection to the file (sqlite.py's `_reader`)
        self._shared = (writer, lock) if shared else None
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._all: list[Any] = []
        self._closed = False

    def read(self, sql: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        if self._shared is not None:
            conn, lock = self._shared
            with lock:
                return conn.execute(sql, params).fetchall()
        conn = self._take()
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            with self._lock:
                if self._closed:
                    conn.close()
                else:
                    self._idle.append(conn)

    def _take(self) -> Any:
        with self._lock:
            if self._closed:
                raise LedgerClosed("the ledger is closed")
            if self._idle:
                return self._idle.pop()
        conn = self._connect()
        with self._lock:
            self._all.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            self._all = [c for c in self._all if c not in idle]
        for conn in idle:  # a connection in use is closed when its read returns
            conn.close()
