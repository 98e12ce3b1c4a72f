"""The ledger and the audit log on one SQLite file queue for its write lock in process (accountant/file_lock.py).

With SQLite's busy timeout at 0, a writer that finds the file's write lock taken fails at once ("database is
locked"): the test shows that the ledger's admits, its stored releases and the audit log's appends, from
many threads, never meet SQLite's lock held by one another, and that nothing is lost or forked.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from accountant.audit.log import AuditRecord, SqliteAudit, sql_sha256
from accountant.events import LaplaceEvent
from accountant.filter import Budget
from accountant.ledger.charges import StoredRelease
from accountant.ledger.sqlite import SqliteLedger


def test_ledger_and_audit_writers_of_one_file_never_meet_sqlite_busy(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path, timeout_s=0.0)
    audit = SqliteAudit(path, timeout_s=0.0)
    try:
        def admit(i: int) -> None:
            sql = f"SELECT {i}"
            charge = ledger.admit(analyst="ana", dataset="demo", sql_sha256=sql_sha256(sql), sql=sql,
                                  event=LaplaceEvent(1, 10.0), epsilon=0.01, delta=0.0, composition="basic",
                                  budget=Budget(10.0, 1e-6))
            ledger.store_release(StoredRelease("ana", "demo", f"{i:064x}", charge.id, b"{}"))

        def append(i: int) -> None:
            audit.append(AuditRecord(analyst="ana", dataset="demo", sql=f"SELECT {i}", decision="rejected",
                                     error_code="parse_error"))

        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(admit if i % 2 else append, i) for i in range(80)]
            for future in futures:
                future.result()  # re-raises "database is locked", if a writer met another's lock

        assert ledger.count(analyst="ana") == 40
        assert audit.verify().ok
        assert audit.count() == 80  # 40 appends here and the 40 charges' admitted entries
    finally:
        audit.close()
        ledger.close()
