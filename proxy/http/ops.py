"""Operator routes: GET /readyz and GET /metrics (the dashboard is proxy/http/dashboard.py).

They are documented in docs/operations.md and kept out of the OpenAPI schema, which describes the analysts'
API (their response declarations stay, ready for the day they join it).

/healthz (liveness) stays in routes.py. /readyz is public, as probes send no credentials, and says only
which component failed (the reasons go to the log). /metrics exposes every analyst's budget, so it needs a
credential: an admin's API key, or `DPPROXY_METRICS_TOKEN`, a bearer token that reads metrics and nothing
else (give that to Prometheus, not an admin key).
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
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from pydantic import BaseModel

from accountant.ledger.sqlite import SqliteLedger
from accountant.ledger.stores import store_of
from proxy.http import errors
from proxy.pipeline import Env
from proxy.policy import access
from proxy.policy.load import AnalystPolicy
from proxy.schemas import ErrorResponse

log = logging.getLogger(__name__)
router = APIRouter(tags=["ops"])

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
