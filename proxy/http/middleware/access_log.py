"""Observe every HTTP request: request id, outcome code, metrics, one access log line, recent rejections.

`Observe` is a pure ASGI middleware, so nothing is buffered on the way out: it reads the status from
`http.response.start`, and for error responses only it reads the `code` of the one error body
(proxy/http/errors.py) as it streams past. An exception that escapes every handler is rendered here through
`errors.error_response`, so even a 500 carries the request id and keeps the connection open.

The analyst is the holder of the bearer key (authenticated again here, by hash, as routes do), and the
dataset is the request's `dataset` field as the route parsed it (`request.state.query`; no body is read
here) or the analyst's only dataset: only names from the policy are recorded, never SQL, literals, query
strings or results.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy import logs
from proxy.http import errors
from proxy.http.metrics import Metrics
from proxy.pipeline import Env
from proxy.policy.access import AuthError, authenticate

_QUERY_PATHS = ("/v1/query", "/v1/query/preview")  # POST bodies that name a dataset
_CAPTURE_LIMIT = 1 << 16  # bytes of an error body kept to read its code
_CODE = re.compile(r"[a-z_]{1,64}")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})  # others: "other"
_OUTCOMES = frozenset({"ok", "client_closed"})
_HTTP_CODE = re.compile(r"http_[1-5]\d\d")
_NOT_A_QUERY = object()  # requests other than queries have no dataset in the access line


@dataclass(frozen=True, slots=True)
class Rejection:
    """One refused or failed API request, as the dashboard lists it."""

    at: datetime
    analyst: str | None
    dataset: str | None
    route: str
    status: int
    code: str


class Rejections:
    """The last `keep` rejections of this process (a ring buffer; per process, lost on restart)."""

    def __init__(self, keep: int) -> None:
        self._items: deque[Rejection] = deque(maxlen=keep)
        self._lock = threading.Lock()

    def add(self, rejection: Rejection) -> None:
        with self._lock:
            self._items.append(rejection)

    def recent(self, limit: int) -> tuple[Rejection, ...]:
        """Newest first."""
        with self._lock:
            items = list(self._items)
        return tuple(reversed(items[-limit:])) if limit > 0 else ()


@dataclass(slots=True)
class _Outcome:
    status: int | None = None
    capture: bool = False
    body: bytes = b""
    charge_id: str | None = None


class Observe:
    def __init__(self, app: ASGIApp, metrics: Metrics, rejections: Rejections) -> None:
        self.app = app
        self.metrics = metrics
        self.rejections = rejections

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        headers = Headers(scope=scope)
        rid = logs.request_id(headers.get("x-request-id"))
        scope.setdefault("state", {})["request_id"] = rid
        outcome = _Outcome()
        requested: object = _NOT_A_QUERY

        async def observed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out["x-request-id"] = rid
                if scope["path"].startswith("/v1/"):  # budgets, ledgers and answers: never kept by a cache
                    out["cache-control"] = "no-store"
                outcome.status = int(message["status"])
                outcome.capture = outcome.status >= 400 and out.get("content-type", "").startswith("application/json")
                outcome.charge_id = out.get("x-dp-charge-id")
            elif message["type"] == "http.response.body" and outcome.capture and len(outcome.body) < _CAPTURE_LIMIT:
                outcome.body += message.get("body", b"")
            await send(message)

        self.metrics.in_flight.inc()  # from the headers on: a request still receiving its body is in flight
        with logs.request_context(rid) as context:
            try:
                if scope["method"] == "POST" and scope["path"] in _QUERY_PATHS:
                    requested = None  # the route leaves what it parsed in request.state.query
                await self.app(scope, receive, observed_send)
            except Exception as exc:
                if outcome.status is not None:  # the response has begun: nothing else can be sent
                    raise
                await errors.error_response(Request(scope), exc)(scope, receive, observed_send)
            finally:
                self.metrics.in_flight.dec()
                self._done(scope, headers, requested, outcome, context, time.perf_counter() - start)

    def _done(
        self, scope: Scope, headers: Headers, requested: object, outcome: _Outcome,
        context: logs.RequestContext, seconds: float,
    ) -> None:
        route = getattr(scope.get("route"), "path", None) or "unmatched"  # a template, never the raw path
        status = outcome.status or 499  # no response was sent: the client went away first
        code = "ok" if status < 400 else "client_closed" if status == 499 else _error_code(outcome.body, status)
        method, code = label(scope["method"], code)
        env: Env | None = getattr(scope["app"].state, "env", None)
        query = scope.get("state", {}).get("query")  # the QueryRequest the route parsed, if it got that far
        if requested is not _NOT_A_QUERY and query is not None:
            requested = query.dataset
        analyst, dataset = _who(env, headers.get("authorization"), requested)
        self.metrics.request_done(route, method, code, seconds)
        if status >= 400 and route.startswith("/v1/"):
            self.rejections.add(Rejection(datetime.now(UTC), analyst, dataset, route, status, code))
        state: dict[str, Any] = scope.get("state", {})
        logs.access(
            request_id=context.request_id, method=method, route=route, status=status, code=code,
            analyst=analyst, dataset=dataset, duration_ms=round(seconds * 1000, 3),
            stages_ms={k: round(v * 1000, 3) for k, v in context.stages.items()},
            charge_id=outcome.charge_id or state.get("charge_id"),
        )


def label(method: str, code: str) -> tuple[str, str]:
    """The method and outcome code as metric labels: a client's invented method or code becomes "other",
    so the number of series stays bounded (routes are already templates, or "unmatched").

    Example:
        >>> label("GET", "ok"), label("M000007XYZ", "not_found"), label("POST", "made_up"), label("PUT", "http_418")
        (('GET', 'ok'), ('other', 'not_found'), ('POST', 'other'), ('PUT', 'http_418'))
    """
    known = code in errors.STATUS or code in _OUTCOMES or _HTTP_CODE.fullmatch(code) is not None
    return (method if method in _METHODS else "other"), (code if known else "other")


def _error_code(body: bytes, status: int) -> str:
    """The `code` of the one error body, or `http_<status>` for anything else."""
    try:
        code = json.loads(body).get("code")
    except (ValueError, AttributeError):
        code = None
    return code if isinstance(code, str) and _CODE.fullmatch(code) else f"http_{status}"


def _who(env: Env | None, authorization: str | None, requested: object) -> tuple[str | None, str | None]:
    """The authenticated analyst and the dataset of the request, as policy names (or None)."""
    if env is None:
        return None, None
    try:
        analyst = authenticate(authorization, env.policy)
    except AuthError:
        return None, None
    if requested is _NOT_A_QUERY:
        return analyst.name, None
    if isinstance(requested, str):
        return analyst.name, requested if env.policy.dataset(requested) is not None else None
    only = analyst.budgets[0][0] if len(analyst.budgets) == 1 else None  # as auth.dataset_for decides
    return analyst.name, only
