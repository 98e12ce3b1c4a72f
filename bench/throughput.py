"""Throughput of small queries over HTTP (issue #12): distinct `SELECT plan, COUNT(*) FROM users GROUP BY plan`.

Starts `python -m proxy serve` on the demo (bounding store, built first) on loopback, then measures
1. one client alone: latency percentiles of distinct requests, one after another;
2. `--clients` concurrent clients (threads, one keep-alive httpx client each) for `--seconds`: answers per
   second and latency percentiles;
and plain DuckDB on the same query in the same run (a read-only connection with the engine's threads), and
the baseline endpoint (bench/baseline_server.py: the same plain SQL behind the product's HTTP stack, started
beside the product) through the same two phases, just before the product's: the product's answers per
second and latency (p50, p90) are reported as ratios to it (issue #32: >= 50 % of its answers/s at 8 clients,
p50 alone <= 1.5x).
Beside the wall times, the server's CPU time per answer (its process, from /proc): on a loaded machine it
moves far less than latency, so it is the figure to compare between runs; and of it, the event loop's (the
main thread: HTTP parsing, middlewares, routing, the access log), the HTTP layer's share. With `--workers N`
the server is N processes (`dpproxy serve --workers N`): CPU is summed over them and their supervisor.
Every request differs from all earlier ones (the output alias `n<i>`), so none is answered from a stored
release; a non-200 answer fails the run. The bench analyst's per-analyst limits (proxy/policy/limits.py: 600 queries
per minute by default) are raised in the bench's policy, so the rate measured is the server's, not the
throttle's. The machine load before and after is printed: on a shared machine
wall times are inflated, so compare with the plain figure of the same run.

    python bench/throughput.py --rows 1000000 --users 50000 --clients 8 --seconds 20

Example (the latency summary used for every row of the report):
    >>> summary([4.0, 1.0, 3.0, 2.0])
    {'n': 4, 'p50_ms': 2.5, 'p90_ms': 4.0, 'p95_ms': 4.0, 'mean_ms': 2.5}
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from query_latency import (  # noqa: E402
    _free_port,
    _server,
    _wait_ready,
    build_bounding_store,
    ensure_dataset,
    fresh_ledger,
    set_bounding,
)

from proxy.settings import Settings  # noqa: E402

SQL = "SELECT plan, COUNT(*) AS n{i} FROM users GROUP BY plan"
_UNIQUE = itertools.count(1)
_UNIQUE_LOCK = threading.Lock()


def summary(samples_ms: list[float]) -> dict[str, Any]:
    """n, p50, p90 and p95 (nearest rank) and mean of latencies in ms."""
    ordered = sorted(samples_ms)
    if not ordered:
        return {"n": 0}

    def rank(q: float) -> float:
        return round(ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))], 2)

    return {"n": len(ordered), "p50_ms": round(statistics.median(ordered), 2), "p90_ms": rank(0.9),
            "p95_ms": rank(0.95), "mean_ms": round(statistics.fmean(ordered), 2)}


def set_limits(policy: Path, clients: int) -> None:
    """Raise the bench analyst's rate and concurrency limits in `policy` (written by the demo) for this run."""
    lines = [line for line in policy.read_text().splitlines()
             if not line.startswith(("queries_per_minute =", "max_concurrent_queries ="))]
    at = lines.index("[analysts.analyst]") + 1
    lines[at:at] = ["queries_per_minute = 1000000", f"max_concurrent_queries = {max(16, clients)}"]
    policy.write_text("\n".join(lines) + "\n")


def _next_sql() -> str:
    with _UNIQUE_LOCK:
        return SQL.format(i=next(_UNIQUE))


def cpu_seconds(pid: int, task: int | None = None) -> float | None:
    """User + system CPU seconds of process `pid` (or of its thread `task`) so far (Linux /proc; None elsewhere)."""
    try:
        stat = Path(f"/proc/{pid}/stat" if task is None else f"/proc/{pid}/task/{task}/stat")
        fields = stat.read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loop_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid`'s main thread so far: the server's event loop (uvicorn runs
    it there: HTTP parsing, middlewares, routing, the access log), apart from the query threads and DuckDB's."""
    return cpu_seconds(pid, task=pid)


def servers(pid: int) -> list[int]:
    """The processes that answer: `pid`, or with `serve --workers N` its worker processes (children of `pid`
    other than multiprocessing's resource tracker)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and b"resource_tracker" not in cmdline:
            children.append(int(stat.parent.name))
    return children or [pid]


def _tree_cpu(pid: int) -> tuple[float | None, float | None]:
    """CPU seconds of the server (its supervisor and workers) and of the answering processes' event loops."""
    answering = servers(pid)
    total = [cpu_seconds(p) for p in {pid, *answering}]
    loops = [loop_cpu_seconds(p) for p in answering]
    return (None if None in total else sum(total)), (None if None in loops else sum(loops))  # type: ignore[arg-type]


def _cpu_per_answer(pid: int, phase: Any) -> Any:
    """Run `phase()` (a summary with `n` answers) and add the server's CPU ms per answer during it, and the
    event loop's share of it."""
    before, loop_before = _tree_cpu(pid)
    result = phase()
    after, loop_after = _tree_cpu(pid)
    if before is not None and after is not None and result.get("n"):
        result["server_cpu_ms_per_answer"] = round((after - before) * 1000 / result["n"], 2)
    if loop_before is not None and loop_after is not None and result.get("n"):
        result["event_loop_cpu_ms_per_answer"] = round((loop_after - loop_before) * 1000 / result["n"], 2)
    return result


def _ask(client: httpx.Client) -> float:
    started = time.perf_counter()
    response = client.post("/v1/query", json={"sql": _next_sql()})
    elapsed = (time.perf_counter() - started) * 1000
    if response.status_code != 200 or response.headers.get("x-dp-repeat") == "true":
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
    return elapsed


def alone(base: str, key: str, count: int) -> dict[str, Any]:
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
        for _ in range(20):  # warm-up: connection, caches
            _ask(client)
        return summary([_ask(client) for _ in range(count)])


def concurrent(base: str, key: str, clients: int, seconds: float) -> dict[str, Any]:
    samples: list[list[float]] = [[] for _ in range(clients)]
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    stop = threading.Event()

    def worker(mine: list[float]) -> None:
        try:
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60) as client:
                _ask(client)  # connect before the clock starts
                start.wait()
                while not stop.is_set():
                    mine.append(_ask(client))
        except BaseException as err:  # reported after the run
            errors.append(err)
            start.abort()

    threads = [threading.Thread(target=worker, args=(s,)) for s in samples]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]!r}")
    every = [x for s in samples for x in s]
    return {"clients": clients, "seconds": round(wall, 2), "answers": len(every),
            "answers_per_s": round(len(every) / wall, 1), **summary(every)}


def plain(db: Path, settings: Settings, count: int) -> dict[str, Any]:
    conn = duckdb.connect(str(db), read_only=True, config={"threads": settings.threads,
                                                          "memory_limit": settings.memory_limit})
    try:
        sql = SQL.format(i=0)
        for _ in range(20):
            conn.execute(sql).fetchall()
        times = []
        for _ in range(count):
            started = time.perf_counter()
            conn.execute(sql).fetchall()
            times.append((time.perf_counter() - started) * 1000)
        return summary(times)
    finally:
        conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20.0, help="duration of the concurrent phase")
    parser.add_argument("--alone", type=int, default=300, help="requests of the one-client phase")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    parser.add_argument("--http", choices=("httptools", "h11"), default=None,
                        help="the server's HTTP parser (default: dpproxy serve's)")
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default=None,
                        help="the server's event loop (default: dpproxy serve's)")
    parser.add_argument("--workers", type=int, default=1, help="server processes (dpproxy serve --workers)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "throughput.json")
    args = parser.parse_args(argv)

    directory = args.dir.resolve()
    meta, key = ensure_dataset(directory, rows=args.rows, users=args.users)
    policy, db = directory / "policy.toml", directory / "demo.duckdb"
    set_bounding(policy, "store")
    set_limits(policy, args.clients)
    ledger = fresh_ledger(directory)
    settings = Settings(policy=policy, ledger=ledger)
    facts: dict[str, Any] = {"dataset": meta, "cores": os.cpu_count(), "loadavg_before": os.getloadavg()[0],
                             "store_build_seconds": round(build_bounding_store(settings), 2)}
    results: dict[str, Any] = {"plain": plain(db, settings, args.alone)}
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "DPPROXY_LEDGER": str(ledger)}
    log_path, baseline_log = directory / "throughput-server.log", directory / "throughput-baseline.log"
    baseline_port = _free_port()
    stack = [f"--{name}={value}" for name, value in (("http", args.http), ("loop", args.loop)) if value]
    stack += [f"--workers={args.workers}"] if args.workers > 1 else []
    facts["server_stack"] = stack
    with log_path.open("w") as log, _server(
        [sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port", str(port), *stack], env, log
    ) as proc, baseline_log.open("w") as blog, _server(
        [sys.executable, str(ROOT / "bench" / "baseline_server.py"), "--policy", str(policy), "--port",
         str(baseline_port)], env, blog
    ) as baseline:
        base, plain_base = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{baseline_port}"
        with httpx.Client(base_url=base) as probe:
            _wait_ready(probe, proc, log_path)
        with httpx.Client(base_url=plain_base) as probe:
            _wait_ready(probe, baseline, baseline_log)
        # each phase on the baseline, then on the product, in the same minutes
        results["baseline_alone"] = _cpu_per_answer(baseline.pid, lambda: alone(plain_base, key, args.alone))
        results["alone"] = _cpu_per_answer(proc.pid, lambda: alone(base, key, args.alone))
        results["baseline_concurrent"] = _cpu_per_answer(
            baseline.pid, lambda: concurrent(plain_base, key, args.clients, args.seconds))
        results["concurrent"] = _cpu_per_answer(proc.pid, lambda: concurrent(base, key, args.clients, args.seconds))
    facts["loadavg_after"] = os.getloadavg()[0]
    print(f"dataset {meta['rows']:,} visits, {meta['users']:,} users; load {facts['loadavg_before']:.1f} -> "
          f"{facts['loadavg_after']:.1f} on {facts['cores']} cores; serve {' '.join(stack) or '(defaults)'}")
    print(f"plain DuckDB        p50 {results['plain']['p50_ms']:7.2f} ms  p95 {results['plain']['p95_ms']:7.2f} ms")
    print(f"HTTP, one client    p50 {results['alone']['p50_ms']:7.2f} ms  p95 {results['alone']['p95_ms']:7.2f} ms"
          f"  (x{results['alone']['p50_ms'] / results['plain']['p50_ms']:.1f} plain)"
          f"  server CPU {results['alone'].get('server_cpu_ms_per_answer')} ms/answer"
          f" (event loop {results['alone'].get('event_loop_cpu_ms_per_answer')})")
    c = results["concurrent"]
    print(f"HTTP, {c['clients']} clients     {c['answers_per_s']:7.1f} answers/s  p50 {c['p50_ms']:7.2f} ms  "
          f"p95 {c['p95_ms']:7.2f} ms  ({c['answers']} answers in {c['seconds']} s)"
          f"  server CPU {c.get('server_cpu_ms_per_answer')} ms/answer"
          f" (event loop {c.get('event_loop_cpu_ms_per_answer')})")
    for phase in ("alone", "concurrent"):
        b, r = results[f"baseline_{phase}"], results[phase]
        results[f"{phase}_over_baseline"] = ratios = {
            q: round(r[f"{q}_ms"] / b[f"{q}_ms"], 2) for q in ("p50", "p90")}
        if phase == "concurrent":
            ratios["answers_per_s_share"] = round(r["answers_per_s"] / b["answers_per_s"], 2)
        print(f"baseline {phase:<10} p50 {b['p50_ms']:7.2f} ms  p90 {b['p90_ms']:7.2f} ms"
              + (f"  {b['answers_per_s']:7.1f} answers/s" if phase == "concurrent" else "")
              + f"  server CPU {b.get('server_cpu_ms_per_answer')} ms/answer;  product / baseline: p50"
              f" x{ratios['p50']:.2f}, p90 x{ratios['p90']:.2f}"
              + (f", answers/s {100 * ratios['answers_per_s_share']:.0f} %" if phase == "concurrent" else ""))
    ours, theirs = (results[k].get("server_cpu_ms_per_answer") for k in ("alone", "baseline_alone"))
    if ours is not None and theirs is not None:
        print(f"fixed cost per request (one client): product {ours} ms server CPU, baseline {theirs} ms:"
              f" the product's own work {ours - theirs:.2f} ms")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"facts": facts, "results": results, "sql": SQL}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
