"""HTTP routes: thin. Each authenticates, calls the pipeline or the ledger, and shapes the response."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from pydantic import AfterValidator
from starlette.concurrency import run_in_threadpool

from accountant.events import to_json
from accountant.filter import Entry
from accountant.ledger.charges import Charge
from proxy.http import formats
from proxy.http.decimal_json import DecimalJSONRoute
from proxy.http.middleware.audit_trail import answered
from proxy.http.views import budget_curves, repeat_error_bars
from proxy.http.views.answer import charge_out, partitions_out, summarised, unreliable, with_row_bars
from proxy.http.views.answer import noise as noise_out
from proxy.http.views.budget import budget_now, budget_out, json_value, plus, refusal, scope_out
from proxy.http.views.budget import stored as history
from proxy.pipeline import Answer, Env, Prepared, PublicAnswer, Reply, answer_public, prepare, reply, settle_keyed
from proxy.policy import access
from proxy.policy.load import AnalystPolicy
from proxy.query import auto_release
from proxy.run.deadline import Deadline
from proxy.schemas import (
    BoundsOut,
    BudgetsResponse,
    ColumnOut,
    DatasetOut,
    DatasetsResponse,
    ErrorResponse,
    LedgerEntry,
    LedgerResponse,
    PartitionsOut,
    PreviewResponse,
    QueryRequest,
    QueryResponse,
    TableOut,
)

# a date-time only: Unix timestamps and bare dates are not what the contract documents
_DATE_TIME = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}:\d{2})?$"

def _valid_moment(text: str | None) -> str | None:
    _moment(text)  # raises ValueError for impossible dates such as 0000-00-00: a 400, not a 500
    return text


def _moment(text: str | None) -> dt.datetime | None:
    """An ISO 8601 date-time (already matched by _DATE_TIME), as an aware UTC datetime."""
    if text is None:
        return None
    moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


router = APIRouter(
    responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 409, 413, 422, 500, 503, 504)},
    route_class=DecimalJSONRoute,  # JSON numbers as exact decimals: ε = 0.1 is charged as at most 1/10
)


async def get_env(request: Request) -> Env:  # async: cheap, so no thread-pool hop per request
    env: Env = request.app.state.env
    return env


EnvDep = Annotated[Env, Depends(get_env)]


async def get_analyst(env: EnvDep, authorization: Annotated[str | None, Header()] = None) -> AnalystPolicy:
    return access.authenticate(authorization, env.policy)


AnalystDep = Annotated[AnalystPolicy, Depends(get_analyst)]


@router.get("/healthz", tags=["ops"])
async def healthz() -> dict[str, bool]:
    """Liveness, answered on the event loop: no thread pool, no I/O."""
    return {"ok": True}


RATE_LIMITED: dict[int | str, dict[str, Any]] = {429: {
    "model": ErrorResponse, "description": "too many requests of this analyst (`rate_limited`); nothing charged",
    "headers": {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "string"}}},
}}


async def _run(request: Request, analyst: AnalystPolicy, work: Callable[[Deadline], Any], env: Env) -> Any:
    """`work` on the query pool (proxy/run/query_pool.py), within the analyst's limits
    (proxy/run/throttle.py)."""
    with request.app.state.throttle.admitted(analyst.name, analyst.limits):
        return await request.app.state.runner.run(analyst.name, work, env.settings.query_timeout_s)


@router.post(
    "/v1/query",
    response_model=QueryResponse,
    tags=["query"],
    responses={200: {"headers": {
        "X-DP-Repeat": {"description": "true when this is the stored answer of an identical earlier request "
                                       "(nothing charged)", "schema": {"type": "string"}},
        "X-DP-Charge-Id": {"description": "the charge that paid for this answer", "schema": {"type": "string"}},
    }}, **RATE_LIMITED},
)
async def query(
    body: QueryRequest, request: Request, analyst: AnalystDep, env: EnvDep,
    idempotency_key: Annotated[str | None, Header(
        description="your key for this request (1-128 of A-Z a-z 0-9 _ . : -, e.g. a UUID): a retry with it "
                    "is never charged twice")] = None,
    detail: Annotated[Literal["summary", "cells"], Query(
        description="summary (default): the answer's `budget` is the summary (spent and remaining under the "
                    "rule in force, the shared budget) and its `charge` has no event tree, per-rule costs or "
                    "cell list (`events` null, `costs` and `scope.listed` empty, `scope.bitmap` null); cells: "
                    "both in full, with the per-rule accounts and the spend per cell (as GET /v1/budget). CSV "
                    "headers always carry the summary")] = "summary",
) -> Response:
    """Answer one SQL query with a differentially private release, charging the budget first. A query over a
    table the policy declares public, alone, is answered exactly and free (`public: true`, `charge` null, no
    `X-DP-Charge-Id`).

    Repeating an identical request returns the first answer byte for byte, without a new charge
    (header `X-DP-Repeat: true`): repeats cannot average the noise away. A repeat at another `confidence`
    gets the same answer with its error bars at that confidence (public functions of the noise).

    With an `Idempotency-Key`, a retry after a lost response (a crash, a dropped connection) is answered
    under the charge the key paid, with the stored answer when there is one: one charge, one release. The
    key is bound to the request it was first charged for; another request with it is refused
    (`idempotency_key_reused`, 422), and a key whose charge ended in a charged error is spent (409)."""

    request.state.query = body  # what this route parsed: proxy/http/middleware/audit_trail.py records it
    wanted = formats.negotiated(request.headers.get("accept"))  # CSV or Arrow from the same JSON answer
    work = query_work(body, analyst, env, request.state, wanted == formats.ARROW, idempotency_key)
    try:
        result: Reply = await _run(request, analyst, work, env)
    except Exception as err:  # a keyed charge's error is its one outcome: recorded before it leaves (or, if a
        # concurrent retry gave the key its outcome first, that outcome is sent instead)
        charged = bool(getattr(request.state, "charged", False))
        result = await run_in_threadpool(settle_keyed, env, analyst.name, idempotency_key, err, charged)
    request.state.audited = result.audited and not result.repeat  # committed with the release: AuditTrail skips it
    headers = {"X-DP-Repeat": str(result.repeat).lower()}
    if result.charge_id:  # none on a free answer over public tables alone
        headers["X-DP-Charge-Id"] = result.charge_id
    brief = summarised(result.body)  # what is stored and repeated is the full answer; this is how it is shown
    if wanted == formats.CSV:  # headers stay under 1 KB (reverse proxies' buffers): the summary, whatever detail
        text, metadata = formats.to_csv(brief)
        return Response(text, media_type="text/csv; charset=utf-8", headers={**headers, **metadata})
    body = result.body if detail == "cells" else brief
    if wanted == formats.ARROW:
        arrow = formats.to_arrow(body, getattr(request.state, "column_types", ()))
        return Response(arrow, media_type=wanted, headers=headers)
    return Response(body, media_type="application/json", headers=headers)


def query_work(
    body: QueryRequest, analyst: AnalystPolicy, env: Env, state: Any, typed: bool = False,
    idempotency_key: str | None = None,
) -> Callable[[Deadline], Reply]:
    """The pipeline work of one query (POST /v1/query, and the PostgreSQL front-end: proxy/wire/), to run on
    the query pool. It leaves on `state` what the audit trail records: `charged`, `charge_id`, `charge` once
    admitted, `normalized_sql` once planned, and with `typed` the declared `column_types`."""

    def admitted(charge: Charge) -> None:
        state.charged = True
        state.charge_id = charge.id
        state.charge = charge

    def planned(prepared: Prepared) -> None:
        state.normalized_sql = prepared.plan.normalized_sql  # the audit trail records it as it is
        if typed:  # the Arrow schema follows the declared types, not the values
            state.column_types = formats.column_types(prepared.plan.analysis)

    def work(deadline: Deadline) -> Reply:
        public = answer_public(body, analyst, env, deadline)  # over public tables alone: exact and free
        if public is not None:
            state.public = True  # the audit trail records a free answer (no charge id, ε = δ = 0)
            state.normalized_sql = public.plan.normalized_sql
            return Reply(_render_public(public, env, analyst.name), "", repeat=False, audited=False)
        return reply(body, analyst, env, admitted, lambda answer: _render(answer, env), deadline,
                     rebar=lambda stored, prepared: repeat_error_bars.at_confidence(stored, prepared, noise_out),
                     on_planned=planned,
                     audited=lambda answer: answered(answer.charge, state.normalized_sql),
                     idempotency_key=idempotency_key)

    return work


def _render(result: Answer, env: Env) -> bytes:
    prepared = result.prepared
    analysis = prepared.plan.analysis
    noise = with_row_bars(analysis, prepared.plan.price, result.release.rows, result.release.parts,
                          noise_out(analysis, prepared.plan.price, prepared.confidence))
    return QueryResponse(
        dataset=prepared.dataset.name,
        columns=list(result.release.columns),
        rows=[[json_value(v) for v in row] for row in result.release.rows],
        charge=charge_out(prepared.plan.price, result.charge.id, prepared.dataset, prepared.plan.scope),
        budget=budget_now(env, result.charge.analyst, prepared.dataset, prepared.budget),
        noise=noise,
        partitions=partitions_out(prepared),
        bounds=None if result.bounds is None else BoundsOut(**result.bounds.report()),
        unreliable=unreliable(analysis, result.release.rows, noise),
    ).model_dump_json(exclude={"public"} if result.bounds is not None else {"bounds", "public"}).encode()  # bounds:
    # only on auto tables


_PUBLIC_NOTE = ("the rows of a table the policy declares public, released exactly: no noise, no charge, and "
                "no partition selection")


def _render_public(result: PublicAnswer, env: Env, analyst: str) -> bytes:
    """An exact answer over public tables alone: the answer's shape, with no charge, no noise, and `public`."""
    return QueryResponse(
        dataset=result.dataset.name,
        columns=list(result.plan.query.columns),
        rows=[[json_value(v) for v in row] for row in result.rows],
        charge=None,
        budget=budget_now(env, analyst, result.dataset, result.budget),
        noise=[],
        partitions=PartitionsOut(kind="public", note=_PUBLIC_NOTE),
        public=True,
    ).model_dump_json(exclude={"bounds"}).encode()


@router.post("/v1/query/preview", response_model=PreviewResponse, tags=["query"], responses=RATE_LIMITED)
async def preview(body: QueryRequest, request: Request, analyst: AnalystDep, env: EnvDep) -> Response:
    """The plan of a query (rewritten SQL, charge under each accounting, noise, and the budget before and
    after it) without charging or touching data. `admissible` applies the dataset's admit rule."""
    request.state.query = body  # what this route parsed: the access log names its dataset
    rendered: bytes = await _run(request, analyst, lambda _: _dump(_preview(body, analyst, env)),
                                 env)  # rendered on the query thread, not the event loop
    return Response(rendered, media_type="application/json")


def _preview(body: QueryRequest, analyst: AnalystPolicy, env: Env) -> PreviewResponse:
    prepared = prepare(body, analyst, env.policy, env.sampler.salt(), env)
    price, dataset = prepared.plan.price, prepared.dataset
    shared = dataset.budget is not None
    before, before_all = history(env, dataset.name, analyst.name), history(env, dataset.name, None) if shared else None
    entry = Entry(price.event, price.epsilon, price.delta, prepared.plan.scope)
    refused = refusal(before, before_all, entry, prepared.budget, dataset)
    return PreviewResponse(
        dataset=dataset.name,
        sql=prepared.plan.sql,
        columns=[o.name for o in prepared.plan.analysis.outputs],
        charge=charge_out(price, None, dataset, prepared.plan.scope),
        budget=budget_out(dataset, prepared.budget, before, before_all),
        # after: this charge, which exists nowhere yet, added to the sums the ledger keeps (no history read)
        budget_after=budget_out(dataset, prepared.budget, plus(before, entry),
                                plus(before_all, entry) if before_all is not None else None),
        admissible=refused is None,
        refusal=None if refused is None else str(refused),
        noise=noise_out(prepared.plan.analysis, price, body.confidence),
        partitions=partitions_out(prepared),
        bounds=_bounds_preview(prepared),
    )


def _dump(preview: PreviewResponse) -> bytes:
    """The preview's JSON; `bounds` only where the table chooses its bound (auto)."""
    return preview.model_dump_json(exclude=None if preview.bounds is not None else {"bounds"}).encode()


def _bounds_preview(prepared: Prepared) -> BoundsOut | None:
    """An auto bound's selection before it runs: its limit and cost; the bound itself needs the data."""
    chooser = prepared.plan.auto
    if chooser is None:
        return None
    return BoundsOut(**auto_release.preview(chooser, prepared.plan.analysis).report())


@router.get("/v1/budget", response_model=BudgetsResponse, tags=["budget"])
def budget(analyst: AnalystDep, env: EnvDep) -> BudgetsResponse:
    """Your budget on every dataset you may query."""
    budgets, reports = [], []
    for name, allowed in analyst.budgets:
        dataset = env.policy.dataset(name)
        assert dataset is not None  # the policy loader checks that budgets name known datasets
        budgets.append(budget_now(env, analyst.name, dataset, allowed))
        mine = history(env, name, analyst.name)  # the curves read the ledger's sums; the PLD report, the charges
        charges = functools.partial(env.ledger.entries, dataset=name, analyst=analyst.name)
        reports.append(budget_curves.detailed(mine, charges, dataset, allowed))
    return BudgetsResponse(analyst=analyst.name, budgets=budgets, reports=reports)


@router.get("/v1/ledger", response_model=LedgerResponse, tags=["budget"])
def ledger(
    analyst: AnalystDep,
    env: EnvDep,
    of: Annotated[str | None, Query(alias="analyst", max_length=64)] = None,
    dataset: Annotated[str | None, Query(max_length=64)] = None,
    since: Annotated[str | None, Query(pattern=_DATE_TIME, description="ISO 8601 date-time (UTC if no offset)"),
                     AfterValidator(_valid_moment)] = None,
    until: Annotated[str | None, Query(pattern=_DATE_TIME, description="ISO 8601 date-time, exclusive"),
                     AfterValidator(_valid_moment)] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
) -> LedgerResponse:
    """Every charge, newest first (admins only)."""
    access.require_admin(analyst)
    filters: dict[str, Any] = {"analyst": of, "dataset": dataset, "since": _moment(since), "until": _moment(until)}
    charges = env.ledger.charges(**filters, limit=limit, offset=offset)
    return LedgerResponse(
        total=env.ledger.count(**filters), limit=limit, offset=offset,
        charges=[
            LedgerEntry(
                id=c.id, analyst=c.analyst, dataset=c.dataset, at=c.at.isoformat(), sql_sha256=c.sql_sha256,
                epsilon=c.epsilon, delta=c.delta, composition=c.composition, events=to_json(c.event),
                scope=None if c.scope is None else scope_out(c.scope, env.policy.dataset(c.dataset)),
            )
            for c in charges
        ],
    )


@router.get("/v1/datasets", response_model=DatasetsResponse, tags=["query"])
def datasets(analyst: AnalystDep, env: EnvDep) -> DatasetsResponse:
    """The datasets you may query: tables, columns, bounds and what may be grouped on."""
    out = []
    for name, _ in analyst.budgets:
        d = env.policy.dataset(name)
        assert d is not None
        tables = [
            TableOut(
                name=t.name, privacy_unit=t.privacy_unit, max_groups=t.max_groups, max_rows=t.max_rows,
                columns=[
                    ColumnOut(
                        name=c.name, type=c.type, bounds=c.bounds, unit_level=c.unit_level,
                        groupable=c.groupable,
                        public_domain=None if c.public_domain is None else [json_value(v) for v in c.public_domain],
                    )
                    for c in t.columns
                ],
            )
            for t in d.catalog.tables
        ]
        out.append(DatasetOut(name=d.name, mechanism=d.mechanism, epsilon=d.epsilon, delta=d.delta,
                              max_epsilon=d.max_epsilon, tables=tables))
    return DatasetsResponse(datasets=out)


