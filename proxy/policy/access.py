"""authenticate: `Authorization: Bearer <key>` -> the analyst. Keys are compared by SHA-256 hash only."""

from __future__ import annotations

import hashlib
from typing import ClassVar

from accountant.filter import Budget
from proxy.policy.load import AnalystPolicy, Policy


class AuthError(Exception):
    code: ClassVar[str] = "unauthenticated"

    def __init__(self, message: str, **detail: object) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class Unauthenticated(AuthError):
    code = "unauthenticated"


class Forbidden(AuthError):
    code = "forbidden"


def authenticate(authorization: str | None, policy: Policy) -> AnalystPolicy:
    """The analyst holding the bearer key in `authorization`."""
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise Unauthenticated("send your API key as 'Authorization: Bearer <key>'")
    analyst = policy.analyst_by_key_hash(hashlib.sha256(key.strip().encode()).hexdigest())
    if analyst is None:
        raise Unauthenticated("unknown API key")
    return analyst


def dataset_for(analyst: AnalystPolicy, requested: str | None) -> tuple[str, Budget]:
    """The dataset a request is for (the analyst's only one when not named) and the analyst's budget on it."""
    if requested is None:
        if len(analyst.budgets) != 1:
            names = ", ".join(name for name, _ in analyst.budgets)
            raise Forbidden(f"name the dataset: you have access to {names}", construct="dataset")
        return analyst.budgets[0]
    budget = analyst.budget(requested)
    if budget is None:
        raise Forbidden(f"you have no access to dataset {requested!r}", dataset=requested)
    return requested, budget


def require_admin(analyst: AnalystPolicy) -> None:
    if analyst.role != "admin":
        raise Forbidden("this route is for admins only", role=analyst.role)
