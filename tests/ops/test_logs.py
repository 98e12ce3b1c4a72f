"""proxy/logs.py: the JSON line and the request id keep their exact form (they are built without json.dumps'
per-call encoder, strftime and uuid.UUID, for speed)."""

from __future__ import annotations

import json
import logging
import re
import uuid
from datetime import UTC, datetime

from proxy import logs


def reference_line(record: logging.LogRecord, request_id: str) -> str:
    """The line as JsonFormatter wrote it before: strftime, json.dumps(default=str, ensure_ascii=False)."""
    line: dict[str, object] = {
        "ts": datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "level": record.levelname.lower(), "logger": record.name, "msg": record.getMessage(),
        "request_id": request_id,
    }
    line.update((k, v) for k, v in vars(record).items() if k not in logs._RESERVED and not k.startswith("_")
                and k != "color_message")
    return json.dumps(line, default=str, ensure_ascii=False)


def test_the_access_line_is_the_same_text() -> None:
    fields = {"request_id": "r-1", "method": "POST", "route": "/v1/query", "status": 200, "code": "ok",
              "analyst": "anä", "dataset": "demo", "duration_ms": 12.345, "stages_ms": {"plan": 1.2, "admit": 0.5},
              "charge_id": None, "color_message": "\x1b[1mx", "_private": 1, "when": datetime(2026, 1, 1)}
    for created in (0.0, 1738324800.123456, 1738324800.9999996, 1738324800.0000004, 1e9 + 0.5e-6):
        record = logging.LogRecord("dpproxy.access", logging.INFO, __file__, 1, "request %s", ("x",), None)
        record.created = created
        record.__dict__.update(fields)
        token = logs.CURRENT.set(logs.RequestContext("rid-7"))
        try:
            assert logs.JsonFormatter().format(record) == reference_line(record, "rid-7")
        finally:
            logs.CURRENT.reset(token)


def test_a_fresh_request_id_is_a_uuid4_in_hex() -> None:
    for _ in range(200):
        rid = logs.request_id(None)
        assert re.fullmatch(r"[0-9a-f]{32}", rid)
        parsed = uuid.UUID(hex=rid)
        assert (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
    assert len({logs.request_id(None) for _ in range(1000)}) == 1000
