"""The one status table and the one error handler: every failure becomes the same JSON body.

    {"ok": false, "status": 400, "code": "unsupported", "error": "...", "detail": {...}, "charged": false}

Clients branch on `code`. `charged` is true only when the request was admitted (its charge is committed)
before it failed; such errors carry fixed messages, never engine text or data values
(docs/architecture.md, the security boundary).
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from accountant.errors import ProxyError

log = logging.getLogger(__name__)

# Every code and its status: a ProxyError carries its own (`status`, equal to this table's: tests/http/
# test_error_shape.py checks both), the rest are the HTTP layer's own.
STATUS: dict[str, int] = {
    "unauthenticated": 401,
    "forbidden": 403,
    "invalid_request": 400,
    "sql_syntax": 400,
    "unsupported": 400,
    "policy": 400,
    "invalid_parameter": 400,
    "empty_scope": 400,
    "literal_outside_domain": 400,
    "no_reachable_group": 400,
    "budget_exceeded": 403,
    "payload_too_large": 413,
    "not_found": 404,
    "method_not_allowed": 405,
    "rate_limited": 429,
    "execution_failed": 500,
    "timeout": 504,
    "unavailable": 503,
    "ledger_busy": 503,
    "ledger_uncertain": 503,
    "idempotency_key_reused": 422,
    "idempotency_key_spent": 409,
    "invalid_budget_operation": 422,
    "internal": 500,
}


def error_body(status: int, code: str, message: str, detail: dict[str, object], charged: bool) -> dict[str, object]:
    return {"ok": False, "status": status, "code": code, "error": message, "detail": detail, "charged": charged}


def error_response(request: Request, exc: Exception) -> JSONResponse:
    """Map any exception to the canonical body. Only here may a handler catch everything."""
    charged = bool(getattr(request.state, "charged", False))
    headers: dict[str, str] = {}
    status: int | None = None
    match exc:
        case ProxyError():
            code, status, message, detail = exc.code, exc.status, str(exc), dict(exc.detail)
            if exc.retry_after_s is not None:  # throttled, or a ledger wait past its bound: retry once it clears
                headers["Retry-After"] = str(exc.retry_after_s)
        case RequestValidationError():
            code, message = "invalid_request", "the request body is invalid"
            detail = {"errors": [_validation_item(e) for e in exc.errors()]}
        case StarletteHTTPException() if exc.status_code in (404, 405):
            code = "not_found" if exc.status_code == 404 else "method_not_allowed"
            message, detail = str(exc.detail), {}
            headers.update({k: v for k, v in (exc.headers or {}).items() if k.lower() == "allow"})  # 405: RFC 9110
        case StarletteHTTPException() if 400 <= exc.status_code < 500:
            # e.g. FastAPI's "There was an error parsing the body" for a body that is not UTF-8 JSON
            code, message, detail = "invalid_request", str(exc.detail), {}
        case _:
            log.exception("internal error", exc_info=exc)
            code, message, detail = "internal", "internal error", {}
    status = status if status is not None else STATUS.get(code, 500)
    if charged and status >= 500:
        detail["charge_id"] = getattr(request.state, "charge_id", None)
    return JSONResponse(error_body(status, code, message, detail, charged), status_code=status, headers=headers)


def _validation_item(error: object) -> dict[str, object]:
    assert isinstance(error, dict)
    # the offending input is echoed back only as its location and message (it is the caller's own input)
    return {"loc": [str(p) for p in error.get("loc", ())], "msg": str(error.get("msg", ""))}


def install(app: FastAPI) -> None:
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        return error_response(request, exc)

    # Domain errors get their own registration: a handler for Exception alone runs in Starlette's
    # ServerErrorMiddleware, which logs a traceback and closes the connection even for a 400.
    for exc_type in (ProxyError, RequestValidationError, StarletteHTTPException, Exception):
        app.add_exception_handler(exc_type, handle)
