"""The ledger's records and its interface: a `Charge` (one admitted release), a `StoredRelease` (an answer
kept for repeats), an `Idempotency` key and the `Claim` it is bound to, the bounds of a ledger's waits
(`Waits`) and the `Ledger` protocol every store implements (accountant/ledger/charges.py lists them).

Example:
    >>> from accountant.events import LaplaceEvent
    >>> at = datetime(2026, 1, 1, tzinfo=UTC)
    >>> Charge("c1", "ana", "demo", at, "ab" * 32, LaplaceEvent(1, 10.0), 0.1, 0.0, "basic").scope is None
    True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from accountant.audit import chain
from accountant.audit.chain import AuditRecord
from accountant.cell_scope import CellScope
from accountant.cells import Ledgered
from accountant.events import Event
from accountant.filter import BASIC, Accounting, Budget, Entry, Rule, Spend
from accountant.ledger.kept_bounds import KeptBounds

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


KEY_PATTERN = re.compile(r"[A-Za-z0-9_.:-]{1,128}")  # a UUID, a ULID, hex, "job-42:try-1"; no spaces or quotes


def is_key(text: object) -> bool:
    """Whether `text` is a valid idempotency key: 1 to 128 of A-Z a-z 0-9 _ . : -

    Example:
        >>> is_key("6f1c2d0e-9b7a-4c1e-8f2a-3d4b5c6d7e8f"), is_key(""), is_key("a b"), is_key("x" * 129)
        (True, False, False, False)
    """
    return isinstance(text, str) and KEY_PATTERN.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class Idempotency:
    """A client's key for one request and that request's identity (the repeat identity, proxy/pipeline.py).
    Keys are per analyst: the same key of another analyst is unrelated."""

    key: str
    request_sha256: str

    def __post_init__(self) -> None:
        if not is_key(self.key):
            raise ValueError(f"an idempotency key is 1 to 128 of A-Z a-z 0-9 _ . : -, got {self.key!r}")


ANSWERED = "answered"  # a Claim's outcome when a release of its charge was stored


@dataclass(frozen=True, slots=True)
class Claim:
    """What an analyst's idempotency key is bound to, from the admit that charged it: the request (dataset
    and identity), the charge, and its one `outcome` once it has one: `ANSWERED` (a run's release was stored
    under it) or the code of the charged error that ended it; the first outcome stays."""

    analyst: str
    key: str
    dataset: str
    request_sha256: str
    charge_id: str
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class Waits:
    """How long a ledger waits, at most: for a lock (`lock_s`: PostgreSQL's lock_timeout, SQLite's busy
    timeout, a free pooled connection), for one statement of an admit (`statement_s`), and how long the
    database lets one of the product's sessions idle inside a transaction before ending it and its locks
    (`idle_s`, PostgreSQL's idle_in_transaction_session_timeout: a frozen process's locks last that long)."""

    lock_s: float = 5.0
    statement_s: float = 10.0
    idle_s: float = 5.0

    def __post_init__(self) -> None:
        for name in ("lock_s", "statement_s", "idle_s"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not 0 < value <= 3600:
                raise ValueError(f"{name} must be in (0, 3600] seconds, got {value!r}")

    @property
    def retry_after_s(self) -> int:
        """Whole seconds after which a retry finds a frozen holder's locks gone."""
        return max(1, int(-(-self.idle_s // 1)))


@dataclass(frozen=True, slots=True)
class ChargeFilter:
    """Which charges a read selects: one analyst's or all, one dataset's or all, `since <= at < until`
    (timezone-aware moments), checked when built.

    Example:
        >>> ChargeFilter(analyst="ana").dataset is None
        True
        >>> ChargeFilter(since=datetime(2026, 1, 1))
        Traceback (most recent call last):
        ...
        ValueError: since must be timezone-aware, got datetime.datetime(2026, 1, 1, 0, 0)
    """

    analyst: str | None = None
    dataset: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for name, moment in (("since", self.since), ("until", self.until)):
            if moment is not None and moment.utcoffset() is None:
                raise ValueError(f"{name} must be timezone-aware, got {moment!r}")


@dataclass(frozen=True, slots=True)
class Admission:
    """One charge asked of the ledger (`Ledger.admit`): who asks, on which dataset, for which release (the exact
    event, and its (ε, δ) under basic composition), under which budgets and rule, for which cells, with the
    normalised SQL its audit entry records and the request's idempotency key. Checked when built, so a ledger
    never sees a malformed one.

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> a = Admission("ana", "demo", "ab" * 32, LaplaceEvent(1, 10.0), 0.1, 0.0, "basic", Budget(1.0, 0.0))
        >>> a.accounting.rule, a.scope is None
        ('basic', True)
        >>> Admission("ana", "demo", "ab" * 32, LaplaceEvent(1, 10.0), -0.1, 0.0, "basic", Budget(1.0, 0.0))
        Traceback (most recent call last):
        ...
        ValueError: charge epsilon must be finite and >= 0, got -0.1
    """

    analyst: str
    dataset: str
    sql_sha256: str
    event: Event
    epsilon: float
    delta: float
    composition: str
    budget: Budget
    accounting: Accounting = BASIC
    dataset_budget: Budget | None = None
    scope: CellScope | None = None
    sql: str | None = None
    idempotency: Idempotency | None = None

    def __post_init__(self) -> None:
        for name, value in (("epsilon", self.epsilon), ("delta", self.delta)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
                raise ValueError(f"charge {name} must be finite and >= 0, got {value!r}")
        if self.delta >= 1:
            raise ValueError(f"charge delta must be < 1, got {self.delta!r}")
        if not isinstance(self.budget, Budget):
            raise TypeError(f"budget must be a Budget, got {self.budget!r}")
        if not isinstance(self.accounting, Accounting):
            raise TypeError(f"accounting must be an Accounting, got {self.accounting!r}")
        if self.dataset_budget is not None and not isinstance(self.dataset_budget, Budget):
            raise TypeError(f"dataset_budget must be a Budget or None, got {self.dataset_budget!r}")
        if self.sql is not None and chain.sql_sha256(self.sql) != self.sql_sha256:
            raise ValueError("sql_sha256 must be the sha256 of sql, the text the audit entry records")
        if self.idempotency is not None and not isinstance(self.idempotency, Idempotency):
            raise TypeError(f"idempotency must be an Idempotency or None, got {self.idempotency!r}")


class Ledger(Protocol):
    """Storage of charges; `admit` is atomic check-then-insert."""

    def admit(self, admission: Admission) -> Charge:
        """Record the charge if it fits, else raise `BudgetExceeded` and write nothing (the fields below are
        the admission's).

        It fits if, in every cell of `scope` (every unit when None), the analyst's history on the dataset
        plus this charge passes the `accounting` rule's filter for `budget` and, when `dataset_budget` is
        given, the history of all analysts on the dataset plus this charge passes it for `dataset_budget`
        (cells.py bounds each cell's history): both checks and the insert are one transaction.
        `epsilon`/`delta` are the charge under basic composition; the event is what other rules account.
        With `sql` (the normalised SQL whose sha256 is `sql_sha256`), the charge's `admitted` audit entry is
        appended to the audit chain at this address in the same transaction (audit/chain_tables.py): a committed
        charge always has its entry. The proxy always passes it; tests of the accounting alone may not.

        With `idempotency`, the analyst's key is bound to this charge and request in the same transaction. If
        the key is bound already, nothing is written: the bound charge is returned when it was for this
        request at this exact price (`check_claim`), else `IdempotencyKeyReused` or `IdempotencyKeySpent`
        is raised. A wait past the ledger's bound raises `LedgerBusy` (nothing written); a COMMIT whose
        outcome is unknown raises `ChargeUncertain`, carrying the charge.
        """
        ...

    def claim(self, analyst: str, key: str) -> Claim | None:
        """What the analyst's idempotency key is bound to, if it is."""
        ...

    def end_claim(self, analyst: str, key: str, code: str) -> Claim | None:
        """Record that the key's charge ended in the charged error `code`, durably, before the error is sent,
        unless it has an outcome already; returns the key's claim as it now is (None: no such key)."""
        ...

    def probe(self, datasets: Sequence[str], timeout_s: float) -> None:
        """Raise `LedgerBusy` unless an admit on each dataset could take its locks within `timeout_s` (for
        /readyz: a frozen writer holding one shows here); takes them and lets go at once."""
        ...

    def spent(self, analyst: str, dataset: str) -> Spend:
        """Σε and Σδ charged to the analyst on the dataset (rounded up)."""
        ...

    def entries(self, *, dataset: str, analyst: str | None = None) -> tuple[Entry, ...]:
        """Every charge on the dataset (of one analyst, or of all when `analyst` is None), as the filter
        sees it: the event and its basic (ε, δ). For reports; admit reads its own inside the transaction."""
        ...

    def tallied(self, *, dataset: str, analyst: str | None = None, rule: Rule = "basic",
                floor: int | None = None) -> Ledgered:
        """The per-cell sums of those charges under `rule` (cells.Ledgered), as admit sees them; from the
        budget period starting above `floor` when given (an `allowance`'s), else the current one."""
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

    def store_release(
        self, release: StoredRelease, audit: AuditRecord | None = None, *, idempotency_key: str | None = None
    ) -> bool:
        """Keep a release so that an identical request gets the same answer at no charge (first one wins):
        True when this one was kept, False when a release of the same request was stored first (then
        nothing is written). With `audit`, append that audit entry (the answer's `answered`) in the same
        durable transaction when the release is kept, so the answer needs no second commit before it is
        sent (proxy/http/middleware/audit_trail.py). With `idempotency_key` (the key that paid `release.charge_id`), the
        release is the key's outcome: kept only if the key had none, in the same transaction."""
        ...

    def keep_bounds(self, kept: KeptBounds) -> None:
        """Keep a shape's chosen bounds for reuse (accountant/ledger/kept_bounds.py), replacing any kept for
        that (dataset, scope, shape) and starting its use count at 0."""
        ...

    def reuse_bounds(self, dataset: str, scope: str, shape_sha256: str, stamp: str, max_uses: int) -> str | None:
        """The kept bounds of the shape (their JSON), counting one more use, when they were drawn at `stamp`
        and used fewer than `max_uses` times; else None (and nothing changes). Atomic."""
        ...

    def close(self) -> None:
        """Release the storage."""
        ...
