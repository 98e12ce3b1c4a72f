"""End-to-end throughput with one and with two proxy replicas sharing one PostgreSQL ledger.

    python bench/replica_throughput.py [--requests 400] [--concurrency 8] [--users 2000] [--rows 40000]
                                       [--postgres postgresql://postgres@127.0.0.1:5432/test]

Builds a small demo dataset (so the engine is not the bottleneck and the ledger/HTTP path is what is
measured), gives the analyst a budget large enough for the run, and for 1 and 2 replicas
(`python -m proxy serve` with DPPROXY_LEDGER pointing at a fresh PostgreSQL schema each) sends
`--requests` distinct queries from `--concurrency` client threads spread round-robin over the replicas.
Prints requests/s, latency p50/p95 and the check that the ledger holds exactly one charge per answer.
Loopback only; the load is bounded by --requests.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proxy.cli.demo import build_demo  # noqa: E402


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(policy: Path, ledger: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPPROXY_")}
    env |= {"DPPROXY_LEDGER": ledger, "DPPROXY_LOG_LEVEL": "warning", "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port",
                                 str(port)], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"replica did not start; see {log}")


def _run(policy: Path, key: str, base: str, replicas: int, requests: int, concurrency: int) -> dict[str, float]:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    ledger = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{schema}"
    log = Path(tempfile.mkdtemp()) / "replicas.log"
    servers = [_start(policy, ledger, log) for _ in range(replicas)]
    latencies: list[float] = []
    failures: list[str] = []
    counter = iter(range(requests))
    lock = threading.Lock()

    def client(worker: int) -> None:
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                url = servers[i % replicas][1]
                sql = f"SELECT plan, COUNT(*) AS n{i} FROM users GROUP BY plan"  # distinct: never a repeat
                start = time.perf_counter()
                response = http.post(f"{url}/v1/query", json={"sql": sql, "epsilon": 0.01})
                elapsed = time.perf_counter() - start
                with lock:
                    (latencies.append(elapsed) if response.status_code == 200
                     else failures.append(str(response.status_code)))

    threads = [threading.Thread(target=client, args=(w,)) for w in range(concurrency)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - start
    for proc, _ in servers:
        proc.terminate()
        proc.wait(timeout=30)
    with psycopg.connect(ledger, autocommit=True) as conn:
        (charges,) = conn.execute("SELECT COUNT(*) FROM charges").fetchone()
        conn.execute(f"DROP SCHEMA {schema} CASCADE")
    latencies.sort()
    return {
        "replicas": replicas, "answers": len(latencies), "failures": len(failures), "charges": charges,
        "rps": len(latencies) / wall, "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p95_ms": latencies[int(len(latencies) * 0.95)] * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=40_000)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    files = build_demo(Path(tempfile.mkdtemp()) / "demo", users=args.users, rows=args.rows)
    policy = files.policy.read_text()
    files.policy.write_text(re.sub(r"^budgets = .*$", "budgets = { demo = { epsilon = 1e9, delta = 0.5 } }",
                                   policy, flags=re.M))
    print(f"{args.requests} requests, {args.concurrency} client threads, users table {args.users:,} rows, "
          f"{os.cpu_count()} cores; PostgreSQL ledger")
    print(f"{'replicas':>8} {'answers':>8} {'charges':>8} {'req/s':>8} {'p50 ms':>8} {'p95 ms':>8}")
    for replicas in (1, 2):
        r = _run(files.policy, files.analyst_key, args.postgres, replicas, args.requests, args.concurrency)
        ok = "ok" if r["charges"] == r["answers"] and not r["failures"] else "MISMATCH"
        print(f"{r['replicas']:>8} {r['answers']:>8} {r['charges']:>8} {r['rps']:>8.1f} {r['p50_ms']:>8.1f} "
              f"{r['p95_ms']:>8.1f}  {ok}")


if __name__ == "__main__":
    main()
