"""Structured logs: one JSON object per line, with the request id of the request that logged it.

    {"ts": "2025-01-31T12:00:00.123456Z", "level": "info", "logger": "dpproxy.access", "msg": "request",
     "request_id": "4b1d…", "method": "POST", "route": "/v1/query", "status": 200, "code": "ok",
     "analyst": "alice", "dataset": "demo", "duration_ms": 12.5, "stages_ms": {"plan": 3.1, …}}

The access line is built from a fixed set of fields (`ACCESS_FIELDS`): route templates, never paths or
query strings, and never SQL text, literals or result values. Other loggers keep their own messages (the
engine's text, which may quote data, goes only here, by design: docs/architecture.md, the security boundary).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["json", "text"]
ACCESS = logging.getLogger("dpproxy.access")
ACCESS_FIELDS = ("request_id", "method", "route", "status", "code", "analyst", "dataset", "duration_ms",
                 "stages_ms", "charge_id")
_REQUEST_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_NOT_EXTRA = _RESERVED | {"color_message"}  # uvicorn's ANSI-coloured copy of msg
# json.dumps(…, default=str, ensure_ascii=False) builds this encoder anew for every line; one serves them all
_ENCODE = json.JSONEncoder(default=str, ensure_ascii=False).encode


@dataclass(slots=True)
class RequestContext:
    """What the log lines of one request share; `stages` collects the pipeline's stage timings (seconds)."""

    request_id: str
    stages: dict[str, float] = field(default_factory=dict)


CURRENT: ContextVar[RequestContext | None] = ContextVar("dpproxy_request", default=None)


def request_id(offered: str | None) -> str:
    """The client's `X-Request-Id` when it is a plain token (≤ 128 characters), else a fresh one.

    Example:
        >>> request_id("job-42.step:7")
        'job-42.step:7'
        >>> len(request_id("no spaces, please")), len(request_id(None))
        (32, 32)
    """
    if offered is not None and _REQUEST_ID.fullmatch(offered):
        return offered
    return _uuid4_hex()


def _uuid4_hex() -> str:
    """`uuid.uuid4().hex` without building the UUID object (a third of the time): 16 random bytes from the
    OS with the version (4) and variant (RFC 4122) bits set, as uuid4 sets them.

    Example:
        >>> import uuid
        >>> uuid.UUID(hex=_uuid4_hex()).version
        4
    """
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    return raw.hex()


@contextmanager
def request_context(rid: str) -> Iterator[RequestContext]:
    """Make `rid` the request id of every line logged inside (threadpool workers included)."""
    context = RequestContext(rid)
    token = CURRENT.set(context)
    try:
        yield context
    finally:
        CURRENT.reset(token)


class JsonFormatter(logging.Formatter):
    """A record -> one JSON line: ts, level, logger, msg, request_id, the record's extra fields, exc."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        context = CURRENT.get()
        if context is not None:
            line["request_id"] = context.request_id
        line.update((k, v) for k, v in vars(record).items() if k not in _NOT_EXTRA and not k.startswith("_"))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return _ENCODE(line)


def timestamp(created: float) -> str:
    """A record's time as `%Y-%m-%dT%H:%M:%S.%fZ` in UTC (isoformat: the same text, without strftime's cost).

    Example:
        >>> timestamp(1738324800.123456), timestamp(0.0)
        ('2025-01-31T12:00:00.123456Z', '1970-01-01T00:00:00.000000Z')
    """
    return datetime.fromtimestamp(created, UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


class TextFormatter(logging.Formatter):
    """For a terminal: `ts level logger: msg key=value …`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extra = {k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")
                 and k != "color_message"}
        context = CURRENT.get()
        if context is not None:
            extra = {"request_id": context.request_id, **extra}
        return text + "".join(f" {k}={json.dumps(v, default=str)}" for k, v in extra.items())


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time of the record (test runners swap it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def configure(fmt: LogFormat = "json", level: str = "info") -> Callable[[], None]:
    """Send every log record (uvicorn's included) to stderr as `fmt`, and return the undo.

    uvicorn's own access log is turned off: the access line of `proxy.http.middleware.access_log` replaces it (it has
    the request id, the outcome code and the analyst, and never a query string). Idempotent.
    """
    root = logging.getLogger()
    if any(getattr(h, "dpproxy", False) for h in root.handlers):
        return lambda: None
    handler = _Stderr()
    handler.dpproxy = True  # type: ignore[attr-defined]
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    uvicorn = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "uvicorn.access")]
    saved = (root.level, [(lg, lg.handlers[:], lg.propagate, lg.level) for lg in uvicorn])
    root.addHandler(handler)
    root.setLevel(level.upper())
    for logger in uvicorn[:2]:
        logger.handlers = []
        logger.propagate = True
    uvicorn[2].handlers = []
    uvicorn[2].propagate = False
    uvicorn[2].setLevel(logging.WARNING)

    def undo() -> None:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        for logger, handlers, propagate, lvl in saved[1]:
            logger.handlers, logger.propagate = handlers, propagate
            logger.setLevel(lvl)

    return undo


def dict_config(fmt: LogFormat = "json", level: str = "info") -> dict[str, object]:
    """The same set-up as `configure`, as a `logging.config.dictConfig` dict for `uvicorn.run(log_config=…)`,
    so that uvicorn's first lines (before the application starts) are formatted too."""
    formatter = {"()": f"{__name__}.{'JsonFormatter' if fmt == 'json' else 'TextFormatter'}"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"dpproxy": formatter},
        "handlers": {"dpproxy": {"()": f"{__name__}._marked_stderr", "formatter": "dpproxy"}},
        "root": {"handlers": ["dpproxy"], "level": level.upper()},
        "loggers": {
            "uvicorn": {"handlers": [], "propagate": True},
            "uvicorn.error": {"handlers": [], "propagate": True},
            "uvicorn.access": {"handlers": [], "propagate": False, "level": "WARNING"},
        },
    }


def _marked_stderr() -> logging.Handler:
    handler = _Stderr()
    handler.dpproxy = True  # type: ignore[attr-defined]
    return handler


def access(**fields: object) -> None:
    """Log the one access line of a request. Only `ACCESS_FIELDS` are accepted."""
    unknown = set(fields) - set(ACCESS_FIELDS)
    if unknown:
        raise ValueError(f"not an access log field: {sorted(unknown)}")
    status = fields.get("status")
    level = logging.ERROR if isinstance(status, int) and status >= 500 else logging.INFO
    ACCESS.log(level, "request", extra=fields)
