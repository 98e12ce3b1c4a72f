"""Operator routes: GET /readyz, GET /metrics and the budget operations (the dashboard is proxy/http/dashboard.py).

They are documented in docs/operations.md and kept out of the OpenAPI schema, which describes the analysts'
API (their response declarations stay, ready for the day they join it).

/healthz (liveness) stays in routes.py. /readyz is public, as probes send no credentials, and says only
which component failed (the reasons go to the log). /metrics exposes every analyst's budget, so it needs a
credential: an admin's API key, or `DPPROXY_METRICS_TOKEN`, a bearer token that reads metrics and nothing
else (give that to Prometheus, not an admin key).

The budget operations (admins only; docs/operations.md#budget-grants-and-periods): POST /v1/admin/grants
(more budget for one analyst on a dataset), POST /v1/admin/dataset-grants (a larger budget shared by all
analysts of a dataset), POST /v1/admin/periods (a new budget period) and GET /v1/admin/operations. Each
write is one ledger transaction with its audit entry (accountant/ledger/budget_ops.py); the answer holds the
operation and the budgets it changed, as the admit now sees them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from pydantic import BaseModel, ConfigDict

from accountant.filter import Budget
from accountant.ledger.budget_ops import (
    Allowance,
    InvalidBudgetOperation,
    Operation,
    StoredOp,
    UnusableBudget,
    decimal_of,
    raised,
)
from accountant.ledger.sqlite import SqliteLedger
from accountant.ledger.stores import store_of
from proxy.http import errors
from proxy.http.decimal_json import DecimalJSONRoute
from proxy.http.views.budget import budget_now
from proxy.pipeline import Env
from proxy.policy import access
from proxy.policy.load import AnalystPolicy
from proxy.schemas import BudgetOut, ErrorResponse

log = logging.getLogger(__name__)
router = APIRouter(tags=["ops"], route_class=DecimalJSONRoute)  # a grant's ε and δ keep their written digits

_SQLITE_HEADER = b"SQLite format 3\x00"
NO_STORE = {"Cache-Control": "no-store"}
CREDENTIALED: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "no or an unknown credential (`unauthenticated`)"},
    403: {"model": ErrorResponse, "description": "not an admin key (`forbidden`)"},
    500: {"model": ErrorResponse, "description": "internal error"},
}


def get_env(request: Request) -> Env:
    env: Env = request.app.state.env
    return env


EnvDep = Annotated[Env, Depends(get_env)]
AuthorizationHeader = Annotated[str | None, Header()]


def get_analyst(env: EnvDep, authorization: AuthorizationHeader = None) -> AnalystPolicy:
    return access.authenticate(authorization, env.policy)


AnalystDep = Annotated[AnalystPolicy, Depends(get_analyst)]


# --- readiness --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LedgerFile:
    """The SQLite ledger file as opened at start-up. If the file at `path` is removed or replaced, the open
    connection keeps writing to the old, unlinked file, and those charges would be lost on restart."""

    path: Path
    device: int
    inode: int

    @classmethod
    def of(cls, env: Env) -> LedgerFile | None:
        if not isinstance(env.ledger, SqliteLedger):
            return None
        _, path = store_of(env.settings.ledger or env.policy.ledger)
        found = Path(path).stat()
        return cls(Path(path), found.st_dev, found.st_ino)

    def check(self) -> None:
        found = self.path.stat()  # FileNotFoundError when removed
        if (found.st_dev, found.st_ino) != (self.device, self.inode):
            raise RuntimeError("the ledger file was replaced since start-up")
        with self.path.open("rb") as file:  # PermissionError when unreadable
            if file.read(len(_SQLITE_HEADER)) != _SQLITE_HEADER:
                raise RuntimeError("the ledger file is not an SQLite database")
        if not os.access(self.path, os.R_OK | os.W_OK):
            raise PermissionError("the ledger file is not readable and writable")


_PROBE_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="dpproxy-readyz")


async def _within(timeout_s: float, check: Callable[[], None]) -> str | None:
    """None when `check` returns within `timeout_s`, else why not (a lock, an error). The check runs on the
    probe threads, never on the event loop or a thread that serves queries or other routes; one that hangs
    keeps its thread until it ends (the ledger and the engines have time limits of their own)."""

    def run() -> str | None:
        try:
            check()
        except Exception as err:
            return f"{type(err).__name__}: {err}"
        return None

    try:
        return await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(_PROBE_THREADS, run), timeout_s)
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"


async def readiness(env: Env, ledger_file: LedgerFile | None) -> dict[str, str | None]:
    """Component -> None when it works, else the reason: the ledger file, a read, and the locks an admit on
    each dataset takes, within the time limit (a process frozen holding one would stall every admit: the
    ledger is then not ready), and `SELECT 1` on every DuckDB engine (with its database file still in place)
    or a job on every Spark connection; the checks run at once."""

    def ledger() -> None:
        if ledger_file is not None:
            ledger_file.check()
        env.ledger.count()
        # within the check's own limit, so that the reason given is the lock, not the time limit
        env.ledger.probe([name for name, _ in env.engines], min(env.settings.ledger_lock_timeout_s, timeout * 0.75))

    def engine(name: str) -> Callable[[], None]:
        def check() -> None:
            dataset = env.policy.dataset(name)
            probe = getattr(env.engine(name), "ready", None)
            if probe is not None:  # Spark: a job on the cluster, which SELECT 1 would not reach
                probe(timeout)
                return
            if dataset is not None and not Path(dataset.path).is_file():
                raise FileNotFoundError("the database file is missing")
            if env.engine(name).run("SELECT 1", timeout).rows != ((1,),):
                raise RuntimeError("SELECT 1 did not return 1")

        return check

    timeout = env.settings.readiness_timeout_s
    checks = {"ledger": ledger, **{f"dataset:{name}": engine(name) for name, _ in env.engines}}
    found = await asyncio.gather(*(_within(timeout, check) for check in checks.values()))
    return dict(zip(checks, found, strict=True))


class Ready(BaseModel):
    ok: bool = True


@router.get("/readyz", include_in_schema=False, responses={200: {"model": Ready},
                                  503: {"model": ErrorResponse, "description": "not ready (code `unavailable`)"}})
async def readyz(request: Request) -> JSONResponse:
    """Readiness: 200 when the ledger can be read and locked in time, and every dataset's engine answers
    `SELECT 1`. Answered
    apart from the thread pools that serve queries and other routes, so a busy server still answers it."""
    env: Env = request.app.state.env
    ledger_file = getattr(request.app.state, "ledger_file", None)
    found = await readiness(env, ledger_file)
    failed = sorted({"ledger" if name == "ledger" else "engine" for name, why in found.items() if why})
    if not failed:
        return JSONResponse({"ok": True}, headers=NO_STORE)
    for name, why in found.items():
        if why:
            log.warning("not ready: %s: %s", name, why)
    body = errors.error_body(503, "unavailable", "not ready: " + " and ".join(failed) + " failing",
                             {"failed": failed}, False)
    return JSONResponse(body, status_code=503, headers=NO_STORE)


# --- metrics ----------------------------------------------------------------------------------------


def _sha256(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def require_metrics_reader(env: Env, authorization: str | None) -> None:
    """The metrics token (when configured) or an admin's API key; else 401/403 as everywhere."""
    token = env.settings.metrics_token
    scheme, _, key = (authorization or "").partition(" ")
    if (token is not None and scheme.lower() == "bearer"
            and hmac.compare_digest(_sha256(key.strip()), _sha256(token.get_secret_value()))):
        return
    access.require_admin(access.authenticate(authorization, env.policy))


@router.get("/metrics", include_in_schema=False, response_class=Response, responses={
    200: {"content": {CONTENT_TYPE_PLAIN_0_0_4: {}}, "description": "Prometheus text format"}, **CREDENTIALED})
def metrics(request: Request, env: EnvDep, authorization: AuthorizationHeader = None) -> Response:
    """Prometheus metrics (admin key or `DPPROXY_METRICS_TOKEN`). Names: docs/operations.md."""
    require_metrics_reader(env, authorization)
    body, content_type = request.app.state.metrics.exposition(request.headers.get("accept"))
    return Response(body, headers={"Content-Type": content_type, **NO_STORE})


# --- budget operations ------------------------------------------------------------------------------

Amount = Decimal | str | None  # a JSON number read exactly (DecimalJSONRoute), or its digits as a string


class GrantIn(BaseModel):
    """More budget for one analyst on a dataset, for the rest of the current period."""

    model_config = ConfigDict(extra="forbid")
    dataset: str
    analyst: str
    epsilon: Amount = None
    delta: Amount = None
    reason: str | None = None  # required: checked by the operation, so that its absence has the stable code


class DatasetGrantIn(BaseModel):
    """A larger budget shared by all analysts of a dataset (the dataset's own `budget`)."""

    model_config = ConfigDict(extra="forbid")
    dataset: str
    epsilon: Amount = None
    delta: Amount = None
    reason: str | None = None


class PeriodIn(BaseModel):
    """A new budget period on a dataset: for one analyst, or (`analyst` null) for every analyst and the
    dataset's shared budget."""

    model_config = ConfigDict(extra="forbid")
    dataset: str
    analyst: str | None = None
    reason: str | None = None


class OperationOut(BaseModel):
    """One operation as the ledger keeps it; its audit entry has `charge_id` = `id`."""

    id: str
    seq: int
    at: str
    kind: str  # grant | period
    dataset: str
    analyst: str | None  # None: the dataset's shared budget (grant) / every analyst (period)
    epsilon: str  # exact decimal text
    delta: str
    floor: int  # a period's: the highest charge number when it began
    operator: str
    reason: str


class OperationDone(BaseModel):
    operation: OperationOut
    budgets: list[BudgetOut]  # the budgets it changed (each analyst's it applies to), as the admit now sees them


class OperationsOut(BaseModel):
    operations: list[OperationOut]  # oldest first


def operation_out(op: StoredOp) -> OperationOut:
    o = op.operation
    return OperationOut(id=op.id, seq=op.seq, at=op.at.isoformat(), kind=o.kind, dataset=o.dataset,
                        analyst=o.analyst, epsilon=_digits(o.epsilon), delta=_digits(o.delta), floor=op.floor,
                        operator=o.operator, reason=o.reason)


def _digits(amount: Fraction) -> str:
    return format((Decimal(amount.numerator) / Decimal(amount.denominator)).normalize(), "f")


def _amount(value: Amount, name: str) -> Fraction:
    return Fraction(0) if value is None else decimal_of(value, name)


def _budget_of(env: Env, dataset: str, name: str) -> Budget:
    """The analyst's budget on the dataset in the policy; refused when they have none there."""
    found = next((a for a in env.policy.analysts if a.name == name), None)
    budget = None if found is None else found.budget(dataset)
    if budget is None:
        raise InvalidBudgetOperation(f"analyst {name!r} has no budget on dataset {dataset!r} in the policy",
                                     field="analyst", hint="the policy file names each analyst's datasets")
    return budget


def _dataset(env: Env, name: str) -> None:
    if env.policy.dataset(name) is None:
        raise InvalidBudgetOperation(f"unknown dataset {name!r}", field="dataset")


def _fits(policy: Budget, allowance: Allowance, epsilon: Fraction, delta: Fraction) -> None:
    """Refuse a grant that would take the budget's δ to 1 or more (no (ε, δ) guarantee is left there)."""
    try:
        raised(policy, Allowance(allowance.floor, allowance.epsilon + epsilon, allowance.delta + delta))
    except UnusableBudget:  # the operator's write: a 422 naming the field, not a query's refusal
        raise InvalidBudgetOperation("the granted delta takes the budget's delta to 1 or more", field="delta") from None


def _done(env: Env, op: StoredOp) -> OperationDone:
    o = op.operation
    dataset = env.policy.dataset(o.dataset)
    assert dataset is not None
    names = [o.analyst] if o.analyst is not None else [
        a.name for a in env.policy.analysts if a.budget(o.dataset) is not None]
    budgets = [budget_now(env, name, dataset, _budget_of(env, o.dataset, name)) for name in names]
    return OperationDone(operation=operation_out(op), budgets=budgets)


_OPERATED: dict[int | str, dict[str, Any]] = {
    422: {"model": ErrorResponse, "description": "no reason, a bad amount, an unknown dataset or analyst"
                                                 " (`invalid_budget_operation`)"}, **CREDENTIALED}


@router.post("/v1/admin/grants", include_in_schema=False, response_model=OperationDone, responses=_OPERATED)
def grant(body: GrantIn, env: EnvDep, admin: AnalystDep) -> OperationDone:
    """Grant one analyst more (ε, δ) on a dataset for the rest of the current period (admins only). The
    dataset's shared budget is not raised: that is POST /v1/admin/dataset-grants."""
    access.require_admin(admin)
    _dataset(env, body.dataset)
    policy = _budget_of(env, body.dataset, body.analyst)
    epsilon, delta = _amount(body.epsilon, "epsilon"), _amount(body.delta, "delta")
    operation = Operation("grant", body.dataset, body.analyst, epsilon, delta, admin.name, body.reason or "")
    _fits(policy, env.ledger.allowance(dataset=body.dataset, analyst=body.analyst), epsilon, delta)
    return _done(env, env.ledger.operate(operation))


@router.post("/v1/admin/dataset-grants", include_in_schema=False, response_model=OperationDone,
             responses=_OPERATED)
def dataset_grant(body: DatasetGrantIn, env: EnvDep, admin: AnalystDep) -> OperationDone:
    """Raise the budget shared by all analysts of a dataset (admins only): the dataset's guarantee becomes
    the new total. A dataset without a shared budget in the policy has none to raise."""
    access.require_admin(admin)
    _dataset(env, body.dataset)
    dataset = env.policy.dataset(body.dataset)
    assert dataset is not None
    epsilon, delta = _amount(body.epsilon, "epsilon"), _amount(body.delta, "delta")
    operation = Operation("grant", body.dataset, None, epsilon, delta, admin.name, body.reason or "")
    if dataset.budget is None:
        raise InvalidBudgetOperation(f"dataset {body.dataset!r} has no shared budget in the policy: there is none"
                                     " to raise", field="dataset", hint="grant an analyst more: POST /v1/admin/grants")
    _fits(dataset.budget, env.ledger.allowance(dataset=body.dataset), epsilon, delta)
    return _done(env, env.ledger.operate(operation))


@router.post("/v1/admin/periods", include_in_schema=False, response_model=OperationDone, responses=_OPERATED)
def period(body: PeriodIn, env: EnvDep, admin: AnalystDep) -> OperationDone:
    """Start a new budget period on a dataset (admins only): for one analyst (their charges so far stop
    counting against their budget, not against the shared one), or with no analyst for everyone and the
    shared budget. The new period's grants start from nothing."""
    access.require_admin(admin)
    _dataset(env, body.dataset)
    if body.analyst is not None:
        _budget_of(env, body.dataset, body.analyst)
    operation = Operation("period", body.dataset, body.analyst, Fraction(0), Fraction(0), admin.name,
                          body.reason or "")
    return _done(env, env.ledger.operate(operation))


@router.get("/v1/admin/operations", include_in_schema=False, response_model=OperationsOut,
            responses=CREDENTIALED)
def operations(env: EnvDep, admin: AnalystDep,
               dataset: Annotated[str | None, Query(max_length=64)] = None) -> OperationsOut:
    """Every grant and period (on one dataset, or all), oldest first (admins only)."""
    access.require_admin(admin)
    return OperationsOut(operations=[operation_out(op) for op in env.ledger.operations(dataset=dataset)])
