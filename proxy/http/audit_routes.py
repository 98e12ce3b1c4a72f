"""GET /v1/audit and GET /v1/audit/verify (admins only): the audit log of query requests, and its check.

The log is `app.state.audit` (an `accountant.audit.log.AuditLog`), opened at start-up beside the ledger.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, BeforeValidator

from accountant.audit.log import AuditEntry, AuditFilter, AuditLog, Decision
from proxy.http.routes import AnalystDep
from proxy.policy import access
from proxy.schemas import ErrorResponse

router = APIRouter(tags=["audit"], responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 500)})

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?([Zz]|[+-]\d{2}:?\d{2})?")
MAX_OFFSET = 2**63 - 1  # the largest OFFSET SQLite and PostgreSQL can bind


def _date_time(value: object) -> object:
    """Only what the schema documents (format: date-time): pydantic alone also takes "0" and "2026-01-01"."""
    if isinstance(value, str) and not _RFC3339.fullmatch(value):
        raise ValueError("expected an RFC 3339 date-time, such as 2026-01-01T00:00:00Z")
    return value


DateTime = Annotated[dt.datetime, BeforeValidator(_date_time)]


def get_audit(request: Request) -> AuditLog:
    audit: AuditLog | None = getattr(request.app.state, "audit", None)
    if audit is None:
        raise RuntimeError("no audit log is configured (app.state.audit)")
    return audit


AuditDep = Annotated[AuditLog, Depends(get_audit)]


class AuditEntryOut(BaseModel):
    seq: int
    at: str
    analyst: str | None
    dataset: str | None
    sql: str
    sql_sha256: str
    decision: str
    error_code: str | None
    charge_id: str | None
    epsilon: float
    delta: float
    prev_hash: str
    hash: str


class AuditResponse(BaseModel):
    ok: Literal[True] = True
    total: int
    limit: int
    offset: int
    entries: list[AuditEntryOut]


class AuditVerifyResponse(BaseModel):
    ok: bool  # the chain is intact and every charge has its admitted entry (and every such entry its charge)
    checked: int
    first_bad_seq: int | None
    reason: str | None
    head: str
    charges: int
    unaudited_charges: list[str]  # charges without an admitted entry (at most 100 listed)
    orphaned_admissions: list[str]  # charge ids of admitted entries without a charge (at most 100 listed)


@router.get("/v1/audit", response_model=AuditResponse)
def audit_entries(
    analyst: AnalystDep,
    audit: AuditDep,
    of: Annotated[str | None, Query(alias="analyst", max_length=64)] = None,
    dataset: Annotated[str | None, Query(max_length=64)] = None,
    decision: Decision | None = None,
    since: DateTime | None = None,
    until: DateTime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
) -> AuditResponse:
    """Every query request and its outcome, newest first (admins only)."""
    access.require_admin(analyst)
    filters = AuditFilter(analyst=of, dataset=dataset, decision=decision, since=_utc(since), until=_utc(until))
    return AuditResponse(
        total=audit.count(filters), limit=limit, offset=offset,
        entries=[_out(entry) for entry in audit.entries(filters, limit=limit, offset=offset)],
    )


@router.get("/v1/audit/verify", response_model=AuditVerifyResponse)
def audit_verify(analyst: AnalystDep, audit: AuditDep) -> AuditVerifyResponse:
    """Check the whole hash chain, and that every charge has its admitted entry (admins only); `ok: false`
    names the first entry that fails and why, or the charges without an entry."""
    access.require_admin(analyst)
    result, covered = audit.verify(), audit.coverage()
    return AuditVerifyResponse(ok=result.ok and covered.ok, checked=result.checked,
                               first_bad_seq=result.first_bad_seq, reason=result.reason, head=result.head,
                               charges=covered.charges, unaudited_charges=list(covered.unaudited),
                               orphaned_admissions=list(covered.orphaned))


def _out(entry: AuditEntry) -> AuditEntryOut:
    return AuditEntryOut(
        seq=entry.seq, at=entry.at.isoformat(), analyst=entry.analyst, dataset=entry.dataset, sql=entry.sql,
        sql_sha256=entry.sql_sha256, decision=entry.decision, error_code=entry.error_code,
        charge_id=entry.charge_id, epsilon=entry.epsilon, delta=entry.delta, prev_hash=entry.prev_hash,
        hash=entry.hash,
    )


def _utc(moment: dt.datetime | None) -> dt.datetime | None:
    """A time without an offset is taken as UTC (as GET /v1/ledger does)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=dt.UTC)
