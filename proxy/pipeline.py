"""The request path (docs/architecture.md): plan (pure, free to reject) → admit (atomic charge) → run → release.

A charge is committed before any result exists and is never refunded: if the engine fails afterwards, the
charge stays and the error says so (`charged: true`). The post-admit work (execute, release, render) has
one time limit, `query_timeout_s` from admission (proxy/run/deadline.py): an answer not ready by then is a
charged `timeout` and is never released. An identical request (same analyst, dataset and
effective parameters, and a query whose answer is the same function of the data: `repeat_identity`, whatever
its dialect or spelling) gets the stored release back, byte for byte, at no charge, so repeating a query can
never average its noise away (docs/privacy.md §2).

An idempotency key (`reply(..., idempotency_key=…)`: the `Idempotency-Key` header) makes a retry after a
crash free: the key is bound to its charge in the admit that commits it, and a retry with it gets the stored
release or, when none was stored, runs under the charge already paid. A keyed answer leaves only if its
release is the one stored for the request, so one charge never has two releases (docs/privacy.md §5.8).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Literal, get_args

from accountant.audit.chain import AuditRecord
from accountant.errors import ChargeUncertain, IdempotencyKeySpent
from accountant.filter import Budget
from accountant.ledger.admit import check_claim
from accountant.ledger.charges import ANSWERED, Admission, Charge, Claim, Idempotency, Ledger, StoredRelease, is_key
from accountant.ledger.kept_bounds import KeptBounds
from mechanisms.sampling import Sampler
from proxy.engines.base import QueryEngine, Rows
from proxy.policy.access import dataset_for
from proxy.policy.load import AnalystPolicy, DatasetPolicy, Policy, check_accountable
from proxy.query import auto_release
from proxy.query.analyse.analysis import public_cells
from proxy.query.auto.bounds import ChosenBounds, chosen_from_json, chosen_json
from proxy.query.errors import InvalidParameter, PolicyError
from proxy.query.mechanism_choice import plan_with
from proxy.query.planner import PublicPlan, QueryPlan, plan_public, public_scalars, repeat_identity
from proxy.query.public.scalars import Folded, folded, value_query
from proxy.query.release.publish import Release, release
from proxy.query.rewrite.render import render, render_text
from proxy.run import faults, padding
from proxy.run.deadline import Deadline
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from proxy.store.duckdb_store import StoreEngine

log = logging.getLogger(__name__)

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
    reused: ChosenBounds | None = None  # the plan runs at bounds an earlier query chose and kept (at_kept_bounds)


@dataclass(frozen=True, slots=True)
class Reply:
    body: bytes  # the JSON answer exactly as first sent
    charge_id: str
    repeat: bool
    audited: bool = True  # a new answer's `answered` entry committed with its release (else the caller's to write)


@dataclass(frozen=True, slots=True)
class Answer:
    prepared: Prepared  # with auto bounds: the plan at the chosen bound
    charge: Charge
    release: Release
    bounds: ChosenBounds | None = None  # the max_rows a query on an auto table chose, and its cost
    selected: QueryPlan | None = None  # with bounds chosen now: the plan they were chosen for (at the limits)


def engine_sql(planned: QueryPlan, engine: QueryEngine | StoreEngine) -> str:
    """The plan's query as `engine` reads it: its tree through the engine's dialect (proxy/query/rewrite/render.py);
    a bounding store's SQL, which has no tree, as it is for DuckDB and through `render_text` for Spark's store."""
    target = engine.target
    if planned.tree is None:  # a bounding store's SQL: DuckDB's text, rendered for Spark's store (render_text)
        return planned.sql if target.dialect == "duckdb" else render_text(planned.sql, target)
    return render(planned.tree, target)


@dataclass(frozen=True, slots=True)
class PublicAnswer:
    """The exact answer to a query over public tables alone: no noise, no charge (docs/privacy.md §1)."""

    dataset: DatasetPolicy
    budget: Budget  # the analyst's, unchanged: shown in the answer
    plan: PublicPlan
    rows: tuple[tuple[object, ...], ...]


def answer_public(req: QueryRequest, analyst: AnalystPolicy, env: Env, deadline: Deadline | None = None
                  ) -> PublicAnswer | None:
    """The exact answer of `req` when it reads public tables alone (planner.plan_public), else None (a DP query:
    `reply`). Authorised like any query (the dataset must be granted); nothing is admitted or charged, since the
    declared public table is the same in every pair of neighbouring datasets; it runs on the dataset's engine
    (read-only, hardened) within the query's time limit. An answer with more rows than the dataset's
    `max_release_cells` is refused, free: the rule asks for one row more than it may release."""
    name, budget = dataset_for(analyst, req.dataset)
    dataset = policy_dataset(env.policy, name)
    # untimed: a DP query is planned (and timed) again by `prepare`, and the stage metrics count each query once
    planned = plan_public(req.sql, dataset.catalog, max_rows=dataset.max_release_cells,
                          dialect=req.dialect or dataset.dialect)
    if planned is None:
        return None
    deadline = deadline or Deadline(env.settings.query_timeout_s)
    engine = env.engine(name)
    sql = render(planned.tree, engine.target)
    engine.refresh()  # a bounding store copies the public table: read the current one
    deadline.start()
    with env.timed("execute"):
        rows = tuple(tuple(row) for row in engine.run(sql, deadline.remaining()).rows)
    if len(rows) > planned.query.max_rows:
        raise PolicyError(
            f"this query over {planned.query.label} returns more than "
            f"{planned.query.max_rows} rows, this dataset's max_release_cells: filter with WHERE, aggregate, or "
            "add a LIMIT", construct="ROWS", max_release_cells=planned.query.max_rows,
        )
    deadline.deliver()
    return PublicAnswer(dataset, budget, planned, rows)


def policy_dataset(policy: Policy, name: str) -> DatasetPolicy:
    dataset = policy.dataset(name)
    assert dataset is not None  # the policy loader checks that budgets name known datasets
    return dataset


def public_values(sql: str, dialect: str, dataset: DatasetPolicy, env: Env) -> tuple[Folded, ...]:
    """The values of the query's scalar subqueries over public tables (planner.public_scalars), as typed literals
    to fold in (docs/privacy.md §3.2): each run exactly on the dataset's engine (read-only, hardened) before the
    query is planned, so nothing about them can fail after admission; one that returns more than one row is
    refused here, free. Public data only: nothing is charged, and no protected row is read."""
    queries = public_scalars(sql, dataset.catalog, dialect=dialect)
    if not queries:
        return ()
    engine = env.engine(dataset.name)
    engine.refresh()  # a bounding store copies the public tables: read the current ones
    values = []
    for query in queries:
        rows = engine.run(render(value_query(query), engine.target)).rows
        values.append(folded(rows, query.tree.sql(dialect="duckdb")))
    return tuple(values)


def prepare(req: QueryRequest, analyst: AnalystPolicy, policy: Policy, salt: int, env: Env | None = None) -> Prepared:
    """Authorise the dataset and plan the query: no protected data, no budget touched. `salt` keys the bounding.
    With `env`, the query's scalar subqueries over public tables are evaluated first (`public_values`); without
    it, a query that has one is refused."""
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
    dialect = req.dialect or dataset.dialect
    scalars = () if env is None else public_values(req.sql, dialect, dataset, env)
    planned = plan_with(req.sql, dataset.catalog, epsilon=epsilon, delta=delta, scalars=scalars,
                        mechanism=req.mechanism or dataset.mechanism, salt=salt, noise_multiplier=req.noise_multiplier,
                        cells=dataset.cell_accounting, dialect=dialect,
                        bounding=dataset.bounding, conversion="gdp" if dataset.accounting.rule == "gdp" else "zcdp",
                        auto_share=dataset.auto_bounds_share, auto_quantile=dataset.auto_bounds_quantile)
    mechanism = planned.price.mechanism  # "auto" resolved: the noise this query runs with
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
    idempotency_key: str | None = None,
) -> Reply:
    """The answer to `req`: the stored release of an identical earlier request (its error bars by `rebar` at
    this request's confidence, proxy/http/views/repeat_error_bars.py), else a new charged one, delivered within
    `deadline` (default: `query_timeout_s` from admission). `on_planned` sees the plan before anything else happens (the
    audit trail records its normalised SQL instead of parsing it again). `audited(answer)` is the answer's
    `answered` audit entry, committed with its stored release in one durable transaction
    (proxy/http/middleware/audit_trail.py then has nothing left to write before the answer leaves).

    With `idempotency_key` (checked: `accountant.ledger.charges.is_key`, else `invalid_parameter`), a key already
    bound to another request is refused free (`idempotency_key_reused`), one whose charge ended in a charged
    error too (`idempotency_key_spent`), and otherwise the request runs under the key's charge, or a new one
    that binds the key. The first outcome of a keyed charge is its only one: a run's answer leaves only if
    storing it also made it the key's outcome; a charged error of a keyed request must be made the key's
    outcome with `settle_keyed` before it is sent (the caller does it, since a time limit can pass outside
    this call: proxy/run/query_pool.py)."""
    if idempotency_key is not None and not is_key(idempotency_key):
        raise InvalidParameter("an Idempotency-Key is 1 to 128 characters of A-Z a-z 0-9 _ . : - (a UUID fits)",
                               parameter="Idempotency-Key")
    deadline = deadline or Deadline(env.settings.query_timeout_s)
    with env.timed("plan"):
        prepared = prepare(req, analyst, env.policy, env.sampler.salt(), env)
    if on_planned is not None:
        on_planned(prepared)
    claim = None if idempotency_key is None else env.ledger.claim(analyst.name, idempotency_key)
    if claim is not None:  # bound to another request: refused before anything else, free
        check_claim(dataclasses.replace(claim, outcome=None), prepared.dataset.name, prepared.request_sha256)
    stored = env.ledger.stored_release(analyst.name, prepared.dataset.name, prepared.request_sha256)
    padding.pace(prepared.dataset.answer_time, prepared.dataset.padded_ms, deadline, stored is not None)
    if stored is not None:
        return Reply(stored.body if rebar is None else rebar(stored.body, prepared), stored.charge_id, repeat=True)
    if claim is not None:  # paid, nothing released: run under the charge, unless an error was its outcome
        check_claim(claim, prepared.dataset.name, prepared.request_sha256)
    key = None if idempotency_key is None else Idempotency(idempotency_key, prepared.request_sha256)
    if key is None:  # a keyed request always draws its own bounds: every retry of it is priced alike
        prepared = at_kept_bounds(prepared, analyst.name, env)
    try:
        result = answer(prepared, analyst, env, on_admitted, deadline, key)
    except IdempotencyKeySpent:  # a concurrent retry gave the key its outcome since: its answer, if it was one
        stored = env.ledger.stored_release(analyst.name, prepared.dataset.name, prepared.request_sha256)
        if stored is None:
            raise
        return Reply(stored.body if rebar is None else rebar(stored.body, prepared), stored.charge_id, repeat=True)
    keep_bounds(result, analyst.name, env)
    body = render(result)
    faults.point("rendered")
    deadline.deliver()  # from here on the answer is released; if too late, a charged timeout instead
    kept = env.ledger.store_release(
        StoredRelease(analyst.name, prepared.dataset.name, prepared.request_sha256, result.charge.id, body),
        None if audited is None else audited(result), idempotency_key=idempotency_key,
    )
    faults.point("stored")
    if kept:
        return Reply(body, result.charge.id, repeat=False)
    if key is None:  # an unkeyed charge is run once: its answer is its one release (the first stored is another's)
        return Reply(body, result.charge.id, repeat=False, audited=False)
    # A keyed run that did not become its key's outcome is never sent: a concurrent retry under the same
    # charge got there first, with an answer (the stored one is the answer to this request) or an error.
    return _outcome(env, analyst.name, env.ledger.claim(analyst.name, idempotency_key or ""), rebar, prepared)


def _outcome(
    env: Env, analyst: str, claim: Claim | None, rebar: Callable[[bytes, Prepared], bytes] | None,
    prepared: Prepared | None,
) -> Reply:
    """The reply a keyed request gets once its key has an outcome: the stored answer of the key's request,
    or, when that outcome was an error, `idempotency_key_spent` naming it (nothing of this run is sent)."""
    stored = None if claim is None else env.ledger.stored_release(analyst, claim.dataset, claim.request_sha256)
    if stored is not None:
        body = stored.body if rebar is None or prepared is None else rebar(stored.body, prepared)
        return Reply(body, stored.charge_id, repeat=True)
    if claim is None or claim.outcome in (None, ANSWERED):
        raise RuntimeError("a keyed run was not released, and its key has no outcome to send instead")
    check_claim(claim, claim.dataset, claim.request_sha256)  # raises idempotency_key_spent
    raise AssertionError("unreachable")


def settle_keyed(env: Env, analyst: str, idempotency_key: str | None, error: Exception, charged: bool) -> Reply:
    """Before a charged error of a keyed request is sent: make it the key's one outcome, so that no retry
    runs under the charge again (the error, a `timeout` say, is an output of that charge), and raise it. If
    the key had an outcome already (a concurrent retry's answer or error), that outcome is sent instead:
    the stored answer as a repeat, or `idempotency_key_spent`. Anything else (no key, a refusal before
    admission, `ledger_uncertain`, where nothing ran) raises `error` unchanged. Best effort: a ledger that
    cannot record the outcome is logged, and the error is sent (a retry may then run under the charge)."""
    if idempotency_key is None or not charged or isinstance(error, ChargeUncertain) or not is_key(idempotency_key):
        raise error
    code = getattr(error, "code", "internal")
    code = code if isinstance(code, str) else "internal"
    try:
        claim = env.ledger.end_claim(analyst, idempotency_key, code)
    except Exception:
        log.exception("could not record the outcome %s of an idempotency key; a retry with it may run again", code)
        raise error from None
    if claim is None or claim.outcome == code:  # this error is the key's outcome (or one just like it was)
        raise error
    return _outcome(env, analyst, claim, None, None)


def answer(
    prepared: Prepared, analyst: AnalystPolicy, env: Env, on_admitted: Callable[[Charge], None],
    deadline: Deadline | None = None, idempotency: Idempotency | None = None,
) -> Answer:
    """Admit, run and release one prepared query; the deadline's clock starts at admission. With
    `idempotency`, the admit binds the key, or returns the charge it already paid (then it runs under that)."""
    deadline = deadline or Deadline(env.settings.query_timeout_s)
    price = prepared.plan.price
    engine = env.engine(prepared.dataset.name)
    sql = engine_sql(prepared.plan, engine)  # a refusal here is before the charge: free
    picking = auto_release.selection_text(prepared.plan, engine.target) if prepared.plan.auto is not None else None
    engine.refresh()  # a changed source is rebuilt into its store before the charge, not on the query's clock
    with env.timed("admit"):
        try:
            charge = env.ledger.admit(Admission(
                analyst=analyst.name, dataset=prepared.dataset.name, sql_sha256=prepared.plan.sql_sha256,
                event=price.event, epsilon=price.epsilon, delta=price.delta, composition=price.composition,
                budget=prepared.budget, accounting=prepared.dataset.accounting,
                dataset_budget=prepared.dataset.budget, scope=prepared.plan.scope,
                sql=prepared.plan.normalized_sql,  # its admitted audit entry commits with the charge
                idempotency=idempotency,
            ))
        except ChargeUncertain as err:  # the COMMIT's outcome is unknown: reported as charged, never as free
            if isinstance(err.charge, Charge):
                on_admitted(err.charge)
            raise
    on_admitted(charge)  # from here on, every failure reports charged: true
    faults.point("admitted")
    deadline.start()
    bounds = prepared.reused  # kept bounds: the plan is at them already, and nothing is selected
    selected = prepared.plan
    with env.timed("execute"):
        deadline.check()
        if picking is not None:  # choose the bound first (proxy/query/auto_release.py): charged above already
            prepared, bounds = at_chosen_bound(prepared, engine, picking, env.sampler, deadline)
            sql, price = engine_sql(prepared.plan, engine), prepared.plan.price
        rows = _run_answer(prepared.plan, engine, sql, deadline.remaining())
    with env.timed("release"):
        deadline.check()
        result = release(rows.rows, prepared.plan.analysis, price, env.sampler)
    deadline.check()
    return Answer(prepared, charge, result, bounds, selected)


def _run_answer(planned: QueryPlan, engine: QueryEngine | StoreEngine, sql: str, timeout_s: float | None) -> Rows:
    """The exact rows of the query's SQL at its bounds. On a bounding store they are a function of the store and the
    text alone, so a text it answered before is answered from memory (store/duckdb_store.py `run_answer`): the
    bounds kept for a shape, or drawn again on the same grid, then cost no scan (docs/privacy.md §10.7.1). The noise
    is drawn afresh by `release` either way."""
    run = getattr(engine, "run_answer", None) if planned.bounding == "store" else None
    return engine.run(sql, timeout_s) if run is None else run(sql, timeout_s)  # type: ignore[no-any-return]


def _kept_at(prepared: Prepared, analyst: str, env: Env) -> tuple[str, str, str] | None:
    """(scope, shape, stamp) under which this query's chosen bounds are kept, or None where nothing is kept:
    no selection, or a dataset that reuses none. The scope is the dataset ("") when it has a total budget, which
    covers every analyst's charges together, else the analyst (docs/privacy.md §10.8)."""
    planned = prepared.plan
    if planned.auto is None or not planned.auto.parts or prepared.dataset.auto_bounds_reuse == 0:
        return None
    scope = "" if prepared.dataset.budget is not None else analyst
    stamp = getattr(env.engine(prepared.dataset.name), "stamp", "")  # a store's; a source read as is has none
    return scope, auto_release.shape_sha256(planned), str(stamp)


def at_kept_bounds(prepared: Prepared, analyst: str, env: Env) -> Prepared:
    """`prepared` at the bounds an earlier query of the same shape chose, if the ledger keeps them for this
    scope at the source's current stamp and they have been reused fewer than `auto_bounds_reuse` times: planned
    as if declared (auto_release.plan_reused: no selection, the fixed-bounds price at this ε). Else `prepared`.
    Before admission: the price it gives is the one charged."""
    if _kept_at(prepared, analyst, env) is None:
        return prepared
    env.engine(prepared.dataset.name).refresh()  # the stamp compared is the store's that will answer
    kept = _kept_at(prepared, analyst, env)
    assert kept is not None
    scope, shape, stamp = kept
    text = env.ledger.reuse_bounds(prepared.dataset.name, scope, shape, stamp, prepared.dataset.auto_bounds_reuse)
    if text is None:
        return prepared
    chosen = dataclasses.replace(chosen_from_json(text), reused=True)
    return dataclasses.replace(prepared, plan=auto_release.plan_reused(prepared.plan, chosen), reused=chosen)


def keep_bounds(result: Answer, analyst: str, env: Env) -> None:
    """Keep the bounds `result`'s query chose now, for later queries of its shape (a reused or a declared-limits
    answer keeps nothing new). Post-processing of a release already made; a ledger that cannot keep them costs
    only the reuse, never the answer."""
    bounds = result.bounds
    if bounds is None or bounds.reused or bounds.note is not None:
        return
    # the shape is the plan's before the bounds were drawn: the prepared plan at the limits has it
    kept = _kept_at(dataclasses.replace(result.prepared, plan=result.selected), analyst, env)
    if kept is None:
        return
    scope, shape, stamp = kept
    try:
        env.ledger.keep_bounds(KeptBounds(result.prepared.dataset.name, scope, shape, stamp, chosen_json(bounds)))
    except Exception:
        log.exception("could not keep the bounds chosen for dataset %s; later queries will choose their own",
                      result.prepared.dataset.name)


def at_chosen_bound(
    prepared: Prepared, engine: QueryEngine | StoreEngine, picking: str, sampler: Sampler, deadline: Deadline
) -> tuple[Prepared, ChosenBounds]:
    """The prepared query at the bounds its selection (`picking`, auto_release.selection_text) draws from the data."""
    chosen = choose_bounds(prepared.plan, engine, picking, sampler, deadline.remaining())
    return dataclasses.replace(prepared, plan=auto_release.plan_at(prepared.plan, chosen)), chosen


def choose_bounds(planned: QueryPlan, engine: QueryEngine | StoreEngine, picking: str, sampler: Sampler,
                  timeout_s: float | None) -> ChosenBounds:
    """Every bound of an automatic-bounds plan: the engine reads every selection histogram in one query
    (`picking`), proxy/query/auto_release.py draws each bound from them."""
    assert planned.auto is not None
    if not planned.auto.parts:  # at the declared limits: nothing to read or draw
        return auto_release.preview(planned.auto, planned.analysis)
    # a bounding store reads each histogram once per store (store/duckdb_store.py: run_remembered); a source, every time
    run = getattr(engine, "run_remembered", engine.run) if planned.bounding == "store" else engine.run
    return auto_release.draw(planned.analysis, planned.auto, run(picking, timeout_s).rows, sampler)
