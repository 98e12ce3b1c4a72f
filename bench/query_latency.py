"""Query latency of the DP proxy against plain DuckDB on the demo dataset (docs/privacy.md §11).

    python bench/query_latency.py [--rows 10000000] [--users 200000] [--repeat 30] [--dir bench/data]

For each workload query it measures, with time.perf_counter, one untimed warm-up per measurement:

    (a) plain     plain DuckDB running the analyst's SQL as is (non-private) on a read-only connection
                  with the engine's threads and memory limit
    engine        the rewritten (bounded, clamped) SQL alone, through proxy.engines.duckdb_engine.Engine.run
    no-bound      diagnostic: the rewritten SQL with its QUALIFY clauses (the L∞ and L0 contribution
                  bounding) removed, same engine; engine − no-bound is the cost of bounding
    (b) pipeline  proxy.pipeline.answer in process: plan, real SQLite ledger admit, engine, release with the
                  real OpenDP sampler (on_admitted does nothing)
    (c) HTTP      POST /v1/query to a real `python -m proxy serve` (uvicorn) on 127.0.0.1, httpx client
    (d) baseline  POST /v1/query of the plain SQL to bench/baseline_server.py, started beside the product:
                  plain DuckDB on the same file behind the product's HTTP stack (issue #32's denominator);
                  its requests alternate with (c)'s, one each, so both see the same minutes of a shared
                  machine; (c)/(d) at p50 and p90 is the DP overhead end to end, and so is a stored
                  release's answer (an identical request) over (d)

plus the proxy's own stages (prepare/plan, ledger admit, release, ledger spent) in isolation.

Each measurement runs `--repeat` times or until `--max-seconds` have passed (at least 3 runs), whichever
comes first; the number of runs is reported. Phases run one after the other (never two things at once):
plain, then the in-process proxy, then the HTTP server. A measurement whose warm-up fails (engine timeout,
out of memory) is reported as failed; the later measurements of that query are then skipped.

The dataset is proxy.cli.demo.build_demo at the requested size in --dir, reused when dataset.json there
records the same size. The generated policy's budgets lines are rewritten to a budget large enough for
the run; every run uses a fresh ledger file (bench-ledger.sqlite in --dir).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import itertools
import json
import logging
import os
import platform
import re
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import httpx  # noqa: E402
import numpy as np  # noqa: E402
import sqlglot  # noqa: E402
from sqlglot import exp  # noqa: E402
from utility import request_epsilon, utility  # noqa: E402

from accountant.ledger.charges import Admission  # noqa: E402
from proxy import pipeline  # noqa: E402
from proxy.app import build_env  # noqa: E402
from proxy.cli.demo import build_demo  # noqa: E402
from proxy.policy.load import AnalystPolicy, load_policy  # noqa: E402
from proxy.query.release.publish import release  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402
from proxy.settings import Settings  # noqa: E402

DATASET = "demo"
BENCH_BUDGET = "budgets = { demo = { epsilon = 1e9, delta = 0.5 } }"
_BUDGET_LINE = re.compile(r"^budgets = \{ demo = \{ epsilon = [^,{}]+, delta = [^,{}]+ \} \}$", re.MULTILINE)
MIN_RUNS = 3
EPSILON = 0.1  # the demo policy's default ε per query
_UNIQUE = itertools.count(1)


def unique_request(sql: str) -> QueryRequest:
    """A request for `sql` that is never a repeat of an earlier one: ε differs in the 9th decimal.

    The proxy may answer an identical request (same SQL and parameters) from its stored releases without
    running it; a benchmark of the query path must not hit that shortcut.
    """
    # a decimal: a float such as 0.100000001 is exactly a 55-digit number, which requests refuse (40 digits)
    return QueryRequest(sql=sql, epsilon=Decimal(f"{EPSILON + next(_UNIQUE) * 1e-9:.9f}"))


def prepare(req: QueryRequest, analyst: AnalystPolicy, env: Any) -> Any:
    """pipeline.prepare with a fresh salt, as the request path draws one (older versions take no salt)."""
    if "salt" in inspect.signature(pipeline.prepare).parameters:
        return pipeline.prepare(req, analyst, env.policy, env.sampler.salt())
    return pipeline.prepare(req, analyst, env.policy)


def answer(req: QueryRequest, analyst: AnalystPolicy, env: Any) -> Any:
    """pipeline.answer for one request, on_admitted doing nothing: plan, admit, run, release.

    Newer versions take the prepared query instead of the request; prepare is then timed here too.
    """
    first = next(iter(inspect.signature(pipeline.answer).parameters))
    if first == "prepared":
        return pipeline.answer(prepare(req, analyst, env), analyst, env, lambda charge: None)
    return pipeline.answer(req, analyst, env, lambda charge: None)


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    what: str
    sql: str


WORKLOAD = (
    Workload("region_count", "COUNT(*) by region: public, unit-level key",
             "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"),
    Workload("category_sum_avg", "SUM/AVG(amount) by category: public, row-level key, max_groups 4",
             "SELECT category, SUM(amount) AS total, AVG(amount) AS mean FROM visits GROUP BY category"),
    Workload("day_distinct_users", "COUNT(DISTINCT user_id) by day: private partition selection",
             "SELECT day, COUNT(DISTINCT user_id) AS users FROM visits GROUP BY day"),
    Workload("filtered_avg", "AVG(duration_s), WHERE filter, no GROUP BY",
             "SELECT AVG(duration_s) AS mean_duration FROM visits WHERE category = 'travel' AND amount > 50"),
    Workload("users_by_plan", "users table: COUNT(*) by plan",
             "SELECT plan, COUNT(*) AS n FROM users GROUP BY plan"),
    Workload("region_category", "two keys: COUNT(*), SUM(amount) by region, category",
             "SELECT region, category, COUNT(*) AS n, SUM(amount) AS total FROM visits"
             " GROUP BY region, category"),
    Workload("day_filtered_count", "COUNT(*) by category, row-level WHERE on day",
             "SELECT category, COUNT(*) AS n FROM visits WHERE day BETWEEN DATE '2026-03-01' AND DATE '2026-05-31'"
             " GROUP BY category"),
    Workload("region_filtered_count", "COUNT(*) by region (unit-level key), row-level WHERE on amount",
             "SELECT region, COUNT(*) AS n FROM visits WHERE amount > 100 GROUP BY region"),
    Workload("drilldown", "COUNT(*) by category, unit-level WHERE (per-cell accounting)",
             "SELECT category, COUNT(*) AS n FROM visits WHERE region = 'north' AND age BETWEEN 30 AND 39"
             " GROUP BY category"),
    Workload("count_sum_total", "COUNT(*), SUM(amount), no GROUP BY",
             "SELECT COUNT(*) AS n, SUM(amount) AS total FROM visits"),
    Workload("age_histogram", "COUNT(*) by a computed key: age buckets of 10 (public, unit-level)",
             "SELECT CAST(FLOOR(age / 10) * 10 AS INTEGER) AS age_group, COUNT(*) AS n FROM visits"
             " GROUP BY CAST(FLOOR(age / 10) * 10 AS INTEGER)"),
    Workload("plan_join", "COUNT(*) by users.plan: visits JOIN users on the privacy unit",
             "SELECT u.plan, COUNT(*) AS n FROM visits v JOIN users u USING (user_id) GROUP BY u.plan"),
)


# --- measuring ------------------------------------------------------------------------------------


def measure(fn: Callable[[], object], *, repeat: int, max_seconds: float,
            cpu: Callable[[], float] = time.process_time) -> dict[str, Any]:
    """Warm up once, then time `fn` `repeat` times or until `max_seconds` (at least MIN_RUNS runs).

    Besides wall time (perf_counter), `cpu` (cumulative CPU seconds of every thread doing the work; by
    default this process, whose DuckDB threads are its own) gives the mean CPU time per run: unlike wall
    time, it barely moves when other processes compete for the cores.
    """
    try:
        fn()
    except Exception as err:
        return {"error": _describe(err), "phase": "warm-up"}
    samples: list[float] = []
    started, cpu_started = time.perf_counter(), cpu()
    while len(samples) < repeat:
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as err:
            return {"error": _describe(err), "phase": f"run {len(samples) + 1}", **_stats(samples)}
        samples.append((time.perf_counter() - t0) * 1000)
        if time.perf_counter() - started >= max_seconds and len(samples) >= MIN_RUNS:
            break
    return {**_stats(samples), "cpu_ms_mean": (cpu() - cpu_started) * 1000 / len(samples)}


def measure_pair(first: Callable[[], object], second: Callable[[], object], *, repeat: int, max_seconds: float,
                 servers: tuple[Callable[[], float], Callable[[], float]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`first` and `second` alternately (one warm-up each), `repeat` times each or until `max_seconds`: two cells
    as `measure` gives, each with `cpu_ms_mean` (its server's CPU, `servers`, plus this client's) and
    `server_cpu_ms_mean` (its server's alone)."""
    fns = (first, second)
    for fn in fns:
        try:
            fn()
        except Exception as err:
            failed = {"error": _describe(err), "phase": "warm-up"}
            return failed, failed
    samples: tuple[list[float], list[float]] = ([], [])
    client, server = [0.0, 0.0], [0.0, 0.0]
    started = time.perf_counter()
    while len(samples[1]) < repeat:
        for i, fn in enumerate(fns):
            s0, c0, t0 = servers[i](), time.process_time(), time.perf_counter()
            try:
                fn()
            except Exception as err:
                cell = {"error": _describe(err), "phase": f"run {len(samples[i]) + 1}", **_stats(samples[i])}
                return (cell, {**_stats(samples[1])}) if i == 0 else ({**_stats(samples[0])}, cell)
            samples[i].append((time.perf_counter() - t0) * 1000)
            client[i] += time.process_time() - c0
            server[i] += servers[i]() - s0
        if time.perf_counter() - started >= max_seconds and len(samples[1]) >= MIN_RUNS:
            break
    cells = []
    for i in range(2):
        n = len(samples[i])
        cells.append({**_stats(samples[i]), "cpu_ms_mean": (client[i] + server[i]) * 1000 / n,
                      "server_cpu_ms_mean": server[i] * 1000 / n})
    return cells[0], cells[1]


def _stats(samples_ms: list[float]) -> dict[str, Any]:
    if not samples_ms:
        return {"n": 0}
    a = np.asarray(samples_ms)
    return {
        "n": len(samples_ms),
        "loadavg_1min_after": round(os.getloadavg()[0], 2),
        "p50_ms": float(np.percentile(a, 50)),
        "p90_ms": float(np.percentile(a, 90)),
        "p95_ms": float(np.percentile(a, 95)),
        "mean_ms": float(a.mean()),
        "min_ms": float(a.min()),
        "max_ms": float(a.max()),
        "samples_ms": [round(s, 3) for s in samples_ms],
    }


def _describe(err: BaseException) -> str:
    code = getattr(err, "code", None)
    text = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}" + (f" [{code}]" if code else "") + (f": {text[:160]}" if text else "")


def _ok(cell: dict[str, Any] | None) -> bool:
    return bool(cell) and "error" not in cell and "skipped" not in cell and cell.get("n", 0) > 0


# --- the dataset ----------------------------------------------------------------------------------


def ensure_dataset(directory: Path, *, rows: int, users: int) -> tuple[dict[str, Any], str]:
    """The demo dataset of this size in `directory` (built unless already there), and the analyst key."""
    directory.mkdir(parents=True, exist_ok=True)
    meta_path = directory / "dataset.json"
    files = [directory / name for name in ("demo.duckdb", "policy.toml", "keys.env")]
    meta: dict[str, Any] | None = None
    if meta_path.exists() and all(f.exists() for f in files):
        with contextlib.suppress(ValueError, OSError):
            meta = json.loads(meta_path.read_text())
    if meta is not None and meta.get("rows") == rows and meta.get("users") == users:
        meta = {**meta, "reused": True}
    else:
        meta_path.unlink(missing_ok=True)  # never leave a size record next to a half-built dataset
        print(f"building the demo dataset: {rows:,} visits of {users:,} users in {directory}/ ...", flush=True)
        t0 = time.perf_counter()
        build_demo(directory, users=users, rows=rows)
        meta = {"rows": rows, "users": users, "generator": "proxy.cli.demo.build_demo",
                "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "build_seconds": round(time.perf_counter() - t0, 2)}
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        meta = {**meta, "reused": False}
    set_bench_budget(directory / "policy.toml")
    keys = dict(line.split("=", 1) for line in (directory / "keys.env").read_text().split() if "=" in line)
    return meta, keys["DPPROXY_ANALYST_KEY"]


def set_bench_budget(policy: Path) -> None:
    """Rewrite the budgets lines of the generated policy (and nothing else) to the bench budget."""
    text = policy.read_text()
    new, count = _BUDGET_LINE.subn(BENCH_BUDGET, text)
    if count == 0:
        raise SystemExit(f"{policy}: no generated budgets line to rewrite; delete the directory and rerun")
    if new != text:
        policy.write_text(new)


def fresh_ledger(directory: Path) -> Path:
    ledger = directory / "bench-ledger.sqlite"
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    return ledger


def in_process(policy: Path, directory: Path, key: str) -> tuple[Any, AnalystPolicy]:
    """The product in this process over `policy` with a fresh ledger in `directory` and its bounding store built
    from scratch: its environment (`proxy.app.Env`) and the analyst holding `key`."""
    settings = Settings(policy=policy, ledger=fresh_ledger(directory))
    build_bounding_store(settings)
    env = build_env(settings)
    analyst = env.policy.analyst_by_key_hash(hashlib.sha256(key.encode()).hexdigest())
    assert analyst is not None
    return env, analyst


def close_env(env: Any) -> None:
    """Close what `in_process` (or `build_env`) opened: the ledger and every dataset's engine."""
    env.ledger.close()
    for _, engine in env.engines:
        engine.close()


def unbounded(sql: str) -> str:
    """Diagnostic only: the rewritten SQL with every QUALIFY (the row and group bounding) removed, and on the
    bounding store every rank filter (`__row_rank… <= k`, `__group_rank… <= g`) replaced by TRUE (the per-cell
    path of a row-level WHERE keeps its per-cell aggregation: only its L0 filter goes)."""
    tree = sqlglot.parse_one(sql, read="duckdb")
    for select in tree.find_all(exp.Select):
        select.set("qualify", None)

    def no_rank_filter(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.LTE) and isinstance(node.this, exp.Column) and node.this.name.startswith(
                ("__row_rank", "__group_rank")):
            return exp.true()
        return node

    return tree.transform(no_rank_filter).sql(dialect="duckdb")


_DATASET_LINE = re.compile(r"^\[datasets\.demo\]\n", re.MULTILINE)
_BOUNDING_LINE = re.compile(r'^bounding = "[a-z_]+".*\n', re.MULTILINE)
_ONE_ROW_LINE = re.compile(r"^one_row_per_unit = true.*\n", re.MULTILINE)


def set_bounding(policy: Path, bounding: str) -> None:
    """Set the demo dataset's `bounding` (and declare `users` one row per unit, which the store checks)."""
    text = _ONE_ROW_LINE.sub("", _BOUNDING_LINE.sub("", policy.read_text()))
    text = _DATASET_LINE.sub(f'[datasets.demo]\nbounding = "{bounding}"\n', text, count=1)
    if bounding == "store":
        text = text.replace("[datasets.demo.tables.users]\n", "[datasets.demo.tables.users]\none_row_per_unit = true\n")
    policy.write_text(text)


def build_bounding_store(settings: Settings) -> float:
    """Build the demo's bounding store from scratch (as `dpproxy prepare` does); its wall time in seconds."""
    from proxy.app import store_dir
    from proxy.store.duckdb_store import build_store, deployment_key

    policy = load_policy(settings.policy)
    dataset = policy.dataset(DATASET)
    assert dataset is not None
    directory = store_dir(settings, policy)
    for old in directory.glob(f"{DATASET}.store-*.duckdb"):
        old.unlink()
    started = time.perf_counter()
    build_store(DATASET, dataset.path, dataset.catalog, directory, deployment_key(directory),
                threads=settings.threads, memory_limit=settings.memory_limit)
    return time.perf_counter() - started


# --- phases ---------------------------------------------------------------------------------------


def phase_plain(db: Path, settings: Settings, results: dict[str, dict[str, Any]], args: argparse.Namespace,
                facts: dict[str, Any]) -> None:
    config = {"threads": settings.threads, "memory_limit": settings.memory_limit}
    conn = duckdb.connect(str(db), read_only=True, config=config)
    try:
        conn.execute("SET enable_progress_bar = false")
        facts["visits_rows"] = conn.execute("SELECT COUNT(*) FROM visits").fetchone()[0]  # type: ignore[index]
        facts["users_rows"] = conn.execute("SELECT COUNT(*) FROM users").fetchone()[0]  # type: ignore[index]
        for w in WORKLOAD:
            _progress(w.name, "plain")
            results[w.name]["plain"] = measure(
                lambda w=w: conn.execute(w.sql).fetchall(), repeat=args.repeat, max_seconds=args.max_seconds)
    finally:
        conn.close()


def phase_in_process(settings: Settings, analyst_key: str, results: dict[str, dict[str, Any]],
                     args: argparse.Namespace) -> None:
    env = build_env(settings)
    try:
        analyst = env.policy.analyst_by_key_hash(hashlib.sha256(analyst_key.encode()).hexdigest())
        assert analyst is not None, "the analyst key from keys.env does not match the policy"
        engine = env.engine(DATASET)
        for w in WORKLOAD:
            r = results[w.name]
            prepared = prepare(QueryRequest(sql=w.sql), analyst, env)
            r["rewritten_sql"] = prepared.plan.sql
            r["auto_bounds"] = prepared.plan.auto is not None  # the server runs other SQL, at the chosen bounds
            r["unbounded_sql"] = unbounded(prepared.plan.sql)
            r["price"] = {"epsilon": prepared.plan.price.epsilon, "delta": prepared.plan.price.delta,
                          "partitions": prepared.plan.analysis.partitions}

            _progress(w.name, "engine")
            r["engine"] = measure(lambda p=prepared: engine.run(p.plan.sql),
                                  repeat=args.repeat, max_seconds=args.max_seconds)
            if not _ok(r["engine"]):
                reason = f"skipped: the rewritten SQL failed on the engine ({r['engine'].get('error')})"
                for key in ("no_bound", "pipeline", "stages", "http"):
                    r[key] = {"skipped": reason}
                continue
            _progress(w.name, "no-bound")
            r["no_bound"] = measure(lambda sql=r["unbounded_sql"]: engine.run(sql),
                                    repeat=args.repeat, max_seconds=args.max_seconds)
            _progress(w.name, "pipeline")
            r["pipeline"] = measure(lambda w=w, r=r: _answer(unique_request(w.sql), analyst, env, r),
                                    repeat=args.repeat, max_seconds=args.max_seconds)
            _progress(w.name, "stages")
            r["stages"] = measure_stages(w.sql, analyst, env, args)
    finally:
        close_env(env)


def phase_utility(db: Path, settings: Settings, analyst_key: str, results: dict[str, dict[str, Any]],
                  args: argparse.Namespace) -> None:
    """The utility column (bench/utility.py): `--utility` answers per query at `--utility-epsilon`."""
    env = build_env(settings)
    conn = duckdb.connect(str(db), read_only=True, config={"threads": settings.threads,
                                                          "memory_limit": settings.memory_limit})
    serial = itertools.count(1)
    try:
        analyst = env.policy.analyst_by_key_hash(hashlib.sha256(analyst_key.encode()).hexdigest())
        assert analyst is not None

        def ask(sql: str) -> list[Any]:
            req = QueryRequest(sql=sql, epsilon=request_epsilon(args.utility_epsilon, next(serial)))
            return list(answer(req, analyst, env).release.rows)

        for w in WORKLOAD:
            _progress(w.name, "utility")
            n_keys = len(prepare(QueryRequest(sql=w.sql), analyst, env).plan.analysis.keys)
            try:
                results[w.name]["utility"] = utility(w.sql, conn.execute(w.sql).fetchall(), n_keys, ask,
                                                     args.utility)
            except Exception as err:  # reported in the table, like a failed latency measurement
                results[w.name]["utility"] = {"error": _describe(err)}
    finally:
        conn.close()
        close_env(env)


def _answer(req: QueryRequest, analyst: AnalystPolicy, env: Any, r: dict[str, Any]) -> None:
    result = answer(req, analyst, env)
    r["released_rows"] = len(result.release.rows)


def measure_stages(sql: str, analyst: AnalystPolicy, env: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The proxy's own work, each step alone (the engine step is the `engine` measurement)."""
    req = QueryRequest(sql=sql)
    prepared = prepare(req, analyst, env)
    price = prepared.plan.price
    rows = env.engine(DATASET).run(prepared.plan.sql).rows
    repeat = max(args.repeat, 30)  # these are milliseconds: always take enough runs

    extra: dict[str, Any] = {}  # newer ledgers also take the dataset's accounting rule and shared budget
    admit_params = inspect.signature(env.ledger.admit).parameters
    if "accounting" in admit_params and hasattr(prepared.dataset, "accounting"):
        extra["accounting"] = prepared.dataset.accounting
    if "dataset_budget" in admit_params and hasattr(prepared.dataset, "budget"):
        extra["dataset_budget"] = prepared.dataset.budget

    def admit() -> None:
        env.ledger.admit(Admission(analyst=analyst.name, dataset=DATASET, sql_sha256=prepared.plan.sql_sha256,
                         event=price.event, epsilon=price.epsilon, delta=price.delta,
                         composition=price.composition, budget=prepared.budget, **extra))

    return {
        "prepare": measure(lambda: prepare(req, analyst, env), repeat=repeat, max_seconds=5),
        "admit": measure(admit, repeat=repeat, max_seconds=5),
        "release": measure(lambda: release(rows, prepared.plan.analysis, price, env.sampler),
                           repeat=repeat, max_seconds=5),
        "spent": measure(lambda: env.ledger.spent(analyst.name, DATASET), repeat=repeat, max_seconds=5),
        "engine_result_rows": len(rows),
    }


def phase_http(settings: Settings, policy: Path, ledger: Path, analyst_key: str, directory: Path,
               results: dict[str, dict[str, Any]], args: argparse.Namespace, facts: dict[str, Any]) -> None:
    port, baseline_port = _free_port(), _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "DPPROXY_LEDGER": str(ledger), "DPPROXY_THREADS": str(settings.threads),
           "DPPROXY_MEMORY_LIMIT": settings.memory_limit, "DPPROXY_QUERY_TIMEOUT_S": str(settings.query_timeout_s),
           "DPPROXY_ANSWER_MEMORY": str(settings.answer_memory)}  # the server remembers as the in-process env does
    log_path, baseline_log = directory / "server.log", directory / "baseline-server.log"
    with log_path.open("w") as log, _server(
        [sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port", str(port)], env, log
    ) as proc, baseline_log.open("w") as blog, _server(
        [sys.executable, str(ROOT / "bench" / "baseline_server.py"), "--policy", str(policy), "--port",
         str(baseline_port)], env, blog
    ) as baseline:
        base = f"http://127.0.0.1:{port}"
        servers = (lambda: _process_cpu_seconds(proc.pid), lambda: _process_cpu_seconds(baseline.pid))

        def cpu() -> float:  # the server's CPU (all its threads) plus this client's
            return _process_cpu_seconds(proc.pid) + time.process_time()

        t0 = time.perf_counter()
        headers = {"Authorization": f"Bearer {analyst_key}"}
        with httpx.Client(base_url=base, timeout=settings.query_timeout_s + 60, headers=headers) as client, \
                httpx.Client(base_url=f"http://127.0.0.1:{baseline_port}", timeout=settings.query_timeout_s + 60,
                             headers=headers) as plain_client:
            _wait_ready(client, proc, log_path)
            facts["server_start_seconds"] = round(time.perf_counter() - t0, 2)
            _wait_ready(plain_client, baseline, baseline_log)
            for w in WORKLOAD:
                r = results[w.name]
                if "skipped" in r.get("http", {}):
                    continue
                _progress(w.name, "http and baseline")
                r["http"], r["baseline"] = measure_pair(
                    lambda w=w: _post(client, unique_request(w.sql)), lambda w=w: _post_plain(plain_client, w.sql),
                    repeat=args.repeat, max_seconds=args.max_seconds, servers=servers)
                if _ok(r["http"]) and _post(client, QueryRequest(sql=w.sql)) is not None:
                    # the server keeps releases: time an identical request, answered from the stored release
                    _progress(w.name, "http repeat")
                    r["http_repeat"] = measure(lambda w=w: _post(client, QueryRequest(sql=w.sql), repeat=True),
                                               repeat=args.repeat, max_seconds=args.max_seconds, cpu=cpu)


def _post_plain(client: httpx.Client, sql: str) -> None:
    """POST one plain query to the baseline endpoint (bench/baseline_server.py)."""
    response = client.post("/v1/query", json={"sql": sql, "epsilon": EPSILON})
    if response.status_code != 200:
        raise RuntimeError(f"baseline HTTP {response.status_code}: {response.text[:200]}")


def _process_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, all threads, from /proc (Linux; 0 elsewhere). Tick resolution."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _post(client: httpx.Client, req: QueryRequest, *, repeat: bool = False) -> bool | None:
    """POST one query; the X-DP-Repeat header's value (None when the server sends none)."""
    response = client.post("/v1/query", json=req.model_dump(exclude_none=True))
    body = response.json()
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code} {body.get('code')}: {body.get('error')}")
    header = response.headers.get("x-dp-repeat")
    was_repeat = None if header is None else header == "true"
    if was_repeat is not None and was_repeat != repeat:
        raise RuntimeError(f"X-DP-Repeat is {header}, expected {str(repeat).lower()}")
    return was_repeat


@contextlib.contextmanager
def _server(cmd: list[str], env: dict[str, str], log: Any) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()  # uvicorn shuts down gracefully on SIGTERM
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait_ready(client: httpx.Client, proc: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
        with contextlib.suppress(httpx.TransportError):
            if client.get("/healthz", timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    raise SystemExit(f"the server did not come up in 120 s; see {log_path}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _progress(query: str, what: str) -> None:
    print(f"  {query:<20} {what} ...", file=sys.stderr, flush=True)


# --- facts and report -----------------------------------------------------------------------------


def machine_facts(db: Path) -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), platform.processor() or "?")
    mem = next((int(line.split()[1]) // 1024 for line in _read("/proc/meminfo").splitlines()
                if line.startswith("MemTotal")), None)
    versions = {}
    for dist in ("duckdb", "sqlglot", "opendp", "fastapi", "uvicorn", "httpx", "pydantic", "numpy"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[dist] = metadata.version(dist)
    return {
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu": cpu,
        "memory_mb": mem,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "database_mb": round(db.stat().st_size / 2**20, 1),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
        "git_modified": (_git("status", "--porcelain") or "").splitlines(),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "loadavg_before": round(os.getloadavg()[0], 2),
    }


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def _p(cell: dict[str, Any] | None, key: str = "p50_ms") -> float | None:
    return cell.get(key) if _ok(cell) else None  # type: ignore[union-attr]


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den <= 0 else num / den


def derive(r: dict[str, Any]) -> dict[str, Any]:
    plain, engine, no_bound = _p(r.get("plain")), _p(r.get("engine")), _p(r.get("no_bound"))
    pipeline, http = _p(r.get("pipeline")), _p(r.get("http"))
    stages = r.get("stages") or {}
    own = [_p(stages.get(k)) for k in ("prepare", "admit", "release", "spent")]
    return {
        "pipeline_over_plain": _ratio(pipeline, plain),
        "http_over_plain": _ratio(http, plain),
        "engine_over_plain": _ratio(engine, plain),
        "bounding_ms": None if engine is None or no_bound is None else engine - no_bound,
        "bounding_share_of_engine": None if engine is None or no_bound is None else (engine - no_bound) / engine,
        "proxy_stages_ms": None if None in own else sum(own),  # type: ignore[arg-type]
        "pipeline_minus_engine_ms": None if pipeline is None or engine is None else pipeline - engine,
        "http_minus_pipeline_ms": None if http is None or pipeline is None else http - pipeline,
        "http_over_baseline_p50": _ratio(http, _p(r.get("baseline"))),
        "http_over_baseline_p90": _ratio(_p(r.get("http"), "p90_ms"), _p(r.get("baseline"), "p90_ms")),
        "repeat_over_baseline_p50": _ratio(_p(r.get("http_repeat")), _p(r.get("baseline"))),
        # the product's server CPU per answer beyond its engine's CPU for the same SQL: its fixed cost (not with
        # automatic bounds: `engine` then times the plan at the limits, the server the selection and the answer)
        "fixed_cpu_ms": None if _p(r.get("http"), "server_cpu_ms_mean") is None or engine is None
        or r.get("auto_bounds", True) else
        _p(r.get("http"), "server_cpu_ms_mean") - _p(r.get("engine"), "cpu_ms_mean"),  # type: ignore[operator]
    }


def _fmt(value: float | None, spec: str = ".1f", width: int = 8) -> str:
    return f"{'-' if value is None else format(value, spec):>{width}}"


def _cell_text(cell: dict[str, Any] | None) -> str:
    """p50 p95 n, fixed width (23 chars), or why there is no figure."""
    if _ok(cell):
        assert cell is not None
        return f"{cell['p50_ms']:>8.1f}{cell['p95_ms']:>9.1f}{cell['n']:>4d}  "
    if cell and "error" in cell:
        text = cell["error"]
        return f"{'FAILED ' + text.split(':')[0]:<23.23}"
    return f"{'skipped':>8}{'':15}"


def report(facts: dict[str, Any], settings: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    out = []
    line = "=" * 128
    out.append(line)
    out.append(f"dp-proxy query latency   {facts['visits_rows']:,} visits, {facts['users_rows']:,} users"
               f"  ({facts['database_mb']} MB DuckDB file)")
    v = facts["versions"]
    out.append(f"machine: {facts['cores']} cores ({facts['usable_cores']} usable), {facts['cpu']},"
               f" {facts['memory_mb']} MB RAM; Python {facts['python']}")
    out.append(f"versions: duckdb {v.get('duckdb')}, sqlglot {v.get('sqlglot')}, opendp {v.get('opendp')},"
               f" fastapi {v.get('fastapi')}, uvicorn {v.get('uvicorn')}, httpx {v.get('httpx')}")
    out.append(f"engine: threads {settings['threads']}, memory_limit {settings['memory_limit']},"
               f" query timeout {settings['query_timeout_s']} s (plain DuckDB uses the same threads and memory"
               f" limit);  repeat {settings['repeat']}, max {settings['max_seconds']} s per measurement,"
               f" 1 warm-up each")
    build = facts.get("store_build_seconds")
    out.append(f"bounding: {facts.get('bounding', 'per_query')}"
               + ("" if build is None else f"; bounding store built from scratch in {build} s (one-off)"))
    out.append(line)
    out.append("latency, ms: p50 p95 n (n = timed runs)")
    head = ["query", "(a) plain DuckDB", "engine: rewritten SQL", "(b) pipeline", "(c) HTTP"]
    out.append(f"{head[0]:<20}" + "".join(f"{h:>23}  " for h in head[1:]))
    out.append(f"{'':<20}" + f"{'p50':>8}{'p95':>9}{'n':>4}    " * 4)
    for name, r in results.items():
        out.append(f"{name:<20}" + "".join(
            f"{_cell_text(r.get(k)):>23}  " for k in ("plain", "engine", "pipeline", "http")))
    out.append("")
    out.append("ratios to (a) and where the time goes (p50, ms)")
    out.append(f"{'query':<20}{'(b)/(a)':>9}{'(c)/(a)':>9}{'eng/(a)':>9}{'no-bound':>10}{'bounding':>10}"
               f"{'bound %':>8}{'prepare':>9}{'admit':>8}{'release':>9}{'spent':>8}{'(b)-eng':>9}{'(c)-(b)':>9}"
               f"{'(c) rep':>9}")
    for name, r in results.items():
        d = r["derived"]
        st = r.get("stages") or {}
        share = d["bounding_share_of_engine"]
        out.append(
            f"{name:<20}{_fmt(d['pipeline_over_plain'], '.1f', 9)}{_fmt(d['http_over_plain'], '.1f', 9)}"
            f"{_fmt(d['engine_over_plain'], '.1f', 9)}{_fmt(_p(r.get('no_bound')), '.1f', 10)}"
            f"{_fmt(d['bounding_ms'], '.1f', 10)}{_fmt(None if share is None else 100 * share, '.0f', 8)}"
            f"{_fmt(_p(st.get('prepare')), '.2f', 9)}{_fmt(_p(st.get('admit')), '.2f', 8)}"
            f"{_fmt(_p(st.get('release')), '.2f', 9)}{_fmt(_p(st.get('spent')), '.2f', 8)}"
            f"{_fmt(d['pipeline_minus_engine_ms'], '.1f', 9)}{_fmt(d['http_minus_pipeline_ms'], '.1f', 9)}"
            f"{_fmt(_p(r.get('http_repeat')), '.1f', 9)}")
    out.append("  no-bound: the rewritten SQL without its QUALIFY clauses (no L∞/L0 bounding), diagnostic only;"
               " bounding = engine − no-bound")
    out.append("  prepare/admit/release/spent: the proxy's own steps, each timed alone;"
               " (b)-eng and (c)-(b): differences of p50s")
    out.append("  (c) rep: HTTP p50 of an identical request answered from the stored release, when the server"
               " keeps releases (else -)")
    load = facts.get("loadavg_before"), facts.get("loadavg_after")
    out.append(f"  1-min load average before/after the run: {load[0]} / {load[1]}"
               f" (other processes on this machine compete for the same {facts['usable_cores']} cores)")
    out.append("")
    out.append("CPU time per query, ms (mean over the timed runs, all threads; HTTP: server + client process)")
    cols = ("plain", "engine", "no_bound", "pipeline", "http")
    out.append(f"{'query':<20}{'(a) plain':>11}{'engine':>11}{'no-bound':>11}{'(b) pipe':>11}{'(c) HTTP':>11}"
               f"{'(b)/(a)':>9}{'(c)/(a)':>9}")
    for name, r in results.items():
        c = {k: _p(r.get(k), "cpu_ms_mean") for k in cols}
        out.append(f"{name:<20}" + "".join(_fmt(c[k], ".1f", 11) for k in cols)
                   + _fmt(_ratio(c["pipeline"], c["plain"]), ".1f", 9) + _fmt(_ratio(c["http"], c["plain"]), ".1f", 9))
    if any(_ok(r.get("baseline")) for r in results.values()):
        out.append("")
        out.append("against the baseline endpoint: (d) plain DuckDB on the same file behind the product's HTTP stack,"
                   " requests alternating with (c)'s (ms; ratios (c)/(d))")
        out.append(f"{'query':<20}{'(d) p50':>9}{'(d) p90':>9}{'(c) p50':>9}{'(c) p90':>9}{'p50 x':>8}{'p90 x':>8}"
                   f"{'rep x':>8}{'(c) srv':>9}{'(d) srv':>9}{'engine':>9}{'fixed':>8}")
        for name, r in results.items():
            d = r["derived"]
            out.append(
                f"{name:<20}{_fmt(_p(r.get('baseline')), '.1f', 9)}{_fmt(_p(r.get('baseline'), 'p90_ms'), '.1f', 9)}"
                f"{_fmt(_p(r.get('http')), '.1f', 9)}{_fmt(_p(r.get('http'), 'p90_ms'), '.1f', 9)}"
                f"{_fmt(d['http_over_baseline_p50'], '.2f', 8)}{_fmt(d['http_over_baseline_p90'], '.2f', 8)}"
                f"{_fmt(d['repeat_over_baseline_p50'], '.2f', 8)}"
                f"{_fmt(_p(r.get('http'), 'server_cpu_ms_mean'), '.1f', 9)}"
                f"{_fmt(_p(r.get('baseline'), 'server_cpu_ms_mean'), '.1f', 9)}"
                f"{_fmt(_p(r.get('engine'), 'cpu_ms_mean'), '.1f', 9)}{_fmt(d['fixed_cpu_ms'], '.1f', 8)}")
        out.append("  rep x: a stored release's answer (an identical request) over (d); srv: server CPU ms per request"
                   " (all threads); engine: the rewritten SQL's CPU in process; fixed = (c) srv − engine, the"
                   " product's CPU per request outside DuckDB (- with automatic bounds: engine then times the plan"
                   " at the limits)")
    if any("utility" in r for r in results.values()):
        out.append("")
        out.append("utility: median relative error per group against the plain unbounded answer (bench/utility.py)")
        for name, r in results.items():
            u = r.get("utility") or {}
            error = u.get("median_relative_error")
            text = u.get("error") or ("-" if error is None else f"{100 * error:.1f} %")
            out.append(f"{name:<22}{text:>10}   {u.get('answers', '-')} answers, {u.get('groups', '-')} groups")
    failures = [(name, k, r[k]) for name, r in results.items() for k in ("plain", "engine", "pipeline", "http")
                if isinstance(r.get(k), dict) and "error" in r[k]]
    if failures:
        out.append("")
        out.append("failures")
        for name, k, cell in failures:
            out.append(f"  {name:<20} {k:<9} {cell['phase']}: {cell['error']}")
    out.append(line)
    return "\n".join(out)


# --- main -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000, help="visits (default 10,000,000)")
    parser.add_argument("--users", type=int, default=200_000, help="users (default 200,000)")
    parser.add_argument("--repeat", type=int, default=30, help="timed runs per measurement (default 30)")
    parser.add_argument("--max-seconds", type=float, default=8.0,
                        help="stop a measurement after this many seconds of timed runs, once it has at least"
                             f" {MIN_RUNS} runs (default 8)")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data", help="dataset directory")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "query_latency.json")
    parser.add_argument("--memory-limit", default=None,
                        help="DuckDB memory limit for the engine, the server and plain DuckDB"
                             " (default: the product default, proxy.settings.Settings)")
    parser.add_argument("--timeout", type=float, default=None,
                        help="engine query timeout in seconds (default: the product default)")
    parser.add_argument("--no-http", action="store_true", help="skip the HTTP measurement")
    parser.add_argument("--answer-memory", type=int, default=None, metavar="N",
                        help="DPPROXY_ANSWER_MEMORY for the in-process env and the HTTP server: SQL texts whose exact"
                             " rows a bounding store remembers (default: the setting's, 64; 0: every answer scans)")
    parser.add_argument("--utility", type=int, default=0, metavar="N",
                        help="also N private answers per query at --utility-epsilon, scored against the plain answer"
                             " (median relative error per group; the issue asks N >= 20)")
    parser.add_argument("--utility-epsilon", type=float, default=1.0)
    parser.add_argument("--bounding", choices=("per_query", "store"), default="store",
                        help="the dataset's bounding: the bounding store (default), built from scratch first and"
                             " timed, or per-query windows")
    parser.add_argument("--engine", choices=("duckdb", "spark"), default="duckdb",
                        help="spark: the same workload on Spark local[2] from Parquet, against plain Spark SQL and"
                             " DuckDB (bench/spark_latency.py, which takes --rows, --users, --repeat, --dir, --out)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    if args.engine == "spark":
        import spark_latency  # bench/ is on sys.path; pyspark is the `spark` extra

        spark_out = args.out.with_name("spark_latency.json") if args.out.name == "query_latency.json" else args.out
        return spark_latency.main(["--rows", str(args.rows), "--users", str(args.users), "--repeat",
                                   str(args.repeat), "--dir", str(args.dir), "--out", str(spark_out)])
    logging.basicConfig(level=logging.ERROR)  # the engine logs failed queries at WARNING; we report them

    t_start = time.perf_counter()
    directory = args.dir.resolve()
    meta, analyst_key = ensure_dataset(directory, rows=args.rows, users=args.users)
    policy, db = directory / "policy.toml", directory / "demo.duckdb"
    set_bounding(policy, args.bounding)
    load_policy(policy)  # fail early if the budget rewrite broke anything
    ledger = fresh_ledger(directory)
    overrides: dict[str, Any] = {"policy": policy, "ledger": ledger}
    if args.memory_limit:
        overrides["memory_limit"] = args.memory_limit
    if args.timeout:
        overrides["query_timeout_s"] = args.timeout
    if args.answer_memory is not None:
        overrides["answer_memory"] = args.answer_memory
    settings = Settings(**overrides)

    facts = {**machine_facts(db), "dataset": meta, "bounding": args.bounding}
    if args.bounding == "store":
        print("building the bounding store ...", file=sys.stderr, flush=True)
        facts["store_build_seconds"] = round(build_bounding_store(settings), 2)
    run_settings = {"threads": settings.threads, "memory_limit": settings.memory_limit,
                    "answer_memory": settings.answer_memory,
                    "query_timeout_s": settings.query_timeout_s, "repeat": args.repeat,
                    "max_seconds": args.max_seconds, "min_runs": MIN_RUNS, "ledger": str(ledger),
                    "argv": sys.argv[1:] if argv is None else argv}
    results: dict[str, dict[str, Any]] = {w.name: {"what": w.what, "sql": w.sql} for w in WORKLOAD}

    print(f"dataset: {meta}", flush=True)
    if facts["loadavg_before"] >= 0.5 * (facts["usable_cores"] or 1):
        print(f"WARNING: the 1-minute load average is {facts['loadavg_before']} on {facts['usable_cores']} cores:"
              " other processes are using the CPU, so wall times will be inflated and noisy; the CPU-time"
              " table is less affected.", file=sys.stderr, flush=True)
    print("phase 1/3: plain DuckDB", file=sys.stderr, flush=True)
    phase_plain(db, settings, results, args, facts)
    print("phase 2/3: proxy in process", file=sys.stderr, flush=True)
    phase_in_process(settings, analyst_key, results, args)
    if args.utility:
        print(f"utility: {args.utility} answers per query at epsilon {args.utility_epsilon}", file=sys.stderr,
              flush=True)
        phase_utility(db, settings, analyst_key, results, args)
    if args.no_http:
        for r in results.values():
            r.setdefault("http", {"skipped": "--no-http"})
    else:
        print("phase 3/3: proxy over HTTP", file=sys.stderr, flush=True)
        phase_http(settings, policy, ledger, analyst_key, directory, results, args, facts)
    for r in results.values():
        r["derived"] = derive(r)
    facts["total_seconds"] = round(time.perf_counter() - t_start, 1)
    facts["loadavg_after"] = round(os.getloadavg()[0], 2)

    text = report(facts, run_settings, results)
    print(text)
    print(f"total time {facts['total_seconds']} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"facts": facts, "settings": run_settings, "queries": results},
                                   indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
