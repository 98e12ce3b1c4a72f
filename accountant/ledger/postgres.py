"""The ledger in PostgreSQL, shared by any number of proxy processes; with its pool, where psycopg is used.

`PostgresLedger` implements the same `Ledger` protocol as `SqliteLedger` and admits through the same
`_Admitting.admit`: only the storage hooks differ. The check-and-charge is atomic *in the database*, so
replicas sharing one database can never overspend. Schema changes are versioned migrations applied at
start-up under an advisory lock (`migrate`, accountant/ledger/postgres_schema.py), which the audit log reuses for
its own table; the connections are accountant/ledger/postgres_pool.py's.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

import psycopg

from accountant.audit.chain import AuditRecord
from accountant.audit.chain_tables import POSTGRES_MIGRATIONS, append
from accountant.errors import ChargeUncertain, LedgerBusy
from accountant.filter import Entry, Spend, total
from accountant.ledger import budget_ops, kept_bounds, tallies
from accountant.ledger.admit import Since, _Admitting, _Memos
from accountant.ledger.budget_ops import StoredOp, allowance_of, op_of
from accountant.ledger.charges import ANSWERED, Charge, ChargeFilter, Claim, Clock, StoredRelease, Waits, _utcnow
from accountant.ledger.kept_bounds import KeptBounds
from accountant.ledger.postgres_pool import Connection, Pool, lock_key
from accountant.ledger.postgres_pool import ms as _ms
from accountant.ledger.postgres_schema import MIGRATIONS, migrate
from accountant.ledger.sql_rows import COLUMNS, charge_of, charge_row, since_of, since_sql, where

# Operators' budget operations against admits: admits hold it shared, an operation exclusive (`_operating`).
_OPS_LOCK = int.from_bytes(hashlib.sha256(b"dp-proxy budget operations").digest()[:8], "big", signed=True)

_CLAIM = "SELECT analyst, key, dataset, request_sha256, charge_id, outcome FROM idempotency_keys"
_COLUMNS = COLUMNS.format(at="at")


def _where(
    analyst: str | None, dataset: str | None, since: datetime | None, until: datetime | None
) -> tuple[str, tuple[object, ...]]:
    return where(analyst, dataset, since, until, mark="%s", at_column="at", moment=lambda moment: moment)


def _since(conn: Connection, analyst: str | None, dataset: str, seq: int) -> Since:
    clause, params = _where(analyst, dataset, None, None)
    sql = since_sql(clause, "%s")
    return since_of(conn.execute(sql, (*params, *params, seq)).fetchall(), seq)


class PostgresLedger(_Admitting):
    """A durable ledger in PostgreSQL; safe across threads, processes and hosts sharing the database.

    Concurrency design. `admit` is one transaction on one pooled connection: `_write` opens it, and each storage
    hook takes a transaction-scoped advisory lock before it reads. `_since(analyst, dataset, …)` locks the pair
    (analyst, dataset); `_since(None, dataset, …)`, which only an admit checking the dataset's shared budget
    calls, also locks the dataset. `_insert` adds the charge and COMMIT releases the locks. So every admit on
    one pair, from any process, queues on that pair's lock, and every admit checking a dataset budget also
    queues on the dataset's lock, taken second (always in that order, so they cannot deadlock). Under READ
    COMMITTED each statement takes a fresh snapshot, so the read after a lock sees every charge committed by
    earlier holders (PostgreSQL makes a commit visible before it releases the transaction's locks). Admits on
    other pairs do not wait (the insert's trigger locks only the pair's own count, accountant/ledger/tallies.py).

    Why advisory locks: a `SELECT … FOR UPDATE` needs a row per (analyst, dataset) to exist first (an
    extra upsert per admit and a table of lock rows), and SERIALIZABLE needs a retry loop whose
    predicate-lock false positives grow with load. An advisory lock is held exactly for the transaction,
    vanishes with a crashed session, and costs one round trip. Its one duty: every writer of `charges`
    must take it, and only this class writes `charges`.
    """

    def __init__(self, url: str, *, clock: Clock = _utcnow, timeout_s: float = 30.0, pool_size: int = 8,
                 waits: Waits | None = None) -> None:
        self._clock = clock
        self._memos = _Memos()
        self._waits = waits or Waits()
        self._pool = Pool(url, size=pool_size, timeout_s=timeout_s, waits=self._waits)
        self._local = threading.local()  # the connection of this thread's open admit, if any
        try:
            migrate(self._pool, "ledger", MIGRATIONS)
            migrate(self._pool, "audit", POSTGRES_MIGRATIONS)  # the audit chain: admit appends to it
            migrate(self._pool, "chosen_bounds", kept_bounds.POSTGRES_MIGRATIONS)  # its own component: additive
            migrate(self._pool, "budget_ops", budget_ops.POSTGRES_MIGRATIONS)  # operators' grants and periods
        except BaseException:
            self._pool.close()
            raise

    @contextmanager
    def _bounded(self) -> Iterator[None]:
        """A lock wait or a statement past its bound is `LedgerBusy`: PostgreSQL cancelled the statement, so
        the transaction is rolled back and nothing of it was written."""
        try:
            yield
        except (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled) as err:
            raise LedgerBusy(
                f"the ledger could not take its locks within {self._waits.lock_s:g} s (another process holds "
                "them, or is stalled holding them); its transaction was rolled back: retry after Retry-After",
                retry_after_s=self._waits.retry_after_s) from err

    @contextmanager
    def _write(self) -> Iterator[None]:
        """The admit's transaction. Its statements are bounded (lock_timeout, and statement_timeout from its
        first lock on, `_locked`). An error of the COMMIT itself leaves its outcome unknown (the connection
        may have dropped after the server committed): that is `ChargeUncertain`, never a free refusal."""
        done = False
        with self._bounded(), self._pool.connection() as conn:
            try:
                with conn.transaction():
                    self._local.conn, self._local.locked, self._local.locking = conn, set(), True
                    try:
                        yield
                    finally:
                        self._local.conn = None
                    done = True
            except Exception as err:
                if not done:
                    raise
                raise ChargeUncertain("the ledger did not confirm the charge's commit: it counts as charged",
                                      charge=None, retry_after_s=self._waits.retry_after_s) from err

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """A report's read: no advisory lock, so it never waits behind an admit (a frozen one included). It
        reads committed charges only, and `_tallied`'s watermark count makes a memo brought up to date this
        way sound: a charge that commits later below the watermark changes that count, and the next reader
        starts over."""
        with self._bounded(), self._pool.connection() as conn, conn.transaction():
            self._local.conn, self._local.locked, self._local.locking = conn, set(), False
            try:
                yield
            finally:
                self._local.conn = None

    def _locked(self, *key: str) -> Connection:
        """The open admit's connection, holding the advisory lock on `key` (taken once per transaction; the
        first one also sets the transaction's statement_timeout). In a report's read, the connection only."""
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            raise RuntimeError("PostgresLedger storage hooks run only inside _write()")
        if self._local.locking and key not in self._local.locked:
            if self._local.locked:
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("ledger", *key),))
            else:  # the first lock comes with the operations' lock, shared (`_operating` takes it exclusive)
                conn.execute("SELECT set_config('statement_timeout', %s, true), pg_advisory_xact_lock_shared(%s),"
                             " pg_advisory_xact_lock(%s)",
                             (_ms(self._waits.statement_s), _OPS_LOCK, lock_key("ledger", *key)))
            self._local.locked.add(key)
        return conn

    def _since(self, analyst: str | None, dataset: str, seq: int) -> Since:
        conn = self._locked("pair", analyst, dataset) if analyst is not None else self._locked("dataset", dataset)
        return _since(conn, analyst, dataset, seq)

    @contextmanager
    def _operating(self) -> Iterator[None]:
        """An operation's transaction: the operations' lock, exclusive, first. Every admit holds it shared
        from its first lock to its commit, so this waits for the admits in flight, and later ones wait for
        this: each reads the operations wholly before or wholly after it, and a period's floor (the highest
        charge number) has no uncommitted charge below it."""
        with self._write():
            conn: Connection = self._local.conn
            conn.execute("SELECT set_config('statement_timeout', %s, true), pg_advisory_xact_lock(%s)",
                         (_ms(self._waits.statement_s), _OPS_LOCK))
            self._local.locked.add(("ops",))
            yield

    def _ops(self, analyst: str | None, dataset: str) -> list[StoredOp]:
        conn = self._locked("pair", analyst, dataset) if analyst is not None else self._locked("dataset", dataset)
        params = (dataset, analyst) if analyst is not None else (dataset,)
        rows = conn.execute(budget_ops.select_sql("%s", analyst=analyst is not None), params).fetchall()
        return [op_of(row, row[2].astimezone(UTC)) for row in rows]

    def _all_ops(self, dataset: str | None) -> list[StoredOp]:
        clause, params = ("WHERE dataset = %s", (dataset,)) if dataset is not None else ("", ())
        conn: Connection = self._local.conn
        rows = conn.execute(f"SELECT {budget_ops.COLUMNS} FROM budget_ops {clause} ORDER BY seq", params).fetchall()
        return [op_of(row, row[2].astimezone(UTC)) for row in rows]

    def _top(self) -> int:
        conn: Connection = self._local.conn
        row = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM charges").fetchone()
        assert row is not None
        return int(row[0])

    def _insert_op(self, op: StoredOp) -> int:
        conn: Connection = self._local.conn
        row = conn.execute(f"INSERT INTO budget_ops ({budget_ops.INSERT_COLUMNS}) VALUES"
                           " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING seq", op.row(op.at)).fetchone()
        assert row is not None
        return int(row[0])

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        with self._reading():  # the current budget period's
            floor = allowance_of(self._ops(analyst, dataset), analyst).floor
            found = _since(self._local.conn, analyst, dataset, floor).after
        return tuple(entry for entry, count in found for entry in [entry] * count)

    def _insert(self, charge: Charge) -> None:
        conn = self._locked("pair", charge.analyst, charge.dataset)
        conn.execute(f"INSERT INTO charges ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                     charge_row(charge, charge.at))

    def _record(self, record: AuditRecord, at: datetime) -> None:
        conn = self._locked("pair", record.analyst or "", record.dataset or "")  # the admit's connection
        append(conn, record, at, postgres=True)  # locks the chain's head row until the admit commits

    def _claimed(self, analyst: str, key: str) -> Claim | None:
        # the key's own lock, taken first: admits binding one key serialise whatever their datasets (the
        # order is key, pair, dataset, chain head in every admit, so they cannot deadlock)
        conn = self._locked("key", analyst, key)
        row = conn.execute(f"{_CLAIM} WHERE analyst = %s AND key = %s", (analyst, key)).fetchone()
        return None if row is None else Claim(*row)

    def _bind(self, claim: Claim) -> None:
        conn = self._locked("key", claim.analyst, claim.key)
        conn.execute("INSERT INTO idempotency_keys (analyst, key, dataset, request_sha256, charge_id)"
                     " VALUES (%s, %s, %s, %s, %s)",
                     (claim.analyst, claim.key, claim.dataset, claim.request_sha256, claim.charge_id))

    def _charge(self, charge_id: str) -> Charge:
        conn: Connection = self._local.conn
        row = conn.execute(f"SELECT {_COLUMNS} FROM charges WHERE id = %s", (charge_id,)).fetchone()
        assert row is not None  # a claim's charge: REFERENCES charges (id)
        return charge_of(row, row[3].astimezone(UTC))

    def claim(self, analyst: str, key: str) -> Claim | None:
        with self._bounded(), self._pool.connection() as conn:
            row = conn.execute(f"{_CLAIM} WHERE analyst = %s AND key = %s", (analyst, key)).fetchone()
        return None if row is None else Claim(*row)

    def end_claim(self, analyst: str, key: str, code: str) -> Claim | None:
        with self._bounded(), self._pool.connection() as conn:
            row = conn.execute(
                "UPDATE idempotency_keys SET outcome = coalesce(outcome, %s) WHERE analyst = %s AND key = %s"
                " RETURNING analyst, key, dataset, request_sha256, charge_id, outcome", (code, analyst, key),
            ).fetchone()  # one statement: the row lock orders it with a release storing the key's outcome
        return None if row is None else Claim(*row)

    def probe(self, datasets: Sequence[str], timeout_s: float) -> None:
        """Take each dataset's advisory lock and the audit chain's head row, as admits do (in their order),
        waiting at most `timeout_s` for each, and let go: a stalled holder makes this `LedgerBusy`."""
        with self._bounded(), self._pool.connection() as conn, conn.transaction():
            conn.execute("SELECT set_config('lock_timeout', %s, true), pg_advisory_xact_lock_shared(%s)",
                         (_ms(timeout_s), _OPS_LOCK))  # first, as admits take it
            for dataset in sorted(set(datasets)):
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("ledger", "dataset", dataset),))
            conn.execute("SELECT 1 FROM audit_head WHERE id = 1 FOR UPDATE")

    def spent(self, analyst: str, dataset: str) -> Spend:
        with self._pool.connection() as conn:
            rows = conn.execute(
                "SELECT epsilon, delta FROM charges WHERE analyst = %s AND dataset = %s", (analyst, dataset)
            ).fetchall()
        return total(rows)  # summed exactly in Python: SQL SUM() rounds arbitrarily

    def _charges(self, where: ChargeFilter, limit: int, offset: int) -> tuple[Charge, ...]:
        analyst, dataset, since, until = where.analyst, where.dataset, where.since, where.until
        clause, params = _where(analyst, dataset, since, until)
        sql = f"SELECT {_COLUMNS} FROM charges WHERE {clause} ORDER BY at DESC, seq DESC LIMIT %s OFFSET %s"
        with self._pool.connection() as conn:
            rows = conn.execute(sql, (*params, limit, offset)).fetchall()
        return tuple(charge_of(row, row[3].astimezone(UTC)) for row in rows)

    def _count(self, where: ChargeFilter) -> int:
        analyst, dataset, since, until = where.analyst, where.dataset, where.since, where.until
        clause, params = _where(analyst, dataset, since, until)
        with self._pool.connection() as conn:
            row = conn.execute(tallies.count_sql(clause, timed=since is not None or until is not None),
                               params).fetchone()
        assert row is not None
        return int(row[0])

    def stored_release(self, analyst: str, dataset: str, request_sha256: str) -> StoredRelease | None:
        with self._pool.connection() as conn:
            row = conn.execute(
                "SELECT charge_id, body FROM releases WHERE analyst = %s AND dataset = %s AND request_sha256 = %s",
                (analyst, dataset, request_sha256),
            ).fetchone()
        return None if row is None else StoredRelease(analyst, dataset, request_sha256, row[0], bytes(row[1]))

    def store_release(
        self, release: StoredRelease, audit: AuditRecord | None = None, *, idempotency_key: str | None = None
    ) -> bool:
        """Keep `release` for repeats unless a release of the same request is stored (then False, nothing
        written); with `audit`, append that entry to the chain in the same transaction (a refused entry is
        raised after the release commits, as SqliteLedger.store_release); with `idempotency_key`, set the
        key's outcome in the same transaction, and keep the release only if it had none."""
        refused: Exception | None = None
        with self._bounded(), self._pool.connection() as conn, conn.transaction():
            if idempotency_key is not None and not conn.execute(
                "UPDATE idempotency_keys SET outcome = %s WHERE analyst = %s AND key = %s AND charge_id = %s"
                " AND outcome IS NULL", (ANSWERED, release.analyst, idempotency_key, release.charge_id),
            ).rowcount:
                return False  # the key's charge has its outcome already: this run is not released
            inserted = conn.execute(
                "INSERT INTO releases (analyst, dataset, request_sha256, charge_id, body)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (release.analyst, release.dataset, release.request_sha256, release.charge_id, release.body),
            ).rowcount
            if not inserted:
                return False  # another release of this request was first: this one is not released
            if audit is not None:
                try:
                    with conn.transaction():  # a savepoint: a refused entry leaves the release to commit
                        append(conn, audit, self._clock().astimezone(UTC), postgres=True)  # last: brief head lock
                except Exception as err:
                    refused = err
        if refused is not None:
            raise refused  # after the release committed: the answer is withheld, a repeat returns it
        return True

    def keep_bounds(self, kept: KeptBounds) -> None:
        row = (kept.dataset, kept.scope, kept.shape_sha256, kept.stamp, kept.bounds, self._clock())
        with self._bounded(), self._pool.connection() as conn, conn.transaction():
            conn.execute(kept_bounds.keep_sql("%s", "at"), row)

    def reuse_bounds(self, dataset: str, scope: str, shape_sha256: str, stamp: str, max_uses: int) -> str | None:
        with self._bounded(), self._pool.connection() as conn, conn.transaction():
            rows = conn.execute(kept_bounds.reuse_sql("%s"), (dataset, scope, shape_sha256, stamp, max_uses)).fetchall()
        return str(rows[0][0]) if rows else None

    def close(self) -> None:
        self._pool.close()
