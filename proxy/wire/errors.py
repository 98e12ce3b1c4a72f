"""How an error reaches a PostgreSQL client: an ErrorResponse with a SQLSTATE, the product's stable error code
first in its message, the detail (the code, whether the request was charged, the error's detail) and a hint.

Example:
    >>> from proxy.query.errors import UnsupportedQuery
    >>> reply = error_message(UnsupportedQuery("UNION is not supported"))
    >>> b"C0A000" in reply, b"unsupported: UNION is not supported" in reply
    (True, True)
"""

from __future__ import annotations

import json
import logging

from accountant.errors import ProxyError
from proxy.wire import messages
from proxy.wire.catalog import describe_error, is_duckdb_error
from proxy.wire.session import WireError

log = logging.getLogger(__name__)

# the product's error codes (proxy/http/errors.py) as SQLSTATEs; a code not listed maps by its status
SQLSTATE = {
    "unauthenticated": "28P01", "forbidden": "42501", "invalid_request": "22023", "sql_syntax": "42601",
    "unsupported": "0A000", "policy": "42501", "invalid_parameter": "22023", "empty_scope": "22023",
    "budget_exceeded": "53400", "payload_too_large": "54000", "rate_limited": "53300", "execution_failed": "XX000",
    "timeout": "57014", "unavailable": "57P03", "ledger_busy": "55P03", "ledger_uncertain": "40003",
    "idempotency_key_reused": "22023", "idempotency_key_spent": "22023", "internal": "XX000",
    "literal_outside_domain": "22023", "no_reachable_group": "22023",
}
HINTS = {
    "budget_exceeded": "SHOW dp.budget shows what is left; ask an operator for more budget",
    "policy": "ask for aggregates (COUNT, SUM, AVG, ...) grouped by groupable columns: rows are never released",
    "unsupported": "see docs/wire.md for what this server answers",
    "rate_limited": "wait a moment and retry",
    "ledger_busy": "retry in a moment: nothing was charged",
    "ledger_uncertain": "the charge may or may not be committed: repeat the query, a repeat is never charged twice",
}


def error_message(err: Exception) -> bytes:
    """The ErrorResponse for `err`: SQLSTATE, `code: message`, the detail (code, charged, the error's detail)
    and a hint."""
    charged = bool(getattr(err, "wire_charged", False))
    if isinstance(err, WireError):
        sqlstate, code, message, detail, hint = err.sqlstate, err.code, err.message, {}, err.hint
    elif is_duckdb_error(err):
        sqlstate, code, message, detail = "0A000", "unsupported", (
            f"the emulated catalog cannot answer this query: {describe_error(err)}"), {}
        hint = HINTS["unsupported"]
    elif isinstance(err, ProxyError):  # the product's errors, with their stable codes (proxy/http/errors.py)
        code = err.code
        sqlstate, message = SQLSTATE.get(code, "22023" if err.status < 500 else "XX000"), str(err)
        detail = dict(err.detail)
        hint = str(detail["hint"]) if detail.get("hint") else HINTS.get(code)  # the error's own next step first
        if code == "internal":
            message = "internal error"
    elif isinstance(err, ValueError):
        sqlstate, code, message, detail, hint = "22023", "invalid_parameter", str(err), {}, None
    else:
        log.exception("internal error on the PostgreSQL protocol", exc_info=err)
        sqlstate, code, message, detail, hint = "XX000", "internal", "internal error", {}, None
    text = f"code={code}; charged={'true' if charged else 'false'}"
    if detail:
        text += "; " + json.dumps(detail, default=str, sort_keys=True)
    return messages.error_response(sqlstate, f"{code}: {message}", text, hint)
