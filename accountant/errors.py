"""The one error base of the product (`ProxyError`), and the accountant's errors.

Every error an analyst or operator can see is a `ProxyError`: a stable machine `code`, the HTTP `status` it
answers with, a message that says what to do, structured `detail`, and `retry_after_s` when a retry can
succeed. The HTTP shell turns any of them into the one JSON body (proxy/http/errors.py, docs/errors.md); the
SQL layer's, the engines', the policy's and the throttle's errors derive from it too. It lives here, in the
lowest package that raises errors to users, so that every layer above can import it.

Example:
    >>> err = BudgetExceeded("budget exhausted", remaining_epsilon=0.0)
    >>> err.code, err.status, str(err), err.detail, err.retry_after_s
    ('budget_exceeded', 403, 'budget exhausted', {'remaining_epsilon': 0.0}, None)
"""

from __future__ import annotations

from typing import ClassVar


class ProxyError(Exception):
    """Base of every error the product reports (docs/errors.md). `default_message` is the message of an error
    raised without one (engine errors carry fixed messages only, never the engine's text)."""

    code: ClassVar[str] = "internal"
    status: ClassVar[int] = 500
    default_message: ClassVar[str] = "internal error"

    def __init__(self, message: str | None = None, *, retry_after_s: int | None = None, **detail: object) -> None:
        self.message = message or self.default_message
        super().__init__(self.message)
        self.retry_after_s = retry_after_s
        self.detail: dict[str, object] = detail if retry_after_s is None else {"retry_after_s": retry_after_s, **detail}


class AccountantError(ProxyError):
    """Base of the accountant's errors."""

    code = "accountant_error"


class BudgetExceeded(AccountantError):
    """`Ledger.admit` refused a charge; `detail` holds the remaining and requested (ε, δ)."""

    code = "budget_exceeded"
    status = 403


class UnsupportedEvent(AccountantError):
    """An event outside the closed union of `events.py`, or one a map cannot account for."""

    code = "unsupported_event"


class LedgerBusy(AccountantError):
    """A ledger wait passed its bound (a lock held by a stalled or frozen writer, a statement over its time
    limit, no connection free): the transaction was rolled back, so nothing of it was written. `retry_after_s`
    is when a retry can expect the holder gone (the database ends an idle transaction by then)."""

    code = "ledger_busy"
    status = 503

    def __init__(self, message: str, *, retry_after_s: int, **detail: object) -> None:
        super().__init__(message, retry_after_s=retry_after_s, **detail)


class ChargeUncertain(AccountantError):
    """The admit's COMMIT failed in a way that leaves its outcome unknown (a lost connection, a cancelled
    COMMIT): the charge may be committed, so it is reported as charged (`charge`), never as free."""

    code = "ledger_uncertain"
    status = 503

    def __init__(self, message: str, *, charge: object, retry_after_s: int) -> None:
        super().__init__(message, retry_after_s=retry_after_s)
        self.charge = charge


class IdempotencyKeyReused(AccountantError):
    """An idempotency key already paid for another request (other SQL, parameters or dataset, or a charge the
    policy in force would price differently): nothing is charged or run."""

    code = "idempotency_key_reused"
    status = 422


class IdempotencyKeySpent(AccountantError):
    """An idempotency key whose charge ended in a charged error: that error was its one outcome, so nothing
    more is run under the charge (a retry of a `timeout` would otherwise probe the data for free)."""

    code = "idempotency_key_spent"
    status = 409
