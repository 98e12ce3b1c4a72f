"""The durable ledger in one SQLite file (`SqliteLedger`): WAL, synchronous=FULL, every admit one
`BEGIN IMMEDIATE` transaction, so threads and processes sharing the file can never overspend. Lookups that
read one statement of committed rows (a stored release, a key's claim, a spend, the charges) run on read-only
connections of their own, so they never wait for a write's fsync (accountant/ledger/sqlite_reads.py).

Example:
    >>> import tempfile, pathlib
    >>> from accountant.events import LaplaceEvent
    >>> from accountant.filter import Budget
    >>> from accountant.ledger.charges import Admission
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     ledger = SqliteLedger(pathlib.Path(tmp) / "ledger.db")
    ...     _ = ledger.admit(Admission(analyst="ana", dataset="demo", sql_sha256="ab" * 32,
    ...         event=LaplaceEvent(1, 10.0), epsilon=0.1, delta=0.0, composition="basic", budget=Budget(1.0, 1e-6)))
    ...     spent = ledger.spent("ana", "demo")
    ...     ledger.close()
    >>> spent
    Spend(epsilon=0.1, delta=0.0)
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta

from accountant.audit.chain import AuditRecord
from accountant.audit.chain_tables import append, migrate_sqlite
from accountant.errors import LedgerBusy
from accountant.file_lock import writer_lock
from accountant.filter import Entry, Spend, total
from accountant.ledger import budget_ops, kept_bounds, tallies
from accountant.ledger.admit import Since, _Admitting, _Memos
from accountant.ledger.budget_ops import StoredOp, allowance_of, op_of
from accountant.ledger.charges import ANSWERED, Charge, ChargeFilter, Claim, Clock, StoredRelease, Waits, _utcnow
from accountant.ledger.kept_bounds import KeptBounds
from accountant.ledger.sql_rows import COLUMNS, charge_of, charge_row, since_of, since_sql, where
from accountant.ledger.sqlite_reads import Readers

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
SCHEMA_VERSION = 4  # 2: charges.scope; 3: tallies (accountant/ledger/tallies.py); 4: idempotency_keys
# --- SQLite -----------------------------------------------------------------------------------------

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS charges (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        analyst TEXT NOT NULL,
        dataset TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        sql_sha256 TEXT NOT NULL,
        event TEXT NOT NULL,
        epsilon REAL NOT NULL,
        delta REAL NOT NULL,
        composition TEXT NOT NULL,
        scope TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS charges_by_owner ON charges (analyst, dataset)",
    """CREATE TABLE IF NOT EXISTS releases (
        analyst TEXT NOT NULL,
        dataset TEXT NOT NULL,
        request_sha256 TEXT NOT NULL,
        charge_id TEXT NOT NULL REFERENCES charges (id),
        body BLOB NOT NULL,
        PRIMARY KEY (analyst, dataset, request_sha256)
    )""",
    "CREATE INDEX IF NOT EXISTS charges_by_time ON charges (at_us, seq)",
    "CREATE INDEX IF NOT EXISTS charges_by_dataset ON charges (dataset)",  # the dataset budget's reads
    *tallies.SQLITE,  # an index ends with the rowid (seq): the owner's and the dataset's serve seq > ? too
    # an analyst's idempotency key and the charge it paid, committed with that charge (kept as long as it)
    """CREATE TABLE IF NOT EXISTS idempotency_keys (
        analyst TEXT NOT NULL,
        key TEXT NOT NULL,
        dataset TEXT NOT NULL,
        request_sha256 TEXT NOT NULL,
        charge_id TEXT NOT NULL UNIQUE REFERENCES charges (id),
        outcome TEXT,
        PRIMARY KEY (analyst, key)
    )""",
)
_CLAIM = "SELECT analyst, key, dataset, request_sha256, charge_id, outcome FROM idempotency_keys"
_COLUMNS = COLUMNS.format(at="at_us")
# from version k to k + 1 (version 4's table is created by _SCHEMA, which runs first)
_UPGRADES = {1: ("ALTER TABLE charges ADD COLUMN scope TEXT",), 2: tallies.FILL, 3: ()}


def _to_us(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def _where(
    analyst: str | None, dataset: str | None, since: datetime | None, until: datetime | None
) -> tuple[str, tuple[object, ...]]:
    return where(analyst, dataset, since, until, mark="?", at_column="at_us", moment=_to_us)


def use_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch the file to WAL. The switch needs an exclusive lock and SQLite does not wait for it through
    busy_timeout, so processes opening one file at once retry here instead of failing at start-up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _reader(path: str | os.PathLike[str], busy_ms: int) -> sqlite3.Connection:
    """A read-only connection for lookups (sqlite_reads.py): autocommit, so each statement reads the last commit."""
    conn = sqlite3.connect(path, timeout=busy_ms / 1000, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    conn.execute("PRAGMA query_only = ON")  # a reader never writes: every write is the writer's transaction
    return conn


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """`BEGIN IMMEDIATE` … `COMMIT`; on any exception (a refusal included) or a failed COMMIT, roll back."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


class SqliteLedger(_Admitting):
    """A durable ledger in one SQLite file (WAL, synchronous=FULL); safe across threads and processes.

    One connection per ledger object, guarded by a lock; `admit` runs in `BEGIN IMMEDIATE`, which takes
    the database's write lock before reading the spend, so concurrent admits on the same file serialise.
    `timeout_s` bounds the waits at start-up; every write after it waits at most `waits.lock_s` in all,
    for this object's lock, this process's writer lock and SQLite's (a frozen process holding SQLite's
    write lock keeps it until it ends: each writer then gives up with `LedgerBusy`, writing nothing).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, clock: Clock = _utcnow, timeout_s: float = 30.0,
        waits: Waits | None = None,
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._waits = waits or Waits()
        self._busy_ms = int(timeout_s * 1000)  # the most SQLite's busy handler ever waits (0: not at all)
        self._memos = _Memos()
        self._writer = writer_lock(path)  # shared with the audit log's connection to this file (file_lock.py)
        self._conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            use_wal(self._conn, timeout_s)
            self._conn.execute("PRAGMA synchronous = FULL")
            self._create_schema()
            with self._writer, _immediate(self._conn):
                self._conn.execute(kept_bounds.SQLITE_TABLE)  # its own table, created if missing: additive
        except BaseException:
            self._conn.close()
            raise
        text = os.fspath(path)  # an in-memory database has no second connection: reads share the writer's
        self._reads = Readers(functools.partial(_reader, path, self._busy_ms), self._conn, self._lock,
                              shared=text in ("", ":memory:") or text.startswith("file:"))

    def _create_schema(self) -> None:
        with self._writer, _immediate(self._conn):
            migrate_sqlite(self._conn)  # the audit chain's tables: admit appends to them
            migrate_sqlite(self._conn, "budget_ops", budget_ops.SQLITE_MIGRATIONS)  # operators' grants, periods
            for statement in _SCHEMA:
                self._conn.execute(statement)
            versions = self._conn.execute("SELECT version FROM schema_version").fetchall()
            if not versions:
                self._conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
                return
            while len(versions) == 1 and versions[0][0] in _UPGRADES:  # an older file: upgrade in place
                (version,) = versions[0]
                for statement in _UPGRADES[version]:
                    self._conn.execute(statement)
                self._conn.execute("UPDATE schema_version SET version = ?", (version + 1,))
                versions = [(version + 1,)]
            if versions != [(SCHEMA_VERSION,)]:
                found = ", ".join(str(v) for (v,) in versions)
                raise RuntimeError(f"ledger schema version {found} is not {SCHEMA_VERSION}; upgrade dp-proxy")

    @contextmanager
    def _write(self) -> Iterator[None]:
        # BEGIN IMMEDIATE takes SQLite's write lock before the spend is read: admits on one file serialise
        with self._writing(self._waits.lock_s), _immediate(self._conn):
            yield

    @contextmanager
    def _writing(self, timeout_s: float) -> Iterator[None]:
        """This object's lock and the file's writer lock, with SQLite's busy timeout set to what is left of
        `timeout_s`: a wait past it is `LedgerBusy` (SQLite's "database is locked" included)."""
        deadline = time.monotonic() + timeout_s
        if not self._lock.acquire(timeout=timeout_s):
            raise self._busy(timeout_s)
        try:
            if not self._writer.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise self._busy(timeout_s)
            try:
                left_ms = int(max(0.0, deadline - time.monotonic()) * 1000)
                self._conn.execute(f"PRAGMA busy_timeout = {min(self._busy_ms, left_ms)}")
                try:
                    yield
                except sqlite3.OperationalError as err:
                    if "locked" in str(err) or "busy" in str(err):  # SQLITE_BUSY: rolled back, nothing written
                        raise self._busy(timeout_s) from err
                    raise
            finally:
                self._writer.release()
        finally:
            self._lock.release()

    def _busy(self, timeout_s: float) -> LedgerBusy:
        return LedgerBusy(f"the ledger file was locked by another writer for more than {timeout_s:g} s (a process "
                          "stalled inside a write?); its transaction was rolled back: retry after Retry-After",
                          retry_after_s=self._waits.retry_after_s)

    def _claimed(self, analyst: str, key: str) -> Claim | None:
        row = self._conn.execute(f"{_CLAIM} WHERE analyst = ? AND key = ?", (analyst, key)).fetchone()
        return None if row is None else Claim(*row)

    def _bind(self, claim: Claim) -> None:
        self._conn.execute("INSERT INTO idempotency_keys (analyst, key, dataset, request_sha256, charge_id)"
                           " VALUES (?, ?, ?, ?, ?)",
                           (claim.analyst, claim.key, claim.dataset, claim.request_sha256, claim.charge_id))

    def _charge(self, charge_id: str) -> Charge:
        row = self._conn.execute(f"SELECT {_COLUMNS} FROM charges WHERE id = ?", (charge_id,)).fetchone()
        return charge_of(row, _EPOCH + row[3] * _MICROSECOND)

    def claim(self, analyst: str, key: str) -> Claim | None:
        rows = self._reads.read(f"{_CLAIM} WHERE analyst = ? AND key = ?", (analyst, key))
        return Claim(*rows[0]) if rows else None

    def end_claim(self, analyst: str, key: str, code: str) -> Claim | None:
        with self._write():
            self._conn.execute("UPDATE idempotency_keys SET outcome = ? WHERE analyst = ? AND key = ?"
                               " AND outcome IS NULL", (code, analyst, key))
            return self._claimed(analyst, key)

    def probe(self, datasets: Sequence[str], timeout_s: float) -> None:
        """SQLite has one write lock for the file: take it (within `timeout_s`) and let go."""
        with self._writing(timeout_s), _immediate(self._conn):
            pass

    def _insert(self, charge: Charge) -> None:
        self._conn.execute(f"INSERT INTO charges ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           charge_row(charge, _to_us(charge.at)))

    def _record(self, record: AuditRecord, at: datetime) -> None:
        append(self._conn, record, at, postgres=False)  # inside BEGIN IMMEDIATE: the file's write lock

    def spent(self, analyst: str, dataset: str) -> Spend:
        rows = self._reads.read("SELECT epsilon, delta FROM charges WHERE analyst = ? AND dataset = ?",
                                (analyst, dataset))
        return total(rows)  # summed exactly in Python: SQL SUM() rounds arbitrarily

    def _reading(self) -> AbstractContextManager[object]:
        return self._lock  # the connection is this object's; one statement needs no transaction

    def _operating(self) -> AbstractContextManager[object]:
        return self._write()  # BEGIN IMMEDIATE: the file's one write lock, as every admit's

    def _ops(self, analyst: str | None, dataset: str) -> list[StoredOp]:
        params = (dataset, analyst) if analyst is not None else (dataset,)
        rows = self._conn.execute(budget_ops.select_sql("?", analyst=analyst is not None), params).fetchall()
        return [op_of(row, _EPOCH + row[2] * _MICROSECOND) for row in rows]

    def _all_ops(self, dataset: str | None) -> list[StoredOp]:
        clause, params = ("WHERE dataset = ?", (dataset,)) if dataset is not None else ("", ())
        rows = self._conn.execute(f"SELECT {budget_ops.COLUMNS} FROM budget_ops {clause} ORDER BY seq",
                                  params).fetchall()
        return [op_of(row, _EPOCH + row[2] * _MICROSECOND) for row in rows]

    def _top(self) -> int:
        (top,) = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM charges").fetchone()
        return int(top)

    def _insert_op(self, op: StoredOp) -> int:
        cursor = self._conn.execute(f"INSERT INTO budget_ops ({budget_ops.INSERT_COLUMNS}) VALUES"
                                    " (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", op.row(_to_us(op.at)))
        assert cursor.lastrowid is not None
        return int(cursor.lastrowid)

    def _since(self, analyst: str | None, dataset: str, seq: int) -> Since:
        clause, params = _where(analyst, dataset, None, None)
        rows = self._conn.execute(since_sql(clause, "?"), (*params, *params, seq)).fetchall()
        return since_of(rows, seq)

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        with self._lock:  # the current budget period's
            floor = allowance_of(self._ops(analyst, dataset), analyst).floor
            found = self._since(analyst, dataset, floor).after
        return tuple(entry for entry, count in found for entry in [entry] * count)

    def _charges(self, where: ChargeFilter, limit: int, offset: int) -> tuple[Charge, ...]:
        analyst, dataset, since, until = where.analyst, where.dataset, where.since, where.until
        clause, params = _where(analyst, dataset, since, until)
        sql = f"SELECT {_COLUMNS} FROM charges WHERE {clause} ORDER BY at_us DESC, seq DESC LIMIT ? OFFSET ?"
        rows = self._reads.read(sql, (*params, limit, offset))
        return tuple(charge_of(row, _EPOCH + row[3] * _MICROSECOND) for row in rows)

    def _count(self, where: ChargeFilter) -> int:
        analyst, dataset, since, until = where.analyst, where.dataset, where.since, where.until
        clause, params = _where(analyst, dataset, since, until)
        sql = tallies.count_sql(clause, timed=since is not None or until is not None)
        ((number,),) = self._reads.read(sql, params)
        return int(number)

    def stored_release(self, analyst: str, dataset: str, request_sha256: str) -> StoredRelease | None:
        rows = self._reads.read(
            "SELECT charge_id, body FROM releases WHERE analyst = ? AND dataset = ? AND request_sha256 = ?",
            (analyst, dataset, request_sha256),
        )
        if not rows:
            return None
        ((charge_id, body),) = rows
        return StoredRelease(analyst, dataset, request_sha256, str(charge_id), bytes(body))

    def store_release(
        self, release: StoredRelease, audit: AuditRecord | None = None, *, idempotency_key: str | None = None
    ) -> bool:
        """Keep `release` for repeats unless a release of the same request is stored (then False, nothing
        written); with `audit` (the answer's `answered` entry), append that entry to the chain in the same
        transaction, committed FULL: the answer may leave as soon as this returns. If the chain refuses the
        entry, the release still commits (the charge paid for it: a repeat returns it) and the refusal is
        raised, so the answer is withheld. With `idempotency_key`, the release is also the key's outcome
        (`Claim.outcome`), set in the same transaction, and kept only if the key had none.

        Without `audit` the release commits without its own fsync (synchronous = NORMAL, for this one
        write): in WAL mode a process crash cannot lose it, and the next FULL commit on this file makes it
        durable too, since one fsync of the WAL covers every frame before it. The server releases no answer
        before its audit entry commits FULL on this same file (here, or proxy/http/middleware/audit_trail.py), so a
        release an analyst has seen is durable; one lost to a power cut was never sent, and asking again is
        charged afresh, as for a request never answered."""
        row = (release.analyst, release.dataset, release.request_sha256, release.charge_id, release.body)
        insert = ("INSERT OR IGNORE INTO releases (analyst, dataset, request_sha256, charge_id, body)"
                  " VALUES (?, ?, ?, ?, ?)")
        if audit is not None or idempotency_key is not None:  # one transaction, one fsync, for all of it
            refused: Exception | None = None
            with self._write():
                if idempotency_key is not None and self._conn.execute(
                    "UPDATE idempotency_keys SET outcome = ? WHERE analyst = ? AND key = ? AND charge_id = ?"
                    " AND outcome IS NULL", (ANSWERED, release.analyst, idempotency_key, release.charge_id),
                ).rowcount == 0:
                    return False  # the key's charge has its outcome already: this run is not released
                if self._conn.execute(insert, row).rowcount == 0:
                    return False  # another release of this request was first: this one is not released
                if audit is None:
                    return True
                self._conn.execute("SAVEPOINT answered")
                try:
                    append(self._conn, audit, self._clock().astimezone(UTC), postgres=False)
                except Exception as err:  # the chain refused it: keep the release (a repeat returns it) and say so
                    self._conn.execute("ROLLBACK TO answered")
                    refused = err
                self._conn.execute("RELEASE answered")
            if refused is not None:
                raise refused
            return True
        with self._writing(self._waits.lock_s):
            self._conn.execute("PRAGMA synchronous = NORMAL")
            try:
                return bool(self._conn.execute(insert, row).rowcount)
            finally:
                self._conn.execute("PRAGMA synchronous = FULL")  # every charge commits with its own fsync

    def keep_bounds(self, kept: KeptBounds) -> None:
        """Without an fsync of its own (synchronous = NORMAL, as a release without its audit entry): a power cut
        may lose the record or a use, which costs a fresh draw or one use more, never privacy."""
        row = (kept.dataset, kept.scope, kept.shape_sha256, kept.stamp, kept.bounds, _to_us(self._clock()))
        with self._writing(self._waits.lock_s), self._unsynced():
            self._conn.execute(kept_bounds.keep_sql("?", "at_us"), row)

    def reuse_bounds(self, dataset: str, scope: str, shape_sha256: str, stamp: str, max_uses: int) -> str | None:
        with self._writing(self._waits.lock_s), self._unsynced():
            rows = self._conn.execute(kept_bounds.reuse_sql("?"),  # stepped to its end: the write commits here
                                      (dataset, scope, shape_sha256, stamp, max_uses)).fetchall()
        return str(rows[0][0]) if rows else None

    @contextmanager
    def _unsynced(self) -> Iterator[None]:
        self._conn.execute("PRAGMA synchronous = NORMAL")
        try:
            yield
        finally:
            self._conn.execute("PRAGMA synchronous = FULL")  # every charge commits with its own fsync

    def close(self) -> None:
        self._reads.close()
        with self._lock:
            self._conn.close()
