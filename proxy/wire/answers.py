"""A data query from the wire, through the one pipeline of POST /v1/query; its Describe, through the preview's.

`answer` runs `proxy.routes.query_work` (plan, admit, execute, release, store, the `answered` audit entry)
on the app's query pool within the analyst's limits, exactly as the HTTP route does, and records the audit
entry of every other outcome (a repeat, a refusal, a failure) as the HTTP audit trail does. A `Cancel` (the
client's CancelRequest) ends it as its time limit would: the answer is never released, and a query admitted
before the cancel stays charged (`QueryCancelled`, a `timeout`). The release is the
HTTP answer's JSON, stored and repeated byte for byte: a query asked over the wire and over HTTP is one
request, charged once. `describe` plans without charging or reading data (`proxy.pipeline.prepare`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

from accountant.audit.chain import AuditRecord, Decision, sql_sha256
from proxy import logs
from proxy.engines.base import ExecutionTimeout
from proxy.engines.interrupts import Interrupts, watching
from proxy.http.errors import STATUS
from proxy.http.formats import column_types
from proxy.http.middleware.access_log import Rejection
from proxy.http.routes import query_work
from proxy.pipeline import Env, prepare
from proxy.policy.load import AnalystPolicy
from proxy.query.errors import QueryError
from proxy.query.parse.statement import normalised, parse
from proxy.run.deadline import Deadline
from proxy.schemas import QueryRequest
from proxy.wire import pgtypes
from proxy.wire.messages import Column


@dataclass(frozen=True, slots=True)
class Result:
    """Rows to send: their columns, values (Python), the CommandComplete tag and NOTICEs before them."""

    columns: tuple[Column, ...]
    rows: list[tuple[object, ...]]
    tag: str
    notices: tuple[str, ...] = ()
    answer: dict[str, Any] = field(default_factory=dict)  # the JSON answer of a DP query (SHOW dp.last_answer)


def columns_of(names: list[str] | tuple[str, ...], declared: tuple[str | None, ...],
               rows: list[tuple[object, ...]], released: bool = False) -> tuple[Column, ...]:
    """Columns typed by their declared type, or by their first non-NULL value where only values say. In a
    `released` answer such a column (arithmetic, a number: what SELECT allows besides keys and aggregates) is
    `float8`, as `describe` says before there are values."""
    out = []
    for i, name in enumerate(names):
        kind = declared[i] if i < len(declared) else None
        if kind is not None:
            oid = pgtypes.oid_of(kind)
        elif released:
            oid = pgtypes.FLOAT8
        else:
            oid = pgtypes.oid_of_value(next((row[i] for row in rows if row[i] is not None), None))
        out.append(Column(name, oid, pgtypes.size_of(oid)))
    return tuple(out)


def describe(req: QueryRequest, analyst: AnalystPolicy, env: Env) -> tuple[Column, ...]:
    """The columns a data query would answer with, from its plan: free, no data read (raises QueryError)."""
    analysis = prepare(req, analyst, env.policy, env.sampler.salt(), env).plan.analysis
    return columns_of([o.name for o in analysis.outputs], column_types(analysis), [], released=True)


def explain(req: QueryRequest, analyst: AnalystPolicy, env: Env) -> Result:
    """EXPLAIN of a data query: what it would charge and the SQL that would run, from its plan (the preview's
    path): free, no data read, nothing charged (raises QueryError)."""
    planned = prepare(req, analyst, env.policy, env.sampler.salt(), env).plan
    price = planned.price
    lines = [f"dp charge: epsilon={price.epsilon:.6g} delta={price.delta:.6g} ({price.mechanism}, "
             f"{price.composition}); EXPLAIN charges nothing", "rewritten SQL:",
             *(f"  {line}" for line in planned.sql.splitlines())]
    return Result((Column("QUERY PLAN", pgtypes.TEXT),), [(line,) for line in lines], "EXPLAIN")


class QueryCancelled(ExecutionTimeout):
    """The client cancelled the query (a CancelRequest with its connection's key): it ends as its time limit
    would, with no answer released; charged when it was admitted before the cancel."""

    default_message = "canceling statement due to user request: no answer is released"


class Cancel:
    """One running query's cancel, shared by the event loop (`request`, from a CancelRequest) and the query
    thread (`bind`, before the pipeline starts), under one lock: a cancel that comes before the thread starts
    refuses the work (nothing charged); one after expires its deadline, as its time limit would, and
    interrupts the engine call in flight (`interrupts`, proxy/engines/interrupts.py), so the query thread is
    free at once instead of at the time limit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._deadline: Deadline | None = None
        self.requested = asyncio.Event()
        self.expired = False  # the deadline was ended by the cancel (False: no deadline yet, or delivered)
        self.interrupts = Interrupts()

    def bind(self, deadline: Deadline) -> None:
        """On the query thread, first: raise QueryCancelled if the query was cancelled already."""
        with self._lock:
            if self.requested.is_set():
                raise QueryCancelled()
            self._deadline = deadline

    def request(self) -> None:
        """On the event loop: cancel the query (no effect once its answer is delivered)."""
        with self._lock:
            if self._deadline is not None and not self.requested.is_set():
                self.expired = self._deadline.expire()
            self.requested.set()
        if self.expired:  # nothing of this query can be released now: stop its engine work too
            self.interrupts.stop()


async def _run(app_state: Any, analyst: AnalystPolicy, work: Any, state: Any, cancel: Cancel | None) -> Any:
    """The query pool's run of `work`; with `cancel`, ended at once when the cancel finds it admitted (the
    thread stops at its next check of the deadline and releases nothing), else when the thread ends."""
    timeout = app_state.env.settings.query_timeout_s
    if cancel is None:
        return await app_state.runner.run(analyst.name, work, timeout)

    def cancellable(deadline: Deadline) -> Any:
        cancel.bind(deadline)
        with watching(cancel.interrupts):  # the engine calls of this work, on this thread, can be interrupted
            return work(deadline)

    running = asyncio.ensure_future(app_state.runner.run(analyst.name, cancellable, timeout))
    stopped = asyncio.ensure_future(cancel.requested.wait())
    try:
        await asyncio.wait((running, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not running.done() and cancel.expired and state.charged:  # admitted: its outcome is the charged cancel
        running.add_done_callback(_consumed)
        raise QueryCancelled()
    try:
        return await running  # before admission (or delivered already), the thread's own outcome
    except ExecutionTimeout as err:
        if cancel.expired and not isinstance(err, QueryCancelled):
            raise QueryCancelled() from err
        raise


def _consumed(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


async def answer(app_state: Any, req: QueryRequest, analyst: AnalystPolicy, cancel: Cancel | None = None) -> Result:
    """The DP answer to `req` (raises the pipeline's errors), audited, counted, logged (one access line, as an
    HTTP request's) and, when refused, listed among the dashboard's recent rejections. `cancel`: the
    connection's CancelRequest for this query, if one comes."""
    env: Env = app_state.env
    state = SimpleNamespace(charged=False, charge=None, charge_id=None, normalized_sql=None, column_types=())
    work = query_work(req, analyst, env, state, typed=True)
    context = logs.RequestContext(logs.request_id(None))
    token = logs.CURRENT.set(context)  # the pipeline's stage timings go into this query's access line
    started = time.perf_counter()
    try:
        try:
            with app_state.throttle.admitted(analyst.name, analyst.limits):
                result = await _run(app_state, analyst, work, state, cancel)
        except Exception as err:
            code = getattr(err, "code", "internal")
            code = code if isinstance(code, str) and code in STATUS else "internal"
            _done(app_state, context, analyst, req, code, started, state.charge_id)
            with contextlib.suppress(AttributeError):
                err.wire_charged = state.charged  # type: ignore[attr-defined]  # the ErrorResponse says so
            await _audit(app_state, _record(env, analyst, req, state, "failed" if STATUS[code] >= 500 else "rejected",
                                            code, None))
            raise
        _done(app_state, context, analyst, req, "ok", started, result.charge_id)
    finally:
        logs.CURRENT.reset(token)
    if result.repeat or not result.audited:
        await _audit(app_state, _record(env, analyst, req, state, "repeat" if result.repeat else "answered", None,
                                        result.charge_id))
    body = json.loads(result.body)
    rows = [tuple(row) for row in body["rows"]]
    return Result(columns_of(body["columns"], tuple(state.column_types), rows, released=True), rows,
                  f"SELECT {len(rows)}", (notice(body, result.repeat, result.charge_id),), body)


def _done(app_state: Any, context: logs.RequestContext, analyst: AnalystPolicy, req: QueryRequest, code: str,
          started: float, charge_id: str | None) -> None:
    """Count, log and (when refused) list one wire query, as proxy/observe.py does an HTTP request."""
    seconds = time.perf_counter() - started
    status = 200 if code == "ok" else STATUS[code]
    app_state.metrics.request_done("pg", "QUERY", code, seconds)
    if status >= 400:
        app_state.rejections.add(Rejection(datetime.now(UTC), analyst.name, req.dataset, "pg", status, code))
    logs.access(request_id=context.request_id, method="QUERY", route="pg", status=status, code=code,
                analyst=analyst.name, dataset=req.dataset, duration_ms=round(seconds * 1000, 3),
                stages_ms={k: round(v * 1000, 3) for k, v in context.stages.items()}, charge_id=charge_id)


def notice(body: dict[str, Any], repeat: bool, charge_id: str) -> str:
    """The charge and noise of one answer, as psql shows a NOTICE.

    Example:
        >>> body = {"charge": {"epsilon": 0.1, "delta": 0.0, "mechanism": "laplace"},
        ...         "budget": {"epsilon_remaining": 4.9, "delta_remaining": 1e-06},
        ...         "noise": [{"column": "n", "scale": 10.0, "ci": 29.96, "confidence": 0.95}]}
        >>> for part in notice(body, False, "c1").split("; "):
        ...     print(part)
        dp: charged epsilon=0.1 delta=0 (charge c1)
        remaining epsilon=4.9 delta=1e-06
        noise: n laplace scale=10 ±29.96 at 95%
    """
    if body.get("public"):
        return "dp: a table the policy declares public, answered exactly: nothing charged, no noise"
    charge = body.get("charge") or {}
    noises = []
    for item in body.get("noise", []):
        half = item.get("ci") if item.get("ci") is not None else item.get("ci95")
        scale = "derived" if item.get("scale") is None else f"scale={item['scale']:.6g}"
        bar = "" if half is None else f" ±{half:.6g} at {item.get('confidence', 0.95):.0%}"
        noises.append(f"{item.get('column')} {charge.get('mechanism', '')} {scale}{bar}".replace("  ", " "))
    noise = "; noise: " + ", ".join(noises) if noises else ""
    if repeat:
        return f"dp: a repeat of charge {charge_id}: nothing charged, the same release{noise}"
    budget = body.get("budget", {})
    return (f"dp: charged epsilon={charge.get('epsilon', 0):.6g} delta={charge.get('delta', 0):.6g} (charge "
            f"{charge_id}); remaining epsilon={budget.get('epsilon_remaining', 0):.6g} "
            f"delta={budget.get('delta_remaining', 0):.6g}{noise}")


def _record(env: Env, analyst: AnalystPolicy, req: QueryRequest, state: Any, decision: Decision,
            code: str | None, charge_id: str | None) -> AuditRecord:
    """The audit entry of a wire query's outcome, as proxy/audit_trail.py makes it for HTTP."""
    charge = state.charge
    sql = state.normalized_sql if state.normalized_sql is not None else _normalised(env, req)
    dataset = req.dataset
    if charge is not None and decision != "repeat":
        if sql_sha256(sql) != charge.sql_sha256:
            raise ValueError(f"the SQL to record is not the SQL charge {charge.id} paid for")
        return AuditRecord(analyst=charge.analyst, dataset=charge.dataset, sql=sql, decision=decision,
                           error_code=code, charge_id=charge.id, epsilon=charge.epsilon, delta=charge.delta)
    return AuditRecord(analyst=analyst.name, dataset=dataset, sql=sql, decision=decision, error_code=code,
                       charge_id=charge_id, epsilon=0.0, delta=0.0)


def _normalised(env: Env, req: QueryRequest) -> str:
    dataset = env.policy.dataset(req.dataset or "")
    dialect = req.dialect or (dataset.dialect if dataset is not None else "duckdb")
    try:
        return normalised(parse(req.sql, dialect), dialect)
    except (QueryError, RecursionError):
        return req.sql.replace("\x00", "\ufffd")


async def _audit(app_state: Any, record: AuditRecord) -> None:
    """Append `record` to the audit log (off the event loop)."""
    import asyncio

    await asyncio.to_thread(app_state.audit.append, record)
