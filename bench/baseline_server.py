"""The baseline endpoint of the speed targets (issue #32): plain DuckDB behind the product's HTTP stack.

    python bench/baseline_server.py --policy DIR/policy.toml --port 8100 [--dataset demo]

One route, `POST /v1/query` with the product's request body (`{"sql": …}`; ε and the other fields are read and
ignored), authenticated as the product authenticates it, that runs the SQL as written (no privacy) on the
dataset's own DuckDB file and answers `{"dataset", "columns", "rows"}` as JSON. What it shares with
`python -m proxy serve`, so that a ratio to it measures the differential privacy and not HTTP:

* uvicorn with the product's options (`proxy.__main__`): the same HTTP parser and event loop
  (`protocol_stack`: httptools with h11 for unknown methods, uvloop), no access log, no server header, the
  product's log configuration;
* FastAPI with the product's decimal JSON body route and request model (`proxy.schemas.QueryRequest`), and the
  two middlewares that shape every request before the route: `Intake` (the key checked by hash and the body
  size limit before a byte is read) and `Hygiene` (path rules). The product's audit trail, access log and
  metrics (`AuditTrail`, `Observe`) are left out: they are part of the product's fixed cost per request;
* the engine: `proxy.engines.duckdb_engine.Engine` on the source file (read-only, locked down), with
  `DPPROXY_THREADS`, `DPPROXY_MEMORY_LIMIT` and `DPPROXY_QUERY_TIMEOUT_S`, on `DPPROXY_QUERY_WORKERS` threads
  apart from the event loop (the product's query pool), which also render the answer (as the product's do)
  with the product's cell conversion (`json_value`: dates as ISO text) through a pydantic model.

It reads the same DPPROXY_* settings as the product. bench/query_latency.py and bench/throughput.py start it
beside the product and report the product's latency and answers per second as ratios to it.

Example (the body it renders):
    >>> from proxy.engines.base import Rows
    >>> import datetime
    >>> render("demo", Rows(("day", "n"), ((datetime.date(2026, 3, 1), 4),)))
    b'{"dataset":"demo","columns":["day","n"],"rows":[["2026-03-01",4]]}'
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import uvicorn  # noqa: E402
from fastapi import APIRouter, FastAPI, Request, Response  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from proxy.__main__ import protocol_stack  # noqa: E402
from proxy.engines.base import Rows  # noqa: E402
from proxy.engines.duckdb_engine import Engine  # noqa: E402
from proxy.http.decimal_json import DecimalJSONRoute  # noqa: E402
from proxy.http.middleware.body_gate import Intake  # noqa: E402
from proxy.http.middleware.path_rules import Hygiene  # noqa: E402
from proxy.http.views.budget import json_value  # noqa: E402
from proxy.logs import dict_config  # noqa: E402
from proxy.policy.access import authenticate  # noqa: E402
from proxy.policy.load import load_policy  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402
from proxy.settings import Settings  # noqa: E402


class PlainAnswer(BaseModel):
    """The plain answer: the product's answer without its privacy fields (charge, budget, noise, …)."""

    dataset: str
    columns: list[str]
    rows: list[list[Any]]


def render(dataset: str, rows: Rows) -> bytes:
    """The JSON body of one answer, as the product renders its rows."""
    return PlainAnswer(dataset=dataset, columns=list(rows.columns),
                       rows=[[json_value(v) for v in row] for row in rows.rows]).model_dump_json().encode()


def create_app(settings: Settings, dataset_name: str | None = None) -> FastAPI:
    """The baseline app over the policy's dataset `dataset_name` (default: its first)."""
    policy = load_policy(settings.policy)
    dataset = next(d for d in policy.datasets if dataset_name in (None, d.name))
    engine = Engine(dataset.path, threads=settings.threads, memory_limit=settings.memory_limit,
                    timeout_s=settings.query_timeout_s)
    pool = ThreadPoolExecutor(max_workers=settings.query_workers, thread_name_prefix="baseline-query")
    router = APIRouter(route_class=DecimalJSONRoute)

    @router.post("/v1/query")
    async def query(body: QueryRequest, request: Request) -> Response:
        authenticate(request.headers.get("authorization"), policy)  # as the product's route dependency does
        answer = await asyncio.get_running_loop().run_in_executor(
            pool, lambda: render(dataset.name, engine.run(body.sql)))
        return Response(answer, media_type="application/json")

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app = FastAPI(docs_url=None, redoc_url=None, redirect_slashes=False)
    app.include_router(router)
    app.state.env = SimpleNamespace(policy=policy)  # what Intake authenticates against
    app.add_middleware(Intake, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(Hygiene)
    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--dataset", default=None)
    args = parser.parse_args(argv)
    settings = Settings(policy=args.policy)
    http, loop = protocol_stack(None, None)
    if http == "httptools":
        from proxy.http.protocol import HttpToolsWithH11Methods

        http = HttpToolsWithH11Methods  # type: ignore[assignment]
    uvicorn.run(create_app(settings, args.dataset), host=args.host, port=args.port, access_log=False,
                server_header=False, log_config=dict_config(settings.log_format, settings.log_level),
                http=http, loop=loop)  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
