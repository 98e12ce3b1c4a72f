"""The ledger of charges: the one place budget state lives, and the only read-modify-write (STYLE.md B6).

`admit` checks a charge against the analyst's remaining budget (and, if the dataset has one, the total
budget shared by all its analysts) and records it in one atomic step, before any result exists; there are
no refunds. `SqliteLedger` makes that step one `BEGIN IMMEDIATE` transaction, so threads and processes
sharing a file can never overspend. Charges store the exact `Event` (as JSON) next to their (ε, δ) under
basic composition, so spend can be re-accounted under any rule, and the cells they could touch. The
accounting math is not here: `cells.py`, `filter.py` and `report.py` run on the history read inside the
transaction (only what is new since the last admit, see `_Admitting._tallied`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Protocol

from accountant import chain
from accountant.admission import admission, append, migrate_sqlite
from accountant.cells import CellScope, Ledgered, Running
from accountant.chain import AuditRecord
from accountant.errors import BudgetExceeded, UnsupportedEvent
from accountant.events import Event, from_json, to_json
from accountant.filter import BASIC, Accounting, Budget, Entry, Rule, Spend, total
from accountant.report import refusal

Clock = Callable[[], datetime]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
SCHEMA_VERSION = 2  # 2: charges.scope


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Charge:
    """One admitted release: who, on what, when, the exact mechanism, and the (ε, δ) charged for it.

    `composition` names the rule the (ε, δ) was computed under (e.g. "basic"). `scope` is the cells the
    query could touch (None: every privacy unit); the admit composes per cell (cells.py).
    """

    id: str
    analyst: str
    dataset: str
    at: datetime
    sql_sha256: str
    event: Event
    epsilon: float
    delta: float
    composition: str
    scope: CellScope | None = None

    def __post_init__(self) -> None:
        if self.at.utcoffset() != timedelta(0):
            raise ValueError(f"charge time must be timezone-aware UTC, got {self.at!r}")


@dataclass(frozen=True, slots=True)
class StoredRelease:
    """An answer as it was sent, kept with its charge: repeats return it and can never average noise away."""

    analyst: str
    dataset: str
    request_sha256: str  # identity of the request: normalised SQL and effective parameters
    charge_id: str
    body: bytes


class Ledger(Protocol):
    """Storage of charges; `admit` is atomic check-then-insert."""

    def admit(
        self,
        *,
        analyst: str,
        dataset: str,
        sql_sha256: str,
        event: Event,
        epsilon: float,
        delta: float,
        composition: str,
        budget: Budget,
        accounting: Accounting = BASIC,
        dataset_budget: Budget | None = None,
        scope: CellScope | None = None,
        sql: str | None = None,
    ) -> Charge:
        """Record the charge if it fits, else raise `BudgetExceeded` and write nothing.

        It fits if, in every cell of `scope` (every unit when None), the analyst's history on the dataset
        plus this charge passes the `accounting` rule's filter for `budget` and, when `dataset_budget` is
        given, the history of all analysts on the dataset plus this charge passes it for `dataset_budget`
        (cells.py bounds each cell's history): both checks and the insert are one transaction.
        `epsilon`/`delta` are the charge under basic composition; the event is what other rules account.
        With `sql` (the normalised SQL whose sha256 is `sql_sha256`), the charge's `admitted` audit entry is
        appended to the audit chain at this address in the same transaction (admission.py): a committed
        charge always has its entry. The proxy always passes it; tests of the accounting alone may not.
        """
        ...

    def spent(self, analyst: str, dataset: str) -> Spend:
        """Σε and Σδ charged to the analyst on the dataset (rounded up)."""
        ...

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        """Every charge on the dataset (of one analyst, or of all when `analyst` is None), as the filter
        sees it: the event and its basic (ε, δ). For reports; admit reads its own inside the transaction."""
        ...

    def tallied(self, *, dataset: str, analyst: str | None = None, rule: Rule = "basic") -> Ledgered:
        """The per-cell sums of those charges under `rule` (cells.Ledgered), as admit sees them."""
        ...

    def charges(
        self,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[Charge, ...]:
        """Charges matching the filters (since <= at < until), newest first, paginated."""
        ...

    def count(
        self,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        """How many charges match the filters."""
        ...

    def stored_release(self, analyst: str, dataset: str, request_sha256: str) -> StoredRelease | None:
        """The release first answered to this analyst for this exact request, if any."""
        ...

    def store_release(self, release: StoredRelease) -> None:
        """Keep a release so that an identical request gets the same answer at no charge (first one wins)."""
        ...

    def close(self) -> None:
        """Release the storage."""
        ...


# --- shared by both ledgers -------------------------------------------------------------------------


def _check_request(epsilon: float, delta: float, budget: Budget) -> None:
    for name, value in (("epsilon", epsilon), ("delta", delta)):
        if not isinstance(value, int | float) or not (0 <= value < float("inf")):
            raise ValueError(f"charge {name} must be finite and >= 0, got {value!r}")
    if delta >= 1:
        raise ValueError(f"charge delta must be < 1, got {delta!r}")
    if not isinstance(budget, Budget):
        raise TypeError(f"budget must be a Budget, got {budget!r}")


@lru_cache(maxsize=16384)
def event_of(text: str) -> Event:
    """An event from its stored JSON text (cached: stored charges never change)."""
    return from_json(json.loads(text))


def _check_window(since: datetime | None, until: datetime | None, limit: int, offset: int) -> None:
    for name, moment in (("since", since), ("until", until)):
        if moment is not None and moment.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware, got {moment!r}")
    for name, number in (("limit", limit), ("offset", offset)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {number!r}")


# --- the one admit, shared ------------------------------------------------------------------------


class _Admitting(ABC):
    """Check-then-commit through the same code for every ledger: `_write` makes it one atomic step.

    Storage hooks, called only inside `_write()`: `_since(analyst, dataset, seq)` (the analyst's charges,
    or every analyst's when `analyst` is None, for the dataset budget, from after `seq` on) and `_insert`.
    A ledger whose locks are finer than the whole store must make `_since(None, dataset, …)` serialise
    with every admit on that dataset, or two analysts could overspend the shared dataset budget together.

    The per-cell sums of a history are kept between admits (`_memos`) and brought up to date with the
    charges past their watermark, so an admit reads and sums only what is new (cells.Running).
    """

    _clock: Clock
    _memos: _Memos

    @abstractmethod
    def _write(self) -> AbstractContextManager[object]:
        """The write transaction: exclusive against every other admit on the same store."""

    @abstractmethod
    def _reading(self) -> AbstractContextManager[object]:
        """A read outside an admit, in which `_since` may run (its one statement is one snapshot)."""

    @abstractmethod
    def _since(self, analyst: str | None, dataset: str, seq: int) -> Since:
        """Inside `_write()`, in one consistent read: how many of the analyst's (or, with None, every
        analyst's) charges on the dataset have a sequence number <= `seq`, and those after it."""

    @abstractmethod
    def _insert(self, charge: Charge) -> None:
        """Write one charge, inside `_write()`."""

    @abstractmethod
    def _record(self, record: AuditRecord, at: datetime) -> None:
        """Append the charge's `admitted` entry to the audit chain, inside `_write()` after `_insert`."""

    @abstractmethod
    def charges(
        self,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[Charge, ...]:
        """Charges matching the filters, newest first, paginated."""

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        """The charges on the dataset as the filter sees them, read through `charges` (for reports)."""
        found = self.charges(analyst=analyst, dataset=dataset, limit=2**62)
        return tuple(Entry(c.event, c.epsilon, c.delta, c.scope) for c in found)

    def admit(
        self,
        *,
        analyst: str,
        dataset: str,
        sql_sha256: str,
        event: Event,
        epsilon: float,
        delta: float,
        composition: str,
        budget: Budget,
        accounting: Accounting = BASIC,
        dataset_budget: Budget | None = None,
        scope: CellScope | None = None,
        sql: str | None = None,
    ) -> Charge:
        """Record the charge if it fits (see `Ledger.admit`), else raise `BudgetExceeded`, writing nothing."""
        _check_request(epsilon, delta, budget)
        if not isinstance(accounting, Accounting):
            raise TypeError(f"accounting must be an Accounting, got {accounting!r}")
        if dataset_budget is not None and not isinstance(dataset_budget, Budget):
            raise TypeError(f"dataset_budget must be a Budget or None, got {dataset_budget!r}")
        if sql is not None and chain.sql_sha256(sql) != sql_sha256:
            raise ValueError("sql_sha256 must be the sha256 of sql, the text the audit entry records")
        entry = Entry(event, float(epsilon), float(delta), scope)
        rule = accounting.rule
        with self._write():
            try:
                mine = self._tallied(analyst, dataset, rule).bound(scope)
                refused = refusal(mine, entry, budget, accounting)
                if refused is None and dataset_budget is not None:
                    everyone = self._tallied(None, dataset, rule).bound(scope)
                    refused = refusal(everyone, entry, dataset_budget, accounting, scope="dataset")
            except UnsupportedEvent as err:  # a stored charge the rule cannot account for: admit nothing more
                raise BudgetExceeded(
                    f"the charges on this dataset include one that {rule!r} accounting cannot account for ({err})",
                    accounting=rule,
                ) from err
            if refused is not None:
                raise refused
            charge = Charge(
                id=uuid.uuid4().hex,
                analyst=analyst,
                dataset=dataset,
                at=self._clock().astimezone(UTC),
                sql_sha256=sql_sha256,
                event=event,
                epsilon=float(epsilon),
                delta=float(delta),
                composition=composition,
                scope=scope,
            )
            self._insert(charge)
            if sql is not None:  # last: PostgreSQL holds the chain's head lock from here to the commit
                self._record(admission(charge.id, analyst, dataset, sql, charge.epsilon, charge.delta), charge.at)
            return charge

    def tallied(self, *, dataset: str, analyst: str | None = None, rule: Rule = "basic") -> Ledgered:
        """The per-cell sums of the analyst's (or, with None, every analyst's) charges on the dataset under
        `rule`, exactly as an admit sees them, from the same memo: what reports read."""
        with self._reading():
            return self._tallied(analyst, dataset, rule)

    def _tallied(self, analyst: str | None, dataset: str, rule: Rule) -> Ledgered:
        """The history's per-cell sums under `rule`, inside `_write()`: the memo's, plus the charges past its
        watermark. Charges are only ever added, so if as many charges as the memo counted still lie at or
        below its watermark, they are the ones it summed. Otherwise (a charge that took its number early
        and committed late, which PostgreSQL allows across analysts, or a deleted row) it starts over from
        the whole history. The memo lives in this process only: a restart reads everything once."""
        key = (analyst, dataset, rule)
        memo = self._memos.take(key) or _Memo(Running(rule), 0, 0)
        seen = self._since(analyst, dataset, memo.last)
        if seen.before != memo.count:
            memo = _Memo(Running(rule), 0, 0)
            seen = self._since(analyst, dataset, 0)
        memo.running.add(seen.after)  # raises, adding nothing, on a charge the rule cannot account for
        memo.count = seen.before + sum(count for _, count in seen.after)
        memo.last = max(memo.last, seen.last)
        self._memos.put(key, memo)
        return memo.running.ledgered()


@dataclass(frozen=True, slots=True)
class Since:
    """One read of a history against a watermark: how many charges lie at or below it, the charges after
    it as (entry, how many identical ones), and the highest sequence number among those."""

    before: int
    after: list[tuple[Entry, int]]
    last: int


@dataclass(slots=True)
class _Memo:
    running: Running
    count: int  # charges summed
    last: int  # the highest sequence number among them


class _Memos:
    """The per-cell sums of recent histories, least recently used dropped first, at most `max_cells`
    per-cell sums in all (each a Python int of a few hundred bits). Thread-safe; a memo taken out is
    held by one admit only until it is put back."""

    def __init__(self, *, max_cells: int = 2_000_000, max_memos: int = 256) -> None:
        self._lock = threading.Lock()
        self._memos: OrderedDict[tuple[str | None, str, Rule], _Memo] = OrderedDict()
        self._max_cells, self._max_memos = max_cells, max_memos

    def take(self, key: tuple[str | None, str, Rule]) -> _Memo | None:
        with self._lock:
            return self._memos.pop(key, None)

    def put(self, key: tuple[str | None, str, Rule], memo: _Memo) -> None:
        with self._lock:
            self._memos[key] = memo
            while len(self._memos) > self._max_memos or (
                len(self._memos) > 1 and sum(m.running.cells for m in self._memos.values()) > self._max_cells
            ):
                self._memos.popitem(last=False)


# --- in memory --------------------------------------------------------------------------------------


class MemoryLedger(_Admitting):
    """A ledger in process memory, for tests and single-process demos; one lock makes admit atomic."""

    def __init__(self, *, clock: Clock = _utcnow) -> None:
        self._lock = threading.Lock()
        self._rows: list[Charge] = []  # in insertion order
        self._releases: dict[tuple[str, str, str], StoredRelease] = {}
        self._clock = clock
        self._memos = _Memos()
        self.admissions: list[AuditRecord] = []  # the admitted entries, in order (no chain in memory)

    def _write(self) -> AbstractContextManager[object]:
        return self._lock

    def _reading(self) -> AbstractContextManager[object]:
        return self._lock

    def _insert(self, charge: Charge) -> None:
        self._rows.append(charge)

    def _record(self, record: AuditRecord, at: datetime) -> None:
        self.admissions.append(record)

    def spent(self, analyst: str, dataset: str) -> Spend:
        with self._lock:
            return total((c.epsilon, c.delta) for c in self._rows if c.analyst == analyst and c.dataset == dataset)

    def _entries(self, analyst: str | None, dataset: str) -> list[Entry]:
        return [
            Entry(c.event, c.epsilon, c.delta, c.scope)
            for c in self._rows
            if c.dataset == dataset and (analyst is None or c.analyst == analyst)
        ]

    def _since(self, analyst: str | None, dataset: str, seq: int) -> Since:
        mine = [(i, c) for i, c in enumerate(self._rows, start=1)
                if c.dataset == dataset and (analyst is None or c.analyst == analyst)]
        after = Counter(Entry(c.event, c.epsilon, c.delta, c.scope) for i, c in mine if i > seq)
        return Since(sum(1 for i, _ in mine if i <= seq), list(after.items()), max((i for i, _ in mine), default=0))

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        with self._lock:
            return tuple(self._entries(analyst, dataset))

    def _select(
        self,
        analyst: str | None,
        dataset: str | None,
        since: datetime | None,
        until: datetime | None,
    ) -> list[Charge]:
        with self._lock:
            rows = list(enumerate(self._rows))
        picked = [
            (seq, c)
            for seq, c in rows
            if (analyst is None or c.analyst == analyst)
            and (dataset is None or c.dataset == dataset)
            and (since is None or c.at >= since)
            and (until is None or c.at < until)
        ]
        picked.sort(key=lambda row: (row[1].at, row[0]), reverse=True)
        return [c for _, c in picked]

    def charges(
        self,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[Charge, ...]:
        _check_window(since, until, limit, offset)
        return tuple(self._select(analyst, dataset, since, until)[offset : offset + limit])

    def count(
        self,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        _check_window(since, until, 0, 0)
        return len(self._select(analyst, dataset, since, until))

    def stored_release(self, analyst: str, dataset: str, request_sha256: str) -> StoredRelease | None:
        with self._lock:
            return self._releases.get((analyst, dataset, request_sha256))

    def store_release(self, release: StoredRelease) -> None:
        with self._lock:
            self._releases.setdefault((release.analyst, release.dataset, release.request_sha256), release)

    def close(self) -> None:
        pass


# --- SQLite -----------------------------------------------------------------------------------------

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS charges (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        analyst TEXT NOT NULL,
        dataset TEXT NOT NULL,
        at_us INTEGER NOT NULL,
        sql_sha256 TEXT NOT NULL,
        event TEXT NOT NULL,
        epsilon REAL NOT NULL,
        delta REAL NOT NULL,
        composition TEXT NOT NULL,
        scope TEXT
    )""",
    "CREATE INDEX IF NOT EXISTS charges_by_owner ON charges (analyst, dataset)",
    """CREATE TABLE IF NOT EXISTS releases (
        analyst TEXT NOT NULL,
        dataset TEXT NOT NULL,
        request_sha256 TEXT NOT NULL,
        charge_id TEXT NOT NULL REFERENCES charges (id),
        body BLOB NOT NULL,
        PRIMARY KEY (analyst, dataset, request_sha256)
    )""",
    "CREATE INDEX IF NOT EXISTS charges_by_time ON charges (at_us, seq)",
    "CREATE INDEX IF NOT EXISTS charges_by_dataset ON charges (dataset)",  # the dataset budget's reads
)
_COLUMNS = "id, analyst, dataset, at_us, sql_sha256, event, epsilon, delta, composition, scope"
_UPGRADES = {1: "ALTER TABLE charges ADD COLUMN scope TEXT"}  # from version k to k + 1


def _to_us(moment: datetime) -> int:
    return (moment - _EPOCH) // _MICROSECOND


def scope_to_text(scope: CellScope | None) -> str | None:
    return None if scope is None else json.dumps(scope.to_json(), separators=(",", ":"))


@lru_cache(maxsize=16384)  # at most 16384 × 12.5 kB (a bitmap of 100k cells); far less for usual spaces
def scope_of(text: str | None) -> CellScope | None:
    """A cell scope from its stored JSON text (cached: stored charges never change)."""
    return None if text is None else CellScope.from_json(json.loads(text))


def since_sql(clause: str, mark: str) -> str:
    """One statement, so one snapshot even under READ COMMITTED: the count of the charges matching `clause`
    up to a sequence number, and those after it, identical ones read once with their count (a history
    repeats a few query shapes many times). `mark` is the driver's placeholder; parameters: the clause's,
    the number, the clause's, the number."""
    return (
        f"WITH old AS (SELECT COUNT(*) AS n FROM charges WHERE {clause} AND seq <= {mark}),"
        f" new AS (SELECT MAX(seq) AS last, event, epsilon, delta, scope, COUNT(*) AS k FROM charges"
        f" WHERE {clause} AND seq > {mark} GROUP BY event, epsilon, delta, scope)"
        " SELECT old.n, new.last, new.event, new.epsilon, new.delta, new.scope, new.k"
        " FROM old LEFT JOIN new ON TRUE ORDER BY new.last"
    )


def since_of(rows: list[tuple[int, int | None, str, float, float, str | None, int | None]], seq: int) -> Since:
    after = [(Entry(event_of(text), epsilon, delta, scope_of(scope)), k)
             for _, _, text, epsilon, delta, scope, k in rows if k is not None]
    return Since(rows[0][0], after, max((last for _, last, *_ in rows if last is not None), default=seq))


def _from_row(row: tuple[str, str, str, int, str, str, float, float, str, str | None]) -> Charge:
    id_, analyst, dataset, at_us, sql_sha256, event, epsilon, delta, composition, scope = row
    return Charge(
        id=id_,
        analyst=analyst,
        dataset=dataset,
        at=_EPOCH + at_us * _MICROSECOND,
        sql_sha256=sql_sha256,
        event=event_of(event),
        epsilon=epsilon,
        delta=delta,
        composition=composition,
        scope=scope_of(scope),
    )


def _where(
    analyst: str | None, dataset: str | None, since: datetime | None, until: datetime | None
) -> tuple[str, tuple[object, ...]]:
    conditions = (
        ("analyst = ?", analyst),
        ("dataset = ?", dataset),
        ("at_us >= ?", None if since is None else _to_us(since)),
        ("at_us < ?", None if until is None else _to_us(until)),
    )
    used = [(sql, value) for sql, value in conditions if value is not None]
    clause = " AND ".join(sql for sql, _ in used) or "1"
    return clause, tuple(value for _, value in used)


def use_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Switch the file to WAL. The switch needs an exclusive lock and SQLite does not wait for it through
    busy_timeout, so processes opening one file at once retry here instead of failing at start-up."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """`BEGIN IMMEDIATE` … `COMMIT`; on any exception (a refusal included) or a failed COMMIT, roll back."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


class SqliteLedger(_Admitting):
    """A durable ledger in one SQLite file (WAL, synchronous=FULL); safe across threads and processes.

    One connection per ledger object, guarded by a lock; `admit` runs in `BEGIN IMMEDIATE`, which takes
    the database's write lock before reading the spend, so concurrent admits on the same file serialise.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, clock: Clock = _utcnow, timeout_s: float = 30.0
    ) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._memos = _Memos()
        self._conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None, check_same_thread=False)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            use_wal(self._conn, timeout_s)
            self._conn.execute("PRAGMA synchronous = FULL")
            self._create_schema()
        except BaseException:
            self._conn.close()
            raise

    def _create_schema(self) -> None:
        with _immediate(self._conn):
            migrate_sqlite(self._conn)  # the audit chain's tables: admit appends to them
            for statement in _SCHEMA:
                self._conn.execute(statement)
            versions = self._conn.execute("SELECT version FROM schema_version").fetchall()
            if not versions:
                self._conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
                return
            while len(versions) == 1 and versions[0][0] in _UPGRADES:  # an older file: upgrade in place
                (version,) = versions[0]
                self._conn.execute(_UPGRADES[version])
                self._conn.execute("UPDATE schema_version SET version = ?", (version + 1,))
                versions = [(version + 1,)]
            if versions != [(SCHEMA_VERSION,)]:
                found = ", ".join(str(v) for (v,) in versions)
                raise RuntimeError(f"ledger schema version {found} is not {SCHEMA_VERSION}; upgrade dp-proxy")

    @contextmanager
    def _write(self) -> Iterator[None]:
        # BEGIN IMMEDIATE takes SQLite's write lock before the spend is read: admits on one file serialise
        with self._lock, _immediate(self._conn):
            yield

    def _insert(self, charge: Charge) -> None:
        self._conn.execute(
            f"INSERT INTO charges ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                charge.id,
                charge.analyst,
                charge.dataset,
                _to_us(charge.at),
                charge.sql_sha256,
                json.dumps(to_json(charge.event), allow_nan=False, separators=(",", ":")),
                charge.epsilon,
                charge.delta,
                charge.composition,
                scope_to_text(charge.scope),
            ),
        )

    def _record(self, record: AuditRecord, at: datetime) -> None:
        append(self._conn, record, at, postgres=False)  # inside BEGIN IMMEDIATE: the file's write lock

    def spent(self, analyst: str, dataset: str) -> Spend:
        with self._lock:
            rows: Iterable[tuple[float, float]] = self._conn.execute(
                "SELECT epsilon, delta FROM charges WHERE analyst = ? AND dataset = ?", (analyst, dataset)
            )
            return total(rows)  # summed exactly in Python: SQL SUM() rounds arbitrarily

    def _reading(self) -> AbstractContextManager[object]:
        return self._lock  # the connection is this object's; one statement needs no transaction

    def _since(self, analyst: str | None, dataset: str, seq: int) -> Since:
        clause, params = _where(analyst, dataset, None, None)
        rows = self._conn.execute(since_sql(clause, "?"), (*params, seq, *params, seq)).fetchall()
        return since_of(rows, seq)

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        with self._lock:
            found = self._since(analyst, dataset, 0).after
        return tuple(entry for entry, count in found for entry in [entry] * count)

    def charges(
        self,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> tuple[Charge, ...]:
        _check_window(since, until, limit, offset)
        clause, params = _where(analyst, dataset, since, until)
        sql = f"SELECT {_COLUMNS} FROM charges WHERE {clause} ORDER BY at_us DESC, seq DESC LIMIT ? OFFSET ?"
        with self._lock:
            rows = self._conn.execute(sql, (*params, limit, offset)).fetchall()
        return tuple(_from_row(row) for row in rows)

    def count(
        self,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        _check_window(since, until, 0, 0)
        clause, params = _where(analyst, dataset, since, until)
        with self._lock:
            (number,) = self._conn.execute(f"SELECT COUNT(*) FROM charges WHERE {clause}", params).fetchone()
        return int(number)

    def stored_release(self, analyst: str, dataset: str, request_sha256: str) -> StoredRelease | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT charge_id, body FROM releases WHERE analyst = ? AND dataset = ? AND request_sha256 = ?",
                (analyst, dataset, request_sha256),
            ).fetchone()
        return None if row is None else StoredRelease(analyst, dataset, request_sha256, row[0], bytes(row[1]))

    def store_release(self, release: StoredRelease) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO releases (analyst, dataset, request_sha256, charge_id, body)"
                " VALUES (?, ?, ?, ?, ?)",
                (release.analyst, release.dataset, release.request_sha256, release.charge_id, release.body),
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()
