"""The ledger's records and its interface: a `Charge` (one admitted release), a `StoredRelease` (an answer
kept for repeats) and the `Ledger` protocol every store implements (accountant/ledger.py lists them).

Example:
    >>> from accountant.events import LaplaceEvent
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> Charge("c1", "ana", "demo", at, "ab" * 32, LaplaceEvent(1, 10.0), 0.1, 0.0, "basic").scope is None
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from accountant.cells import CellScope, Ledgered
from accountant.chain import AuditRecord
from accountant.events import Event
from accountant.filter import BASIC, Accounting, Budget, Entry, Rule, Spend

Clock = Callable[[], datetime]
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

    def store_release(self, release: StoredRelease, audit: AuditRecord | None = None) -> None:
        """Keep a release so that an identical request gets the same answer at no charge (first one wins);
        with `audit`, append that audit entry (the answer's `answered`) in the same durable transaction, so
        the answer needs no second commit before it is sent (proxy/audit_trail.py)."""
        ...

    def close(self) -> None:
        """Release the storage."""
        ...
