"""Where one small query's fixed cost goes (issue #12): CPU and wall per answer, stage by stage, in process.

Runs the request path of `POST /v1/query` without HTTP, on the demo (bounding store), for `--count` distinct
`SELECT plan, COUNT(*) AS n<i> FROM users GROUP BY plan`, each stage timed on its own with
`time.process_time` (the whole process: DuckDB's threads and SQLite's fsync included) and `perf_counter`:

    public check    whether the text reads public tables alone (pipeline.answer_public: the route asks it first)
    prepare         parse, analyse, price, rewrite (proxy.pipeline.prepare); a text of a shape planned before
                    (issue #32, docs/architecture.md "A plan per shape"): the plan of that shape, relabelled
    stored_release  the repeat lookup
    refresh         the bounding store's freshness check
    admit           the ledger's check-and-insert with its `admitted` audit entry (one FULL commit)
    engine          the engine's run of the rewritten SQL
                    (with --again, and not in the total, the same SQL at once again: DuckDB warm, as in a
                    tight loop; the gap is what the work between two queries costs the next one)
    release         noise (the OpenDP sampler) and the released rows
    render          the JSON answer, of which `budget` is the budget shown in it
    store+audit     the stored release with its `answered` audit entry (one FULL commit)

and plain DuckDB on the same query in the same run; then (issue #32) `--repeats` identical requests answered from
the stored release through the route's whole work (`routes.query_work`: the public-table check, plan, repeat
lookup, the answer's summary), timed as one stage, `repeat (whole)`. With `--history 0,100,1000` (issue #32) it
times instead, on a fresh ledger per figure, `--count` distinct small answers through the route's whole work (with
the summary the route sends) after that many earlier per-cell charges of the same analyst (drill-downs of visits
by a region and an age band, admitted as the pipeline admits them, without running them): the per-request CPU as
the cells the analyst's history has touched grow. The HTTP layer's share is what
bench/throughput.py's server CPU per answer adds to the total here. On a loaded machine CPU times inflate less
than wall times; the load before and after is printed.

    python bench/request_cost.py --rows 1000000 --users 50000 --count 300
    python bench/request_cost.py --count 200 --history 0,100,1000

Example (one row of the report):
    >>> row("admit", 0.0009, 0.0021, 10)
    'admit               cpu   0.090 ms   wall   0.210 ms'
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import duckdb  # noqa: E402
from query_latency import build_bounding_store, close_env, ensure_dataset, fresh_ledger, set_bounding  # noqa: E402

from accountant.ledger.charges import Admission, StoredRelease  # noqa: E402
from proxy import pipeline  # noqa: E402
from proxy.app import build_env  # noqa: E402
from proxy.http import routes  # noqa: E402
from proxy.http.middleware.audit_trail import answered  # noqa: E402
from proxy.http.views.answer import summarised  # noqa: E402
from proxy.http.views.budget import budget_now  # noqa: E402
from proxy.query.release.publish import release  # noqa: E402
from proxy.run.deadline import Deadline  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402
from proxy.settings import Settings  # noqa: E402

SQL = "SELECT plan, COUNT(*) AS n{i} FROM users GROUP BY plan"
T = TypeVar("T")


def row(stage: str, cpu_s: float, wall_s: float, count: int) -> str:
    """One stage's mean CPU and wall ms per answer."""
    return f"{stage:18s}  cpu {1000 * cpu_s / count:7.3f} ms   wall {1000 * wall_s / count:7.3f} ms"


class Stages:
    """Sums of CPU and wall seconds per stage."""

    def __init__(self) -> None:
        self.sums: dict[str, list[float]] = {}

    def __call__(self, stage: str, work: Callable[[], T]) -> T:
        cpu, wall = time.process_time(), time.perf_counter()
        result = work()
        sums = self.sums.setdefault(stage, [0.0, 0.0])
        sums[0] += time.process_time() - cpu
        sums[1] += time.perf_counter() - wall
        return result


def one(env: pipeline.Env, analyst: Any, i: int, timed: Stages, again: bool = False) -> None:
    """The request path of one distinct query, stage by stage, as proxy/pipeline.py runs it."""
    request = QueryRequest(sql=SQL.format(i=i))
    if timed("public check", lambda: pipeline.answer_public(request, analyst, env)) is not None:
        raise SystemExit("the query reads a protected table: it is not answered as a public one")
    prepared = timed("prepare", lambda: pipeline.prepare(request, analyst, env.policy, env.sampler.salt()))
    dataset, plan = prepared.dataset, prepared.plan
    timed("stored_release", lambda: env.ledger.stored_release(analyst.name, dataset.name, prepared.request_sha256))
    engine = env.engine(dataset.name)
    sql = pipeline.engine_sql(plan, engine)
    timed("refresh", engine.refresh)
    price = plan.price
    charge = timed("admit", lambda: env.ledger.admit(Admission(
        analyst=analyst.name, dataset=dataset.name, sql_sha256=plan.sql_sha256, event=price.event,
        epsilon=price.epsilon, delta=price.delta, composition=price.composition, budget=prepared.budget,
        accounting=dataset.accounting, dataset_budget=dataset.budget, scope=plan.scope, sql=plan.normalized_sql)))
    rows = timed("engine", lambda: engine.run(sql, env.settings.query_timeout_s))
    if again:  # warm: see the docstring
        timed("  same SQL again", lambda: engine.run(sql, env.settings.query_timeout_s))
    released = timed("release", lambda: release(rows.rows, plan.analysis, price, env.sampler))
    result = pipeline.Answer(prepared, charge, released, None)
    body = timed("render", lambda: routes._render(result, env))
    timed("  of which budget", lambda: budget_now(env, analyst.name, dataset, prepared.budget))
    stored = StoredRelease(analyst.name, dataset.name, prepared.request_sha256, charge.id, body)
    timed("store+audit", lambda: env.ledger.store_release(stored, answered(charge, plan.normalized_sql)))


def repeats(env: pipeline.Env, analyst: Any, count: int, timed: Stages) -> None:
    """`count` identical requests after a first one: each answered from its stored release (checked)."""
    request = QueryRequest(sql=SQL.format(i="_repeat"))

    def ask() -> bool:
        reply = routes.query_work(request, analyst, env, SimpleNamespace())(Deadline(env.settings.query_timeout_s))
        summarised(reply.body)  # what the route sends
        return reply.repeat

    if ask() or not ask():
        raise SystemExit("the first request must be new and the second a repeat")
    for _ in range(count):
        if not timed("repeat (whole)", ask):
            raise SystemExit("a repeat was not answered from the stored release")


def drill_down(i: int) -> str:
    """The `i`-th earlier per-cell query: a region and a five-year age band (a few cells of visits each)."""
    regions = ("north", "south", "east", "west", "central")
    low = 18 + 5 * ((i // len(regions)) % 15)
    return (f"SELECT category, COUNT(*) AS n FROM visits WHERE region = '{regions[i % len(regions)]}' "
            f"AND age BETWEEN {low} AND {low + 4} GROUP BY category")


def charge_history(env: pipeline.Env, analyst: Any, count: int) -> int:
    """`count` per-cell charges admitted as the pipeline admits them (nothing run or released); the cells
    touched under the rule in force."""
    for i in range(count):
        prepared = pipeline.prepare(QueryRequest(sql=drill_down(i), epsilon=Decimal("0.01")), analyst, env.policy,
                                    env.sampler.salt())
        dataset, plan, price = prepared.dataset, prepared.plan, prepared.plan.price
        if plan.scope is None:
            raise SystemExit(f"not a per-cell charge: {drill_down(i)}")
        env.ledger.admit(Admission(
            analyst=analyst.name, dataset=dataset.name, sql_sha256=plan.sql_sha256, event=price.event,
            epsilon=price.epsilon, delta=price.delta, composition=price.composition, budget=prepared.budget,
            accounting=dataset.accounting, dataset_budget=dataset.budget, scope=plan.scope, sql=plan.normalized_sql))
    dataset = env.policy.dataset("demo")
    assert dataset is not None
    tallied = env.ledger.tallied(dataset="demo", analyst=analyst.name, rule=dataset.accounting.rule)
    return sum(int((space.amount != 0).sum()) for space in tallied.spaces)


def with_history(settings: Settings, directory: Path, history: int, count: int) -> tuple[int, Stages]:
    """The route's whole work for `count` distinct small answers after `history` per-cell charges."""
    settings = settings.model_copy(update={"ledger": str(fresh_ledger(directory))})
    env = build_env(settings)
    try:
        analyst = next(a for a in env.policy.analysts if a.name == "analyst")
        touched = charge_history(env, analyst, history)
        timed = Stages()

        def ask(i: int, stage: Stages) -> None:
            request = QueryRequest(sql=SQL.format(i=f"_h{history}_{i}"), epsilon=Decimal("0.01"))
            reply = stage("answer (whole)", lambda: routes.query_work(request, analyst, env, SimpleNamespace())(
                Deadline(env.settings.query_timeout_s)))
            if reply.repeat:
                raise SystemExit("a distinct request was answered as a repeat")
            stage("  summary", lambda: summarised(reply.body))  # what the route sends by default

        for i in range(10):  # untimed: warm
            ask(10**6 + i, Stages())
        for i in range(count):
            ask(i, timed)
        return touched, timed
    finally:
        pipeline_close(env)


def plain(db: Path, settings: Settings, count: int) -> tuple[float, float]:
    conn = duckdb.connect(str(db), read_only=True, config={"threads": settings.threads,
                                                          "memory_limit": settings.memory_limit})
    try:
        for _ in range(20):
            conn.execute(SQL.format(i=0)).fetchall()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(count):
            conn.execute(SQL.format(i=0)).fetchall()
        return time.process_time() - cpu, time.perf_counter() - wall
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--count", type=int, default=300, help="distinct queries timed (after 20 untimed)")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    parser.add_argument("--again", action="store_true", help="also time each engine run repeated at once (warm)")
    parser.add_argument("--repeats", type=int, default=300, help="identical requests timed after (0: none)")
    parser.add_argument("--history", help="comma-separated counts of earlier per-cell charges (issue #32)")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    meta, _ = ensure_dataset(directory, rows=args.rows, users=args.users)
    policy = directory / "policy.toml"
    set_bounding(policy, "store")
    settings = Settings(policy=policy, ledger=str(fresh_ledger(directory)))
    build_bounding_store(settings)
    if args.history:
        return history_report(settings, directory, [int(n) for n in args.history.split(",")], args.count)
    load_before = os.getloadavg()[0]
    plain_cpu, plain_wall = plain(directory / "demo.duckdb", settings, args.count)
    env = build_env(settings)
    try:
        analyst = next(a for a in env.policy.analysts if a.name == "analyst")
        warm, timed = Stages(), Stages()
        for i in range(20):
            one(env, analyst, 10**6 + i, warm)
        for i in range(args.count):
            one(env, analyst, i, timed, args.again)
        again = Stages()
        if args.repeats:
            repeats(env, analyst, args.repeats, again)
    finally:
        pipeline_close(env)
    print(f"dataset {meta['rows']:,} visits, {meta['users']:,} users; {args.count} distinct queries; "
          f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(row("plain DuckDB", plain_cpu, plain_wall, args.count))
    total_cpu = total_wall = 0.0
    for stage, (cpu, wall) in timed.sums.items():
        print(row(stage, cpu, wall, args.count))
        if not stage.startswith(" "):
            total_cpu, total_wall = total_cpu + cpu, total_wall + wall
    print(row("total", total_cpu, total_wall, args.count))
    for stage, (cpu, wall) in again.sums.items():
        print(row(stage, cpu, wall, args.repeats))
    return 0


def history_report(settings: Settings, directory: Path, counts: list[int], count: int) -> int:
    load_before = os.getloadavg()[0]
    results = [(n, *with_history(settings, directory, n, count)) for n in counts]
    print(f"{count} distinct small answers (route's whole work) after n earlier per-cell charges; "
          f"load {load_before:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for n, touched, timed in results:
        for stage, (cpu, wall) in timed.sums.items():
            print(f"n={n:5d} cells touched {touched:4d}  " + row(stage, cpu, wall, count))
    return 0


def pipeline_close(env: pipeline.Env) -> None:
    close_env(env)


if __name__ == "__main__":
    sys.exit(main())
