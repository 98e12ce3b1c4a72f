"""The audit log: every query request and what became of it, append-only and hash-chained.

Entry n stores `prev_hash` (the hash of entry n-1, or `GENESIS` for n = 1) and `hash` = sha256 of the
canonical JSON of all its other fields. `seq` runs 1, 2, 3, … without gaps, and a one-row head table holds
the last (seq, hash), updated in the same transaction as each append. So `verify` finds any edited,
deleted, reordered or inserted row, the last one included. Appends are serialised by the database (SQLite's
write lock; a row lock on the PostgreSQL head), so the chain never forks, across processes too.

What it cannot find: someone with write access who recomputes every hash after a change and the head too.
Against that, keep the head hash that `verify` reports somewhere the database's writers cannot reach.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from accountant.audit.chain import (
    DECISIONS,
    GENESIS,
    AuditEntry,
    AuditRecord,
    Decision,
    VerifyResult,
    chain,
    entry_hash,
    seal,
    sql_sha256,
    verify_chain,
)
from accountant.audit.chain_tables import FIELDS, POSTGRES_MIGRATIONS, Coverage, append, from_us, migrate_sqlite, to_us
from accountant.audit.chain_tables import coverage as coverage_of
from accountant.file_lock import writer_lock
from accountant.ledger.charges import Waits
from accountant.ledger.postgres import Pool, migrate
from accountant.ledger.sqlite import use_wal
from accountant.ledger.stores import store_of

__all__ = [  # the chain's types are part of this module's API
    "DECISIONS", "GENESIS", "AuditEntry", "AuditFilter", "AuditLog", "AuditRecord", "Coverage", "Decision",
    "PostgresAudit", "SqliteAudit", "VerifyResult", "chain", "entry_hash", "open_audit", "seal", "sql_sha256",
    "verify_chain",
]



def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which entries to list or count: each given field must match; since <= at < until."""

    analyst: str | None = None
    dataset: str | None = None
    decision: Decision | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        if self.decision is not None and self.decision not in DECISIONS:
            raise ValueError(f"decision must be one of {DECISIONS}, got {self.decision!r}")
        for name in ("since", "until"):
            moment = getattr(self, name)
            if moment is not None and moment.utcoffset() is None:
                raise ValueError(f"{name} must be timezone-aware, got {moment!r}")


# --- the stores -------------------------------------------------------------------------------------


class AuditLog(Protocol):
    """Append-only storage of audit entries."""

    def append(self, record: AuditRecord) -> AuditEntry:
        """Seal `record` after the last entry and store it, atomically."""
        ...

    def entries(
        self, filters: AuditFilter = AuditFilter(), limit: int = 100, offset: int = 0
    ) -> tuple[AuditEntry, ...]:
        """Entries matching `filters`, newest (highest seq) first, paginated."""
        ...

    def count(self, filters: AuditFilter = AuditFilter()) -> int:
        """How many entries match `filters`."""
        ...

    def verify(self) -> VerifyResult:
        """Check the whole chain and the head, on one consistent snapshot."""
        ...

    def coverage(self, listed: int = 100) -> Coverage:
        """Check that every charge in the ledger at this address has its `admitted` entry, and that every
        `admitted` entry has its charge, on one consistent snapshot (chain_tables.coverage)."""
        ...

    def close(self) -> None:
        ...


def _check_page(limit: int, offset: int) -> None:
    for name, number in (("limit", limit), ("offset", offset)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {number!r}")


def _where(filters: AuditFilter, mark: str, at: Any) -> tuple[str, tuple[object, ...]]:
    conditions = (
        (f"analyst = {mark}", filters.analyst),
        (f"dataset = {mark}", filters.dataset),
        (f"decision = {mark}", filters.decision),
        (f"at >= {mark}", None if filters.since is None else at(filters.since)),
        (f"at < {mark}", None if filters.until is None else at(filters.until)),
    )
    used = [(sql, value) for sql, value in conditions if value is not None]
    return " AND ".join(sql for sql, _ in used) or "1 = 1", tuple(value for _, value in used)


_to_us = to_us


def _sqlite_entry(row: tuple[Any, ...]) -> AuditEntry:
    seq, at_us, *rest = row
    return AuditEntry(seq, from_us(at_us), *rest)


class SqliteAudit:
    """The audit log in a SQLite file (may be the ledger's file: the tables are its own); WAL, FULL sync.

    An append runs in `BEGIN IMMEDIATE`, which takes the file's write lock before the head is read, so
    appends from threads and processes on one file serialise and the chain cannot fork.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Any = _utcnow, timeout_s: float = 30.0) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._path, self._timeout_s = path, timeout_s
        self._writer = writer_lock(path)  # shared with the ledger's connection to this file (file_lock.py)
        self._conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            use_wal(self._conn, timeout_s)
            self._conn.execute("PRAGMA synchronous = FULL")
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._writer:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            finally:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")

    def _migrate(self) -> None:
        with self._transaction() as conn:
            migrate_sqlite(conn)

    def append(self, record: AuditRecord) -> AuditEntry:
        with self._transaction() as conn:
            return append(conn, record, self._clock(), postgres=False)

    def entries(
        self, filters: AuditFilter = AuditFilter(), limit: int = 100, offset: int = 0
    ) -> tuple[AuditEntry, ...]:
        _check_page(limit, offset)
        clause, params = _where(filters, "?", _to_us)
        sql = f"SELECT {FIELDS} FROM audit_log WHERE {clause} ORDER BY seq DESC LIMIT ? OFFSET ?"
        with self._lock:
            rows = self._conn.execute(sql, (*params, limit, offset)).fetchall()
        return tuple(_sqlite_entry(row) for row in rows)

    def count(self, filters: AuditFilter = AuditFilter()) -> int:
        clause, params = _where(filters, "?", _to_us)
        with self._lock:
            (number,) = self._conn.execute(f"SELECT COUNT(*) FROM audit_log WHERE {clause}", params).fetchone()
        return int(number)

    def verify(self) -> VerifyResult:
        # its own connection: a long check must not hold up this object's appends
        conn = sqlite3.connect(self._path, timeout=self._timeout_s, isolation_level=None)
        try:
            conn.execute("BEGIN")  # one read snapshot (WAL): the head and the rows agree
            heads = conn.execute("SELECT seq, hash FROM audit_head").fetchall()
            if len(heads) != 1:
                return VerifyResult(False, 0, None, f"the audit head must be one row, found {len(heads)}")
            rows = conn.execute(f"SELECT {FIELDS} FROM audit_log ORDER BY seq")
            return verify_chain(map(_sqlite_entry, rows), head=tuple(heads[0]))
        finally:
            conn.close()  # ends the read transaction

    def coverage(self, listed: int = 100) -> Coverage:
        conn = sqlite3.connect(self._path, timeout=self._timeout_s, isolation_level=None)
        try:
            conn.execute("BEGIN")  # one read snapshot: a charge and its admitted entry commit together
            has_charges = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'charges'").fetchone() is not None
            return coverage_of(lambda sql: conn.execute(sql).fetchall(), has_charges=has_charges, listed=listed)
        finally:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class PostgresAudit:
    """The audit log in PostgreSQL (normally the ledger's database; the tables are its own).

    An append locks the one head row (`SELECT … FOR UPDATE`), inserts the entry and moves the head, in
    one transaction: appends from every process queue on that row lock, so the chain cannot fork; the
    primary key on `seq` would refuse a fork even so. The head row exists from the first migration, so
    here a row lock needs no upsert (unlike the ledger's per-analyst locks, which are advisory).
    """

    def __init__(self, url: str, *, clock: Any = _utcnow, timeout_s: float = 30.0, pool_size: int = 4,
                 waits: Waits | None = None) -> None:
        self._clock = clock
        self._pool = Pool(url, size=pool_size, timeout_s=timeout_s, waits=waits)
        try:
            migrate(self._pool, "audit", POSTGRES_MIGRATIONS)
        except BaseException:
            self._pool.close()
            raise

    def append(self, record: AuditRecord) -> AuditEntry:
        with self._pool.connection() as conn, conn.transaction():
            return append(conn, record, self._clock(), postgres=True)

    def entries(
        self, filters: AuditFilter = AuditFilter(), limit: int = 100, offset: int = 0
    ) -> tuple[AuditEntry, ...]:
        _check_page(limit, offset)
        clause, params = _where(filters, "%s", lambda moment: moment)
        sql = f"SELECT {FIELDS} FROM audit_log WHERE {clause} ORDER BY seq DESC LIMIT %s OFFSET %s"
        with self._pool.connection() as conn:
            rows = conn.execute(sql, (*params, limit, offset)).fetchall()
        return tuple(map(_postgres_entry, rows))

    def count(self, filters: AuditFilter = AuditFilter()) -> int:
        clause, params = _where(filters, "%s", lambda moment: moment)
        with self._pool.connection() as conn:
            row = conn.execute(f"SELECT count(*) FROM audit_log WHERE {clause}", params).fetchone()
        assert row is not None
        return int(row[0])

    def verify(self) -> VerifyResult:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")  # one snapshot
            heads = conn.execute("SELECT seq, hash FROM audit_head").fetchall()
            if len(heads) != 1:
                return VerifyResult(False, 0, None, f"the audit head must be one row, found {len(heads)}")
            with conn.cursor(name="audit_verify") as cursor:  # server-side: streams a long log
                cursor.itersize = 2000
                cursor.execute(f"SELECT {FIELDS} FROM audit_log ORDER BY seq")
                return verify_chain(map(_postgres_entry, cursor), head=tuple(heads[0]))

    def coverage(self, listed: int = 100) -> Coverage:
        with self._pool.connection() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")  # one snapshot
            row = conn.execute("SELECT to_regclass('charges') IS NOT NULL").fetchone()
            has_charges = bool(row and row[0])
            return coverage_of(lambda sql: conn.execute(sql).fetchall(), has_charges=has_charges, listed=listed)

    def close(self) -> None:
        self._pool.close()


def _postgres_entry(row: tuple[Any, ...]) -> AuditEntry:
    seq, at, *rest = row
    return AuditEntry(seq, at.astimezone(UTC), *rest)


def open_audit(url_or_path: str | os.PathLike[str], waits: Waits | None = None) -> AuditLog:
    """Open (creating or migrating its tables if needed) the audit log at `url_or_path`: a SQLite file
    path or `sqlite:///…`, or a `postgresql://…` URL (normally the ledger's); on PostgreSQL its sessions'
    waits are bounded by `waits` as the ledger's are."""
    kind, target = store_of(url_or_path)
    if kind == "postgresql":
        return PostgresAudit(target, waits=waits)
    return SqliteAudit(target)
