"""The SQLite ledger's lookups on read-only connections of their own (accountant/ledger/sqlite_reads.py, issue
#32): on a real file, with threads, they see exactly what is committed, never a transaction in flight, and do not
wait for the writer; the writes (and their fsyncs) are untouched, so a crash loses no committed charge."""

from __future__ import annotations

import subprocess
import sys
import threading
from fractions import Fraction
from pathlib import Path

import pytest

from accountant.events import LaplaceEvent
from accountant.filter import Budget
from accountant.ledger.charges import Admission, Charge, StoredRelease
from accountant.ledger.sqlite import SqliteLedger

ROOT = Path(__file__).resolve().parents[2]


def _admit(ledger: SqliteLedger, analyst: str, epsilon: float) -> Charge:
    return ledger.admit(Admission(analyst=analyst, dataset="sales", sql_sha256="ab" * 32,
                                  event=LaplaceEvent(1, 1 / epsilon), epsilon=epsilon, delta=0.0,
                                  composition="basic", budget=Budget(1000.0, 1e-6)))


def test_reads_on_their_own_connections_see_every_commit_of_concurrent_writers(tmp_path: Path) -> None:
    ledger = SqliteLedger(tmp_path / "ledger.db")
    writers, per_writer = 3, 20
    stop = threading.Event()
    seen: list[str] = []  # what the readers saw that broke an invariant
    spends: dict[tuple[int, int], list[Fraction]] = {(w, r): [] for w in range(writers) for r in range(2)}

    def write(w: int) -> None:
        for i in range(per_writer):
            charge = _admit(ledger, f"w{w}", 0.125)
            ledger.store_release(StoredRelease(f"w{w}", "sales", f"{w}-{i}", charge.id, f"body {w}-{i}".encode()))

    def read(w: int, r: int) -> None:
        while not stop.is_set():
            for i in range(per_writer):
                found = ledger.stored_release(f"w{w}", "sales", f"{w}-{i}")
                if found is not None and found.body != f"body {w}-{i}".encode():
                    seen.append(f"wrong body for {w}-{i}")
                if found is not None and ledger.charges(analyst=f"w{w}", limit=1000) and found.charge_id not in {
                        c.id for c in ledger.charges(analyst=f"w{w}", limit=1000)}:
                    seen.append(f"a release before its charge: {w}-{i}")
            spends[w, r].append(Fraction(ledger.spent(f"w{w}", "sales").epsilon))

    readers = [threading.Thread(target=read, args=(w, r)) for w in range(writers) for r in range(2)]
    for thread in readers:
        thread.start()
    writing = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for thread in writing:
        thread.start()
    for thread in writing:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()
    try:
        assert seen == []
        for got in spends.values():  # what one reader sees only grows: it reads committed states, in order
            assert got == sorted(got) and got
        for w in range(writers):
            assert ledger.spent(f"w{w}", "sales").epsilon == pytest.approx(0.125 * per_writer, abs=0)
            assert ledger.count(analyst=f"w{w}") == per_writer
            for i in range(per_writer):
                found = ledger.stored_release(f"w{w}", "sales", f"{w}-{i}")
                assert found is not None and found.body == f"body {w}-{i}".encode()
        assert len(ledger.charges(dataset="sales", limit=1000)) == writers * per_writer
    finally:
        ledger.close()


def test_a_read_does_not_wait_for_the_writer_and_sees_only_what_committed(tmp_path: Path) -> None:
    ledger = SqliteLedger(tmp_path / "ledger.db")
    charge = _admit(ledger, "ana", 0.5)
    results: list[object] = []

    def look() -> None:
        results.append(ledger.stored_release("ana", "sales", "r1"))
        results.append(ledger.spent("ana", "sales").epsilon)

    try:
        with ledger._write():  # the writer's transaction, open, as during an admit's COMMIT: its locks held
            ledger._conn.execute("INSERT INTO releases (analyst, dataset, request_sha256, charge_id, body)"
                                 " VALUES ('ana', 'sales', 'r1', ?, x'01')", (charge.id,))
            reader = threading.Thread(target=look)
            reader.start()
            reader.join(timeout=60)  # it returns while the writer still holds its lock (before, it queued here)
            assert not reader.is_alive()
            assert results == [None, 0.5]  # the release in flight is not seen; the committed charge is
        found = ledger.stored_release("ana", "sales", "r1")
        assert found is not None and found.body == b"\x01"  # committed now: seen
    finally:
        ledger.close()


def test_readers_are_closed_with_the_ledger(tmp_path: Path) -> None:
    ledger = SqliteLedger(tmp_path / "ledger.db")
    _admit(ledger, "ana", 0.5)
    assert ledger.spent("ana", "sales").epsilon == 0.5
    readers = ledger._reads
    connections = list(readers._all)
    assert len(connections) == 1  # one reader at a time needed one connection, reused
    ledger.close()
    with pytest.raises(Exception, match="closed"):
        connections[0].execute("SELECT 1")
    with pytest.raises(Exception, match="closed"):
        ledger.spent("ana", "sales")


def test_an_in_memory_ledger_reads_on_its_one_connection() -> None:
    ledger = SqliteLedger(":memory:")
    try:
        _admit(ledger, "ana", 0.25)
        assert ledger.spent("ana", "sales").epsilon == 0.25  # a second connection would see another database
        assert ledger._reads._all == []
    finally:
        ledger.close()


_CRASH = """
import os, sys
sys.path.insert(0, {root!r})
from tests.accountant.test_ledger_reads import _admit
from accountant.ledger.sqlite import SqliteLedger
ledger = SqliteLedger({path!r})
charge = _admit(ledger, "ana", 0.75)
ledger.spent("ana", "sales")  # a reader open too
print(charge.id, flush=True)
os._exit(9)  # killed: nothing closed, nothing flushed by Python
"""


def test_a_committed_charge_survives_a_crash_with_readers_open(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    out = subprocess.run([sys.executable, "-c", _CRASH.format(root=str(ROOT), path=str(path))], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 9, out.stderr
    ledger = SqliteLedger(path)
    try:
        assert [c.id for c in ledger.charges(analyst="ana")] == [out.stdout.strip()]
        assert ledger.spent("ana", "sales").epsilon == 0.75
    finally:
        ledger.close()
