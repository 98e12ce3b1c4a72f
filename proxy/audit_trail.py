"""Record every POST /v1/query in the audit log (accountant/audit.py) before its response leaves.

`AuditTrail` is a pure ASGI middleware that holds the response back until its entry is appended, so no
answer is ever released unaudited. If the append fails, the client gets the canonical 500 body instead
(`charged` as the request was); a charged answer is not lost, since repeating the request returns the
stored release (and is audited as a repeat). The audit log is `app.state.audit`.

What is recorded: the analyst holding the bearer key (authenticated again, by hash, as routes do); the
dataset as a policy name (the request's, or the analyst's only one); the SQL as sqlglot normalises it,
so its sha256 is the ledger's `sql_sha256` (the text as sent, capped, when it does not parse); the
decision, error code and charge id; and the (ε, δ) this request charged (0 for repeats and rejections).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from accountant.audit import AuditLog, AuditRecord, Decision
from proxy import errors
from proxy.auth import AuthError, authenticate, dataset_for
from proxy.pipeline import Env
from proxy.query.errors import QueryError
from proxy.query.guard import MAX_LENGTH
from proxy.query.parse import parse

log = logging.getLogger(__name__)

PATH = "/v1/query"
_BODY_LIMIT = 1 << 20  # bytes of request body kept to read its sql and dataset


@dataclass(slots=True)
class Exchange:
    """One request as the middleware saw it pass: its body, and the response held back."""

    body: bytearray = field(default_factory=bytearray)
    response: list[Message] = field(default_factory=list)

    @property
    def status(self) -> int:
        return next((int(m["status"]) for m in self.response if m["type"] == "http.response.start"), 500)

    @property
    def headers(self) -> Headers:
        start = next((m for m in self.response if m["type"] == "http.response.start"), None)
        return Headers(raw=start["headers"] if start else [])

    @property
    def response_body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.response if m["type"] == "http.response.body")


class AuditTrail:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        seen = Exchange()

        async def noting() -> Message:
            message = await receive()
            if message["type"] == "http.request" and len(seen.body) <= _BODY_LIMIT:
                seen.body += message.get("body", b"")
            return message

        async def holding(message: Message) -> None:
            seen.response.append(message)

        try:
            await self.app(scope, noting, holding)
        # any exception: it is a failed request to record, then re-raised for the error handler to render
        except Exception:
            await self._append(scope, seen, raised=True)
            raise
        if not await self._append(scope, seen, raised=False):
            charged = bool(scope.get("state", {}).get("charged", False))
            body = errors.error_body(500, "internal", "internal error", {}, charged)
            await JSONResponse(body, status_code=500)(scope, receive, send)
            return
        for message in seen.response:
            await send(message)

    async def _append(self, scope: Scope, seen: Exchange, *, raised: bool) -> bool:
        """Build and append the entry in the thread pool (parsing and the log block); False, logged, on failure."""
        app_state = scope["app"].state
        env: Env | None = getattr(app_state, "env", None)
        state: Mapping[str, Any] = scope.get("state", {})
        headers = Headers(scope=scope)

        def append() -> None:
            audit: AuditLog = app_state.audit
            audit.append(audit_record(env, headers, seen, state, raised=raised))

        try:
            await run_in_threadpool(append)
        # any failure of the log (database down, not configured, a bug) withholds the answer: fail closed
        except Exception:
            log.exception("the audit log refused an entry; the response is withheld")
            return False
        return True


def audit_record(
    env: Env | None, headers: Headers, seen: Exchange, state: Mapping[str, Any], *, raised: bool = False
) -> AuditRecord:
    """The entry for one /v1/query exchange (`raised`: the app raised instead of responding)."""
    request = _json(seen.body)
    sql = request.get("sql") if isinstance(request.get("sql"), str) else ""
    analyst, dataset = _who(env, headers.get("authorization"), request.get("dataset"))
    status = 500 if raised else seen.status
    if status < 400:
        repeat = seen.headers.get("x-dp-repeat") == "true"
        charge_id = seen.headers.get("x-dp-charge-id")
        decision: Decision = "repeat" if repeat else "answered"
        code = None
        epsilon, delta = (0.0, 0.0) if repeat else _charge_in(_json(seen.response_body))
    else:
        answer = {} if raised else _json(seen.response_body)
        decision = "failed" if status >= 500 else "rejected"
        code = answer.get("code") if isinstance(answer.get("code"), str) else "internal"
        charged = bool(state.get("charged", False))
        charge_id = state.get("charge_id") if charged else None
        epsilon, delta = _charge_of(env, analyst, dataset, charge_id) if charge_id else (0.0, 0.0)
    return AuditRecord(
        analyst=analyst, dataset=dataset, sql=_normalised(sql), decision=decision, error_code=_clean(code),
        charge_id=_clean(charge_id), epsilon=epsilon, delta=delta,
    )


def _json(body: bytes | bytearray) -> dict[str, Any]:
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _clean(text: str | None) -> str | None:
    """Text the log can store and hash: no NUL, valid Unicode."""
    if text is None:
        return None
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _normalised(sql: str) -> str:
    """The SQL as the pipeline normalises it (sqlglot, DuckDB dialect), or the text as sent, capped."""
    try:
        return parse(sql).sql(dialect="duckdb") if sql else ""
    except (QueryError, RecursionError):
        return _clean(sql[:MAX_LENGTH]) or ""


def _who(env: Env | None, authorization: str | None, requested: object) -> tuple[str | None, str | None]:
    """The authenticated analyst and the request's dataset, as policy names (or None)."""
    if env is None:
        return None, None
    try:
        analyst = authenticate(authorization, env.policy)
    except AuthError:
        return None, None
    try:
        name, _ = dataset_for(analyst, requested if isinstance(requested, str) else None)
    except AuthError:
        return analyst.name, None
    return analyst.name, name


def _charge_in(answer: Mapping[str, Any]) -> tuple[float, float]:
    """(ε, δ) of the charge in an answer body, as the client was told."""
    charge = answer.get("charge")
    if not isinstance(charge, dict):
        raise ValueError("an answer without its charge")
    return float(charge["epsilon"]), float(charge["delta"])


def _charge_of(env: Env | None, analyst: str | None, dataset: str | None, charge_id: str) -> tuple[float, float]:
    """(ε, δ) of a charge committed by a request that then failed: one of the analyst's newest charges."""
    if env is None or analyst is None or dataset is None:
        raise ValueError(f"charge {charge_id} of an unknown analyst or dataset")
    newest = env.ledger.charges(analyst=analyst, dataset=dataset, limit=100)
    found = next((c for c in newest if c.id == charge_id), None)
    if found is None:
        raise ValueError(f"charge {charge_id} is not among the newest charges of {analyst} on {dataset}")
    return found.epsilon, found.delta
