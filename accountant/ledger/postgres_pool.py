"""Connections to the PostgreSQL ledger's database: a small thread-safe pool of autocommit sessions, each
bounded in how long it waits for a lock and idles inside a transaction, and the advisory-lock keys the ledger
and the migrations take. With accountant/ledger/postgres.py, the only modules that use psycopg.
"""

from __future__ import annotations

import hashlib
import json
import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import pq

from accountant.errors import LedgerBusy
from accountant.ledger.charges import Waits

Connection = psycopg.Connection[tuple[Any, ...]]


def lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key for `parts` (sha256, so unambiguous and stable across versions).

    Example:
        >>> key = lock_key("ledger", "ana", "sales")
        >>> key == lock_key("ledger", "ana", "sales") != lock_key("ledger", "an", "asales"), -(2**63) <= key < 2**63
        (True, True)
    """
    digest = hashlib.sha256(json.dumps(["dp-proxy", *parts]).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# --- connections ------------------------------------------------------------------------------------


class Pool:
    """At most `size` autocommit connections to one database, opened lazily and reused; thread-safe.

    A connection that broke, or came back inside a transaction, is closed instead of reused. Each session
    runs in UTC, gives up waiting for a lock after `waits.lock_s` (lock_timeout), and is ended by the server
    if it idles inside a transaction for `waits.idle_s` (idle_in_transaction_session_timeout: a frozen
    process's locks last no longer; the product's own transactions never idle, they run statement after
    statement). Waiting for a free connection is bounded by `waits.lock_s` too; connecting, by `timeout_s`.
    """

    def __init__(self, conninfo: str, *, size: int = 8, timeout_s: float = 30.0, waits: Waits | None = None) -> None:
        if size < 1:
            raise ValueError(f"pool size must be >= 1, got {size!r}")
        self._conninfo = conninfo
        self.timeout_s = timeout_s
        self.waits = waits or Waits()
        self._slots = threading.BoundedSemaphore(size)
        self._idle: queue.LifoQueue[Connection] = queue.LifoQueue()
        self._closed = False

    def _connect(self) -> Connection:
        conn = psycopg.connect(self._conninfo, autocommit=True, connect_timeout=max(1, int(self.timeout_s)))
        try:
            conn.execute(
                "SELECT set_config('TimeZone', 'UTC', false), set_config('lock_timeout', %s, false),"
                " set_config('idle_in_transaction_session_timeout', %s, false)",
                (ms(self.waits.lock_s), ms(self.waits.idle_s)),
            )
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection for this thread until the block ends."""
        if self._closed:
            raise RuntimeError("the PostgreSQL pool is closed")
        if not self._slots.acquire(timeout=self.waits.lock_s):
            raise LedgerBusy(f"no PostgreSQL connection free within {self.waits.lock_s:g} s; retry shortly",
                             retry_after_s=self.waits.retry_after_s)
        try:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = self._connect()
            try:
                yield conn
            finally:
                reusable = (
                    not self._closed
                    and not conn.closed
                    and not conn.broken
                    and conn.info.transaction_status == pq.TransactionStatus.IDLE
                )
                if reusable:
                    self._idle.put(conn)
                else:
                    conn.close()
        finally:
            self._slots.release()

    def close(self) -> None:
        """Close the idle connections now, and each busy one when it is given back."""
        self._closed = True
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


def ms(seconds: float) -> str:
    """A PostgreSQL duration setting in whole milliseconds, at least 1 (0 would mean no limit).

    Example:
        >>> ms(5.0), ms(0.0001)
        ('5000', '1')
    """
    return str(max(1, int(seconds * 1000)))
