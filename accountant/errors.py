"""Errors of the accountant: a machine `code`, a message that says what to do, and structured `detail`."""

from __future__ import annotations

from typing import ClassVar


class AccountantError(Exception):
    """Base of the accountant's errors (docs/errors.md)."""

    code: ClassVar[str] = "accountant_error"

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.detail = detail


class BudgetExceeded(AccountantError):
    """`Ledger.admit` refused a charge; `detail` holds the remaining and requested (ε, δ)."""

    code = "budget_exceeded"


class UnsupportedEvent(AccountantError):
    """An event outside the closed union of `events.py`, or one a map cannot account for."""

    code = "unsupported_event"


class LedgerBusy(AccountantError):
    """A ledger wait passed its bound (a lock held by a stalled or frozen writer, a statement over its time
    limit, no connection free): the transaction was rolled back, so nothing of it was written. `retry_after_s`
    is when a retry can expect the holder gone (the database ends an idle transaction by then)."""

    code = "ledger_busy"

    def __init__(self, message: str, *, retry_after_s: int, **detail: object) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **detail)
        self.retry_after_s = retry_after_s


class ChargeUncertain(AccountantError):
    """The admit's COMMIT failed in a way that leaves its outcome unknown (a lost connection, a cancelled
    COMMIT): the charge may be committed, so it is reported as charged (`charge`), never as free."""

    code = "ledger_uncertain"

    def __init__(self, message: str, *, charge: object, retry_after_s: int) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.charge = charge
        self.retry_after_s = retry_after_s


class IdempotencyKeyReused(AccountantError):
    """An idempotency key already paid for another request (other SQL, parameters or dataset, or a charge the
    policy in force would price differently): nothing is charged or run."""

    code = "idempotency_key_reused"


class IdempotencyKeySpent(AccountantError):
    """An idempotency key whose charge ended in a charged error: that error was its one outcome, so nothing
    more is run under the charge (a retry of a `timeout` would otherwise probe the data for free)."""

    code = "idempotency_key_spent"
