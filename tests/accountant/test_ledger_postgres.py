"""The ledger contract of test_ledger.py, run against PostgresLedger, plus what sharing a server adds: races
between ledger objects, threads and OS processes, and concurrent, idempotent schema migrations.

Each test gets its own schema (dropped afterwards). Without a reachable server these tests fail.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from accountant.audit.chain_tables import POSTGRES_MIGRATIONS
from accountant.errors import BudgetExceeded, LedgerBusy
from accountant.filter import Budget, Spend
from accountant.ledger import budget_ops, kept_bounds
from accountant.ledger.charges import Charge, StoredRelease, Waits
from accountant.ledger.postgres import MIGRATIONS, Pool, PostgresLedger, lock_key, migrate
from accountant.ledger.sqlite import SqliteLedger
from accountant.ledger.stores import open_ledger
from tests.accountant import test_ledger
from tests.accountant.test_ledger import TIMEOUT_S, Factory, _admit
from tests.support.pg_fixtures import execute, fresh_schema


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_schema() as (_, url):
        yield url


@pytest.fixture
def make_ledger(pg_url: str) -> Iterator[Factory]:
    """Overrides test_ledger's fixture for the inherited cases: every ledger of one test shares one schema."""
    opened: list[PostgresLedger] = []

    def make(**kwargs: object) -> PostgresLedger:
        ledger = PostgresLedger(pg_url, **kwargs)  # type: ignore[arg-type]
        opened.append(ledger)
        return ledger

    yield make
    for ledger in opened:
        ledger.close()


class TestPostgresLedgerContract(test_ledger.TestLedgerContract):
    """Every case of the shared contract, unchanged, on PostgreSQL."""


class TestPostgresAccountingContract(test_ledger.TestAccountingContract):
    """The admit rules and the dataset budget, unchanged, on PostgreSQL."""


class TestPostgresIdempotencyContract(test_ledger.TestIdempotencyContract):
    """Idempotency keys, unchanged, on PostgreSQL (migration 4 adds idempotency_keys)."""


class TestPostgresCellContract(test_ledger.TestCellContract):
    """Per-cell accounting, unchanged, on PostgreSQL (migration 2 adds charges.scope)."""


class TestPostgresKeptBoundsContract(test_ledger.TestKeptBoundsContract):
    """Chosen bounds kept for reuse on PostgreSQL (their own migration component, chosen_bounds)."""


# --- PostgreSQL only --------------------------------------------------------------------------------


def test_charges_survive_reopening_exactly(make_ledger: Factory) -> None:
    charge = _admit(make_ledger(), 0.1, 3e-7)
    reopened = make_ledger()
    assert reopened.charges() == (charge,)  # every field, the event and the exact floats included
    assert reopened.spent("ana", "sales") == Spend(0.1, 3e-7)


def test_repeats_are_stored_once(make_ledger: Factory) -> None:
    ledger = make_ledger()
    charge = _admit(ledger)
    first = StoredRelease("ana", "sales", "cd" * 32, charge.id, b'{"rows": [[1]]}')
    ledger.store_release(first)
    ledger.store_release(StoredRelease("ana", "sales", "cd" * 32, charge.id, b"other"))
    assert make_ledger().stored_release("ana", "sales", "cd" * 32) == first  # first one wins, bytes intact
    assert ledger.stored_release("bob", "sales", "cd" * 32) is None


def test_analysts_of_one_dataset_on_two_ledger_objects_never_overspend_its_budget(make_ledger: Factory) -> None:
    """The dataset's lock, not the per-analyst ones, serialises the shared budget's checks."""
    ledgers = (make_ledger(), make_ledger())
    threads = 12
    shared = Budget(0.5, 1e-6)  # 4 of 0.125 fit, whoever asks
    barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

    def worker(i: int) -> int:
        barrier.wait()
        admitted = 0
        for _ in range(2):
            with contextlib.suppress(BudgetExceeded):
                _admit(ledgers[i % 2], 0.125, analyst=f"analyst{i}", dataset_budget=shared)
                admitted += 1
        return admitted

    with ThreadPoolExecutor(threads) as pool:
        assert sum(f.result(timeout=TIMEOUT_S) for f in [pool.submit(worker, i) for i in range(threads)]) == 4
    assert ledgers[0].count() == 4


def test_two_ledger_objects_and_many_threads_never_overspend(make_ledger: Factory) -> None:
    """Two PostgresLedger objects stand for two processes: only the database can serialise their admits."""
    ledgers = (make_ledger(), make_ledger())
    threads, attempts, admitted_ok = 16, 3, 10
    budget = Budget(0.125 * admitted_ok, 1e-6)
    barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

    def worker(i: int) -> list[Charge]:
        barrier.wait()
        admitted = []
        for _ in range(attempts):
            for analyst in ("ana", "bob"):  # two pairs at once: their locks are independent
                with contextlib.suppress(BudgetExceeded):
                    admitted.append(_admit(ledgers[i % 2], 0.125, analyst=analyst, budget=budget))
        return admitted

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(worker, i) for i in range(threads)]
        admitted = [c for future in futures for c in future.result(timeout=TIMEOUT_S)]
    for analyst in ("ana", "bob"):
        assert sum(c.analyst == analyst for c in admitted) == admitted_ok
        assert ledgers[0].count(analyst=analyst) == admitted_ok
        assert ledgers[1].spent(analyst, "sales") == Spend(1.25, 0.0)


def _admit_in_process(url: str, attempts: int) -> int:
    ledger = PostgresLedger(url)
    admitted = 0
    try:
        for _ in range(attempts):
            with contextlib.suppress(BudgetExceeded):
                _admit(ledger, 0.125)
                admitted += 1
    finally:
        ledger.close()
    return admitted


def test_separate_processes_never_overspend(pg_url: str) -> None:
    # no ledger is opened first: the processes also race to apply the migrations
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_admit_in_process, pg_url, 6) for _ in range(3)]
        counts = [future.result(timeout=TIMEOUT_S) for future in futures]
    assert sum(counts) == 8  # 1.0 / 0.125, out of 18 attempts
    check = PostgresLedger(pg_url)
    try:
        assert check.count() == 8
        assert check.spent("ana", "sales") == Spend(1.0, 0.0)
    finally:
        check.close()


def test_migrations_are_recorded_once_and_reopening_is_idempotent(make_ledger: Factory, pg_url: str) -> None:
    charge = _admit(make_ledger())
    make_ledger()
    make_ledger()
    rows = execute(pg_url, "SELECT component, version FROM schema_migrations ORDER BY component, version")
    # the ledger creates the audit chain's tables too: its admit appends the charge's admitted entry
    assert rows == [("audit", v) for v in range(1, len(POSTGRES_MIGRATIONS) + 1)] + [
        ("budget_ops", v) for v in range(1, len(budget_ops.POSTGRES_MIGRATIONS) + 1)] + [
        ("chosen_bounds", v) for v in range(1, len(kept_bounds.POSTGRES_MIGRATIONS) + 1)] + [
        ("ledger", v) for v in range(1, len(MIGRATIONS) + 1)]
    assert make_ledger().charges() == (charge,)


def test_ledgers_opening_at_once_migrate_safely(pg_url: str) -> None:
    threads = 8
    barrier = threading.Barrier(threads, timeout=TIMEOUT_S)

    def open_one() -> PostgresLedger:
        barrier.wait()
        return PostgresLedger(pg_url)

    with ThreadPoolExecutor(threads) as pool:
        ledgers = [f.result(timeout=TIMEOUT_S) for f in [pool.submit(open_one) for _ in range(threads)]]
    try:
        assert execute(pg_url, "SELECT count(*) FROM schema_migrations") == [
            (len(MIGRATIONS) + len(POSTGRES_MIGRATIONS) + len(kept_bounds.POSTGRES_MIGRATIONS)
             + len(budget_ops.POSTGRES_MIGRATIONS),)]
        _admit(ledgers[0])
        assert ledgers[-1].count() == 1
    finally:
        for ledger in ledgers:
            ledger.close()


def test_migrations_apply_only_what_is_new_and_roll_back_a_failure(pg_url: str) -> None:
    pool = Pool(pg_url, size=1)
    try:
        first = "CREATE TABLE m1 (x integer)"
        assert migrate(pool, "test", (first,)) == 1
        assert migrate(pool, "test", (first, "INSERT INTO m1 VALUES (1); INSERT INTO m1 VALUES (2)")) == 2
        assert execute(pg_url, "SELECT count(*) FROM m1") == [(2,)]  # version 2 ran once, version 1 not again
        with pytest.raises(psycopg.errors.UndefinedTable):
            migrate(pool, "test", (first, "SELECT 1", "INSERT INTO m1 VALUES (3); INSERT INTO nowhere VALUES (1)"))
        assert execute(pg_url, "SELECT count(*) FROM m1") == [(2,)]  # the failed version left nothing
        assert execute(pg_url, "SELECT max(version) FROM schema_migrations WHERE component = 'test'") == [(2,)]
    finally:
        pool.close()


def test_a_newer_schema_is_refused(make_ledger: Factory, pg_url: str) -> None:
    make_ledger()
    execute(pg_url, "INSERT INTO schema_migrations (component, version) VALUES ('ledger', %s)", (len(MIGRATIONS) + 1,))
    with pytest.raises(RuntimeError, match="upgrade dp-proxy"):
        PostgresLedger(pg_url)


def test_unreachable_server_fails_at_start_up() -> None:
    with pytest.raises(psycopg.OperationalError):
        PostgresLedger("postgresql://postgres@127.0.0.1:1/test", timeout_s=2)


def test_open_ledger_picks_the_store_by_address(pg_url: str, tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    for address in (path, str(path), f"sqlite:///{path}"):
        ledger = open_ledger(address)
        try:
            assert isinstance(ledger, SqliteLedger)
        finally:
            ledger.close()
    ledger = open_ledger(pg_url)
    try:
        assert isinstance(ledger, PostgresLedger)
    finally:
        ledger.close()
    with pytest.raises(ValueError, match="unsupported ledger address"):
        open_ledger("mysql://db/ledger")


WAITS = Waits(lock_s=0.5, statement_s=2.0, idle_s=2.0)


def test_a_session_frozen_holding_the_dataset_lock_bounds_every_wait(pg_url: str) -> None:
    """A replica stopped (SIGSTOP) inside an admit, just after taking the dataset's lock, stalled the other
    replicas' admits on that dataset for ~50 s (issue 26 item 11). Now: an admit waits `lock_s`, then
    `LedgerBusy` and nothing written; reports do not wait at all; the probe says busy; and PostgreSQL ends
    the frozen session after `idle_s`, so its lock goes and admits succeed again."""
    ledger = PostgresLedger(pg_url, waits=WAITS)
    holder = Pool(pg_url, size=1, waits=WAITS)  # a product session, with the product's idle limit
    shared = Budget(10.0, 1e-6)
    try:
        _admit(ledger, 0.125, dataset_budget=shared)
        with holder.connection() as frozen:
            frozen.execute("BEGIN")
            frozen.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key("ledger", "dataset", "sales"),))
            frozen_at = time.monotonic()  # from here the session idles in its transaction, as a frozen process
            started = time.monotonic()
            with pytest.raises(LedgerBusy):
                _admit(ledger, 0.125, analyst="bob", dataset_budget=shared)
            assert time.monotonic() - started < WAITS.lock_s + 1.0
            started = time.monotonic()
            assert ledger.tallied(dataset="sales").bound(None) is not None  # a report reads without the lock
            assert ledger.spent("ana", "sales") == Spend(0.125, 0.0)
            assert time.monotonic() - started < WAITS.lock_s
            with pytest.raises(LedgerBusy):
                ledger.probe(["sales"], 0.3)
            assert ledger.count() == 1  # the refused admit wrote nothing
            time.sleep(max(0.0, WAITS.idle_s + 1.0 - (time.monotonic() - frozen_at)))
            ledger.probe(["sales"], 0.3)  # the server ended the frozen session: its lock is gone
            assert _admit(ledger, 0.125, analyst="bob", dataset_budget=shared).analyst == "bob"
            with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
                frozen.execute("SELECT 1")
    finally:
        holder.close()
        ledger.close()
