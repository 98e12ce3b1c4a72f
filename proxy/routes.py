"""HTTP routes: thin. Each authenticates, calls the pipeline or the ledger, and shapes the response."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, Response
from pydantic import AfterValidator

from accountant import loss, report
from accountant.cells import CellScope, Ledgered, ledgered
from accountant.errors import UnsupportedEvent
from accountant.events import Event, to_json
from accountant.filter import Accounting, Budget, Entry, Rule, Usage
from accountant.ledger import Charge
from proxy import auth, auto_run, budget_detail, output_formats, repeat_bars
from proxy.deadline import Deadline
from proxy.decimal_json import DecimalJSONRoute
from proxy.pipeline import Answer, Env, Prepared, Reply, prepare, reply
from proxy.policy import AnalystPolicy, DatasetPolicy
from proxy.query.analyse import Analysis
from proxy.query.error_bars import error_bar
from proxy.query.expr import Agg
from proxy.query.hidden_groups import hidden_groups
from proxy.query.price import Price
from proxy.query.scope import cell_space
from proxy.schemas import (
    AccountOut,
    BoundsOut,
    BudgetOut,
    BudgetsResponse,
    CellOut,
    CellSpaceOut,
    ChargeOut,
    ColumnOut,
    CostOut,
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
    ReportedOut,
    ScopeOut,
    SharedBudgetOut,
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
    responses={code: {"model": ErrorResponse} for code in (400, 401, 403, 413, 500, 504)},
    route_class=DecimalJSONRoute,  # JSON numbers as exact decimals: ε = 0.1 is charged as at most 1/10
)


def get_env(request: Request) -> Env:
    env: Env = request.app.state.env
    return env


EnvDep = Annotated[Env, Depends(get_env)]


def get_analyst(env: EnvDep, authorization: Annotated[str | None, Header()] = None) -> AnalystPolicy:
    return auth.authenticate(authorization, env.policy)


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
    """`work` on the query pool (proxy/runner.py), within the analyst's limits (proxy/throttle.py)."""
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
async def query(body: QueryRequest, request: Request, analyst: AnalystDep, env: EnvDep) -> Response:
    """Answer one SQL query with a differentially private release, charging the budget first.

    Repeating an identical request returns the first answer byte for byte, without a new charge
    (header `X-DP-Repeat: true`): repeats cannot average the noise away. A repeat at another `confidence`
    gets the same answer with its error bars at that confidence (public functions of the noise)."""

    request.state.query = body  # what this route parsed: the audit trail records it (proxy/audit_trail.py)

    def admitted(charge: Charge) -> None:
        request.state.charged = True
        request.state.charge_id = charge.id
        request.state.charge = charge

    def planned(prepared: Prepared) -> None:
        request.state.normalized_sql = prepared.plan.normalized_sql  # the audit trail records it as it is

    def work(deadline: Deadline) -> Reply:
        return reply(body, analyst, env, admitted, lambda answer: _render(answer, env), deadline,
                     rebar=lambda stored, prepared: repeat_bars.at_confidence(stored, prepared, _noise),
                     on_planned=planned)

    result: Reply = await _run(request, analyst, work, env)
    headers = {"X-DP-Repeat": str(result.repeat).lower(), "X-DP-Charge-Id": result.charge_id}
    wanted = output_formats.negotiated(request.headers.get("accept"))  # CSV or Arrow from the same JSON answer
    if wanted == output_formats.CSV:
        text, metadata = output_formats.to_csv(result.body)
        return Response(text, media_type="text/csv; charset=utf-8", headers={**headers, **metadata})
    if wanted == output_formats.ARROW:
        return Response(output_formats.to_arrow(result.body), media_type=wanted, headers=headers)
    return Response(result.body, media_type="application/json", headers=headers)


def _render(result: Answer, env: Env) -> bytes:
    prepared = result.prepared
    return QueryResponse(
        dataset=prepared.dataset.name,
        columns=list(result.release.columns),
        rows=[[_json_value(v) for v in row] for row in result.release.rows],
        charge=_charge(prepared.plan.price, result.charge.id, prepared.dataset, prepared.plan.scope),
        budget=budget_now(env, result.charge.analyst, prepared.dataset, prepared.budget),
        noise=_noise(prepared.plan.analysis, prepared.plan.price, prepared.confidence),
        partitions=_partitions(prepared),
        bounds=None if result.bounds is None else BoundsOut(**result.bounds.report()),
    ).model_dump_json(exclude=None if result.bounds is not None else {"bounds"}).encode()  # only on auto tables


@router.post("/v1/query/preview", response_model=PreviewResponse, tags=["query"], responses=RATE_LIMITED)
async def preview(body: QueryRequest, request: Request, analyst: AnalystDep, env: EnvDep) -> Response:
    """The plan of a query (rewritten SQL, charge under each accounting, noise, and the budget before and
    after it) without charging or touching data. `admissible` applies the dataset's admit rule."""
    request.state.query = body  # what this route parsed: the access log names its dataset
    rendered: bytes = await _run(request, analyst, lambda _: _dump(_preview(body, analyst, env)),
                                 env)  # rendered on the query thread, not the event loop
    return Response(rendered, media_type="application/json")


def _preview(body: QueryRequest, analyst: AnalystPolicy, env: Env) -> PreviewResponse:
    prepared = prepare(body, analyst, env.policy, env.sampler.salt())
    price, dataset = prepared.plan.price, prepared.dataset
    shared = dataset.budget is not None
    before, before_all = _stored(env, dataset.name, analyst.name), _stored(env, dataset.name, None) if shared else None
    entry = Entry(price.event, price.epsilon, price.delta, prepared.plan.scope)
    refused = _refusal(before, before_all, entry, prepared.budget, dataset)
    # after: the history with this charge, which exists nowhere yet, summed afresh
    mine = env.ledger.entries(dataset=dataset.name, analyst=analyst.name)
    everyone = env.ledger.entries(dataset=dataset.name) if shared else ()
    return PreviewResponse(
        dataset=dataset.name,
        sql=prepared.plan.sql,
        columns=[o.name for o in prepared.plan.analysis.outputs],
        charge=_charge(price, None, dataset, prepared.plan.scope),
        budget=_budget(dataset, prepared.budget, before, before_all),
        budget_after=_budget(dataset, prepared.budget, _given((*mine, entry)),
                             _given((*everyone, entry)) if shared else None),
        admissible=refused is None,
        refusal=None if refused is None else str(refused),
        noise=_noise(prepared.plan.analysis, price, body.confidence),
        partitions=_partitions(prepared),
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
    return BoundsOut(**auto_run.preview(chooser, prepared.plan.analysis).report())


@router.get("/v1/budget", response_model=BudgetsResponse, tags=["budget"])
def budget(analyst: AnalystDep, env: EnvDep) -> BudgetsResponse:
    """Your budget on every dataset you may query."""
    budgets, reports = [], []
    for name, allowed in analyst.budgets:
        dataset = env.policy.dataset(name)
        assert dataset is not None  # the policy loader checks that budgets name known datasets
        budgets.append(budget_now(env, analyst.name, dataset, allowed))
        mine = env.ledger.entries(dataset=name, analyst=analyst.name)  # curves and PLD report (budget_detail)
        reports.append(budget_detail.detailed(mine, dataset, allowed))
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
    auth.require_admin(analyst)
    filters: dict[str, Any] = {"analyst": of, "dataset": dataset, "since": _moment(since), "until": _moment(until)}
    charges = env.ledger.charges(**filters, limit=limit, offset=offset)
    return LedgerResponse(
        total=env.ledger.count(**filters), limit=limit, offset=offset,
        charges=[
            LedgerEntry(
                id=c.id, analyst=c.analyst, dataset=c.dataset, at=c.at.isoformat(), sql_sha256=c.sql_sha256,
                epsilon=c.epsilon, delta=c.delta, composition=c.composition, events=to_json(c.event),
                scope=None if c.scope is None else _scope_out(c.scope, env.policy.dataset(c.dataset)),
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


def _charge(price: Price, charge_id: str | None, dataset: DatasetPolicy, scope: CellScope | None) -> ChargeOut:
    return ChargeOut(
        id=charge_id, epsilon=price.epsilon, delta=price.delta, mechanism=price.mechanism,
        composition=price.composition, events=to_json(price.event), accounting=dataset.accounting.rule,
        costs=_costs(price), scope=None if scope is None else _scope_out(scope, dataset),
    )


_LISTED_CELLS = 100


def _describer(key: tuple[str, str], dataset: DatasetPolicy | None) -> Callable[[int], dict[str, object]] | None:
    """`CellSpace.describe` for the space `key` names, if the policy in force still has that space."""
    table = None if dataset is None else dataset.catalog.table(key[0])
    space = None if table is None else cell_space(table)
    return space.describe if space is not None and space.fingerprint == key[1] else None


def _scope_out(scope: CellScope, dataset: DatasetPolicy | None) -> ScopeOut:
    describe = _describer(scope.key, dataset)
    cells = scope.indices()
    listed = [] if describe is None else [_cell(describe(int(i))) for i in cells[:_LISTED_CELLS]]
    return ScopeOut(table=scope.table, cells=int(cells.size), of=scope.size, listed=listed,
                    truncated=len(listed) < cells.size, bitmap=scope.to_json()["cells"], space=scope.space)


def _cell(coordinates: dict[str, object]) -> dict[str, Any]:
    return {column: _json_value(value) for column, value in coordinates.items()}


def _costs(price: Price) -> list[CostOut]:
    """The charge under basic composition, zCDP and (without Gaussian noise) GDP."""
    try:
        return list(_costs_of(price.event, price.epsilon, price.delta))
    except TypeError:  # an event built with a list somewhere is not hashable: computed as it is
        return list(_costs_of.__wrapped__(price.event, price.epsilon, price.delta))


@functools.lru_cache(maxsize=1024)  # a pure function of an immutable event: most answers repeat a few shapes
def _costs_of(event: Event, epsilon: float, delta: float) -> tuple[CostOut, ...]:
    basic = CostOut(accounting="basic", epsilon=epsilon, delta=delta)
    rho, selection = loss.approximate_rho(event)
    zcdp = CostOut(accounting="zcdp", rho=rho, delta=selection)
    try:
        mu, selection = loss.approximate_mu(event)
    except UnsupportedEvent:  # the discrete Gaussian has no proven μ-GDP bound
        return basic, zcdp
    return basic, zcdp, CostOut(accounting="gdp", mu=mu, delta=selection)


View = Callable[[Rule], Ledgered]  # a history's per-cell sums under a rule (raises UnsupportedEvent)


def _stored(env: Env, dataset: str, analyst: str | None) -> View:
    """The history in the ledger, read through the admit's memo (only what is new since is read), once per
    rule: one budget's figures ask for the same rule several times."""
    return functools.cache(lambda rule: env.ledger.tallied(dataset=dataset, analyst=analyst, rule=rule))


def _given(entries: tuple[Entry, ...]) -> View:
    """A history given as entries (e.g. with a charge that is only being previewed)."""
    return functools.cache(lambda rule: ledgered(entries, rule))


def budget_now(env: Env, analyst: str, dataset: DatasetPolicy, allowed: Budget) -> BudgetOut:
    everyone = _stored(env, dataset.name, None) if dataset.budget is not None else None
    return _budget(dataset, allowed, _stored(env, dataset.name, analyst), everyone)


def _refusal(
    mine: View, everyone: View | None, entry: Entry, allowed: Budget, dataset: DatasetPolicy
) -> Exception | None:
    """What `Ledger.admit` would raise for `entry` now (the same pure check), or None if it would admit."""
    rule = dataset.accounting.rule
    try:
        used = mine(rule).bound(entry.scope)
        refused = report.refusal(used, entry, allowed, dataset.accounting)
        if refused is None and everyone is not None and dataset.budget is not None:
            used = everyone(rule).bound(entry.scope)
            refused = report.refusal(used, entry, dataset.budget, dataset.accounting, scope="dataset")
    except UnsupportedEvent as err:  # the history itself holds an event the rule cannot account for
        return err
    return refused


def _accounts(history: View, allowed: Budget, accounting: Accounting) -> list[AccountOut]:
    """The worst-off unit's history (the maximum over cells) under basic composition and under the rule in
    force (if another)."""
    out = []
    for rule in dict.fromkeys(("basic", accounting.rule)):
        try:
            used = history(rule).bound()
        except UnsupportedEvent:
            continue  # e.g. a discrete Gaussian charged before the dataset moved to gdp: nothing is admitted
        out.append(_account(used, allowed, Accounting(rule, accounting.selection_share)))
    return out


def _account(used: Usage, allowed: Budget, accounting: Accounting) -> AccountOut:
    a = report.account(used, allowed, accounting)
    return AccountOut(
        accounting=a.rule, epsilon_spent=a.epsilon_spent, delta_spent=a.delta_spent,
        epsilon_remaining=a.epsilon_remaining, delta_remaining=a.delta_remaining, spent=a.spent,
        capacity=a.capacity, selection_delta_spent=a.selection_delta_spent,
        selection_delta_capacity=a.selection_delta_capacity,
    )


_HEAVIEST_CELLS = 20


def _cells(dataset: DatasetPolicy, allowed: Budget, view: View) -> list[CellSpaceOut]:
    """Per cell of every space a charge is scoped to, under the rule in force: the most-charged cells."""
    accounting = dataset.accounting
    try:
        history = view(accounting.rule)
    except UnsupportedEvent:
        return []
    out = []
    for space in history.spaces:
        describe = _describer(space.key, dataset)
        heaviest = [
            CellOut(cell=_cell(describe(i)) if describe is not None else {"#": i},
                    account=_account(Usage(accounting.rule, *space.cell(i)), allowed, accounting))
            for i in space.heaviest(_HEAVIEST_CELLS)
        ]
        elsewhere = _account(Usage(accounting.rule, *space.base), allowed, accounting)
        out.append(CellSpaceOut(table=space.key[0], cells=space.size, heaviest=heaviest, elsewhere=elsewhere))
    return out


def _budget(dataset: DatasetPolicy, allowed: Budget, mine: View, everyone: View | None) -> BudgetOut:
    """A budget and its history: basic Σε/Σδ spent, and what the rule in force leaves (ε at the budget's δ)."""
    accounting = dataset.accounting
    accounts = _accounts(mine, allowed, accounting)
    basic = accounts[0]
    in_force = next((a for a in accounts if a.accounting == accounting.rule), None)
    reported = None
    if allowed.delta > 0:
        epsilon, rule = report.tightest(lambda rule: mine(rule).bound(), allowed.delta)
        if epsilon < float("inf"):
            reported = ReportedOut(epsilon=epsilon, delta=allowed.delta, accounting=rule)
    shared = None
    if dataset.budget is not None and everyone is not None:
        totals = _accounts(everyone, dataset.budget, accounting)
        total_in_force = next((a for a in totals if a.accounting == accounting.rule), None)
        shared = SharedBudgetOut(
            epsilon=dataset.budget.epsilon, delta=dataset.budget.delta, accounts=totals,
            epsilon_remaining=0.0 if total_in_force is None else total_in_force.epsilon_remaining,
            delta_remaining=0.0 if total_in_force is None else total_in_force.delta_remaining,
        )
    return BudgetOut(
        dataset=dataset.name, epsilon=allowed.epsilon, delta=allowed.delta,
        epsilon_spent=basic.epsilon_spent, delta_spent=basic.delta_spent,
        epsilon_remaining=0.0 if in_force is None else in_force.epsilon_remaining,
        delta_remaining=0.0 if in_force is None else in_force.delta_remaining,
        accounting=accounting.rule, accounts=accounts, reported=reported, shared=shared,
        cells=_cells(dataset, allowed, mine),
    )


def _noise(analysis: Analysis, price: Price, confidence: float | None = None) -> list[NoiseOut]:
    """Noise per released aggregate column, in the column's own units, with its error bar at `confidence`
    (proxy/query/error_bars.py). Derived columns (AVG, VAR, arithmetic) have no single scale: their scale and
    ci95 are null."""
    out = []
    level = 0.95 if confidence is None else float(confidence)
    for output in analysis.outputs:
        if isinstance(output.expr, Agg):
            aggregate = analysis.aggregates[output.expr.index]
            bar = error_bar(analysis, price, output.expr.index, level)
            bars = {"confidence": level, "ci": bar.ci, "ci_times_count": bar.ci_times_count,
                    "rank_error": bar.rank_error}
            if aggregate.kind == "quantile":
                out.append(NoiseOut(column=output.name, mechanism="exponential", scale=None, ci95=None, **bars))
                continue
            if aggregate.kind not in ("avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp"):
                measure = analysis.measures.index(_first_measure(analysis, output.expr.index))
                spec = next(n for n in price.noise if n.measure == measure)
                out.append(NoiseOut(column=output.name, mechanism=spec.mechanism,
                                    scale=spec.scale / spec.grid, ci95=spec.ci95 / spec.grid, **bars))
                continue
            out.append(NoiseOut(column=output.name, mechanism=price.mechanism, scale=None, ci95=None, **bars))
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
    threshold = None if selection is None else selection.threshold
    return PartitionsOut(kind=prepared.plan.analysis.partitions, threshold=threshold,
                         note=hidden_groups(prepared.plan.analysis, threshold))


def _json_value(value: object) -> object:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return value

