"""The audit chain's tables and its one append, shared by the audit log and the ledger's admit.

A charge and its `admitted` audit entry are written in one transaction (`Ledger.admit`, an `Admission` with
`sql`), so after any
crash every committed charge has its entry and no entry names a charge that was rolled back. For that the
ledger appends to the chain on its own connection, inside its own transaction, through `append` here; the
audit log (`audit/log.py`) appends every other entry through the same function. Both stores create the audit
tables (`migrate_sqlite`, `POSTGRES_MIGRATIONS`), whichever opens the database first.

`coverage` is the other half of the promise: it lists the charges that have no `admitted` entry matching
them (id, analyst, dataset, SQL hash, ε, δ) and the `admitted` entries whose charge is not in the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from accountant.audit.chain import GENESIS, AuditEntry, AuditRecord, seal

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

FIELDS = "seq, at, analyst, dataset, sql, sql_sha256, decision, error_code, charge_id, epsilon, delta, prev_hash, hash"

# SQLite: `at` holds microseconds since the epoch (as the ledger's at_us); one tuple of statements per version
SQLITE_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        """CREATE TABLE audit_log (
            seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, analyst TEXT, dataset TEXT, sql TEXT NOT NULL,
            sql_sha256 TEXT NOT NULL, decision TEXT NOT NULL, error_code TEXT, charge_id TEXT,
            epsilon REAL NOT NULL, delta REAL NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL
        )""",
        "CREATE INDEX audit_by_time ON audit_log (at)",
        "CREATE INDEX audit_by_analyst ON audit_log (analyst, dataset)",
        "CREATE TABLE audit_head (id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL, hash TEXT NOT NULL)",
        f"INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '{GENESIS}')",
    ),
    ("CREATE INDEX audit_by_charge ON audit_log (charge_id)",),  # 2: coverage finds a charge's entries
)
POSTGRES_MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE TABLE audit_log (
        seq bigint PRIMARY KEY, at timestamptz NOT NULL, analyst text, dataset text, sql text NOT NULL,
        sql_sha256 text NOT NULL, decision text NOT NULL, error_code text, charge_id text,
        epsilon double precision NOT NULL, delta double precision NOT NULL,
        prev_hash text NOT NULL, hash text NOT NULL
    );
    CREATE INDEX audit_by_time ON audit_log (at);
    CREATE INDEX audit_by_analyst ON audit_log (analyst, dataset);
    CREATE TABLE audit_head (id integer PRIMARY KEY CHECK (id = 1), seq bigint NOT NULL, hash text NOT NULL);
    INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '{GENESIS}');
    """,
    "CREATE INDEX audit_by_charge ON audit_log (charge_id)",
)


def to_us(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def from_us(at_us: int) -> datetime:
    return _EPOCH + at_us * _MICROSECOND


def row_of(entry: AuditEntry, at: object) -> tuple[object, ...]:
    return (entry.seq, at, entry.analyst, entry.dataset, entry.sql, entry.sql_sha256, entry.decision,
            entry.error_code, entry.charge_id, entry.epsilon, entry.delta, entry.prev_hash, entry.hash)


def migrate_sqlite(conn: Any, component: str = "audit",
                   migrations: tuple[tuple[str, ...], ...] = SQLITE_MIGRATIONS) -> None:
    """Create or upgrade a component's tables (the audit tables by default) on a `sqlite3.Connection`, inside
    the caller's write transaction (BEGIN IMMEDIATE). This module opens nothing: the two stores (ledger.py,
    audit/log.py) own the connections."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations ("
                 " component TEXT NOT NULL, version INTEGER NOT NULL, PRIMARY KEY (component, version))")
    applied = [v for (v,) in conn.execute(
        "SELECT version FROM schema_migrations WHERE component = ? ORDER BY version", (component,))]
    if applied != list(range(1, len(applied) + 1)) or len(applied) > len(migrations):
        raise RuntimeError(f"{component} schema versions {applied} are not known to this dp-proxy; upgrade dp-proxy")
    for version in range(len(applied) + 1, len(migrations) + 1):
        for statement in migrations[version - 1]:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations (component, version) VALUES (?, ?)", (component, version))


def append(conn: Any, record: AuditRecord, at: datetime, *, postgres: bool) -> AuditEntry:
    """Seal `record` after the head and store it, inside the caller's open transaction on `conn`.

    SQLite: the caller's `BEGIN IMMEDIATE` holds the file's write lock. PostgreSQL: the head row is locked
    here (`FOR UPDATE`) until the caller commits, so appends from every process queue and the chain
    cannot fork. Take it last in a transaction (the ledger's admit does), so it is held briefly.
    """
    mark, lock = ("%s", " FOR UPDATE") if postgres else ("?", "")
    head = conn.execute(f"SELECT seq, hash FROM audit_head WHERE id = 1{lock}").fetchone()
    if head is None:
        raise RuntimeError("the audit head row is missing: the audit log was tampered with")
    entry = seal(record, seq=head[0] + 1, at=at, prev_hash=head[1])
    stored_at = entry.at if postgres else to_us(entry.at)
    conn.execute(f"INSERT INTO audit_log ({FIELDS}) VALUES ({', '.join([mark] * 13)})", row_of(entry, stored_at))
    conn.execute(f"UPDATE audit_head SET seq = {mark}, hash = {mark} WHERE id = 1", (entry.seq, entry.hash))
    return entry


def admitted_entry(charge_id: str, analyst: str, dataset: str, sql: str, epsilon: float, delta: float) -> AuditRecord:
    """The `admitted` entry of a charge: written by the admit, in the transaction that commits the charge."""
    return AuditRecord(analyst=analyst, dataset=dataset, sql=sql, decision="admitted", charge_id=charge_id,
                       epsilon=epsilon, delta=delta)


@dataclass(frozen=True, slots=True)
class Coverage:
    """Charges against `admitted` entries: `unaudited` charges (ids, in ledger order) have no matching
    entry, `orphaned` entries (their charge ids) name no charge. At most `listed` of each are kept; the
    counts are complete."""

    charges: int
    unaudited_count: int
    unaudited: tuple[str, ...]
    orphaned_count: int
    orphaned: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.unaudited_count == 0 and self.orphaned_count == 0


_MATCH = ("a.decision = 'admitted' AND a.charge_id = c.id AND a.analyst = c.analyst AND a.dataset = c.dataset"
          " AND a.sql_sha256 = c.sql_sha256 AND a.epsilon = c.epsilon AND a.delta = c.delta")


def coverage(query: Callable[[str], list[tuple[Any, ...]]], *, has_charges: bool, listed: int = 100) -> Coverage:
    """Check the ledger's `charges` against the chain's `admitted` entries, with `query(sql) -> rows` run in
    one snapshot. In a database without a `charges` table (an audit log kept apart from its ledger) every
    `admitted` entry is orphaned."""
    if not has_charges:
        admitted = "FROM audit_log WHERE decision = 'admitted'"
        (extra,), = query(f"SELECT COUNT(*) {admitted}")
        ids = query(f"SELECT charge_id {admitted} ORDER BY seq LIMIT {int(listed)}")
        return Coverage(0, 0, (), int(extra), tuple(row[0] or "" for row in ids))
    (charges,), = query("SELECT COUNT(*) FROM charges")
    unaudited = f"FROM charges c WHERE NOT EXISTS (SELECT 1 FROM audit_log a WHERE {_MATCH})"
    orphaned = ("FROM audit_log a WHERE a.decision = 'admitted'"
                " AND NOT EXISTS (SELECT 1 FROM charges c WHERE c.id = a.charge_id)")
    (missing,), = query(f"SELECT COUNT(*) {unaudited}")
    (extra,), = query(f"SELECT COUNT(*) {orphaned}")
    first = f"LIMIT {int(listed)}"
    return Coverage(
        charges=int(charges),
        unaudited_count=int(missing),
        unaudited=tuple(row[0] for row in query(f"SELECT c.id {unaudited} ORDER BY c.seq {first}")),
        orphaned_count=int(extra),
        orphaned=tuple(row[0] or "" for row in query(f"SELECT a.charge_id {orphaned} ORDER BY a.seq {first}")),
    )
