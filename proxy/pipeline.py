"""The request path (DESIGN.md §1): plan (pure, free to reject) → admit (atomic charge) → run → release.

A charge is committed before any result exists and is never refunded: if the engine fails afterwards, the
charge stays and the error says so (`charged: true`). The post-admit work (execute, release, render) has
one time limit, `query_timeout_s` from admission (proxy/deadline.py): an answer not ready by then is a
charged `timeout` and is never released. An identical request (same analyst, dataset and
effective parameters, and a query whose answer is the same function of the data: `repeat_identity`, whatever
its dialect or spelling) gets the stored release back, byte for byte, at no charge, so repeating a query can
never average its noise away (DESIGN.md §5).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Literal, get_args

from accountant.chain import AuditRecord
from accountant.filter import Budget
from accountant.ledger import Charge, Ledger, StoredRelease
from mechanisms.sampling import Sampler
from proxy import answer_timing, auto_run
from proxy.auth import dataset_for
from proxy.deadline import Deadline
from proxy.engine import QueryEngine
from proxy.policy import AnalystPolicy, DatasetPolicy, Policy, check_accountable
from proxy.query import QueryPlan, plan, repeat_identity
from proxy.query.analyse import public_cells
from proxy.query.auto_bounds import ChosenBounds
from proxy.query.errors import InvalidParameter, PolicyError
from proxy.query.release import Release, release
from proxy.query.render import DUCKDB, render, render_text
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from proxy.store import StoreEngine

Stage = Literal["plan", "admit", "execute", "release"]  # plan = parse + analyse + price + rewrite
STAGES: tuple[Stage, ...] = get_args(Stage)
StageTimer = Callable[[Stage], AbstractContextManager[object]]


def untimed(stage: Stage) -> AbstractContextManager[object]:
    """The default StageTimer: measures nothing."""
    return nullcontext()


@dataclass(frozen=True, slots=True)
class Env:
    """Everything a request needs, built once at start-up. Holds things; does nothing.

    `timed(stage)` wraps each stage of a query (metrics and logs observe it); it must not change the outcome.
    """

    settings: Settings
    policy: Policy
    engines: tuple[tuple[str, QueryEngine | StoreEngine], ...]  # a StoreEngine for datasets bounded by a store
    ledger: Ledger
    sampler: Sampler
    timed: StageTimer = untimed

    def engine(self, dataset: str) -> QueryEngine | StoreEngine:
        return next(engine for name, engine in self.engines if name == dataset)


@dataclass(frozen=True, slots=True)
class Prepared:
    dataset: DatasetPolicy
    budget: Budget
    plan: QueryPlan
    request_sha256: str  # the identity of a repeat
    confidence: float | None = None  # of the error bars rendered (not part of a repeat's identity)


@dataclass(frozen=True, slots=True)
class Reply:
    body: bytes  # the JSON answer exactly as first sent
    charge_id: str
    repeat: bool


@dataclass(frozen=True, slots=True)
class Answer:
    prepared: Prepared  # with auto bounds: the plan at the chosen bound
    charge: Charge
    release: Release
    bounds: ChosenBounds | None = None  # the max_rows a query on an auto table chose, and its cost


def engine_sql(planned: QueryPlan, engine: QueryEngine | StoreEngine) -> str:
    """The plan's query as `engine` reads it: its tree through the engine's dialect (proxy/query/render.py);
    a bounding store's SQL, which has no tree, as it is for DuckDB and through `render_text` for Spark's store."""
    target = getattr(engine, "target", DUCKDB)
    if planned.tree is None:  # a bounding store's SQL: DuckDB's text, rendered for Spark's store (render_text)
        return planned.sql if target.dialect == "duckdb" else render_text(planned.sql, target)
    return render(planned.tree, target)


def prepare(req: QueryRequest, analyst: AnalystPolicy, policy: Policy, salt: int) -> Prepared:
    """Authorise the dataset and plan the query: no data, no budget touched. `salt` keys the bounding."""
    name, budget = dataset_for(analyst, req.dataset)
    dataset = policy.dataset(name)
    assert dataset is not None  # the policy loader checks that budgets name known datasets
    epsilon = dataset.epsilon if req.epsilon is None else req.epsilon
    if epsilon > dataset.max_epsilon:
        raise InvalidParameter(
            f"epsilon {epsilon} is above this dataset's per-query maximum {dataset.max_epsilon}",
            parameter="epsilon", max_epsilon=dataset.max_epsilon,
        )
    delta = dataset.delta if req.delta is None else req.delta
    mechanism = req.mechanism or dataset.mechanism
    planned = plan(req.sql, dataset.catalog, epsilon=epsilon, delta=delta, mechanism=mechanism, salt=salt,
                   noise_multiplier=req.noise_multiplier, cells=dataset.cell_accounting,
                   dialect=req.dialect or dataset.dialect, bounding=dataset.bounding,
                   conversion="gdp" if dataset.accounting.rule == "gdp" else "zcdp",
                   auto_share=dataset.auto_bounds_share, auto_quantile=dataset.auto_bounds_quantile)
    if planned.price.epsilon > dataset.max_epsilon:  # a requested noise can cost more than the maximum
        raise InvalidParameter(
            f"this noise costs epsilon {planned.price.epsilon:.6g}, above this dataset's per-query maximum "
            f"{dataset.max_epsilon}; ask for more noise",
            parameter="noise_multiplier", max_epsilon=dataset.max_epsilon,
        )
    check_accountable(dataset, mechanism, planned.analysis.partitions)  # free: before any charge
    cells = len(public_cells(planned.analysis)) if planned.analysis.partitions == "public" else 0
    if cells > dataset.max_release_cells:  # the declared domains say how much work a release is: refuse it free
        raise PolicyError(
            f"this GROUP BY would release {cells} cells (every combination of its keys' public domains); this "
            f"dataset releases at most {dataset.max_release_cells} per query: group by fewer keys, or filter "
            "with WHERE and group by the rest", construct="GROUP BY", cells=cells,
            max_release_cells=dataset.max_release_cells,
        )
    knob = epsilon if req.noise_multiplier is None else ["noise_multiplier", req.noise_multiplier]
    identity = json.dumps([name, repeat_identity(planned, dataset.catalog), knob, delta, mechanism])
    return Prepared(dataset, budget, planned, hashlib.sha256(identity.encode()).hexdigest(), req.confidence)


def reply(
    req: QueryRequest,
    analyst: AnalystPolicy,
    env: Env,
    on_admitted: Callable[[Charge], None],
    render: Callable[[Answer], bytes],
    deadline: Deadline | None = None,
    rebar: Callable[[bytes, Prepared], bytes] | None = None,
    on_planned: Callable[[Prepared], None] | None = None,
    audited: Callable[[Answer], AuditRecord] | None = None,
) -> Reply:
    """The answer to `req`: the stored release of an identical earlier request (its error bars by `rebar` at
    this request's confidence, proxy/repeat_bars.py), else a new charged one, delivered within `deadline`
    (default: `query_timeout_s` from admission). `on_planned` sees the plan before anything else happens (the
    audit trail records its normalised SQL instead of parsing it again). `audited(answer)` is the answer's
    `answered` audit entry, committed with its stored release in one durable transaction (proxy/audit_trail.py
    then has nothing left to write before the answer leaves)."""
    deadline = deadline or Deadline(env.settings.query_timeout_s)
    with env.timed("plan"):
        prepared = prepare(req, analyst, env.policy, env.sampler.salt())
    if on_planned is not None:
        on_planned(prepared)
    stored = env.ledger.stored_release(analyst.name, prepared.dataset.name, prepared.request_sha256)
    answer_timing.pace(prepared.dataset.answer_time, prepared.dataset.padded_ms, deadline, stored is not None)
    if stored is not None:
        return Reply(stored.body if rebar is None else rebar(stored.body, prepared), stored.charge_id, repeat=True)
    result = answer(prepared, analyst, env, on_admitted, deadline)
    body = render(result)
    deadline.deliver()  # from here on the answer is released; if too late, a charged timeout instead
    env.ledger.store_release(
        StoredRelease(analyst.name, prepared.dataset.name, prepared.request_sha256, result.charge.id, body),
        None if audited is None else audited(result),
    )
    return Reply(body, result.charge.id, repeat=False)


def answer(
    prepared: Prepared, analyst: AnalystPolicy, env: Env, on_admitted: Callable[[Charge], None],
    deadline: Deadline | None = None,
) -> Answer:
    """Admit, run and release one prepared query; the deadline's clock starts at admission."""
    deadline = deadline or Deadline(env.settings.query_timeout_s)
    price = prepared.plan.price
    engine = env.engine(prepared.dataset.name)
    sql = engine_sql(prepared.plan, engine)  # a refusal here is before the charge: free
    picking = auto_run.selection_text(prepared.plan, engine) if prepared.plan.auto is not None else None
    engine.refresh()  # a changed source is rebuilt into its store before the charge, not on the query's clock
    with env.timed("admit"):
        charge = env.ledger.admit(
            analyst=analyst.name, dataset=prepared.dataset.name, sql_sha256=prepared.plan.sql_sha256,
            event=price.event, epsilon=price.epsilon, delta=price.delta, composition=price.composition,
            budget=prepared.budget, accounting=prepared.dataset.accounting,
            dataset_budget=prepared.dataset.budget, scope=prepared.plan.scope,
            sql=prepared.plan.normalized_sql,  # its admitted audit entry commits with the charge
        )
    on_admitted(charge)  # from here on, every failure reports charged: true
    deadline.start()
    bounds = None
    with env.timed("execute"):
        deadline.check()
        if picking is not None:  # choose the bound first (proxy/auto_run.py): charged above already
            prepared, bounds = at_chosen_bound(prepared, engine, picking, env.sampler, deadline)
            sql, price = engine_sql(prepared.plan, engine), prepared.plan.price
        rows = engine.run(sql, deadline.remaining())
    with env.timed("release"):
        deadline.check()
        result = release(rows.rows, prepared.plan.analysis, price, env.sampler)
    deadline.check()
    return Answer(prepared, charge, result, bounds)


def at_chosen_bound(
    prepared: Prepared, engine: QueryEngine | StoreEngine, picking: str, sampler: Sampler, deadline: Deadline
) -> tuple[Prepared, ChosenBounds]:
    """The prepared query at the max_rows its selection chooses from the data (proxy/query/auto_bounds.py)."""
    chosen = auto_run.choose(prepared.plan, engine, picking, sampler, deadline.remaining())
    return dataclasses.replace(prepared, plan=auto_run.plan_at(prepared.plan, chosen)), chosen
