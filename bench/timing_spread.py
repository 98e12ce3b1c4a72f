"""Timing side channel: how much does a query's response time depend on the data, with and without padding?

    python bench/timing_spread.py [--rows 1000000] [--users 50000] [--pairs 30] [--padded-ms N]
                                  [--dir bench/timing-data]

Serves the demo dataset with a real `python -m proxy serve` (uvicorn, HTTP on 127.0.0.1) twice, one after
the other: as generated (`answer_time = "immediate"`: an answer leaves when ready) and with
`answer_time = "padded"` (proxy/run/padding.py: every outcome after admission leaves `padded_ms` after
it). Against each it sends interleaved pairs of queries that differ only in the data they touch:

    sampler   MEDIAN(amount) of every visit (a scan of every row, and the exponential mechanism's sampler on a
              dense histogram: proposals are rejected until one lands near the median) against the same query
              WHERE user_id = -1 (nobody: an empty histogram, whose first uniform proposal is accepted)
    filter    COUNT(*), SUM(amount) WHERE user_id = X, one person, against X = -1, nobody

at ε = 1. Each query text is unique (an alias carries the index), so no answer comes from the repeat store;
a last series times repeats (the stored answer) on the padded server. Without --padded-ms, the window is
twice the slowest immediate response, rounded up to 100 ms. Prints, per server and pair, the response
time percentiles seen by the client, the median difference, the two-sample Kolmogorov–Smirnov statistic
(the spread an attacker timing responses works with; 1 = the two never overlap), the timeouts, the server's
CPU per query, and the load average (wall times are inflated under load; the padded spread is not).
"""

from __future__ import annotations

import argparse
import bisect
import math
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import httpx  # noqa: E402
from query_latency import _free_port, _process_cpu_seconds, _server, _wait_ready, ensure_dataset  # noqa: E402

EPSILON = 1.0
PAIRS: dict[str, tuple[tuple[str, str], tuple[str, str]]] = {
    "sampler": (("all visits", "SELECT MEDIAN(amount) AS m{i} FROM visits"),
                ("nobody", "SELECT MEDIAN(amount) AS m{i} FROM visits WHERE user_id = -1")),
    "filter": (("one person", "SELECT COUNT(*) AS n{i}, SUM(amount) AS s{i} FROM visits WHERE user_id = {user}"),
               ("nobody", "SELECT COUNT(*) AS n{i}, SUM(amount) AS s{i} FROM visits WHERE user_id = -1")),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ks(a: list[float], b: list[float]) -> float:
    """Two-sample Kolmogorov–Smirnov statistic (the largest distance between the empirical CDFs)."""
    sa, sb = sorted(a), sorted(b)
    return max(abs(bisect.bisect_right(sa, x) / len(sa) - bisect.bisect_right(sb, x) / len(sb)) for x in sa + sb)


def padded_policy(source: Path, padded_ms: int) -> Path:
    text = source.read_text()
    text = re.sub(r"^answer_time = .*\n|^padded_ms = .*\n", "", text, flags=re.MULTILINE)
    text = text.replace("[datasets.demo]\n", f'[datasets.demo]\nanswer_time = "padded"\npadded_ms = {padded_ms}\n', 1)
    target = source.with_name("policy-padded.toml")
    target.write_text(text)
    return target


class Series:
    """Response times (ms) and outcomes of one query shape on one server."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self.timeouts = 0

    def add(self, client: httpx.Client, sql: str) -> None:
        start = time.perf_counter()
        response = client.post("/v1/query", json={"sql": sql, "epsilon": EPSILON})
        self.ms.append((time.perf_counter() - start) * 1e3)
        if response.status_code == 504:
            self.timeouts += 1
        elif response.status_code != 200:
            raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")


def serve(policy: Path, directory: Path, label: str, key: str, run: Callable[[httpx.Client], None]) -> float:
    """Run `run` against a fresh server on `policy` (own ledger, the shared bounding store); its CPU seconds."""
    ledger = directory / f"ledger-{label}.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{ledger}{suffix}").unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "DPPROXY_LEDGER": str(ledger), "DPPROXY_STORE_DIR": str(directory / "store")}
    (directory / "store").mkdir(exist_ok=True)
    port = _free_port()
    log_path = directory / f"server-{label}.log"
    with log_path.open("w") as log, _server(
        [sys.executable, "-m", "proxy", "serve", "--policy", str(policy), "--port", str(port)], env, log
    ) as proc, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120,
                            headers={"Authorization": f"Bearer {key}"}) as client:
        _wait_ready(client, proc, log_path)
        client.post("/v1/query", json={"sql": "SELECT COUNT(*) AS warm FROM visits"})  # store open, caches warm
        cpu = _process_cpu_seconds(proc.pid)
        run(client)
        return _process_cpu_seconds(proc.pid) - cpu


def measure(client: httpx.Client, pairs: int, users: int, offset: int) -> dict[str, tuple[Series, Series]]:
    """`pairs` interleaved pairs of each kind (which of a pair goes first alternates, so drift hits both)."""
    series = {kind: (Series(), Series()) for kind in PAIRS}
    for i in range(pairs):
        for kind, ((_, slow), (_, fast)) in PAIRS.items():
            index = offset + i
            one = slow.format(i=index, user=1 + index % users)
            other = fast.format(i=index, user=-1)
            order = ((0, one), (1, other)) if i % 2 else ((1, other), (0, one))
            for side, sql in order:
                series[kind][side].add(client, sql)
    return series


def report(title: str, series: dict[str, tuple[Series, Series]], cpu_s: float, queries: int) -> None:
    print(f"\n{title}: server CPU {cpu_s / queries * 1e3:.1f} ms per query; load average {os.getloadavg()[0]:.2f}")
    print(f"  {'pair':<9}{'data':<12}{'p5':>8}{'p50':>8}{'p95':>8}{'p99':>8}{'max':>8}{'timeouts':>10}   (ms)")
    for kind, sides in series.items():
        for (label, _), s in zip(PAIRS[kind], sides, strict=True):
            print(f"  {kind:<9}{label:<12}" + "".join(f"{percentile(s.ms, q):>8.1f}" for q in (.05, .5, .95, .99))
                  + f"{max(s.ms):>8.1f}{s.timeouts:>10}")
        a, b = sides[0].ms, sides[1].ms
        print(f"  {'':<9}{'spread':<12}median difference {statistics.median(a) - statistics.median(b):+.2f} ms, "
              f"KS {ks(a, b):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--padded-ms", type=int, default=None)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "timing-data")
    args = parser.parse_args()

    meta, key = ensure_dataset(args.dir, rows=args.rows, users=args.users)
    policy = args.dir / "policy.toml"
    print(f"rows={args.rows:,} users={args.users:,} pairs={args.pairs} ε={EPSILON} dataset reused={meta['reused']} "
          f"cpus={os.cpu_count()} load average at start {os.getloadavg()[0]:.2f}")

    plain: dict[str, tuple[Series, Series]] = {}

    def immediate(client: httpx.Client) -> None:
        plain.update(measure(client, args.pairs, args.users, 0))

    cpu = serve(policy, args.dir, "immediate", key, immediate)
    report('answer_time = "immediate"', plain, cpu, 4 * args.pairs)
    slowest = max(max(s.ms) for sides in plain.values() for s in sides)
    padded_ms = args.padded_ms or 100 * math.ceil(2 * slowest / 100)

    held: dict[str, tuple[Series, Series]] = {}
    repeats = Series()

    def padded(client: httpx.Client) -> None:
        held.update(measure(client, args.pairs, args.users, 10**6))
        sql = PAIRS["filter"][1][1].format(i=0, user=-1)
        for _ in range(args.pairs):
            repeats.add(client, sql)  # the first is an answer, the rest its stored release

    cpu = serve(padded_policy(policy, padded_ms), args.dir, "padded", key, padded)
    report(f'answer_time = "padded", padded_ms = {padded_ms}', held, cpu, 5 * args.pairs)
    r = repeats.ms[1:]
    print(f"  {'repeat':<9}{'stored':<12}" + "".join(f"{percentile(r, q):>8.1f}" for q in (.05, .5, .95, .99))
          + f"{max(r):>8.1f}{repeats.timeouts:>10}")


if __name__ == "__main__":
    main()
