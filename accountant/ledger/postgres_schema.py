"""The PostgreSQL ledger's schema: versioned migrations per component, applied at start-up under one advisory
lock (`migrate`, which the audit log reuses for its own table), and the ledger's own migrations (`MIGRATIONS`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from accountant.ledger import tallies
from accountant.ledger.postgres_pool import Pool, ms

# One key for every migration of every component: start-ups of many processes apply them one at a time.
_MIGRATION_LOCK = int.from_bytes(hashlib.sha256(b"dp-proxy schema migrations").digest()[:8], "big", signed=True)


def migrate(pool: Pool, component: str, migrations: Sequence[str]) -> int:
    """Bring `component`'s tables up to `len(migrations)`; returns that version. Idempotent.

    `schema_migrations` records one row per (component, version) applied. Every migration runs in one
    transaction holding one advisory lock, so processes starting together apply each migration once, and
    a failed migration leaves nothing behind. A database newer than this code is refused, not altered.
    """
    with pool.connection() as conn, conn.transaction():
        # start-up waits for another process's migration as long as connecting may take, not an admit's bound
        conn.execute("SELECT set_config('lock_timeout', %s, true)", (ms(pool.timeout_s),))
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " component text NOT NULL, version integer NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (component, version))"
        )
        applied = [
            version
            for (version,) in conn.execute(
                "SELECT version FROM schema_migrations WHERE component = %s ORDER BY version", (component,)
            )
        ]
        if applied != list(range(1, len(applied) + 1)) or len(applied) > len(migrations):
            found = ", ".join(map(str, applied))
            raise RuntimeError(
                f"{component} schema versions {found} do not match the {len(migrations)} this dp-proxy knows;"
                " upgrade dp-proxy"
            )
        for version in range(len(applied) + 1, len(migrations) + 1):
            conn.execute(migrations[version - 1])  # no parameters, so it may hold several statements
            conn.execute(
                "INSERT INTO schema_migrations (component, version) VALUES (%s, %s)", (component, version)
            )
    return len(migrations)


# --- the ledger -------------------------------------------------------------------------------------


MIGRATIONS: tuple[str, ...] = (
    # 1: charges and stored releases, as in SqliteLedger (event as its exact JSON text, ε/δ as float8)
    """
    CREATE TABLE charges (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id text NOT NULL UNIQUE,
        analyst text NOT NULL,
        dataset text NOT NULL,
        at timestamptz NOT NULL,
        sql_sha256 text NOT NULL,
        event text NOT NULL,
        epsilon double precision NOT NULL,
        delta double precision NOT NULL,
        composition text NOT NULL
    );
    CREATE INDEX charges_by_owner ON charges (analyst, dataset);
    CREATE INDEX charges_by_time ON charges (at, seq);
    CREATE INDEX charges_by_dataset ON charges (dataset);
    CREATE TABLE releases (
        analyst text NOT NULL,
        dataset text NOT NULL,
        request_sha256 text NOT NULL,
        charge_id text NOT NULL REFERENCES charges (id),
        body bytea NOT NULL,
        PRIMARY KEY (analyst, dataset, request_sha256)
    );
    """,
    # 2: the cells a charge could touch (accountant/cells.py), as JSON; NULL for every privacy unit
    "ALTER TABLE charges ADD COLUMN scope text",
    # 3: the charges of each history counted by triggers, filled from the existing ones (accountant/ledger/tallies.py)
    tallies.POSTGRES,
    # 4: an analyst's idempotency key and the charge it paid, committed with that charge (kept as long as it)
    """
    CREATE TABLE idempotency_keys (
        analyst text NOT NULL,
        key text NOT NULL,
        dataset text NOT NULL,
        request_sha256 text NOT NULL,
        charge_id text NOT NULL UNIQUE REFERENCES charges (id),
        outcome text,
        PRIMARY KEY (analyst, key)
    );
    """,
)
