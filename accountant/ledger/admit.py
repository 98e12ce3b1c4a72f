"""The one admit shared by every ledger (`_Admitting`): check the charge against the per-cell sums of the
history and insert it in one atomic step, with those sums kept between admits (`_Memos`) and brought up to
date from a watermark (`Since`); and the checks every ledger applies to its arguments.

Example:
    >>> _check_window(None, None, 10, 0) is None
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

from accountant.audit import chain
from accountant.audit.chain import AuditRecord
from accountant.audit.chain_tables import admission
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
from accountant.filter import BASIC, Accounting, Budget, Entry, Rule
from accountant.ledger.charges import Charge, Claim, Clock, Idempotency
from accountant.report import refusal

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
        idempotency: Idempotency | None = None,
    ) -> Charge:
        """Record the charge if it fits (see `Ledger.admit`), else raise `BudgetExceeded`, writing nothing."""
        _check_request(epsilon, delta, budget)
        if not isinstance(accounting, Accounting):
            raise TypeError(f"accounting must be an Accounting, got {accounting!r}")
        if dataset_budget is not None and not isinstance(dataset_budget, Budget):
            raise TypeError(f"dataset_budget must be a Budget or None, got {dataset_budget!r}")
        if sql is not None and chain.sql_sha256(sql) != sql_sha256:
            raise ValueError("sql_sha256 must be the sha256 of sql, the text the audit entry records")
        if idempotency is not None and not isinstance(idempotency, Idempotency):
            raise TypeError(f"idempotency must be an Idempotency or None, got {idempotency!r}")
        entry = Entry(event, float(epsilon), float(delta), scope)
        charge: Charge | None = None
        try:
            with self._write():
                charge = self._admit(analyst, dataset, sql_sha256, event, entry, composition, budget, accounting,
                                     dataset_budget, scope, sql, idempotency)
        except ChargeUncertain as err:  # the COMMIT's outcome is unknown: counted as charged, never as free
            raise ChargeUncertain(str(err), charge=charge, retry_after_s=err.retry_after_s) from err
        assert charge is not None
        return charge

    def _admit(
        self, analyst: str, dataset: str, sql_sha256: str, event: Event, entry: Entry, composition: str,
        budget: Budget, accounting: Accounting, dataset_budget: Budget | None, scope: CellScope | None,
        sql: str | None, idempotency: Idempotency | None,
    ) -> Charge:
        """The admit's transaction body, inside `_write()`."""
        rule = accounting.rule
        if idempotency is not None:  # first, before any lock of the admit's own: keys are serialised on their own
            claim = self._claimed(analyst, idempotency.key)
            if claim is not None:  # paid already: this admit writes nothing
                check_claim(claim, dataset, idempotency.request_sha256)
                paid = self._charge(claim.charge_id)
                if not _same_price(paid, sql_sha256, event, entry.epsilon, entry.delta, composition, scope):
                    raise IdempotencyKeyReused(
                        "this Idempotency-Key paid for another charge than this request now costs (the policy "
                        "changed since); use a new key", key=claim.key, charge_id=claim.charge_id)
                return paid
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
            epsilon=entry.epsilon,
            delta=entry.delta,
            composition=composition,
            scope=scope,
        )
        self._insert(charge)
        if idempotency is not None:  # the key commits with its charge, or neither does
            self._bind(Claim(analyst, idempotency.key, dataset, idempotency.request_sha256, charge.id))
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
        the whole history. The memo lives in this process only: a restart reads everything once. The stores
        take the count at or below the watermark from the history's tally less the charges after it
        (accountant/ledger/tallies.py), so the check reads no history: O(new charges + log n), plus one count per
        analyst of the dataset for everyone's history."""
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
