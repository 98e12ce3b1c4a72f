"""Operators' grants and budget periods in the ledger, on memory, SQLite and PostgreSQL: the admit reads them
in its own transaction (exact budgets after a grant, a period's history above its floor), each is written
with its audit entry, and concurrent admits around a grant or a period never overspend."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path

import pytest

from accountant.audit.chain import sql_sha256
from accountant.audit.log import open_audit
from accountant.errors import BudgetExceeded
from accountant.events import LaplaceEvent
from accountant.filter import Accounting, Budget
from accountant.ledger.admit import NEXT_STEP
from accountant.ledger.budget_ops import InvalidBudgetOperation, Operation
from accountant.ledger.charges import Admission, Charge, Ledger
from accountant.ledger.memory import MemoryLedger
from accountant.ledger.postgres import PostgresLedger
from accountant.ledger.sqlite import SqliteLedger
from tests.accountant.test_ledger import TIMEOUT_S
from tests.support.pg_fixtures import execute, fresh_schema

BUDGET = Budget(0.5, 0.0, exact=(Fraction(1, 2), Fraction(0)))
SHARED = Budget(1.0, 0.0, exact=(Fraction(1), Fraction(0)))
EIGHTH = 0.125  # exact in binary: sums are exact, so the counts below are exact


Factory = Callable[[], Ledger]


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Factory, str]]:
    """(kind, a factory of ledgers on one store, the store's address or '')."""
    opened: list[Ledger] = []
    if request.param == "postgresql":
        with fresh_schema() as (_, url):
            def make_pg() -> Ledger:
                opened.append(PostgresLedger(url))
                return opened[-1]
            yield "postgresql", make_pg, url
    else:
        memory = MemoryLedger()

        def make() -> Ledger:
            if request.param == "memory":
                return memory
            opened.append(SqliteLedger(tmp_path / "ledger.sqlite"))
            return opened[-1]

        yield request.param, make, str(tmp_path / "ledger.sqlite")
    for ledger in opened:
        ledger.close()


def admit(ledger: Ledger, analyst: str = "ana", epsilon: float = EIGHTH, *, shared: Budget | None = None,
          sql: str = "SELECT COUNT(*) FROM t") -> Charge:
    return ledger.admit(Admission(analyst, "demo", sql_sha256(sql), LaplaceEvent(1, 1 / epsilon), epsilon, 0.0,
                                  "basic", BUDGET, dataset_budget=shared, sql=sql))


def grant(ledger: Ledger, analyst: str | None, epsilon: str, reason: str = "ticket 42") -> None:
    ledger.operate(Operation("grant", "demo", analyst, Fraction(epsilon), Fraction(0), "root", reason))


def period(ledger: Ledger, analyst: str | None) -> None:
    ledger.operate(Operation("period", "demo", analyst, Fraction(0), Fraction(0), "root", "new quarter"))


def fill(ledger: Ledger, analyst: str = "ana", *, shared: Budget | None = None) -> int:
    """Admit ε = 1/8 charges until one is refused; how many were admitted."""
    for n in range(100):
        try:
            admit(ledger, analyst, shared=shared)
        except BudgetExceeded:
            return n
    raise AssertionError("never refused")


def test_a_grant_raises_the_analysts_budget_exactly(store: tuple[str, Factory, str]) -> None:
    _, make, _ = store
    ledger = make()
    assert fill(ledger) == 4  # 0.5 / 0.125
    grant(ledger, "ana", "0.25")
    allowance = ledger.allowance(dataset="demo", analyst="ana")
    assert (allowance.epsilon, allowance.delta, allowance.floor) == (Fraction(1, 4), 0, 0)
    assert fill(ledger) == 2  # exactly the 0.25 granted, read by the admit
    assert make().allowance(dataset="demo", analyst="ana").epsilon == Fraction(1, 4)  # durable, on another object
    assert fill(ledger, "bob") == 4  # another analyst's budget is untouched


def test_a_refusal_names_the_next_step(store: tuple[str, Factory, str]) -> None:
    ledger = store[1]()
    fill(ledger)
    with pytest.raises(BudgetExceeded) as info:
        admit(ledger)
    assert info.value.detail["hint"] == NEXT_STEP


def test_an_analysts_grant_never_raises_the_dataset_total(store: tuple[str, Factory, str]) -> None:
    ledger = store[1]()
    assert fill(ledger, "ana", shared=SHARED) == 4
    assert fill(ledger, "bob", shared=SHARED) == 4  # the shared ε = 1 is spent
    grant(ledger, "ana", "0.5")
    with pytest.raises(BudgetExceeded) as info:
        admit(ledger, "ana", shared=SHARED)
    assert info.value.detail["scope"] == "dataset"
    grant(ledger, None, "0.25")  # the dataset total, raised explicitly
    assert fill(ledger, "ana", shared=SHARED) == 2
    assert ledger.allowance(dataset="demo").epsilon == Fraction(1, 4)


def test_a_period_starts_the_analysts_history_over_and_ends_their_grants(store: tuple[str, Factory, str]) -> None:
    ledger = store[1]()
    fill(ledger, "ana")
    fill(ledger, "bob")
    grant(ledger, "ana", "0.125")
    period(ledger, "ana")
    assert ledger.allowance(dataset="demo", analyst="ana").epsilon == 0  # the grant lapsed with its period
    assert ledger.tallied(dataset="demo", analyst="ana").bound().amount == 0
    assert len(ledger.entries(dataset="demo", analyst="ana")) == 0
    assert fill(ledger, "ana") == 4
    assert fill(ledger, "bob") == 0  # bob's period goes on
    assert len(ledger.entries(dataset="demo", analyst="bob")) == 4


def test_a_dataset_wide_period_restarts_everyone_and_the_shared_budget(store: tuple[str, Factory, str]) -> None:
    ledger = store[1]()
    fill(ledger, "ana", shared=SHARED)
    fill(ledger, "bob", shared=SHARED)
    period(ledger, "ana")  # ana's own period: the shared budget still counts her charges
    assert fill(ledger, "ana", shared=SHARED) == 0
    period(ledger, None)
    assert fill(ledger, "ana", shared=SHARED) == 4
    assert fill(ledger, "bob", shared=SHARED) == 4
    assert fill(ledger, "cy", shared=SHARED) == 0  # 8 × 1/8 = the shared ε of 1


def test_operations_are_checked(store: tuple[str, Factory, str]) -> None:
    with pytest.raises(InvalidBudgetOperation, match="reason"):
        Operation("grant", "demo", "ana", Fraction(1), Fraction(0), "root", "")
    with pytest.raises(InvalidBudgetOperation, match="above 0"):
        Operation("grant", "demo", "ana", Fraction(0), Fraction(0), "root", "why")
    ledger = store[1]()
    grant(ledger, "ana", "0.5")
    (op,) = ledger.operations(dataset="demo")
    assert (op.operation.kind, op.operation.analyst, op.operation.epsilon, op.operation.reason) == (
        "grant", "ana", Fraction(1, 2), "ticket 42")
    assert ledger.operations(dataset="other") == ()


@pytest.mark.parametrize("when", [0, 2, 4])
def test_concurrent_admits_around_a_grant_never_overspend(store: tuple[str, Factory, str], when: int) -> None:
    """Eight threads admit 1/8 each until refused while a ninth grants 0.25 after `when` admits: exactly
    (0.5 + 0.25) / 0.125 = 6 are admitted, whatever the interleaving."""
    make = store[1]
    ledgers = [make() for _ in range(9)]
    admitted: list[Charge] = []
    lock = threading.Lock()
    granted = threading.Event()
    barrier = threading.Barrier(9, timeout=TIMEOUT_S)

    def worker(i: int) -> None:
        barrier.wait()
        while True:  # until refused after the grant (the test's time limit bounds it)
            try:
                charge = admit(ledgers[i])
            except BudgetExceeded:
                if granted.is_set():
                    return
                continue
            with lock:
                admitted.append(charge)

    def granter() -> None:
        barrier.wait()
        while True:
            with lock:
                if len(admitted) >= when:
                    break
        grant(ledgers[8], "ana", "0.25")
        granted.set()

    with ThreadPoolExecutor(9) as pool:
        futures = [pool.submit(worker, i) for i in range(8)] + [pool.submit(granter)]
        for future in futures:
            future.result(timeout=TIMEOUT_S)
    assert len(admitted) <= 6
    # the workers stop only once refused after the grant: the whole 0.75 was spent, not a ulp more
    assert len(ledgers[0].charges(analyst="ana", limit=100)) == 6
    assert fill(ledgers[0]) == 0


@pytest.mark.parametrize("when", [0, 3, 8])
def test_concurrent_admits_around_a_period_never_overspend(store: tuple[str, Factory, str], when: int) -> None:
    """A dataset-wide period after `when` admits, while two analysts' admits go on until refused after it:
    each period's charges stay within the analysts' and the shared budget, and the new period's are exactly
    the shared budget's 8."""
    kind, make, address = store
    ledgers = [make() for _ in range(5)]
    barrier = threading.Barrier(5, timeout=TIMEOUT_S)
    admitted = [0]
    lock = threading.Lock()
    started = threading.Event()

    def worker(i: int) -> None:
        barrier.wait()
        while True:
            try:
                admit(ledgers[i], ["ana", "bob"][i % 2], shared=SHARED)
            except BudgetExceeded:
                if started.is_set():
                    return
                continue
            with lock:
                admitted[0] += 1

    def operator() -> None:
        barrier.wait()
        while True:
            with lock:
                if admitted[0] >= when:
                    break
        period(ledgers[4], None)
        started.set()

    with ThreadPoolExecutor(5) as pool:
        futures = [pool.submit(worker, i) for i in range(4)] + [pool.submit(operator)]
        for future in futures:
            future.result(timeout=TIMEOUT_S)
    (op,) = ledgers[0].operations()
    charges = ledgers[0].charges(limit=1000)
    numbers = _numbers(kind, ledgers[0], address)
    for before in (True, False):  # the old period and the new one, split at the floor, each within its budgets
        period_charges = [c for c in charges if (numbers[c.id] <= op.floor) == before]
        for who in ("ana", "bob"):
            assert sum(Fraction(c.epsilon) for c in period_charges if c.analyst == who) <= Fraction(1, 2)
        assert sum(Fraction(c.epsilon) for c in period_charges) <= 1
        assert len(period_charges) >= (when if before else 8)
    assert len([c for c in charges if numbers[c.id] > op.floor]) == 8


def _numbers(kind: str, ledger: Ledger, address: str) -> dict[str, int]:
    """Each charge's number (the store's `seq`), by id."""
    if kind == "memory":
        return {c.id: i + 1 for i, c in enumerate(ledger._rows)}  # type: ignore[attr-defined]
    if kind == "sqlite":
        with sqlite3.connect(address) as conn:
            return dict(conn.execute("SELECT id, seq FROM charges").fetchall())
    return dict(execute(address, "SELECT id, seq FROM charges"))


def test_every_operation_is_in_the_audit_chain_and_an_edit_breaks_it(store: tuple[str, Factory, str]) -> None:
    kind, make, address = store
    if kind == "memory":
        ledger = make()
        grant(ledger, "ana", "0.25")
        assert [r.decision for r in ledger.admissions] == ["granted"]  # type: ignore[attr-defined]
        return
    ledger = make()
    admit(ledger)
    grant(ledger, "ana", "0.25", reason="quarter-end report")
    period(ledger, None)
    audit = open_audit(address)
    try:
        entries = audit.entries(limit=10)
        decisions = sorted(e.decision for e in entries)
        assert decisions == ["admitted", "granted", "period"]
        (granted,) = [e for e in entries if e.decision == "granted"]
        assert (granted.analyst, granted.dataset, granted.epsilon) == ("ana", "demo", 0.25)
        assert '"operator":"root"' in granted.sql and '"reason":"quarter-end report"' in granted.sql
        (op, _) = ledger.operations()
        assert granted.charge_id == op.id
        assert audit.verify().ok and audit.coverage().ok
        edit = "UPDATE audit_log SET sql = REPLACE(sql, 'quarter-end', 'year-end') WHERE decision = 'granted'"
        if kind == "sqlite":
            with sqlite3.connect(address) as conn:
                conn.execute(edit)
        else:
            execute(address, edit)
        result = audit.verify()
        assert not result.ok and result.first_bad_seq == granted.seq
    finally:
        audit.close()


def test_a_grant_under_zcdp_converts_the_new_total(tmp_path: Path) -> None:
    """Under zcdp a grant raises the budget in (ε, δ); the capacity is the new total's ρ, not a sum of ρs."""
    ledger = SqliteLedger(tmp_path / "ledger.sqlite")
    zcdp = Accounting("zcdp", 0.0)
    budget = Budget(1.0, 1e-6)

    def one() -> None:
        ledger.admit(Admission("ana", "demo", sql_sha256("q"), LaplaceEvent(1, 10.0), 0.1, 0.0, "basic", budget,
                               accounting=zcdp, sql="q"))

    def count() -> int:
        for n in range(1000):
            try:
                one()
            except BudgetExceeded:
                return n
        raise AssertionError("never refused")

    try:
        assert count() == 4  # ρ = 0.02436 for (1, 1e-6); each query ρ = 0.005 (docs/privacy.md §5.6)
        ledger.operate(Operation("grant", "demo", "ana", Fraction(1), Fraction(0), "root", "more"))
        # (2, 1e-6): ρ(2, 1e-6) = 0.08815…, room for 17 in all: 13 more (a sum of the two ρs would give 12)
        assert count() == 13
    finally:
        ledger.close()
