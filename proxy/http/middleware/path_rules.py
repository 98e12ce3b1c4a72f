"""HTTP hygiene around the routes (a pure ASGI middleware): two rules the router does not keep by itself.

- A path with an encoded slash or backslash (`/v1%2fledger`) is a 404: the server decodes `%2f` before
  routing, so it would otherwise reach `/v1/ledger` by a spelling no client needs and a proxy may not see.
- `HEAD` is answered for every `GET` route, as `GET` without the body (FastAPI's routes list GET only).
  The route runs in full: HEAD is for probes and link checkers, and costs what the GET costs.

`Cache-Control: no-store` on /v1/* and the request id are added by `proxy.http.middleware.access_log.Observe`,
outside this, so they are on every response, including the ones made here.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.http import errors

_ENCODED_SEPARATORS = (b"%2f", b"%5c")


class Hygiene:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = bytes(scope.get("raw_path") or b"").lower()
        if any(separator in raw for separator in _ENCODED_SEPARATORS):
            body = errors.error_body(404, "not_found", "Not Found", {}, False)
            await JSONResponse(body, status_code=404)(scope, receive, send)
            return
        if scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def bodiless(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        inner = {**scope, "method": "GET"}  # the same state dict: charges and the request id are shared
        try:
            await self.app(inner, receive, bodiless)
        finally:
            if "route" in inner:
                scope["route"] = inner["route"]  # for the metrics and the access line
