"""The one admit shared by every ledger (`_Admitting`): check the charge against the per-cell sums of the
history and insert it in one atomic step, with those sums kept between admits (`_Memos`) and brought up to
date from a watermark (`Since`); and the checks every ledger applies to its arguments.

Example:
    >>> _check_page(10, 0) is None
    True
    >>> event_of('{"kind": "laplace", "sensitivity": 1.0, "scale": 10.0}')
    LaplaceEvent(sensitivity=1.0, scale=10.0)
    >>> check_claim(Claim("ana", "k1", "demo", "ab" * 32, "c1"), "demo", "ab" * 32) is None
    True
"""

from __future__ import annotations

import json
import threading
import uuid
from abc import ABC, abstractmethod
from collections import OrderedDict
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from accountant.audit.chain import AuditRecord
from accountant.audit.chain_tables import admitted_entry
from accountant.cell_scope import CellScope
from accountant.cells import Ledgered, Running
from accountant.errors import (
    BudgetExceeded,
    ChargeUncertain,
    IdempotencyKeyReused,
    IdempotencyKeySpent,
    UnsupportedEvent,
)
from accountant.events import Event, from_json
from accountant.filter import Entry, Rule
from accountant.ledger.budget_ops import Allowance, Operation, StoredOp, allowance_of, raised
from accountant.ledger.charges import Admission, Charge, ChargeFilter, Claim, Clock
from accountant.report import refusal

# --- shared by both ledgers -------------------------------------------------------------------------

NEXT_STEP = ("ask an operator for a grant (`dpproxy budget grant`, docs/operations.md#budget-grants-and-periods) "
             "or for a new budget period; cheaper queries may still fit")


@lru_cache(maxsize=16384)
def event_of(text: str) -> Event:
    """An event from its stored JSON text (cached: stored charges never change)."""
    return from_json(json.loads(text))


def _check_page(limit: int, offset: int) -> None:
    for name, number in (("limit", limit), ("offset", offset)):
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {number!r}")


def check_claim(claim: Claim, dataset: str, request_sha256: str) -> None:
    """Raise unless a request on `dataset` with identity `request_sha256` may use the key `claim` binds: it
    must be the request the key was first charged for, and that charge must have no outcome yet."""
    if (claim.dataset, claim.request_sha256) != (dataset, request_sha256):
        raise IdempotencyKeyReused(
            "this Idempotency-Key was first used with another request (other SQL, parameters or dataset); "
            "use a new key for a new request", key=claim.key, charge_id=claim.charge_id)
    if claim.outcome is not None:
        raise IdempotencyKeySpent(
            f"this Idempotency-Key's charge has its one outcome (`{claim.outcome}`); nothing more is run under "
            "it: send the request with a new key (charged again)",
            key=claim.key, charge_id=claim.charge_id, outcome=claim.outcome)


def _same_price(paid: Charge, sql_sha256: str, event: Event, epsilon: float, delta: float, composition: str,
                scope: CellScope | None) -> bool:
    """Whether the charge a key paid for is exactly the charge this request would make: a retry runs under
    it only then (a policy changed in between could price the same request higher)."""
    return (paid.sql_sha256, paid.event, paid.epsilon, paid.delta, paid.composition, paid.scope) == (
        sql_sha256, event, float(epsilon), float(delta), composition, scope)


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
    def _claimed(self, analyst: str, key: str) -> Claim | None:
        """Inside `_write()`, first: the key's claim, serialised with every admit binding the same key."""

    @abstractmethod
    def _bind(self, claim: Claim) -> None:
        """Bind the key to its charge, inside `_write()` after `_insert`."""

    @abstractmethod
    def _charge(self, charge_id: str) -> Charge:
        """Inside `_write()`: the committed charge with this id (a claim's)."""

    @abstractmethod
    def _charges(self, where: ChargeFilter, limit: int, offset: int) -> tuple[Charge, ...]:
        """The charges `where` selects, newest first, `limit` of them after the first `offset`."""

    @abstractmethod
    def _ops(self, analyst: str | None, dataset: str) -> list[StoredOp]:
        """Inside `_write()`, serialised with every operation that applies (`_operating`): the dataset's budget
        operations that apply to the analyst (theirs and the dataset-wide ones), or with None to the shared
        budget (the dataset-wide ones); outside it, the same read of committed ones."""

    @abstractmethod
    def _operating(self) -> AbstractContextManager[object]:
        """An operation's write transaction: exclusive against every admit on the store, so that an admit
        reads the operations before or after it, never half, and no charge is uncommitted when it starts."""

    @abstractmethod
    def _top(self) -> int:
        """Inside `_operating()`: the highest charge number committed (0 with none)."""

    @abstractmethod
    def _insert_op(self, op: StoredOp) -> int:
        """Write one operation inside `_operating()`; its number (`op.seq` is ignored)."""

    @abstractmethod
    def _all_ops(self, dataset: str | None) -> list[StoredOp]:
        """Every operation committed (on one dataset, or all), oldest first, for listings."""

    @abstractmethod
    def _count(self, where: ChargeFilter) -> int:
        """How many charges `where` selects."""

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
        """Charges matching the filters (since <= at < until), newest first, paginated (see `Ledger.charges`)."""
        _check_page(limit, offset)
        return self._charges(ChargeFilter(analyst, dataset, since, until), limit, offset)

    def count(
        self,
        *,
        analyst: str | None = None,
        dataset: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        """How many charges match the filters."""
        return self._count(ChargeFilter(analyst, dataset, since, until))

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        """The charges on the dataset as the filter sees them, read through `charges` (for reports)."""
        found = self.charges(analyst=analyst, dataset=dataset, limit=2**62)
        return tuple(Entry(c.event, c.epsilon, c.delta, c.scope) for c in found)

    # --- operators' budget operations (budget_ops.py) ---------------------------------------------------

    def operate(self, operation: Operation) -> StoredOp:
        """Write a grant or a new period and its audit entry (`granted` / `period`) in one transaction, after
        every admit in flight and before every later one; a period's floor is the highest charge number then."""
        with self._operating():
            at = self._clock().astimezone(UTC)
            floor = self._top() if operation.kind == "period" else 0
            op = StoredOp(0, uuid.uuid4().hex, at, operation, floor)
            op = StoredOp(self._insert_op(op), op.id, at, operation, floor)
            self._record(operation.audit_record(op.id), at)
        return op

    def operations(self, *, dataset: str | None = None) -> tuple[StoredOp, ...]:
        """The operations committed (on one dataset, or all), oldest first."""
        with self._reading():
            return tuple(self._all_ops(dataset))

    def allowance(self, *, dataset: str, analyst: str | None = None) -> Allowance:
        """What the operations give the analyst's budget (None: the shared budget) now: period and grants."""
        with self._reading():
            return allowance_of(self._ops(analyst, dataset), analyst)

    def admit(self, asked: Admission) -> Charge:
        """Record the charge if it fits (see `Ledger.admit`), else raise `BudgetExceeded`, writing nothing."""
        charge: Charge | None = None
        try:
            with self._write():
                charge = self._admit(asked)
        except ChargeUncertain as err:  # the COMMIT's outcome is unknown: counted as charged, never as free
            raise ChargeUncertain(str(err), charge=charge, retry_after_s=err.retry_after_s) from err
        assert charge is not None
        return charge

    def _admit(self, asked: Admission) -> Charge:
        """The admit's transaction body, inside `_write()`."""
        analyst, dataset, idempotency, scope = asked.analyst, asked.dataset, asked.idempotency, asked.scope
        entry = Entry(asked.event, float(asked.epsilon), float(asked.delta), scope)
        accounting = asked.accounting
        rule = accounting.rule
        if idempotency is not None:  # first, before any lock of the admit's own: keys are serialised on their own
            claim = self._claimed(analyst, idempotency.key)
            if claim is not None:  # paid already: this admit writes nothing
                check_claim(claim, dataset, idempotency.request_sha256)
                paid = self._charge(claim.charge_id)
                if not _same_price(paid, asked.sql_sha256, asked.event, entry.epsilon, entry.delta, asked.composition,
                                   scope):
                    raise IdempotencyKeyReused(
                        "this Idempotency-Key paid for another charge than this request now costs (the policy "
                        "changed since); use a new key", key=claim.key, charge_id=claim.charge_id)
                return paid
        try:
            # the budgets as the operators left them, read under the admit's own locks (budget_ops.py)
            own = allowance_of(self._ops(analyst, dataset), analyst)
            mine = self._tallied(analyst, dataset, rule, own.floor).bound(scope)
            refused = refusal(mine, entry, raised(asked.budget, own), accounting)
            if refused is None and asked.dataset_budget is not None:
                shared = allowance_of(self._ops(None, dataset), None)
                everyone = self._tallied(None, dataset, rule, shared.floor).bound(scope)
                refused = refusal(everyone, entry, raised(asked.dataset_budget, shared), accounting, scope="dataset")
        except UnsupportedEvent as err:  # a stored charge the rule cannot account for: admit nothing more
            raise BudgetExceeded(
                f"the charges on this dataset include one that {rule!r} accounting cannot account for ({err})",
                accounting=rule,
            ) from err
        if refused is not None:
            refused.detail.setdefault("hint", NEXT_STEP)
            raise refused
        charge = Charge(
            id=uuid.uuid4().hex,
            analyst=analyst,
            dataset=dataset,
            at=self._clock().astimezone(UTC),
            sql_sha256=asked.sql_sha256,
            event=asked.event,
            epsilon=entry.epsilon,
            delta=entry.delta,
            composition=asked.composition,
            scope=scope,
        )
        self._insert(charge)
        if idempotency is not None:  # the key commits with its charge, or neither does
            self._bind(Claim(analyst, idempotency.key, dataset, idempotency.request_sha256, charge.id))
        if asked.sql is not None:  # last: PostgreSQL holds the chain's head lock from here to the commit
            entry_record = admitted_entry(charge.id, analyst, dataset, asked.sql, charge.epsilon, charge.delta)
            self._record(entry_record, charge.at)
        return charge

    def tallied(self, *, dataset: str, analyst: str | None = None, rule: Rule = "basic",
                floor: int | None = None) -> Ledgered:
        """The per-cell sums of the analyst's (or, with None, every analyst's) charges on the dataset under
        `rule` in the current budget period, exactly as an admit sees them, from the same memo: what reports
        read. `floor` is the period's, from an `allowance` the caller read already (else it is read here)."""
        with self._reading():
            if floor is None:
                floor = allowance_of(self._ops(analyst, dataset), analyst).floor
            return self._tallied(analyst, dataset, rule, floor)

    def _tallied(self, analyst: str | None, dataset: str, rule: Rule, floor: int = 0) -> Ledgered:
        """The history's per-cell sums under `rule`, inside `_write()`: the memo's, plus the charges past its
        watermark. Charges are only ever added, so if as many charges as the memo counted still lie at or
        below its watermark, they are the ones it summed. Otherwise (a charge that took its number early
        and committed late, which PostgreSQL allows across analysts, or a deleted row) it starts over from
        the whole history. The memo lives in this process only: a restart reads everything once. The stores
        take the count at or below the watermark from the history's tally less the charges after it
        (accountant/ledger/tallies.py), so the check reads no history: O(new charges + log n), plus one count per
        analyst of the dataset for everyone's history.

        A budget period (budget_ops.py) is the history above its `floor`: its memo starts there, and the
        count at or below the watermark still covers the whole history, so a late commit below it restarts
        the memo from the floor."""
        key = (analyst, dataset, rule, floor)
        memo = self._memos.take(key)
        fresh = memo is None
        if memo is None:  # its count is whatever lies at or below the floor: this one read says
            memo = _Memo(Running(rule), 0, floor)
        seen = self._since(analyst, dataset, memo.last)
        if not fresh and seen.before != memo.count:
            memo = _Memo(Running(rule), 0, floor)
            seen = self._since(analyst, dataset, floor)
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
        self._memos: OrderedDict[tuple[str | None, str, Rule, int], _Memo] = OrderedDict()
        self._max_cells, self._max_memos = max_cells, max_memos

    def take(self, key: tuple[str | None, str, Rule, int]) -> _Memo | None:
        with self._lock:
            return self._memos.pop(key, None)

    def put(self, key: tuple[str | None, str, Rule, int], memo: _Memo) -> None:
        with self._lock:
            self._memos[key] = memo
            while len(self._memos) > self._max_memos or (
                len(self._memos) > 1 and sum(m.running.cells for m in self._memos.values()) > self._max_cells
            ):
                self._memos.popitem(last=False)
