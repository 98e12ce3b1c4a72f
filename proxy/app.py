"""create_app(settings) -> FastAPI: the lifespan builds the Env (policy, engines, ledger, sampler)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from accountant.ledger import SqliteLedger
from mechanisms.sampling import SecureSampler
from proxy import errors, routes
from proxy.engine import Engine, EngineMisconfigured
from proxy.pipeline import Env
from proxy.policy import load_policy
from proxy.settings import Settings


def build_env(settings: Settings) -> Env:
    """Load and check everything at start-up, refusing to serve on any mismatch."""
    policy = load_policy(settings.policy)
    engines: list[tuple[str, Engine]] = []
    try:
        for dataset in policy.datasets:
            engine = Engine(dataset.path, threads=settings.threads, memory_limit=settings.memory_limit,
                            timeout_s=settings.query_timeout_s)
            engines.append((dataset.name, engine))
            problems = engine.check_catalog(dataset.catalog)
            if problems:
                raise EngineMisconfigured(f"dataset {dataset.name}: " + "; ".join(problems))
    except Exception:
        for _, engine in engines:
            engine.close()
        raise
    ledger = SqliteLedger(settings.ledger or policy.ledger)
    return Env(settings=settings, policy=policy, engines=tuple(engines), ledger=ledger, sampler=SecureSampler())


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        env = build_env(settings)
        app.state.env = env
        try:
            yield
        finally:
            env.ledger.close()
            for _, engine in env.engines:
                engine.close()

    app = FastAPI(
        title="dp-proxy",
        summary="Differentially private SQL over HTTP: GROUP BY answers with noise, charged to a budget.",
        version="0.1.0",
        lifespan=lifespan,
    )
    errors.install(app)
    app.include_router(routes.router)
    return app
