"""HTTP routes: thin. Each authenticates, calls the pipeline or the ledger, and shapes the response."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response

from accountant import filter as budget_filter
from accountant.events import to_json
from accountant.filter import Budget, Spend
from accountant.ledger import Charge
from proxy import auth
from proxy.pipeline import Answer, Env, Prepared, prepare, reply
from proxy.policy import AnalystPolicy
from proxy.query.analyse import Analysis
from proxy.query.expr import Agg
from proxy.query.price import Price
from proxy.schemas import (
    BudgetOut,
    BudgetsResponse,
    ChargeOut,
    ColumnOut,
    DatasetOut,
    DatasetsResponse,
    ErrorResponse,
    LedgerEntry,
    LedgerResponse,
    NoiseOut,
    PartitionsOut,
    PreviewResponse,
    QueryRequest,
    QueryResponse,
    TableOut,
)

router = APIRouter(responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 500, 504)})


def get_env(request: Request) -> Env:
    env: Env = request.app.state.env
    return env


EnvDep = Annotated[Env, Depends(get_env)]


def get_analyst(env: EnvDep, authorization: Annotated[str | None, Header()] = None) -> AnalystPolicy:
    return auth.authenticate(authorization, env.policy)


AnalystDep = Annotated[AnalystPolicy, Depends(get_analyst)]


@router.get("/healthz", tags=["ops"])
def healthz() -> dict[str, bool]:
    return {"ok": True}


@router.post(
    "/v1/query",
    response_model=QueryResponse,
    tags=["query"],
    responses={200: {"headers": {
        "X-DP-Repeat": {"description": "true when this is the stored answer of an identical earlier request "
                                       "(nothing charged)", "schema": {"type": "string"}},
        "X-DP-Charge-Id": {"description": "the charge that paid for this answer", "schema": {"type": "string"}},
    }}},
)
def query(body: QueryRequest, request: Request, analyst: AnalystDep, env: EnvDep) -> Response:
    """Answer one SQL query with a differentially private release, charging the budget first.

    Repeating an identical request returns the first answer byte for byte, without a new charge
    (header `X-DP-Repeat: true`): repeats cannot average the noise away."""

    def admitted(charge: Charge) -> None:
        request.state.charged = True
        request.state.charge_id = charge.id

    result = reply(body, analyst, env, admitted, _render)
    headers = {"X-DP-Repeat": str(result.repeat).lower(), "X-DP-Charge-Id": result.charge_id}
    return Response(result.body, media_type="application/json", headers=headers)


def _render(result: Answer) -> bytes:
    prepared = result.prepared
    return QueryResponse(
        dataset=prepared.dataset.name,
        columns=list(result.release.columns),
        rows=[[_json_value(v) for v in row] for row in result.release.rows],
        charge=_charge(prepared.plan.price, result.charge.id),
        budget=_budget(prepared.dataset.name, prepared.budget, result.spent),
        noise=_noise(prepared.plan.analysis, prepared.plan.price),
        partitions=_partitions(prepared),
    ).model_dump_json().encode()


@router.post("/v1/query/preview", response_model=PreviewResponse, tags=["query"])
def preview(body: QueryRequest, analyst: AnalystDep, env: EnvDep) -> PreviewResponse:
    """The plan of a query (rewritten SQL, charge, noise) without charging or touching data."""
    prepared = prepare(body, analyst, env.policy, env.sampler.salt())
    price = prepared.plan.price
    spent = env.ledger.spent(analyst.name, prepared.dataset.name)
    after = budget_filter.total([(spent.epsilon, spent.delta), (price.epsilon, price.delta)])  # rounded up
    return PreviewResponse(
        dataset=prepared.dataset.name,
        sql=prepared.plan.sql,
        columns=[o.name for o in prepared.plan.analysis.outputs],
        charge=_charge(price, None),
        budget=_budget(prepared.dataset.name, prepared.budget, spent),
        budget_after=_budget(prepared.dataset.name, prepared.budget, after),
        admissible=budget_filter.admits(spent, price.epsilon, price.delta, prepared.budget),
        noise=_noise(prepared.plan.analysis, price),
        partitions=_partitions(prepared),
    )


@router.get("/v1/budget", response_model=BudgetsResponse, tags=["budget"])
def budget(analyst: AnalystDep, env: EnvDep) -> BudgetsResponse:
    """Your budget on every dataset you may query."""
    return BudgetsResponse(
        analyst=analyst.name,
        budgets=[_budget(name, b, env.ledger.spent(analyst.name, name)) for name, b in analyst.budgets],
    )


@router.get("/v1/ledger", response_model=LedgerResponse, tags=["budget"])
def ledger(
    analyst: AnalystDep,
    env: EnvDep,
    of: Annotated[str | None, Query(alias="analyst", max_length=64)] = None,
    dataset: Annotated[str | None, Query(max_length=64)] = None,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> LedgerResponse:
    """Every charge, newest first (admins only)."""
    auth.require_admin(analyst)
    since, until = _utc(since), _utc(until)
    filters: dict[str, Any] = {"analyst": of, "dataset": dataset, "since": since, "until": until}
    charges = env.ledger.charges(**filters, limit=limit, offset=offset)
    return LedgerResponse(
        total=env.ledger.count(**filters), limit=limit, offset=offset,
        charges=[
            LedgerEntry(
                id=c.id, analyst=c.analyst, dataset=c.dataset, at=c.at.isoformat(), sql_sha256=c.sql_sha256,
                epsilon=c.epsilon, delta=c.delta, composition=c.composition, events=to_json(c.event),
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
                        public_domain=None if c.public_domain is None else [_json_value(v) for v in c.public_domain],
                    )
                    for c in t.columns
                ],
            )
            for t in d.catalog.tables
        ]
        out.append(DatasetOut(name=d.name, mechanism=d.mechanism, epsilon=d.epsilon, delta=d.delta,
                              max_epsilon=d.max_epsilon, tables=tables))
    return DatasetsResponse(datasets=out)


def _charge(price: Price, charge_id: str | None) -> ChargeOut:
    return ChargeOut(
        id=charge_id, epsilon=price.epsilon, delta=price.delta, mechanism=price.mechanism,
        composition=price.composition, events=to_json(price.event),
    )


def _budget(dataset: str, total: Budget, spent: Spend) -> BudgetOut:
    left = budget_filter.remaining(spent, total)
    return BudgetOut(
        dataset=dataset, epsilon=total.epsilon, delta=total.delta, epsilon_spent=spent.epsilon,
        delta_spent=spent.delta, epsilon_remaining=left.epsilon, delta_remaining=left.delta,
    )


def _noise(analysis: Analysis, price: Price) -> list[NoiseOut]:
    """Noise per released aggregate column, in the column's own units. Derived columns (AVG, arithmetic)
    have no single scale: their scale and ci95 are null."""
    out = []
    for output in analysis.outputs:
        if isinstance(output.expr, Agg):
            aggregate = analysis.aggregates[output.expr.index]
            if aggregate.kind != "avg":
                measure = analysis.measures.index(_first_measure(analysis, output.expr.index))
                spec = price.noise[measure]
                out.append(NoiseOut(column=output.name, mechanism=spec.mechanism,
                                    scale=spec.scale / spec.grid, ci95=spec.ci95 / spec.grid))
                continue
        if _uses_aggregate(output.expr):
            out.append(NoiseOut(column=output.name, mechanism=price.mechanism, scale=None, ci95=None))
    return out


def _first_measure(analysis: Analysis, index: int) -> Any:
    from proxy.query.measures import measures_of

    return measures_of(analysis.aggregates[index], analysis.table)[0]


def _uses_aggregate(expr: Any) -> bool:
    if isinstance(expr, Agg):
        return True
    return any(_uses_aggregate(a) for a in getattr(expr, "args", ()))


def _partitions(prepared: Prepared) -> PartitionsOut:
    selection = prepared.plan.price.selection
    return PartitionsOut(kind=prepared.plan.analysis.partitions,
                         threshold=None if selection is None else selection.threshold)


def _json_value(value: object) -> object:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value


def _utc(moment: dt.datetime | None) -> dt.datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=dt.UTC)
