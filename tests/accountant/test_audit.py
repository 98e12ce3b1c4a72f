"""The audit log: its chain math alone; both stores (SQLite and PostgreSQL) verify an untouched log and
catch every edited field, deleted, reordered or inserted row, and never fork under concurrent appends; the
CLI's exit codes; and the middleware and routes on the real app, wired as proxy/app.py is to wire them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from accountant.audit.chain import chain
from accountant.audit.log import (
    GENESIS,
    AuditEntry,
    AuditFilter,
    AuditLog,
    AuditRecord,
    Coverage,
    PostgresAudit,
    SqliteAudit,
    open_audit,
    seal,
    sql_sha256,
    verify_chain,
)
from accountant.errors import BudgetExceeded
from accountant.filter import Budget
from accountant.ledger.charges import Charge, Ledger
from accountant.ledger.memory import MemoryLedger
from accountant.ledger.stores import open_ledger
from proxy.app import create_app
from proxy.cli.audit import audit_verify
from proxy.cli.demo import DemoFiles
from proxy.http import audit_routes
from proxy.http.middleware.audit_trail import AuditTrail, Held, audit_record
from proxy.policy.load import load_policy
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from tests.accountant.test_ledger import EVENT
from tests.support.live import free_port, policy_copy
from tests.support.pg_fixtures import execute, fresh_schema

START = datetime(2025, 1, 1, tzinfo=UTC)
TIMEOUT_S = 60
RECORDS = (
    AuditRecord("ana", "sales", "SELECT COUNT(*) FROM t", "answered", None, "c1" * 16, 0.25, 0.0),
    AuditRecord("ana", "sales", "SELECT COUNT(*) FROM t", "repeat", None, "c1" * 16),
    AuditRecord("bob", "hr", "SELECT SUM(x) FROM t", "answered", None, "c2" * 16, 0.5, 1e-8),
    AuditRecord(None, None, "SELEC", "rejected", "unauthenticated"),
    AuditRecord("bob", "hr", "SELECT AVG(x) FROM t", "failed", "timeout", "c3" * 16, 0.125, 0.0),
)
TARGET = 3  # the row the tamper cases change: an answered one, all fields set but error_code


class FakeClock:
    def __init__(self) -> None:
        self._next, self._lock = START, threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            now, self._next = self._next, self._next + timedelta(seconds=1)
            return now


# --- the chain math alone ---------------------------------------------------------------------------


def test_a_sealed_chain_verifies_and_links_from_genesis() -> None:
    log = chain(RECORDS, at=START)
    assert [e.seq for e in log] == [1, 2, 3, 4, 5]
    assert log[0].prev_hash == GENESIS and all(b.prev_hash == a.hash for a, b in itertools.pairwise(log))
    result = verify_chain(log, head=(5, log[-1].hash))
    assert (result.ok, result.checked, result.first_bad_seq, result.reason, result.head) == (
        True, 5, None, None, log[-1].hash
    )
    assert verify_chain(()).ok and verify_chain((), head=(0, GENESIS)).ok


def _flip(text: str) -> str:
    return ("1" if text[0] == "0" else "0") + text[1:]


FIELD_EDITS: dict[str, Callable[[Any], Any]] = {
    "at": lambda at: at + timedelta(microseconds=1),
    "analyst": lambda v: v + "x",
    "dataset": lambda v: v + "x",
    "sql": lambda v: v + " ",
    "sql_sha256": _flip,
    "decision": lambda v: "rejected",
    "error_code": lambda v: "forbidden",
    "charge_id": lambda v: _flip(v),
    "epsilon": lambda v: v + 0.5,
    "delta": lambda v: v + 1e-9,
    "prev_hash": _flip,
    "hash": _flip,
    "seq": lambda v: v + 100,
}


@pytest.mark.parametrize("name", FIELD_EDITS)
def test_pure_chain_catches_an_edit_of_each_field(name: str) -> None:
    log = list(chain(RECORDS, at=START))
    target = log[TARGET - 1]
    log[TARGET - 1] = dataclasses.replace(target, **{name: FIELD_EDITS[name](getattr(target, name))})
    result = verify_chain(log, head=(5, log[-1].hash))
    expected = TARGET + 100 if name == "seq" else TARGET  # the seq found where TARGET belongs
    assert not result.ok and result.first_bad_seq == expected and result.checked == TARGET - 1, result


def test_pure_chain_catches_a_recomputed_edit_at_the_next_entry() -> None:
    log = list(chain(RECORDS, at=START))
    edited = dataclasses.replace(log[1], epsilon=9.0)
    log[1] = seal(AuditRecord("ana", "sales", edited.sql, "repeat", None, edited.charge_id, 9.0), seq=2,
                  at=edited.at, prev_hash=edited.prev_hash)  # a forger who re-hashes the entry they changed
    result = verify_chain(log)
    assert (result.ok, result.first_bad_seq) == (False, 3)
    assert result.reason is not None and "does not link" in result.reason


@pytest.mark.parametrize(
    ("change", "first_bad"),
    [
        (lambda log: log[1:], 2),  # first removed
        (lambda log: log[:2] + log[3:], 4),  # middle removed
        (lambda log: [*log[:2], log[3], log[2], *log[4:]], 4),  # two swapped: entry 4 comes too early
        (lambda log: [*log[:3], log[2], *log[3:]], 3),  # one duplicated: entry 3 comes again
    ],
    ids=["delete-first", "delete-middle", "swap", "duplicate"],
)
def test_pure_chain_catches_removed_reordered_and_inserted_entries(
    change: Callable[[list[AuditEntry]], list[AuditEntry]], first_bad: int
) -> None:
    log = list(chain(RECORDS, at=START))
    result = verify_chain(change(log), head=(5, log[-1].hash))
    assert (result.ok, result.first_bad_seq) == (False, first_bad), result


def test_pure_chain_catches_a_removed_or_added_tail_only_with_the_head() -> None:
    log = list(chain(RECORDS, at=START))
    assert verify_chain(log[:4]).ok  # the chain alone cannot tell: that is what the head is for
    cut = verify_chain(log[:4], head=(5, log[-1].hash))
    assert (cut.ok, cut.first_bad_seq) == (False, 5) and "removed" in (cut.reason or "")
    extra = seal(RECORDS[0], seq=6, at=START, prev_hash=log[-1].hash)
    added = verify_chain([*log, extra], head=(5, log[-1].hash))
    assert (added.ok, added.first_bad_seq) == (False, 6) and "added" in (added.reason or "")


def test_records_are_validated() -> None:
    with pytest.raises(ValueError, match="decision"):
        AuditRecord("ana", "s", "SELECT 1", "maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="epsilon"):
        AuditRecord("ana", "s", "SELECT 1", "answered", epsilon=float("nan"))
    with pytest.raises(ValueError, match="NUL"):
        AuditRecord("ana", "s", "SELECT 1\x00", "answered")
    with pytest.raises(ValueError, match="surrogate"):
        AuditRecord("ana", "s", "SELECT '\ud800'", "answered")
    with pytest.raises(ValueError, match="timezone"):
        AuditFilter(since=datetime(2025, 1, 1))  # naive on purpose


# --- both stores ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Store:
    """An audit store under test, and an outsider's access to its tables (to inspect and tamper)."""

    kind: str
    address: str  # what open_audit takes
    make: Callable[..., AuditLog]
    run: Callable[[str, tuple[object, ...]], list[tuple[object, ...]]]
    mark: str  # the parameter placeholder
    at_plus_one: str  # SQL that moves `at` by one microsecond

    def sql(self, text: str, *params: object) -> list[tuple[object, ...]]:
        return self.run(text.replace("?", self.mark), params)


def _sqlite_run(path: Path) -> Callable[[str, tuple[object, ...]], list[tuple[object, ...]]]:
    def run(text: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            return conn.execute(text, params).fetchall()
        finally:
            conn.close()

    return run


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    opened: list[AuditLog] = []

    def opener(factory: Callable[..., AuditLog]) -> Callable[..., AuditLog]:
        def make(**kwargs: object) -> AuditLog:
            audit = factory(**kwargs)
            opened.append(audit)
            return audit

        return make

    try:
        if request.param == "sqlite":
            path = tmp_path / "audit.sqlite"
            yield Store("sqlite", str(path), opener(lambda **kw: SqliteAudit(path, **kw)), _sqlite_run(path), "?",
                        "at = at + 1")
        else:
            with fresh_schema() as (_, url):
                yield Store("postgresql", url, opener(lambda **kw: PostgresAudit(url, **kw)),
                            lambda text, params: execute(url, text, params), "%s",
                            "at = at + interval '1 microsecond'")
                for audit in opened:
                    audit.close()
                opened.clear()
    finally:
        for audit in opened:
            audit.close()


def _filled(store: Store) -> tuple[AuditLog, tuple[AuditEntry, ...]]:
    audit = store.make(clock=FakeClock())
    return audit, tuple(audit.append(record) for record in RECORDS)


def test_store_appends_lists_and_verifies(store: Store) -> None:
    audit, made = _filled(store)
    prev = GENESIS
    for i, (record, entry) in enumerate(zip(RECORDS, made, strict=True)):  # sealed as the pure function seals
        assert entry == seal(record, seq=i + 1, at=START + timedelta(seconds=i), prev_hash=prev)
        prev = entry.hash
    assert audit.entries() == tuple(reversed(made))  # every field read back exactly, newest first
    assert audit.count() == 5
    assert audit.entries(AuditFilter(analyst="bob")) == (made[4], made[2])
    assert audit.count(AuditFilter(decision="answered")) == 2
    assert audit.entries(AuditFilter(dataset="sales", decision="repeat")) == (made[1],)
    assert audit.entries(limit=2, offset=1) == (made[3], made[2])
    since, until = START + timedelta(seconds=1), START + timedelta(seconds=3)
    assert audit.entries(AuditFilter(since=since, until=until)) == (made[2], made[1])  # since in, until out
    assert audit.count(AuditFilter(since=since, until=until)) == 2
    result = audit.verify()
    assert (result.ok, result.checked, result.head) == (True, 5, made[-1].hash)
    again = store.make()  # reopening migrates nothing and keeps the chain
    assert again.verify().ok and again.append(RECORDS[0]).seq == 6 and again.verify().checked == 6


_FLIP = "{0} = CASE WHEN substr({0}, 1, 1) = '0' THEN '1' ELSE '0' END || substr({0}, 2)"  # first hex digit
EDITS_SQL = {
    "at": None,  # per store
    "analyst": "analyst = analyst || 'x'",
    "dataset": "dataset = dataset || 'x'",
    "sql": "sql = sql || ' '",
    "sql_sha256": _FLIP.format("sql_sha256"),
    "decision": "decision = 'rejected'",
    "error_code": "error_code = 'forbidden'",
    "charge_id": "charge_id = 'c0ffee'",
    "epsilon": "epsilon = epsilon + 0.5",
    "delta": "delta = delta + 1e-9",
    "prev_hash": _FLIP.format("prev_hash"),
    "hash": _FLIP.format("hash"),
    "seq": "seq = seq + 100",
}


@pytest.mark.parametrize("name", EDITS_SQL)
def test_store_catches_an_edit_of_each_column(store: Store, name: str) -> None:
    audit, _ = _filled(store)
    assert store.sql(f"UPDATE audit_log SET {EDITS_SQL[name] or store.at_plus_one} WHERE seq = ?", TARGET) == []
    result = audit.verify()
    expected = TARGET + 1 if name == "seq" else TARGET  # a moved seq leaves a gap where it was
    assert not result.ok and result.first_bad_seq == expected, result


def _swap(store: Store, a: int, b: int) -> None:
    """Swap every column but seq between rows a and b (the rows change places in the order)."""
    columns = ("at", "analyst", "dataset", "sql", "sql_sha256", "decision", "error_code", "charge_id", "epsilon",
               "delta", "prev_hash", "hash")
    rows = {seq: store.sql(f"SELECT {', '.join(columns)} FROM audit_log WHERE seq = ?", seq)[0] for seq in (a, b)}
    assignments = ", ".join(f"{c} = ?" for c in columns)
    for seq, other in ((a, b), (b, a)):
        store.sql(f"UPDATE audit_log SET {assignments} WHERE seq = ?", *rows[other], seq)


def _insert_forged(store: Store, entry: AuditEntry) -> None:
    values = dataclasses.astuple(entry)
    store.sql(f"INSERT INTO audit_log ({', '.join(f.name for f in dataclasses.fields(AuditEntry))})"
              f" VALUES ({', '.join('?' * len(values))})", *values[:1], _at(store, entry.at), *values[2:])


def _at(store: Store, at: datetime) -> object:
    return at if store.kind == "postgresql" else (at - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _shift_from(store: Store, seq: int) -> None:
    """Renumber rows seq, seq+1, … one up, making room for a row at `seq` (via negatives: keys stay unique)."""
    store.sql("UPDATE audit_log SET seq = -seq WHERE seq >= ?", seq)
    store.sql("UPDATE audit_log SET seq = 1 - seq WHERE seq < 0")


TAMPERS: dict[str, tuple[Callable[[Store, tuple[AuditEntry, ...]], None], int]] = {
    "delete-first": (lambda s, _: s.sql("DELETE FROM audit_log WHERE seq = 1"), 2),
    "delete-middle": (lambda s, _: s.sql("DELETE FROM audit_log WHERE seq = 3"), 4),
    "delete-last": (lambda s, _: s.sql("DELETE FROM audit_log WHERE seq = 5"), 5),
    "delete-all": (lambda s, _: s.sql("DELETE FROM audit_log"), 1),
    "reorder-rows": (lambda s, _: _swap(s, 2, 3), 2),
    "reorder-seqs": (lambda s, _: (s.sql("UPDATE audit_log SET seq = -1 WHERE seq = 2"),
                                   s.sql("UPDATE audit_log SET seq = 2 WHERE seq = 3"),
                                   s.sql("UPDATE audit_log SET seq = 3 WHERE seq = -1")), 2),
    # a forger who knows the hash: the inserted entry is valid, the one after it no longer links
    "insert-middle": (lambda s, made: (
        _shift_from(s, 3), _insert_forged(s, seal(RECORDS[3], seq=3, at=START, prev_hash=made[1].hash))
    ), 4),
    # a valid entry appended behind the log's back: only the head shows it
    "insert-end": (lambda s, made: _insert_forged(s, seal(RECORDS[0], seq=6, at=START, prev_hash=made[4].hash)), 6),
}


@pytest.mark.parametrize("tamper", TAMPERS)
def test_store_catches_deleted_reordered_and_inserted_rows(store: Store, tamper: str) -> None:
    audit, made = _filled(store)
    change, first_bad = TAMPERS[tamper]
    change(store, made)
    result = audit.verify()
    assert (result.ok, result.first_bad_seq) == (False, first_bad), result


def test_store_catches_a_changed_head(store: Store) -> None:
    audit, _ = _filled(store)
    store.sql("UPDATE audit_head SET hash = ?", GENESIS)
    assert audit.verify().first_bad_seq == 5
    store.sql("DELETE FROM audit_head")
    result = audit.verify()
    assert not result.ok and "head" in (result.reason or "")


def test_store_appends_from_many_threads_and_two_objects_never_fork(store: Store) -> None:
    audits = (store.make(), store.make())
    threads, each = 8, 20
    barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

    def worker(i: int) -> list[int]:
        barrier.wait()
        return [audits[i % 2].append(RECORDS[i % len(RECORDS)]).seq for _ in range(each)]

    with ThreadPoolExecutor(threads) as pool:
        seqs = [s for f in [pool.submit(worker, i) for i in range(threads)] for s in f.result(timeout=TIMEOUT_S)]
    assert sorted(seqs) == list(range(1, threads * each + 1))  # every append got its own place
    result = audits[1].verify()
    assert (result.ok, result.checked) == (True, threads * each), result


def _append_in_process(address: str, count: int) -> list[int]:
    audit = open_audit(address)
    try:
        return [audit.append(RECORDS[0]).seq for _ in range(count)]
    finally:
        audit.close()


def test_store_appends_from_separate_processes_never_fork(store: Store) -> None:
    store.make()  # the tables exist before the race (the ledger tests race the migrations too)
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_append_in_process, store.address, 15) for _ in range(3)]
        seqs = [s for future in futures for s in future.result(timeout=TIMEOUT_S)]
    assert sorted(seqs) == list(range(1, 46))
    assert store.make().verify().ok


# --- the CLI ----------------------------------------------------------------------------------------


def test_cli_exit_codes(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    _filled(store)
    assert audit_verify(store.address) == 0
    assert "audit log: ok, 5 entries, head " in capsys.readouterr().out
    store.sql("UPDATE audit_log SET epsilon = 0 WHERE seq = 3")
    assert audit_verify(store.address) == 1
    assert "TAMPERED at entry 3" in capsys.readouterr().out


@pytest.mark.parametrize(
    "address", ["mysql://user:secret@db/ledger", "postgresql://postgres:secret@127.0.0.1:1/test"],
    ids=["unknown-scheme", "unreachable"],
)
def test_cli_cannot_check_exits_2_without_echoing_the_password(
    address: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert audit_verify(address) == 2
    err = capsys.readouterr().err
    assert "not checked" in err and "secret" not in err


# --- admissions: a charge and its admitted entry, in one transaction ------------------------------------

ADMITTED_SQL = "SELECT COUNT(*) FROM t"


def _ledger_at(store: Store) -> Ledger:
    return open_ledger(store.address)


def _admit_audited(ledger: Ledger, epsilon: float = 0.25, sql: str | None = ADMITTED_SQL) -> Charge:
    return ledger.admit(analyst="ana", dataset="sales", sql_sha256=sql_sha256(ADMITTED_SQL), event=EVENT,
                        epsilon=epsilon, delta=0.0, composition="basic", budget=Budget(1.0, 0.0), sql=sql)


def test_admit_appends_the_admitted_entry_with_its_charge(store: Store) -> None:
    audit, ledger = store.make(), _ledger_at(store)
    try:
        audit.append(RECORDS[3])  # the chain is shared: admissions follow the log's own entries
        charge = _admit_audited(ledger)
        with pytest.raises(BudgetExceeded):
            _admit_audited(ledger, epsilon=0.9)  # refused: no charge, no entry
        last, first = audit.entries()
        assert first.decision == "rejected" and last.prev_hash == first.hash
        assert (last.seq, last.analyst, last.dataset, last.sql, last.sql_sha256, last.decision, last.charge_id,
                last.epsilon, last.delta, last.at) == (2, "ana", "sales", ADMITTED_SQL, charge.sql_sha256,
                                                       "admitted", charge.id, 0.25, 0.0, charge.at)
        assert audit.verify().ok
        assert audit.coverage() == Coverage(1, 0, (), 0, ())
    finally:
        ledger.close()


def test_a_charge_cannot_commit_without_its_entry(store: Store) -> None:
    ledger = _ledger_at(store)
    try:
        with pytest.raises(ValueError, match="sha256"):
            _admit_audited(ledger, sql="SELECT 2")  # not the SQL whose hash is charged
        store.sql("DELETE FROM audit_head")  # the chain cannot take the entry now
        with pytest.raises(RuntimeError, match="head"):
            _admit_audited(ledger)
        assert ledger.count() == 0  # the charge rolled back with its entry
    finally:
        ledger.close()


def test_coverage_finds_charges_without_entries_and_entries_without_charges(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    audit, ledger = store.make(), _ledger_at(store)
    try:
        kept = _admit_audited(ledger, epsilon=0.125)
        silent = _admit_audited(ledger, epsilon=0.125, sql=None)  # a caller that passes no SQL writes no entry
        edited = _admit_audited(ledger, epsilon=0.125)
        deleted = _admit_audited(ledger, epsilon=0.125)
        store.sql("UPDATE charges SET epsilon = 0.0625 WHERE id = ?", edited.id)  # no longer its entry's ε
        store.sql("DELETE FROM charges WHERE id = ?", deleted.id)  # a refund behind the ledger's back
        assert audit.verify().ok  # the chain alone cannot see either
        covered = audit.coverage()
        assert (covered.charges, covered.unaudited, covered.orphaned) == (3, (silent.id, edited.id), (deleted.id,))
        assert not covered.ok and kept.id not in covered.unaudited
        assert audit.coverage(listed=1).unaudited == (silent.id,) and audit.coverage(listed=1).unaudited_count == 2
        assert audit_verify(store.address) == 1
        out = capsys.readouterr().out
        assert "audit log: ok" in out
        assert f"charges: MISSING: 2 charges have no admitted audit entry: {silent.id}, {edited.id}" in out
        assert f"1 admitted audit entries have no charge in the ledger: {deleted.id}" in out
    finally:
        ledger.close()


def test_coverage_of_an_audit_log_without_a_ledger(store: Store) -> None:
    audit = store.make()
    audit.append(AuditRecord("ana", "sales", ADMITTED_SQL, "admitted", None, "c9" * 16, 0.5, 0.0))
    assert audit.coverage() == Coverage(0, 0, (), 1, ("c9" * 16,))


def test_memory_ledger_keeps_its_admissions() -> None:
    ledger = MemoryLedger()
    charge = _admit_audited(ledger)
    assert ledger.admissions == [AuditRecord("ana", "sales", ADMITTED_SQL, "admitted", None, charge.id, 0.25, 0.0)]


# --- the middleware and the routes on the real app --------------------------------------------------

COUNT = "select region, count(*) as n from visits group by region"
BROKEN = "SELECT COUNT(* FROM visits"


@dataclasses.dataclass
class Wired:
    client: httpx.Client
    app: FastAPI
    audit: SqliteAudit  # reads the log the app writes


@contextlib.contextmanager
def _serving(app: FastAPI) -> Iterator[str]:
    """`app` served by uvicorn on a loopback port, in a thread of this process."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the in-process server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(TIMEOUT_S)


@pytest.fixture
def wired(demo: DemoFiles, tmp_path: Path) -> Iterator[Wired]:
    """The app as proxy/app.py is to wire it: the middleware, the router, and app.state.audit (in the ledger's
    SQLite file). Until app.py does so itself, this fixture does it."""
    app = create_app(Settings(policy=policy_copy(demo, tmp_path, epsilon=1.0, delta=1e-6)))
    reader = SqliteAudit(tmp_path / "ledger.sqlite")
    if not any(m.cls is AuditTrail for m in app.user_middleware):
        app.add_middleware(AuditTrail)
        app.include_router(audit_routes.router)
        app.state.audit = reader
    try:
        with _serving(app) as url, httpx.Client(base_url=url, timeout=TIMEOUT_S) as client:
            yield Wired(client, app, reader)
    finally:
        reader.close()


def _post(client: httpx.Client, key: str | None, body: dict[str, Any]) -> Any:
    headers = {} if key is None else {"Authorization": f"Bearer {key}"}
    return client.post("/v1/query", json=body, headers=headers)


def test_every_query_request_is_audited(wired: Wired, demo: DemoFiles) -> None:
    client, audit = wired.client, wired.audit
    answered = _post(client, demo.analyst_key, {"sql": COUNT, "epsilon": 0.25})
    assert answered.status_code == 200, answered.text
    repeat = _post(client, demo.analyst_key, {"sql": COUNT, "epsilon": 0.25})
    assert repeat.headers["x-dp-repeat"] == "true"
    assert _post(client, demo.analyst_key, {"sql": BROKEN}).json()["code"] == "sql_syntax"
    assert _post(client, demo.analyst_key, {"sql": COUNT + " ", "epsilon": 0.9}).json()["code"] == "budget_exceeded"
    assert _post(client, None, {"sql": COUNT}).json()["code"] == "unauthenticated"

    entries = audit.entries()
    assert [(e.seq, e.analyst, e.decision, e.error_code) for e in reversed(entries)] == [
        (1, "analyst", "admitted", None),  # written by the admit, with the charge
        (2, "analyst", "answered", None),
        (3, "analyst", "repeat", None),
        (4, "analyst", "rejected", "sql_syntax"),
        (5, "analyst", "rejected", "budget_exceeded"),
        (6, None, "rejected", "unauthenticated"),
    ]
    admitted, first, again = entries[-1], entries[-2], entries[-3]
    charge = answered.json()["charge"]
    for entry in (admitted, first):
        assert (entry.charge_id, entry.epsilon, entry.delta) == (charge["id"], charge["epsilon"], charge["delta"])
    assert (again.charge_id, again.epsilon, again.delta) == (charge["id"], 0.0, 0.0)  # a repeat charges nothing
    assert first.sql == "SELECT region, COUNT(*) AS n FROM visits GROUP BY region" and first.dataset == "demo"
    (ledger_entry,) = client.get("/v1/ledger", headers={"Authorization": f"Bearer {demo.admin_key}"}).json()["charges"]
    assert first.sql_sha256 == admitted.sql_sha256 == ledger_entry["sql_sha256"]  # the SQL the ledger charged
    assert entries[2].sql == BROKEN  # unparsable: kept as parsed from the JSON
    assert entries[0].sql == ""  # no key: its body was never read
    assert audit.verify().ok and audit.coverage().ok


def test_audit_route_is_for_admins_and_filters(wired: Wired, demo: DemoFiles) -> None:
    client = wired.client
    for sql in (COUNT, COUNT, BROKEN):
        _post(client, demo.analyst_key, {"sql": sql, "epsilon": 0.25})
    admin = {"Authorization": f"Bearer {demo.admin_key}"}
    page = client.get("/v1/audit", headers=admin).json()
    assert (page["ok"], page["total"], page["limit"], page["offset"]) == (True, 4, 100, 0)
    assert [e["decision"] for e in page["entries"]] == ["rejected", "repeat", "answered", "admitted"]
    assert client.get("/v1/audit", params={"decision": "repeat"}, headers=admin).json()["total"] == 1
    paged = client.get("/v1/audit", params={"limit": 1, "offset": 1}, headers=admin).json()
    assert (paged["total"], [e["seq"] for e in paged["entries"]]) == (4, [3])
    assert client.get("/v1/audit", params={"analyst": "nobody"}, headers=admin).json()["total"] == 0
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert client.get("/v1/audit", params={"since": future}, headers=admin).json()["total"] == 0
    for bad in ({"decision": "maybe"}, {"since": "0"}, {"until": "2026-01-01"}, {"offset": str(2**63)}):
        assert client.get("/v1/audit", params=bad, headers=admin).json()["code"] == "invalid_request", bad
    refused = client.get("/v1/audit", headers={"Authorization": f"Bearer {demo.analyst_key}"})
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert client.get("/v1/audit").status_code == 401
    verified = client.get("/v1/audit/verify", headers=admin).json()
    assert (verified["ok"], verified["checked"], verified["first_bad_seq"]) == (True, 4, None)


def test_an_answer_is_withheld_when_the_audit_log_fails(wired: Wired, demo: DemoFiles, tmp_path: Path) -> None:
    client = wired.client
    # the chain refuses the answer's `answered` entry (committed by the pipeline with its stored release)
    with contextlib.closing(sqlite3.connect(tmp_path / "ledger.sqlite", isolation_level=None)) as db:
        db.execute("CREATE TRIGGER no_answers BEFORE INSERT ON audit_log WHEN NEW.decision = 'answered'"
                   " BEGIN SELECT RAISE(ABORT, 'refused'); END")
        failed = _post(client, demo.analyst_key, {"sql": COUNT, "epsilon": 0.25})
        assert failed.status_code == 500
        assert {k: failed.json()[k] for k in ("code", "charged")} == {"code": "internal", "charged": True}
        db.execute("DROP TRIGGER no_answers")
    again = _post(client, demo.analyst_key, {"sql": COUNT, "epsilon": 0.25})  # paid for: not lost
    assert again.status_code == 200 and again.headers["x-dp-repeat"] == "true"
    # the admitted entry was written by the admit (with the charge); the withheld answer's was refused
    assert [e.decision for e in wired.audit.entries()] == ["repeat", "failed", "admitted"]
    wired.app.state.audit.close()  # the middleware's own appends (repeats, failures) now raise: withheld too
    working = SqliteAudit(tmp_path / "ledger.sqlite")
    try:
        withheld = _post(client, demo.analyst_key, {"sql": COUNT, "epsilon": 0.25})
        assert withheld.status_code == 500 and withheld.json()["charged"] is False
        wired.app.state.audit = working
        assert [e.decision for e in working.entries()] == ["repeat", "failed", "admitted"]
    finally:
        working.close()


def test_a_failure_after_admit_records_its_charge(demo: DemoFiles) -> None:
    policy = load_policy(demo.policy)
    ledger = MemoryLedger()
    sql = "SELECT COUNT(*) FROM visits"
    charge = ledger.admit(analyst="analyst", dataset="demo", sql_sha256=sql_sha256(sql), event=EVENT, epsilon=0.5,
                          delta=1e-9, composition="basic", budget=policy.analysts[0].budgets[0][1], sql=sql)
    env = SimpleNamespace(policy=policy, ledger=ledger)
    state = {"query": QueryRequest(sql="select count(*) from visits"), "charged": True, "charge": charge}
    record = audit_record(env, f"Bearer {demo.analyst_key}", Held(), state, raised=True)  # type: ignore[arg-type]
    assert (record.decision, record.error_code, record.charge_id, record.epsilon, record.delta) == (
        "failed", "internal", charge.id, 0.5, 1e-9
    )
    assert (record.analyst, record.dataset, record.sql) == ("analyst", "demo", sql)
    assert ledger.admissions == [AuditRecord("analyst", "demo", sql, "admitted", None, charge.id, 0.5, 1e-9)]
