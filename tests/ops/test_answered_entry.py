"""An answer's `answered` audit entry commits with its stored release, in one transaction of the ledger's store
(`Ledger.store_release(release, audit)`, proxy/http/middleware/audit_trail.py): after it returns, both are there and
the chain verifies; if the chain refuses the entry, the release (paid for) is kept and the refusal is raised, so the
answer is withheld and a repeat returns it."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

from accountant.audit.chain import sql_sha256
from accountant.audit.log import SqliteAudit
from accountant.events import LaplaceEvent
from accountant.filter import Budget
from accountant.ledger.charges import Charge, StoredRelease
from accountant.ledger.memory import MemoryLedger
from accountant.ledger.sqlite import SqliteLedger
from proxy.http.middleware.audit_trail import answered

SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


def _charged(ledger: SqliteLedger | MemoryLedger) -> Charge:
    return ledger.admit(analyst="ana", dataset="demo", sql_sha256=sql_sha256(SQL), event=LaplaceEvent(1, 10.0),
                        epsilon=0.1, delta=0.0, composition="basic", budget=Budget(1.0, 1e-6), sql=SQL)


def _release(charge: Charge) -> StoredRelease:
    return StoredRelease("ana", "demo", "r" * 64, charge.id, b'{"rows": []}')


def test_the_release_and_its_entry_commit_together(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    try:
        charge = _charged(ledger)
        ledger.store_release(_release(charge), answered(charge, SQL))
    finally:
        ledger.close()
    reopened, audit = SqliteLedger(path), SqliteAudit(path)  # what another process, or a restart, reads
    try:
        assert reopened.stored_release("ana", "demo", "r" * 64) == _release(charge)
        entries = audit.entries()
        assert [(e.decision, e.charge_id, e.epsilon, e.sql) for e in entries] == [
            ("answered", charge.id, 0.1, SQL), ("admitted", charge.id, 0.1, SQL)]
        assert audit.verify().ok and audit.coverage().ok
    finally:
        reopened.close()
        audit.close()


def test_a_refused_entry_keeps_the_release_and_is_raised(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    try:
        charge = _charged(ledger)
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
            db.execute("CREATE TRIGGER no_answers BEFORE INSERT ON audit_log WHEN NEW.decision = 'answered'"
                       " BEGIN SELECT RAISE(ABORT, 'refused'); END")
        with pytest.raises(sqlite3.Error, match="refused"):
            ledger.store_release(_release(charge), answered(charge, SQL))
        assert ledger.stored_release("ana", "demo", "r" * 64) == _release(charge)  # paid for: a repeat gets it
    finally:
        ledger.close()
    audit = SqliteAudit(path)
    try:
        assert [e.decision for e in audit.entries()] == ["admitted"]
        assert audit.verify().ok  # the head did not move with the refused entry
    finally:
        audit.close()


def test_an_entry_for_other_sql_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    ledger = MemoryLedger()
    charge = _charged(ledger)
    with pytest.raises(ValueError, match="not the SQL charge"):
        ledger.store_release(_release(charge), answered(charge, SQL + " "))
    assert ledger.stored_release("ana", "demo", "r" * 64) is None
    ledger.store_release(_release(charge), answered(charge, SQL))
    assert [r.decision for r in ledger.admissions] == ["admitted", "answered"]
