"""An admit's cost does not grow with the ledger's history (issue #12): the memo's check reads each history's
tally (accountant/ledger/tallies.py), kept by triggers, instead of counting the history; and the tallies stay exact
through admits, deletes, moved rows, late commits and upgrades, on SQLite and PostgreSQL.

The cost is measured as work, never as time: the SQLite virtual machine's instructions (a progress handler
called at every one) and the rows each PostgreSQL plan node visits (`EXPLAIN (ANALYZE, FORMAT JSON)`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import psycopg
import pytest

from accountant.audit.chain_tables import POSTGRES_MIGRATIONS
from accountant.cell_scope import CellScope
from accountant.cells import ledgered
from accountant.errors import BudgetExceeded
from accountant.events import LaplaceEvent
from accountant.filter import Budget
from accountant.ledger import postgres
from accountant.ledger.charges import Ledger
from accountant.ledger.postgres import MIGRATIONS, Pool, PostgresLedger, migrate
from accountant.ledger.sql_rows import since_sql
from accountant.ledger.sqlite import SqliteLedger
from tests.support.ledger_rows import T, insert_charges, instructions
from tests.support.pg_fixtures import execute, fresh_schema

EVENT_TEXT = '{"kind":"laplace","sensitivity":1,"scale":4.0}'  # ε = 0.25
BIG = Budget(1e9, 0.5)
COUNTS = "SELECT analyst, dataset, COUNT(*) FROM charges GROUP BY analyst, dataset ORDER BY analyst, dataset"
TALLIES = "SELECT analyst, dataset, charges FROM tallies WHERE charges <> 0 ORDER BY analyst, dataset"


@pytest.fixture
def pg_url() -> Iterator[str]:
    with fresh_schema() as (_, url):
        yield url


def _admit(ledger: Ledger, epsilon: float = 0.25, *, analyst: str = "ana", dataset: str = "sales",
           dataset_budget: Budget | None = None, cells: list[int] | None = None) -> None:
    ledger.admit(analyst=analyst, dataset=dataset, sql_sha256="ab" * 32, event=LaplaceEvent(1, 1 / epsilon),
                 epsilon=epsilon, delta=0.0, composition="basic", budget=BIG, dataset_budget=dataset_budget,
                 scope=None if cells is None else CellScope.of("t", "s", 4, cells))


def _mixed_history(ledger: Ledger) -> None:
    """Admits over three analysts and two datasets, scoped and not, checked against a dataset budget."""
    for i in range(24):
        _admit(ledger, (0.125, 0.25, 0.5)[i % 3], analyst=("ana", "bob", "cy")[i % 3],
               dataset=("sales", "hr")[i % 2], dataset_budget=BIG,
               cells=None if i % 4 == 0 else [i % 4, (i + 1) % 4])


def _assert_memo_is_a_fresh_read(ledger: Ledger) -> None:
    for dataset in ("sales", "hr"):
        for analyst in ("ana", "bob", "cy", None):
            for rule in ("basic", "zcdp", "gdp"):
                fresh = ledgered(ledger.entries(dataset=dataset, analyst=analyst), rule)  # type: ignore[arg-type]
                kept = ledger.tallied(dataset=dataset, analyst=analyst, rule=rule)  # type: ignore[arg-type]
                assert (kept.total, kept.bound()) == (fresh.total, fresh.bound())


# --- the tallies are exact -------------------------------------------------------------------------


def test_sqlite_tallies_are_the_counts_of_the_histories(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    try:
        _mixed_history(ledger)
        _assert_memo_is_a_fresh_read(ledger)
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:  # behind the ledger's back
            conn.execute("DELETE FROM charges WHERE seq IN (2, 3)")
            conn.execute("UPDATE charges SET analyst = 'dan', dataset = 'ops' WHERE seq = 5")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            assert conn.execute(TALLIES).fetchall() == conn.execute(COUNTS).fetchall()
            assert conn.execute("SELECT SUM(charges) FROM tallies").fetchone() == (22,)  # 24 admitted, 2 deleted
        _admit(ledger)
        _assert_memo_is_a_fresh_read(ledger)  # the deleted and the moved rows were noticed
    finally:
        ledger.close()


def test_postgres_tallies_are_the_counts_of_the_histories(pg_url: str) -> None:
    ledger = PostgresLedger(pg_url)
    try:
        _mixed_history(ledger)
        _assert_memo_is_a_fresh_read(ledger)
        execute(pg_url, "DELETE FROM charges WHERE seq IN (2, 3)")
        execute(pg_url, "UPDATE charges SET analyst = 'dan', dataset = 'ops' WHERE seq = 5")
        assert execute(pg_url, TALLIES) == execute(pg_url, COUNTS)
        assert execute(pg_url, "SELECT SUM(charges)::int FROM tallies") == [(22,)]  # 24 admitted, 2 deleted
        _admit(ledger)
        _assert_memo_is_a_fresh_read(ledger)
        execute(pg_url, "TRUNCATE charges CASCADE")
        assert execute(pg_url, "SELECT count(*) FROM tallies") == [(0,)]
    finally:
        ledger.close()


def test_postgres_a_charge_that_took_its_number_early_and_committed_late_is_read(pg_url: str) -> None:
    """Another analyst's admit takes a sequence number, this ledger's admits pass it, then it commits: the
    charge lands below the memo's watermark. Its tally changes without a row above the watermark, so the
    next read starts over, and the dataset's shared budget is never overspent."""
    ledger = PostgresLedger(pg_url)
    shared = Budget(1.0, 0.0)
    try:
        _admit(ledger, dataset_budget=shared)
        with psycopg.connect(pg_url) as late:  # a transaction of its own, as another replica's admit
            (seq,) = late.execute("SELECT nextval(pg_get_serial_sequence('charges', 'seq'))").fetchone()  # type: ignore[misc]
            _admit(ledger, dataset_budget=shared)
            _admit(ledger, dataset_budget=shared)  # 0.75 of 1.0 spent, the watermark past `seq`
            assert ledger.tallied(dataset="sales").total[0] == Fraction(3, 4)
            late.execute(
                "INSERT INTO charges (seq, id, analyst, dataset, at, sql_sha256, event, epsilon, delta, composition)"
                " OVERRIDING SYSTEM VALUE VALUES (%s, 'late', 'bob', 'sales', now(), 'q', %s, 0.25, 0, 'basic')",
                (seq, EVENT_TEXT),
            )
        assert execute(pg_url, "SELECT max(seq) > %s FROM charges", (seq,)) == [(True,)]
        assert ledger.tallied(dataset="sales").total[0] == 1  # 0.75 would be the memo's stale sum
        with pytest.raises(BudgetExceeded, match="dataset's shared"):
            _admit(ledger, 0.125, dataset_budget=shared)
        _assert_memo_is_a_fresh_read(ledger)
    finally:
        ledger.close()


# --- the memo's check does not read the history ----------------------------------------------------


def _instructions(ledger: SqliteLedger) -> tuple[int, ...]:
    """The SQLite instructions one admit (with a dataset budget) and each tallied read execute."""
    return tuple(instructions(ledger._conn, call)[0] for call in (
        lambda: _admit(ledger, 1e-9, analyst="a0", dataset_budget=BIG),
        lambda: ledger.tallied(dataset="sales"), lambda: ledger.tallied(dataset="sales", analyst="a0")))


def _as_history_grows(path: Path, sizes: tuple[int, ...], measure: Callable[[SqliteLedger, int], T]) -> list[T]:
    """`measure(ledger, n)` once the ledger at `path` holds n charges on `sales` (over a0 … a9), for each size."""
    ledger = SqliteLedger(path)
    try:
        found, first = [], 1
        for last in sizes:
            insert_charges(path, first, last, dataset="sales", event=EVENT_TEXT, epsilon=1e-9)
            found.append(measure(ledger, last))
            first = last + 1
        return found
    finally:
        ledger.close()


def _warm_then_count(ledger: SqliteLedger, _: int) -> tuple[int, ...]:
    ledger.tallied(dataset="sales")  # the memos read the new rows once
    ledger.tallied(dataset="sales", analyst="a0")
    _admit(ledger, 1e-9, analyst="a0", dataset_budget=BIG)
    return _instructions(ledger)


def test_sqlite_admit_and_tallied_execute_as_many_instructions_at_2k_and_40k_charges(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    measured = _as_history_grows(path, (2_000, 40_000), _warm_then_count)
    assert measured[0] == measured[1]  # the old COUNT visited every earlier charge: 20x the rows, 20x the work
    with contextlib.closing(sqlite3.connect(path)) as conn:
        plan = conn.execute("EXPLAIN QUERY PLAN " + since_sql("dataset = ?", "?"), ("sales", "sales", 1)).fetchall()
    assert not [row for row in plan if row[3].startswith(("SCAN charges", "SCAN tallies"))], plan  # searched


def _visited(plan: dict[str, Any]) -> int:
    """Rows a plan node and those under it produced or read and dropped."""
    own = plan["Actual Rows"] * plan["Actual Loops"] + plan.get("Rows Removed by Filter", 0)
    return own + plan.get("Rows Removed by Index Recheck", 0) + sum(_visited(p) for p in plan.get("Plans", []))


class _Explaining:
    """A connection that runs each statement once more under EXPLAIN ANALYZE and keeps the rows it visited."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn, self.visited = conn, 0

    def execute(self, sql: str, params: tuple[object, ...]) -> Any:
        explained = self.conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
        assert explained is not None
        self.visited += _visited(explained[0][0]["Plan"])
        return self.conn.execute(sql, params)


def _pg_fill(url: str, first: int, last: int) -> None:
    execute(url, "INSERT INTO charges (id, analyst, dataset, at, sql_sha256, event, epsilon, delta, composition)"
                 " SELECT 'fill' || i, 'a' || (i %% 10), 'sales', now(), 'q', %s, 1e-9, 0.0, 'basic'"
                 " FROM generate_series(%s::bigint, %s::bigint) AS i", (EVENT_TEXT, first, last))
    execute(url, "ANALYZE charges")


def test_postgres_the_memo_check_visits_as_many_rows_at_2k_and_40k_charges(pg_url: str) -> None:
    ledger = PostgresLedger(pg_url)
    try:
        measured = []
        for first, last in ((1, 2_000), (2_001, 40_000)):
            _pg_fill(pg_url, first, last)
            (top,) = execute(pg_url, "SELECT max(seq) FROM charges")[0]
            with psycopg.connect(pg_url, autocommit=True) as conn:
                explaining = _Explaining(conn)
                for analyst in ("a0", None):  # at the memo's watermark: nothing new
                    seen = postgres._since(explaining, analyst, "sales", int(top))  # type: ignore[arg-type]
                    assert seen.after == [] and seen.before == (last if analyst is None else last // 10)
            measured.append(explaining.visited)
        assert measured[0] == measured[1], measured  # the old COUNT: 2,406 rows, then 48,006
    finally:
        ledger.close()


# --- upgrades fill the tallies ---------------------------------------------------------------------


def _budget_is_exact(ledger: Ledger) -> None:
    """ana holds 0.5 of the shared 1.0 and bob 0.25: 0.25 more fits, then nothing."""
    shared = Budget(1.0, 0.0)
    _admit(ledger, 0.25, analyst="bob", dataset_budget=shared)
    with pytest.raises(BudgetExceeded, match="dataset's shared"):
        _admit(ledger, 0.125, dataset_budget=shared)
    _assert_memo_is_a_fresh_read(ledger)


def test_sqlite_version_2_files_are_upgraded_with_their_tallies_filled(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = SqliteLedger(path)
    _admit(ledger)
    _admit(ledger, analyst="bob")
    ledger.close()
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:  # as version 2 left it: no tallies
        for name in ("insert", "delete", "move"):
            conn.execute(f"DROP TRIGGER charges_tally_{name}")
        conn.execute("DROP TABLE tallies")
        conn.execute("UPDATE schema_version SET version = 2")
        conn.execute(
            "INSERT INTO charges (id, analyst, dataset, at_us, sql_sha256, event, epsilon, delta, composition)"
            " VALUES ('v2', 'ana', 'sales', 0, 'q', ?, 0.25, 0, 'basic')", (EVENT_TEXT,))
    ledger = SqliteLedger(path)
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn:
            assert conn.execute("SELECT version FROM schema_version").fetchall() == [(4,)]
            assert conn.execute(TALLIES).fetchall() == [("ana", "sales", 2), ("bob", "sales", 1)]
        _budget_is_exact(ledger)
    finally:
        ledger.close()


def test_postgres_version_2_schemas_are_upgraded_with_their_tallies_filled(pg_url: str) -> None:
    pool = Pool(pg_url, size=1)
    try:
        migrate(pool, "ledger", MIGRATIONS[:2])
        migrate(pool, "audit", POSTGRES_MIGRATIONS)
    finally:
        pool.close()
    for seq, analyst in enumerate(("ana", "bob", "ana"), start=1):
        execute(pg_url, "INSERT INTO charges (id, analyst, dataset, at, sql_sha256, event, epsilon, delta,"
                        " composition) VALUES (%s, %s, 'sales', now(), 'q', %s, 0.25, 0, 'basic')",
                (f"v2-{seq}", analyst, EVENT_TEXT))
    ledger = PostgresLedger(pg_url)
    try:
        assert execute(pg_url, "SELECT max(version) FROM schema_migrations WHERE component = 'ledger'") == [(4,)]
        assert execute(pg_url, TALLIES) == [("ana", "sales", 2), ("bob", "sales", 1)]
        indexes = execute(pg_url, "SELECT indexname FROM pg_indexes WHERE tablename = 'charges'"
                                  " AND schemaname = current_schema() ORDER BY 1")
        assert [name for (name,) in indexes] == ["charges_by_dataset_seq", "charges_by_pair", "charges_by_time",
                                                 "charges_id_key", "charges_pkey"]
        _budget_is_exact(ledger)
    finally:
        ledger.close()


def test_postgres_reads_past_a_watermark_through_an_index(pg_url: str) -> None:
    """The read past a watermark searches (analyst, dataset, seq) or (seq), never scans the table."""
    PostgresLedger(pg_url).close()
    _pg_fill(pg_url, 1, 5_000)
    for analyst, index in (("a1", "charges_by_pair"), (None, "")):  # one dataset: the primary key serves as well
        clause = "analyst = %s AND dataset = %s" if analyst else "dataset = %s"
        params = ("a1", "sales") if analyst else ("sales",)
        sql = since_sql(clause, "%s")
        (plan,) = execute(pg_url, "EXPLAIN (FORMAT JSON) " + sql, (*params, *params, 4_990))[0]
        assert index in json.dumps(plan) and "Seq Scan" not in json.dumps(plan)


# --- a listing's total reads the tallies too ---------------------------------------------------------


def _counts_agree(ledger: Ledger, last: int) -> None:
    """`count` without a time window (tallies) against the charges counted: the readiness probe, the metrics,
    the dashboard and the ledger listing's total all call it."""
    assert ledger.count() == ledger.count(dataset="sales") == last
    assert ledger.count(analyst="a3", dataset="sales") == ledger.count(analyst="a3") == (last + 7) // 10
    assert ledger.count(dataset="hr") == ledger.count(analyst="nobody") == 0
    assert ledger.count(since=datetime(1970, 1, 1, tzinfo=UTC)) == last  # a time window counts the rows


def _count_work(ledger: SqliteLedger, last: int) -> int:
    _counts_agree(ledger, last)
    return instructions(ledger._conn, lambda: ledger.count(dataset="sales"))[0]


def test_sqlite_count_reads_as_much_at_20k_charges_as_at_2k(tmp_path: Path) -> None:
    work = _as_history_grows(tmp_path / "ledger.sqlite", (2_000, 20_000), _count_work)
    assert work[0] == work[1]  # COUNT(*) of the rows visited every charge: 10x the rows, 10x the work


def test_postgres_count_is_the_tallies_sum(pg_url: str) -> None:
    ledger = PostgresLedger(pg_url)
    try:
        _pg_fill(pg_url, 1, 2_345)
        _counts_agree(ledger, 2_345)
    finally:
        ledger.close()
