"""Round trip of a small query over the PostgreSQL protocol against the same query over HTTP (issue #30).

    python bench/wire_roundtrip.py [--rows 6000] [--users 300] [--repeat 200] [--fresh 30]

One real `python -m proxy serve --pg-port` subprocess on the demo policy (built in a temporary directory,
plaintext allowed for loopback), measured from this process with time.perf_counter, one phase after another:

    repeat   the stored release of a query answered once (no charge, no engine): HTTP (httpx, one kept-alive
             connection), psycopg simple protocol, psycopg extended protocol with a server-side prepared
             statement (prepare=True), asyncpg (prepares)
    fresh    new queries (a different `age > k` each, so each is planned, charged, run and released): HTTP,
             psycopg simple protocol

Reports the median and 90th percentile in milliseconds and the wire/HTTP ratio of the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from proxy.cli.demo import build_demo  # noqa: E402

SQL = "SELECT region, COUNT(*) AS n FROM visits GROUP BY region"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def timed(run: Callable[[], object], times: int) -> list[float]:
    run()  # warm-up
    out = []
    for _ in range(times):
        start = time.perf_counter()
        run()
        out.append((time.perf_counter() - start) * 1000)
    return out


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(ordered), 3),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 3), "runs": len(ordered)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--users", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--fresh", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        files = build_demo(Path(directory), users=args.users, rows=args.rows)
        policy = files.policy.read_text().replace("epsilon = 5.0, delta = 1e-6", "epsilon = 1000.0, delta = 1e-3")
        policy = policy.replace('[analysts.analyst]\n', '[analysts.analyst]\nqueries_per_minute = 1000000\n')
        files.policy.write_text(policy)
        http_port, pg_port = free_port(), free_port()
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("DPPROXY_")},
               "DPPROXY_PG_PORT": str(pg_port), "DPPROXY_PG_ALLOW_PLAINTEXT_LOOPBACK": "true",
               "DPPROXY_LOG_LEVEL": "warning", "PYTHONPATH": str(ROOT)}
        server = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--policy", str(files.policy),
                                   "--port", str(http_port)], cwd=directory, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{http_port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{base}/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline and server.poll() is None, "the server did not start"
                time.sleep(0.1)
            results = measure(base, pg_port, files.analyst_key, args)
        finally:
            server.terminate()
            server.wait(30)
    print(json.dumps(results, indent=2))
    return 0


def measure(base: str, pg_port: int, key: str, args: argparse.Namespace) -> dict[str, object]:
    dsn = f"postgresql://analyst:{key}@127.0.0.1:{pg_port}/demo?sslmode=disable"
    results: dict[str, object] = {}
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http, \
            psycopg.connect(dsn, autocommit=True) as conn:
        assert http.post("/v1/query", json={"sql": SQL}).status_code == 200  # answered (and charged) once
        repeat = {
            "http": timed(lambda: http.post("/v1/query", json={"sql": SQL}).raise_for_status(), args.repeat),
            "psycopg_simple": timed(lambda: conn.pgconn.exec_(SQL.encode()), args.repeat),
            "psycopg_prepared": timed(lambda: conn.execute(SQL, prepare=True).fetchall(), args.repeat),
        }

        async def asyncpg_run() -> list[float]:
            import asyncpg

            pg = await asyncpg.connect(dsn.split("?")[0], ssl=False)
            out = []
            await pg.fetch(SQL)
            for _ in range(args.repeat):
                start = time.perf_counter()
                await pg.fetch(SQL)
                out.append((time.perf_counter() - start) * 1000)
            await pg.close()
            return out

        with contextlib.suppress(ImportError):  # asyncpg is in the test extra
            repeat["asyncpg"] = asyncio.run(asyncpg_run())
        ages = iter(range(18, 18 + 2 * args.fresh + 4))
        fresh = {
            "http": timed(lambda: http.post("/v1/query", json={
                "sql": f"SELECT region, COUNT(*) AS n FROM visits WHERE age > {next(ages)} GROUP BY region"
            }).raise_for_status(), args.fresh),
            "psycopg_simple": timed(lambda: conn.pgconn.exec_(
                f"SELECT region, COUNT(*) AS n FROM visits WHERE age > {next(ages)} GROUP BY region".encode()),
                args.fresh),
        }
    for name, phase in (("repeat", repeat), ("fresh", fresh)):
        shown = {client: summary(samples) for client, samples in phase.items()}
        http_median = shown["http"]["median_ms"]
        for figures in shown.values():
            figures["ratio_to_http"] = round(figures["median_ms"] / http_median, 3)
        results[name] = shown
    return results


if __name__ == "__main__":
    sys.exit(main())
