"""The gate in front of the routes: a body is read only when it is small and, on a query route, its sender known.

`Intake` is a pure ASGI middleware, inside `Observe` and `AuditTrail` (which record what it refuses):

1. A request to a route that reads a body (`BODY_ROUTES`) is authenticated from its headers alone (the key by
   hash, as the routes do). A missing or unknown key gets 401 before a byte of the body is read, so a client
   without a key costs no memory, parsing or storage, whatever it sends.
2. Any request whose `Content-Length` is above `DPPROXY_MAX_BODY_BYTES` gets 413 `payload_too_large`, unread.
3. On a body route the body is then read here, counting the bytes as they stream in (a chunked body has no
   `Content-Length`), and refused with 413 as soon as it passes the limit; a body within the limit is handed
   on to the route unchanged. Nothing here parses it: the route's own parse is the one the audit records.

Both refusals are the one error body of proxy/http/errors.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.http import errors
from proxy.pipeline import Env
from proxy.policy.access import AuthError, authenticate

BODY_ROUTES = frozenset({("POST", "/v1/query"), ("POST", "/v1/query/preview")})


class Intake:
    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.limit = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        reads_body = (scope["method"], scope["path"]) in BODY_ROUTES
        if reads_body:
            env: Env | None = getattr(scope["app"].state, "env", None)
            try:
                if env is not None:
                    authenticate(headers.get("authorization"), env.policy)
            except AuthError as err:
                await _refuse(401, err.code, err.message, dict(err.detail))(_routed(scope), receive, send)
                return
        if _declared(headers) > self.limit:
            await self._too_large()(_routed(scope), receive, send)
            return
        if not reads_body:
            await self.app(scope, receive, send)
            return
        body, last = await _read(receive, self.limit)
        if body is None:
            await self._too_large()(_routed(scope), receive, send)
            return
        await self.app(scope, _replay(body, last, receive), send)

    def _too_large(self) -> JSONResponse:
        message = f"the request body is larger than the limit of {self.limit} bytes"
        return _refuse(413, "payload_too_large", message, {"limit": self.limit})


def _refuse(status: int, code: str, message: str, detail: dict[str, object]) -> JSONResponse:
    assert errors.STATUS[code] == status
    return JSONResponse(errors.error_body(status, code, message, detail, False), status_code=status)


@dataclass(frozen=True, slots=True)
class Template:
    """The route a refused request was for, as `scope["route"]` (what the metrics and the access line read)."""

    path: str


def _routed(scope: Scope) -> Scope:
    """`scope` naming its route template when it is a body route (their paths are their templates), so the
    metrics and the access line of a refusal here name the route, as for refusals by the route itself."""
    if (scope["method"], scope["path"]) in BODY_ROUTES:
        scope.setdefault("route", Template(scope["path"]))
    return scope


def _declared(headers: Headers) -> int:
    """The body length the client declared (0 when none; the server has already refused a malformed one)."""
    text = headers.get("content-length", "")
    return int(text) if text.isdigit() else 0


async def _read(receive: Receive, limit: int) -> tuple[bytes | None, Message | None]:
    """The whole body if it is at most `limit` bytes, else None as soon as it passes it; and a message that
    ended the reading early (a disconnect), to hand on."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body), message
        body += message.get("body", b"")
        if len(body) > limit:
            return None, None
        if not message.get("more_body", False):
            return bytes(body), None


def _replay(body: bytes, last: Message | None, receive: Receive) -> Receive:
    """A receive that gives the body read here as one message, then whatever the client sends next."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]
    if last is not None:
        pending.append(last)

    async def replayed() -> Message:
        return pending.pop(0) if pending else await receive()

    return replayed
