"""Fair sharing under load (issue #11, finding 6): what a second analyst and the probes see while eight
clients of one analyst send heavy queries to a live `python -m proxy serve`.

    python bench/fairness.py [--rows 1000000] [--users 50000] [--seconds 30] [--clients 8] [--workers N]
                             [--dir bench/data/fairness] [--pad-ms 250]

First, on a server whose dataset pads every answer to `--pad-ms` after its admission (`answer_time =
"padded"`, docs/policy.md), a query holds its worker for exactly that window whatever its data, so answers
per second times the window is the number of workers one analyst keeps busy:

    dashboard  `--clients` threads of the first analyst alone send distinct small queries back to back (a
               dashboard's tiles under one key): with the work-conserving pool (proxy/run/query_pool.py) they
               use every worker, where the old rule (at most workers − 1 per analyst) kept one busy on 2

Then, on the dataset as the demo declares it, phases one after the other, each `--seconds` long, against one
server (127.0.0.1 only):

    idle     the second analyst ("admin" in the demo policy) sends small queries (COUNT by region over
             users, a fresh ε each time, so none is a free repeat) and GET /v1/budget, while a prober sends
             GET /readyz and GET /healthz; nothing else runs
    loaded   the same, while `--clients` threads of the first analyst ("analyst") each send the heavy query
             (a four-key GROUP BY over visits, ε = 1e-5) back to back, a fresh alias each time

It prints, per phase, p50/p95/max latency (ms) and the count and statuses of each kind of request, and the
heavy clients' outcomes (answered, 429, other). Latencies are wall-clock on a machine that may be shared:
compare phases of one run, not runs. The dataset is proxy.cli.demo.build_demo in --dir (reused when its
dataset.json records the same size), with a budget no run exhausts and a fresh ledger per run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from proxy.cli.demo import build_demo  # noqa: E402
from proxy.settings import Settings  # noqa: E402

HEAVY = ("SELECT day, age, category, region, COUNT(*) AS n{tag}, SUM(amount) AS s FROM visits "
         "GROUP BY day, age, category, region")
SMALL = "SELECT region, COUNT(*) AS n FROM users GROUP BY region"
_BUDGETS = re.compile(r"^budgets = .*$", re.MULTILINE)


@dataclass
class Samples:
    """Latencies (ms) and status codes of one kind of request."""

    ms: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ms: float, status: str) -> None:
        with self.lock:
            self.ms.append(ms)
            self.statuses[status] += 1

    def summary(self) -> str:
        if not self.ms:
            return "no samples"
        ordered = sorted(self.ms)
        p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
        codes = ", ".join(f"{k}: {v}" for k, v in sorted(self.statuses.items()))
        return (f"p50 {statistics.median(ordered):8.1f}  p95 {p95:8.1f}  max {ordered[-1]:8.1f}  "
                f"n {len(ordered):4d}  ({codes})")


def timed(samples: Samples, call: Callable[..., httpx.Response], *args: object, **kwargs: object) -> None:
    start = time.perf_counter()
    try:
        status = str(call(*args, **kwargs).status_code)
    except httpx.HTTPError as err:
        status = type(err).__name__
    samples.add((time.perf_counter() - start) * 1000, status)


def dataset(directory: Path, rows: int, users: int) -> dict[str, str]:
    """Build (or reuse) the demo of this size; returns its API keys. The policy gets a huge budget."""
    meta = directory / "dataset.json"
    if not (meta.exists() and json.loads(meta.read_text()) == {"rows": rows, "users": users}):
        meta.unlink(missing_ok=True)
        print(f"building the demo: {rows:,} visits of {users:,} users in {directory}/ ...", flush=True)
        build_demo(directory, users=users, rows=rows)
        meta.write_text(json.dumps({"rows": rows, "users": users}))
    policy = directory / "policy.toml"
    policy.write_text(_BUDGETS.sub("budgets = { demo = { epsilon = 1e9, delta = 0.5 } }", policy.read_text()))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{directory / 'ledger.sqlite'}{suffix}").unlink(missing_ok=True)
    return dict(line.split("=", 1) for line in (directory / "keys.env").read_text().split())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def dashboard(base: str, key: str, seconds: float, clients: int) -> tuple[int, float]:
    """`clients` threads of one analyst sending distinct small queries back to back: (answers, wall seconds)."""
    answered, stop, lock = [0], threading.Event(), threading.Lock()

    def tile(number: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=120) as c:
            i = 0
            while not stop.is_set():
                sql = SMALL.replace(" AS n ", f" AS n{number}_{i} ")  # a fresh alias: never a stored repeat
                if c.post("/v1/query", json={"sql": sql}).status_code == 200:
                    with lock:
                        answered[0] += 1
                i += 1

    threads = [threading.Thread(target=tile, args=(n,)) for n in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return answered[0], time.perf_counter() - began


def padded_policy(directory: Path, pad_ms: int) -> Path:
    """A copy of the demo policy whose dataset pads every answer to `pad_ms` after its admission."""
    text = (directory / "policy.toml").read_text()
    padded = directory / "policy-padded.toml"
    padded.write_text(text.replace("[datasets.demo]\n", f'[datasets.demo]\nanswer_time = "padded"\n'
                                   f"padded_ms = {pad_ms}\n", 1))  # beside the original: the same relative paths
    return padded


def serve(policy: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`python -m proxy serve` on `policy` on a free loopback port, once /healthz answers: (process, base URL)."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port", str(port)],
                              cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    return server, base


def phase(base: str, keys: dict[str, str], seconds: float, clients: int) -> dict[str, Samples]:
    """Run one phase: the second analyst, the prober and (if clients > 0) the heavy clients."""
    kinds = {name: Samples() for name in ("second analyst: query", "second analyst: /v1/budget",
                                          "/readyz", "/healthz", "heavy analyst: query")}
    stop = threading.Event()
    heavy_key, second_key = keys["DPPROXY_ANALYST_KEY"], keys["DPPROXY_ADMIN_KEY"]

    def heavy(number: int) -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {heavy_key}"}, timeout=120) as c:
            i = 0
            while not stop.is_set():
                sql = HEAVY.format(tag=f"{number}_{i}_{time.monotonic_ns()}")
                timed(kinds["heavy analyst: query"], c.post, "/v1/query", json={"sql": sql, "epsilon": 1e-5})
                i += 1

    def second() -> None:
        with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {second_key}"}, timeout=120) as c:
            i = 0
            while not stop.is_set():
                epsilon = 0.5 + 1e-9 * i  # a fresh ε: never a repeat answered from the ledger
                timed(kinds["second analyst: query"], c.post, "/v1/query", json={"sql": SMALL, "epsilon": epsilon})
                timed(kinds["second analyst: /v1/budget"], c.get, "/v1/budget")
                i += 1
                stop.wait(0.2)

    def prober() -> None:
        with httpx.Client(base_url=base, timeout=120) as c:
            while not stop.is_set():
                timed(kinds["/readyz"], c.get, "/readyz")
                timed(kinds["/healthz"], c.get, "/healthz")
                stop.wait(0.2)

    threads = [threading.Thread(target=heavy, args=(n,)) for n in range(clients)]
    threads += [threading.Thread(target=second), threading.Thread(target=prober)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data" / "fairness")
    parser.add_argument("--workers", type=int, default=None, help="DPPROXY_QUERY_WORKERS (default: the product's)")
    parser.add_argument("--pad-ms", type=int, default=250, help="the dashboard phase's answer window (ms)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    keys = dataset(args.dir, args.rows, args.users)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DPPROXY_")}
    env["PYTHONPATH"] = str(ROOT)
    if args.workers is not None:
        env["DPPROXY_QUERY_WORKERS"] = str(args.workers)
    workers = args.workers or Settings.model_fields["query_workers"].default
    print(f"{args.rows:,} visits, {args.users:,} users; {os.cpu_count()} CPUs; query workers: {workers}; "
          f"{args.seconds:g} s per phase; heavy query at ε = 1e-5: {HEAVY.format(tag='')}")
    server, base = serve(padded_policy(args.dir, args.pad_ms), env, args.dir / "server-padded.log")
    try:
        answers, wall = dashboard(base, keys["DPPROXY_ANALYST_KEY"], args.seconds, args.clients)
    finally:
        server.terminate()
        server.wait(timeout=60)
    busy = answers / wall * args.pad_ms / 1000  # each answer held its worker for the window: Little's law
    print(f"\ndashboard ({args.clients} clients of one analyst, answers padded to {args.pad_ms} ms): "
          f"{answers / wall:.1f} answers/s, {busy:.2f} of {workers} workers busy on average")
    server, base = serve(args.dir / "policy.toml", env, args.dir / "server.log")
    try:
        for name, clients in (("idle", 0), (f"loaded ({args.clients} heavy clients)", args.clients)):
            print(f"\n{name}: latency in ms")
            for kind, samples in phase(base, keys, args.seconds, clients).items():
                if samples.ms:
                    print(f"  {kind:<28} {samples.summary()}")
    finally:
        server.terminate()
        server.wait(timeout=60)

if __name__ == "__main__":
    main()
