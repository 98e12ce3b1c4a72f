"""Read-only connections to a SQLite ledger's file (accountant/ledger/sqlite.py), one per concurrent reader.

Example:
    >>> import tempfile, pathlib
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = pathlib.Path(tmp) / "l.db"
    ...     writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    ...     _ = writer.execute("PRAGMA journal_mode = WAL")
    ...     _ = writer.execute("CREATE TABLE t (x)"); _ = writer.execute("INSERT INTO t VALUES (1)")
    ...     reads = Readers(path, 1000, writer, threading.Lock())
    ...     found = reads.read("SELECT x FROM t", ())
    ...     reads.close(); writer.close()
    >>> found
    [(1,)]
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any


class Readers:
    """Read-only connections to the ledger's file, one per concurrent reader, kept for reuse (issue #32).

    In WAL mode a reader sees the last committed state of the file when its statement starts and never waits
    for a writer, so a repeat's lookup no longer queues behind an admit's fsync on the writer's connection; it
    never sees a transaction that has not committed. Each read is one statement, stepped to its end
    (`fetchall`), so no snapshot stays open between reads. An in-memory file has no second connection: there
    `read` uses the writer's, under its lock, as every read did before."""

    def __init__(self, path: str | os.PathLike[str], busy_ms: int, writer: sqlite3.Connection,
                 lock: threading.Lock) -> None:
        text = os.fspath(path)
        self._path, self._busy_ms = path, busy_ms
        self._shared = (writer, lock) if text in ("", ":memory:") or text.startswith("file:") else None
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._all: list[sqlite3.Connection] = []
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

    def _take(self) -> sqlite3.Connection:
        with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("the ledger is closed")
            if self._idle:
                return self._idle.pop()
        conn = sqlite3.connect(self._path, timeout=self._busy_ms / 1000, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
        conn.execute("PRAGMA query_only = ON")  # a reader never writes: every write is the writer's transaction
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
