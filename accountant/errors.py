"""Errors of the accountant: a machine `code`, a message that says what to do, and structured `detail`."""

from __future__ import annotations

from typing import ClassVar


class AccountantError(Exception):
    """Base of the accountant's errors (STYLE.md B5)."""

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
