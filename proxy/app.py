"""create_app(settings) -> FastAPI: the lifespan builds the Env (policy, engines, ledger, sampler).

Around the routes: `Observe` (request ids, metrics, access log, recent rejections) and the operator routes
of `proxy.http.ops` (/readyz, /metrics) and `proxy.http.dashboard` (/dashboard). See docs/operations.md.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from accountant.audit.log import open_audit
from accountant.ledger.stores import open_ledger
from mechanisms.sampling import SecureSampler
from proxy import logs
from proxy.engines.base import EngineMisconfigured, QueryEngine
from proxy.engines.open import open_engine
from proxy.http import apidocs, audit_routes, dashboard, errors, ops, routes
from proxy.http.metrics import Metrics
from proxy.http.middleware.access_log import Observe, Rejections
from proxy.http.middleware.audit_trail import AuditTrail
from proxy.http.middleware.body_gate import Intake
from proxy.http.middleware.path_rules import Hygiene
from proxy.pipeline import Env, StageTimer, untimed
from proxy.policy.load import Policy, load_policy
from proxy.policy.public_tables import public_table_problems
from proxy.run.query_pool import QueryRunner
from proxy.run.throttle import Throttle
from proxy.settings import Settings
from proxy.store.duckdb_store import StoreEngine
from proxy.store.open import open_bounding_store
from proxy.wire.server import WireServer

if TYPE_CHECKING:
    from proxy.store.spark_store import SparkStoreEngine

log = logging.getLogger(__name__)


def build_env(settings: Settings, *, timed: StageTimer = untimed) -> Env:
    """Load and check everything at start-up, refusing to serve on any mismatch."""
    policy = load_policy(settings.policy)
    engines: list[tuple[str, QueryEngine | StoreEngine | SparkStoreEngine]] = []
    try:
        for dataset in policy.datasets:
            engine = open_engine(dataset.name, dataset.engine, dataset.path, dataset.spark,
                                 threads=settings.threads, memory_limit=settings.memory_limit,
                                 timeout_s=settings.query_timeout_s)
            engines.append((dataset.name, engine))
            problems = engine.check_catalog(dataset.catalog)
            problems += public_table_problems(dataset.catalog.public, engine.columns)  # joined public tables
            if problems:
                raise EngineMisconfigured(f"dataset {dataset.name}: " + "; ".join(problems))
            if dataset.bounding == "store":  # queries read the bounding store, built here when missing
                engines.pop()
                engine.close()  # the builder attaches the source itself
                engines.append((dataset.name, open_bounding_store(dataset, store_dir(settings, policy), settings)))
        ledger = open_ledger(settings.ledger or policy.ledger, settings.ledger_waits)  # SQLite file or PostgreSQL URL
    except Exception:
        for _, engine in engines:
            engine.close()
        raise
    return Env(settings=settings, policy=policy, engines=tuple(engines), ledger=ledger, sampler=SecureSampler(),
               timed=timed)


def store_dir(settings: Settings, policy: Policy) -> Path:
    """Where bounding stores and the deployment key live: DPPROXY_STORE_DIR, else beside the ledger file."""
    return settings.store_dir or policy.ledger.parent


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        restore_logging = logs.configure(settings.log_format, settings.log_level)
        try:
            env = build_env(settings, timed=metrics.timed)
        except BaseException:
            restore_logging()
            raise
        app.state.env = env
        app.state.audit = open_audit(settings.ledger or str(env.policy.ledger), settings.ledger_waits)  # same store
        app.state.ledger_file = ops.LedgerFile.of(env)
        app.state.runner = QueryRunner(settings.query_workers)  # queries run apart from the other routes
        app.state.wire = None
        sigterm = _SigtermExit()
        sigterm.arm()
        try:
            if settings.pg_port is not None:  # the PostgreSQL protocol, on this loop, through the same pipeline
                app.state.wire = WireServer(app.state, settings)
                await app.state.wire.start()
            yield
        finally:
            if app.state.wire is not None:
                await app.state.wire.stop()
            app.state.runner.close()
            app.state.audit.close()
            _close(env)
            log.info("shut down: requests drained, ledger and engines closed")
            restore_logging()
            sigterm.disarm()

    app = FastAPI(
        title="dp-proxy",
        summary="Differentially private SQL over HTTP: GROUP BY answers with noise, charged to a budget.",
        version="0.1.0",
        lifespan=lifespan,
        docs_url=None, redoc_url=None,  # opt-in: proxy/http/apidocs.py
        redirect_slashes=False,  # `/v1/budget/` is a 404, not a redirect built from the Host header
    )
    metrics = Metrics(lambda: getattr(app.state, "env", None))
    rejections = Rejections(settings.rejections_kept)
    app.state.metrics, app.state.rejections = metrics, rejections
    app.state.throttle = Throttle()  # per-analyst limits of the query routes
    errors.install(app)
    app.include_router(routes.router)
    app.include_router(ops.router)
    app.include_router(dashboard.router)
    app.include_router(audit_routes.router)
    if settings.interactive_docs:
        apidocs.install(app)
    app.add_middleware(Intake, max_body_bytes=settings.max_body_bytes)  # 401 before a body is read; 413
    app.add_middleware(AuditTrail)  # every POST /v1/query: decision, code, charge — hash-chained
    app.add_middleware(Hygiene)  # encoded slashes are 404; HEAD answers as GET without the body
    app.add_middleware(Observe, metrics=metrics, rejections=rejections)  # outermost: sees the final response
    return app


def _close(env: Env) -> None:
    env.ledger.close()
    for _, engine in env.engines:
        engine.close()


class _SigtermExit:
    """Let a shutdown that SIGTERM started end with exit status 0.

    uvicorn (>= 0.29) drains in-flight requests on SIGTERM and runs this lifespan's shutdown; then it restores
    the handler that was there before it started (the default: terminate) and raises the signal again, so a
    server that drained cleanly would still end "killed by SIGTERM" (status 143). `arm` wraps uvicorn's
    handler to note that SIGTERM came; `disarm`, after the drain and the shutdown, puts uvicorn's handler back
    and, if SIGTERM came, blocks it in the main thread: the re-raised signal then stays pending, `uvicorn.run`
    returns, and `dpproxy serve` exits 0. SIGKILL still ends a stuck process. Outside a server that handles
    SIGTERM (a test client, another thread) this does nothing.
    """

    def __init__(self) -> None:
        self.received = False
        self.previous: Callable[[int, FrameType | None], Any] | None = None

    def arm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGTERM)
        if not callable(previous):
            return

        def noted(signum: int, frame: FrameType | None) -> None:
            self.received = True
            previous(signum, frame)

        self.previous = previous
        signal.signal(signal.SIGTERM, noted)

    def disarm(self) -> None:
        if self.previous is None:
            return
        signal.signal(signal.SIGTERM, self.previous)
        if self.received:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
