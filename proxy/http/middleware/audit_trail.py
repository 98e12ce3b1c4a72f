"""Record every POST /v1/query in the audit log (accountant/audit/log.py) before its response leaves.

`AuditTrail` is a pure ASGI middleware that holds the response back until its entry is appended, so no
answer is ever released unaudited. If the append fails, or the entry cannot be made (an answer without the
request the route parsed, or SQL whose hash is not the charge's), the client gets the canonical 500 body
instead (`charged` as the request was); a charged answer is not lost, since repeating the request returns
the stored release (and is audited as a repeat). The audit log is `app.state.audit`.

Two kinds of entry describe a charged request. The charge's `admitted` entry is written by `Ledger.admit`
in the transaction that commits the charge, so a crash at any moment leaves no charge without its entry.
The outcome follows with the same charge id: a new answer's `answered` entry (`answered` here) is committed
by the pipeline with the answer's stored release, in one durable transaction of the ledger's store
(`Ledger.store_release(release, audit)`), before the answer leaves the query thread, and the route marks the
request `audited`; so an answer costs one commit after its charge, not two, and no extra thread hop. Every
other outcome (`failed` with its code, e.g. `timeout`; `repeat`; `rejected`) is appended here, as is a
failure after an answer was stored (a second entry for that charge: the answer was not sent). An exact answer
over a public table alone (`request.state.public`, pipeline.answer_public) is an `answered` entry with no
charge id and ε = δ = 0, appended here: nothing was admitted for it.

What is recorded is what the route parsed, never a re-read of the raw body: the route leaves the
`QueryRequest` it validated in `request.state.query`, and the pipeline's admit leaves the `Charge` in
`request.state.charge`. So: the analyst holding the bearer key (authenticated again, by hash, as routes do);
the dataset as a policy name (the request's, or the analyst's only one); the SQL as sqlglot normalises it in its
dialect, named in a leading comment unless DuckDB's (`parse.normalised`: the plan's own text,
`request.state.normalized_sql`, once the pipeline planned it), whose sha256 is the ledger's
`sql_sha256` (checked for a charged request; the text as parsed when it does not parse as SQL); the decision,
error code and charge id; and the (ε, δ) this request charged (0 for repeats and rejections). A request the
route never parsed — no key or an unknown one (401, refused by `proxy.http.middleware.body_gate` before its
body is read), a body too large (413), or not JSON of the documented shape (400) — is recorded with empty
SQL: nothing of its body is read, hashed, parsed or stored.
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

from accountant.audit.log import AuditLog, AuditRecord, Decision, sql_sha256
from accountant.ledger.charges import Charge
from proxy.http import errors
from proxy.pipeline import Env
from proxy.policy.access import AuthError, authenticate, dataset_for
from proxy.query.errors import QueryError
from proxy.query.parse.statement import normalised, parse
from proxy.schemas import QueryRequest

log = logging.getLogger(__name__)

PATH = "/v1/query"


@dataclass(slots=True)
class Held:
    """The response of one request, held back until its entry is appended."""

    messages: list[Message] = field(default_factory=list)

    @property
    def status(self) -> int:
        return next((int(m["status"]) for m in self.messages if m["type"] == "http.response.start"), 500)

    @property
    def headers(self) -> Headers:
        start = next((m for m in self.messages if m["type"] == "http.response.start"), None)
        return Headers(raw=start["headers"] if start else [])

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.messages if m["type"] == "http.response.body")


class AuditTrail:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        held = Held()

        async def holding(message: Message) -> None:
            held.messages.append(message)

        try:
            await self.app(scope, receive, holding)
        # any exception: it is a failed request to record, then re-raised for the error handler to render
        except Exception:
            await self._append(scope, held, raised=True)
            raise
        if _already_audited(scope, held):  # the pipeline committed its `answered` entry with the release
            for message in held.messages:
                await send(message)
            return
        if not await self._append(scope, held, raised=False):
            charged = bool(scope.get("state", {}).get("charged", False))
            body = errors.error_body(500, "internal", "internal error", {}, charged)
            await JSONResponse(body, status_code=500)(scope, receive, send)
            return
        for message in held.messages:
            await send(message)

    async def _append(self, scope: Scope, held: Held, *, raised: bool) -> bool:
        """Build and append the entry in the thread pool (parsing and the log block); False, logged, on failure."""
        app_state = scope["app"].state
        env: Env | None = getattr(app_state, "env", None)
        state: Mapping[str, Any] = scope.get("state", {})
        authorization = Headers(scope=scope).get("authorization")

        def append() -> None:
            audit: AuditLog = app_state.audit
            audit.append(audit_record(env, authorization, held, state, raised=raised))

        try:
            await run_in_threadpool(append)
        # any failure of the log (database down, not configured, a bug) withholds the answer: fail closed
        except Exception:
            log.exception("the audit log refused an entry; the response is withheld")
            return False
        return True


def answered(charge: Charge, sql: str) -> AuditRecord:
    """The `answered` entry of a new answer paid for by `charge`, whose planned SQL is `sql` (the text the
    charge's hash is of; raises otherwise, before anything is stored or sent).

    Example:
        >>> from datetime import UTC, datetime
        >>> from accountant.events import LaplaceEvent
        >>> c = Charge("c1", "ana", "demo", datetime(2026, 1, 1, tzinfo=UTC), sql_sha256("SELECT 1"),
        ...            LaplaceEvent(1, 10.0), 0.1, 0.0, "basic")
        >>> answered(c, "SELECT 1").decision, answered(c, "SELECT 1").charge_id
        ('answered', 'c1')
    """
    if sql_sha256(sql) != charge.sql_sha256:
        raise ValueError(f"the SQL to record is not the SQL charge {charge.id} paid for")
    return AuditRecord(analyst=charge.analyst, dataset=charge.dataset, sql=sql, decision="answered",
                       charge_id=charge.id, epsilon=charge.epsilon, delta=charge.delta)


def _already_audited(scope: Scope, held: Held) -> bool:
    """The route marked this response's new answer as audited (its `answered` entry is committed) and the
    response is that answer: a success, not a repeat, naming the charge."""
    state: Mapping[str, Any] = scope.get("state", {})
    charge: Charge | None = state.get("charge")
    if not state.get("audited") or charge is None or held.status >= 400:
        return False
    headers = held.headers
    return headers.get("x-dp-repeat") == "false" and headers.get("x-dp-charge-id") == charge.id


def audit_record(
    env: Env | None, authorization: str | None, held: Held, state: Mapping[str, Any], *, raised: bool = False
) -> AuditRecord:
    """The entry for one /v1/query exchange (`raised`: the app raised instead of responding), from what the
    route parsed (`state["query"]`) and admitted (`state["charge"]`); raises if that cannot be recorded."""
    query: QueryRequest | None = state.get("query")
    charge: Charge | None = state.get("charge")
    analyst, dataset = _who(env, authorization, query)
    # only a route that authenticated parses a query; it is read in the dialect the pipeline read it in (the
    # plan's own normalised text when the pipeline got that far: no second parse)
    planned: str | None = state.get("normalized_sql")
    sql = "" if query is None else planned if planned is not None else _normalised(
        query.sql, _dialect(env, dataset, query))
    status = 500 if raised else held.status
    code: str | None = None
    decision: Decision
    charge_id = None if charge is None else charge.id
    epsilon, delta = (0.0, 0.0) if charge is None else (charge.epsilon, charge.delta)
    if status < 400:
        if query is None:
            raise ValueError("an answer to a request the route did not parse")
        if state.get("public") and charge is None:  # exact, over public tables alone: free, nothing charged
            decision = "answered"
        elif held.headers.get("x-dp-repeat") == "true":
            decision = "repeat"
            charge_id, epsilon, delta = held.headers.get("x-dp-charge-id"), 0.0, 0.0
        elif charge is None or held.headers.get("x-dp-charge-id") != charge.id:
            raise ValueError("an answer without the charge that paid for it")
        else:
            decision = "answered"
    else:
        answer = {} if raised else _json(held.body)
        decision = "failed" if status >= 500 else "rejected"
        code = answer.get("code") if isinstance(answer.get("code"), str) else "internal"
    if charge is not None:
        if sql_sha256(sql) != charge.sql_sha256:
            raise ValueError(f"the SQL to record is not the SQL charge {charge.id} paid for")
        analyst, dataset = charge.analyst, charge.dataset
    return AuditRecord(
        analyst=analyst, dataset=dataset, sql=sql, decision=decision, error_code=_clean(code),
        charge_id=_clean(charge_id), epsilon=epsilon, delta=delta,
    )


def _json(body: bytes) -> dict[str, Any]:
    """An error body this app rendered (proxy/http/errors.py), as a dict."""
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _clean(text: str | None) -> str | None:
    """Text the log can store and hash: no NUL, valid Unicode."""
    if text is None:
        return None
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _dialect(env: Env | None, dataset: str | None, query: QueryRequest) -> str:
    found = None if env is None or dataset is None else env.policy.dataset(dataset)
    return query.dialect or (found.dialect if found is not None else "duckdb")


def _normalised(sql: str, dialect: str) -> str:
    """The SQL as the pipeline normalises it (read and printed in `dialect`: parse.normalised), or the text as
    parsed, when it does not parse."""
    try:
        return normalised(parse(sql, dialect), dialect)
    except (QueryError, RecursionError):
        return _clean(sql) or ""


def _who(env: Env | None, authorization: str | None, query: QueryRequest | None) -> tuple[str | None, str | None]:
    """The authenticated analyst and the request's dataset, as policy names (or None)."""
    if env is None:
        return None, None
    try:
        analyst = authenticate(authorization, env.policy)
    except AuthError:
        return None, None
    try:
        name, _ = dataset_for(analyst, None if query is None else query.dataset)
    except AuthError:
        return analyst.name, None
    return analyst.name, name
