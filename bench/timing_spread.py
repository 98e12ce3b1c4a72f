"""Timing side channel: how much does the answer time of a query depend on whether its filter matches?

    python bench/timing_spread.py [--rows 1000000] [--users 50000] [--pairs 200] [--dir bench/timing-data]

Runs, in process through the real pipeline (plan, SQLite admit, hardened DuckDB, OpenDP noise), pairs of
queries that differ only in whether `WHERE user_id = X` matches one person (X exists) or nobody (X = -1),
interleaved so drift hits both equally. Each query text is unique (an alias carries the index), so no answer
comes from the repeat store. Prints the latency distributions, the median difference, and a two-sample
Kolmogorov–Smirnov statistic: the spread an attacker timing responses would have to work with.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proxy.app import build_env  # noqa: E402
from proxy.demo import build_demo  # noqa: E402
from proxy.pipeline import prepare, reply  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402
from proxy.settings import Settings  # noqa: E402


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _ks(a: list[float], b: list[float]) -> float:
    """Two-sample Kolmogorov–Smirnov statistic (max distance between the empirical CDFs)."""
    points = sorted(set(a) | set(b))
    sa, sb = sorted(a), sorted(b)
    import bisect

    return max(abs(bisect.bisect_right(sa, x) / len(sa) - bisect.bisect_right(sb, x) / len(sb)) for x in points)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "timing-data")
    args = parser.parse_args()

    files = build_demo(args.dir, users=args.users, rows=args.rows)
    policy = files.policy.read_text()
    policy = re.sub(r"^budgets = .*$", "budgets = { demo = { epsilon = 1e9, delta = 0.5 } }", policy, flags=re.M)
    policy = policy.replace('max_epsilon = 1.0', 'max_epsilon = 10.0')
    files.policy.write_text(policy)
    ledger = Path(tempfile.mkdtemp()) / "ledger.sqlite"
    env = build_env(Settings(policy=files.policy, ledger=ledger))
    analyst = next(a for a in env.policy.analysts if a.name == "analyst")

    def timed(i: int, user: int) -> float:
        sql = f"SELECT COUNT(*) AS n{i}, SUM(amount) AS s{i} FROM visits WHERE user_id = {user}"
        start = time.perf_counter()
        reply(QueryRequest(sql=sql, epsilon=0.1), analyst, env, lambda _: None, lambda answer: b"")
        return time.perf_counter() - start

    prepare(QueryRequest(sql="SELECT COUNT(*) FROM visits"), analyst, env.policy, 0)
    timed(10**9, 1)  # warm-up
    one, none = [], []
    for i in range(args.pairs):
        if i % 2:
            one.append(timed(2 * i, 1 + i % args.users))
            none.append(timed(2 * i + 1, -1))
        else:
            none.append(timed(2 * i + 1, -1))
            one.append(timed(2 * i, 1 + i % args.users))

    print(f"rows={args.rows:,} users={args.users:,} pairs={args.pairs}")
    print(f"{'filter matches':<16}{'p50 ms':>9}{'p95 ms':>9}{'mean ms':>9}{'stdev ms':>10}")
    for label, values in (("one person", one), ("nobody", none)):
        ms = [v * 1e3 for v in values]
        print(f"{label:<16}{_percentile(ms, .5):>9.2f}{_percentile(ms, .95):>9.2f}"
              f"{statistics.mean(ms):>9.2f}{statistics.stdev(ms):>10.2f}")
    difference = (statistics.median(one) - statistics.median(none)) * 1e3
    print(f"median difference (one − nobody): {difference:+.3f} ms; KS statistic: {_ks(one, none):.3f}")


if __name__ == "__main__":
    main()
