"""Ledger contract, run against every implementation, plus SQLite durability and cross-connection races."""

from __future__ import annotations

import contextlib
import multiprocessing
import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from accountant.errors import BudgetExceeded
from accountant.events import ComposedEvent, Event, GaussianEvent, LaplaceEvent, ThresholdEvent
from accountant.filter import Budget, Spend
from accountant.ledger import Charge, Ledger, MemoryLedger, SqliteLedger

START = datetime(2025, 1, 1, tzinfo=UTC)
BUDGET = Budget(1.0, 1e-6)
TIMEOUT_S = 60  # a deadlock fails the test instead of hanging the suite
EVENT: Event = ComposedEvent((LaplaceEvent(1, 8.0), GaussianEvent(2.0, 3.5), ThresholdEvent(0.25, 1e-9)))


class FakeClock:
    """Hands out START, START + 1 s, … so that ordering and time filters are deterministic."""

    def __init__(self) -> None:
        self._next = START
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            now, self._next = self._next, self._next + timedelta(seconds=1)
            return now


Factory = Callable[..., Ledger]


@pytest.fixture(params=["memory", "sqlite"])
def make_ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Factory]:
    opened: list[Ledger] = []

    def make(**kwargs: object) -> Ledger:
        ledger: Ledger
        if request.param == "memory":
            ledger = MemoryLedger(**kwargs)  # type: ignore[arg-type]
        else:
            ledger = SqliteLedger(tmp_path / "ledger.sqlite", **kwargs)  # type: ignore[arg-type]
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


def _admit(
    ledger: Ledger,
    epsilon: float = 0.125,
    delta: float = 0.0,
    *,
    analyst: str = "ana",
    dataset: str = "sales",
    budget: Budget = BUDGET,
) -> Charge:
    return ledger.admit(
        analyst=analyst,
        dataset=dataset,
        sql_sha256="ab" * 32,
        event=EVENT,
        epsilon=epsilon,
        delta=delta,
        composition="basic",
        budget=budget,
    )


class TestLedgerContract:
    def test_admit_records_the_charge(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        charge = _admit(ledger, 0.25, 1e-7)
        assert len(charge.id) == 32 and int(charge.id, 16) >= 0
        assert charge.at.tzinfo is not None and charge.at.utcoffset() == timedelta(0)
        assert (charge.analyst, charge.dataset, charge.sql_sha256) == ("ana", "sales", "ab" * 32)
        assert (charge.event, charge.composition, charge.epsilon, charge.delta) == (
            EVENT,
            "basic",
            0.25,
            1e-7,
        )
        assert ledger.spent("ana", "sales") == Spend(0.25, 1e-7)  # exact: one charge
        assert ledger.charges() == (charge,)

    def test_spend_is_per_analyst_and_dataset(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        _admit(ledger, 0.5)
        _admit(ledger, 0.25, analyst="bob")
        _admit(ledger, 0.125, dataset="hr")
        assert ledger.spent("ana", "sales") == Spend(0.5, 0.0)
        assert ledger.spent("bob", "sales") == Spend(0.25, 0.0)
        assert ledger.spent("ana", "hr") == Spend(0.125, 0.0)
        assert ledger.spent("nobody", "sales") == Spend(0.0, 0.0)

    def test_charges_filter_and_paginate_newest_first(self, make_ledger: Factory) -> None:
        ledger = make_ledger(clock=FakeClock())
        made = [_admit(ledger, 0.0625, analyst=("ana", "bob")[i % 2]) for i in range(6)]  # at START + i s
        assert ledger.charges() == tuple(reversed(made))
        assert ledger.count() == 6
        assert ledger.charges(analyst="bob") == (made[5], made[3], made[1])
        assert ledger.count(analyst="bob") == 3
        assert ledger.charges(dataset="hr") == () and ledger.count(dataset="hr") == 0
        assert ledger.charges(limit=2) == (made[5], made[4])
        assert ledger.charges(limit=2, offset=2) == (made[3], made[2])
        assert ledger.charges(offset=10) == ()
        since, until = START + timedelta(seconds=2), START + timedelta(seconds=4)
        assert ledger.charges(since=since, until=until) == (made[3], made[2])  # since inclusive, until not
        assert ledger.count(since=since, until=until) == 2
        assert ledger.charges(analyst="ana", since=START + timedelta(seconds=1)) == (made[4], made[2])

    def test_equal_times_keep_insertion_order(self, make_ledger: Factory) -> None:
        ledger = make_ledger(clock=lambda: START)
        made = [_admit(ledger, 0.125) for _ in range(3)]
        assert ledger.charges() == tuple(reversed(made))

    def test_refusal_explains_and_writes_nothing(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        budget = Budget(3.0, 1e-6)
        _admit(ledger, 2.75, budget=budget)
        with pytest.raises(BudgetExceeded) as info:
            _admit(ledger, 0.5, budget=budget)
        error = info.value
        assert str(error) == "query needs ε=0.5 but 0.25 of your ε=3.0 remains"
        assert error.code == "budget_exceeded"
        assert error.detail == {
            "epsilon_remaining": 0.25,
            "delta_remaining": 1e-6,
            "epsilon_requested": 0.5,
            "delta_requested": 0.0,
        }
        assert ledger.count() == 1
        assert ledger.spent("ana", "sales") == Spend(2.75, 0.0)

    def test_refusal_on_delta(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        budget = Budget(3.0, 1e-6)
        _admit(ledger, 0.5, 1e-6, budget=budget)
        with pytest.raises(BudgetExceeded, match=r"query needs δ=1e-09 but 0.0 of your δ=1e-06 remains"):
            _admit(ledger, 0.5, 1e-9, budget=budget)
        assert ledger.count() == 1

    def test_exact_fill_is_admitted_then_nothing_more(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        for _ in range(8):
            _admit(ledger, 0.125)
        with pytest.raises(BudgetExceeded):
            _admit(ledger, 5e-324)
        _admit(ledger, 0.0)  # a free charge (e.g. a repeat answered from the ledger) still fits
        assert ledger.count() == 9

    @pytest.mark.parametrize(("epsilon", "delta"), [(-0.1, 0.0), (float("nan"), 0.0), (0.1, 1.0)])
    def test_malformed_charges_are_refused(self, make_ledger: Factory, epsilon: float, delta: float) -> None:
        ledger = make_ledger()
        with pytest.raises(ValueError):
            _admit(ledger, epsilon, delta)
        assert ledger.count() == 0

    def test_naive_times_and_bad_pages_are_refused(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        with pytest.raises(ValueError):
            ledger.charges(since=datetime(2025, 1, 1))  # naive on purpose
        with pytest.raises(ValueError):
            ledger.count(until=datetime(2025, 1, 1))
        with pytest.raises(ValueError):
            ledger.charges(limit=-1)

    def test_concurrent_admits_never_overspend(self, make_ledger: Factory) -> None:
        ledger = make_ledger()
        threads, admitted_ok = 16, 5
        budget = Budget(0.25 * admitted_ok, 1e-6)  # exact: 1.25
        barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

        def worker() -> str:
            barrier.wait()
            try:
                _admit(ledger, 0.25, budget=budget)
                return "admitted"
            except BudgetExceeded:
                return "refused"

        with ThreadPoolExecutor(threads) as pool:
            futures = [pool.submit(worker) for _ in range(threads)]
            outcomes = [future.result(timeout=TIMEOUT_S) for future in futures]
        assert outcomes.count("admitted") == admitted_ok
        assert ledger.count() == admitted_ok
        assert ledger.spent("ana", "sales") == Spend(1.25, 0.0)


# --- SQLite only ------------------------------------------------------------------------------------


def test_sqlite_charges_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    charge = _admit(ledger, 0.1, 3e-7)
    ledger.close()
    reopened = SqliteLedger(path)
    try:
        assert reopened.charges() == (charge,)  # every field, the event and the exact floats included
        assert reopened.spent("ana", "sales") == Spend(0.1, 3e-7)
    finally:
        reopened.close()


def test_sqlite_file_is_wal_and_versioned(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    SqliteLedger(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(1,)]
    conn.close()


def test_sqlite_refuses_an_unknown_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    SqliteLedger(path).close()
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE schema_version SET version = 99")
    conn.close()
    with pytest.raises(RuntimeError, match="schema version 99"):
        SqliteLedger(path)


def test_separate_connections_on_one_file_never_overspend(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    threads, admitted_ok = 16, 6
    budget = Budget(0.125 * admitted_ok, 1e-6)
    barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

    def worker() -> list[Charge]:
        admitted = []
        try:
            ledger = SqliteLedger(path)  # its own connection: only SQLite's locking serialises the admits
        finally:
            barrier.wait()  # reached even if opening failed, so no other worker waits forever
        try:
            for _ in range(2):
                with contextlib.suppress(BudgetExceeded):
                    admitted.append(_admit(ledger, 0.125, budget=budget))
        finally:
            ledger.close()
        return admitted

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(worker) for _ in range(threads)]
        admitted = [charge for future in futures for charge in future.result(timeout=TIMEOUT_S)]
    check = SqliteLedger(path)
    try:
        assert len(admitted) == admitted_ok
        assert check.count() == admitted_ok
        assert check.spent("ana", "sales") == Spend(0.75, 0.0)
    finally:
        check.close()


def _admit_in_process(path: str, attempts: int) -> int:
    ledger = SqliteLedger(path)
    admitted = 0
    try:
        for _ in range(attempts):
            with contextlib.suppress(BudgetExceeded):
                _admit(ledger, 0.125)
                admitted += 1
    finally:
        ledger.close()
    return admitted


def test_separate_processes_on_one_file_never_overspend(tmp_path: Path) -> None:
    path = str(tmp_path / "ledger.sqlite")
    SqliteLedger(path).close()
    # an executor, not multiprocessing.Pool: a worker that dies raises BrokenProcessPool instead of hanging
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_admit_in_process, path, 6) for _ in range(3)]
        counts = [future.result(timeout=TIMEOUT_S) for future in futures]
    assert sum(counts) == 8  # 1.0 / 0.125, out of 18 attempts
    check = SqliteLedger(path)
    try:
        assert check.count() == 8
    finally:
        check.close()
