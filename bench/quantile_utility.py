"""Utility and latency of the DP quantiles on the demo data (issue #15).

    python bench/quantile_utility.py [--users 50000] [--rows 1000000] [--answers 100] [--epsilon 1.0]
                                     [--dir bench/data-quantile]

For each workload query (per region: MEDIAN, p10, p90, STDDEV of amount, at --epsilon per query) it runs --answers
full answers, each a fresh plan (fresh bounding salt) → DuckDB → release with the production sampler, and
compares every released value with the true (non-private, unbounded) value from plain DuckDB (`stddev/c`:
with the true STDDEV of the values clamped to the policy's bounds, to separate noise from clamping bias):

    within 5%   share of (answer, region) pairs whose relative error is at most 5 %
    median rel  median relative error |released − true| / |true|
    p95 rel     95th percentile of the relative error

Latency (time.perf_counter): DP = plan + DuckDB + release, plain = the analyst's SQL on plain DuckDB, both
in the same run on the same connection; p50/p90/p99 over the answers and the ratio of medians.

`--joint` compares, in the same run, p10, median and p90 of amount by region asked in ONE query: released
jointly (mechanisms/joint_quantiles.py, the default for three or more quantiles of one column) and split
(one exponential mechanism each, ε/3), at the same charge: per quantile, the share within 5 %, the median
and p95 relative error, and the 95 % rank error bar each reports.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
from auto_utility import demo_fixed  # noqa: E402

from mechanisms.sampling import SecureSampler  # noqa: E402
from proxy.cli.demo import build_demo  # noqa: E402
from proxy.policy.load import load_policy  # noqa: E402
from proxy.query.planner import plan  # noqa: E402
from proxy.query.price import quantiles  # noqa: E402
from proxy.query.release.error_bars import error_bar  # noqa: E402
from proxy.query.release.publish import release  # noqa: E402

WORKLOAD = {
    "median": ("SELECT region, MEDIAN(amount) FROM visits GROUP BY region",
               "SELECT region, MEDIAN(amount) FROM visits GROUP BY region"),
    "p10": ("SELECT region, QUANTILE_CONT(amount, 0.1) FROM visits GROUP BY region",
            "SELECT region, QUANTILE_CONT(amount, 0.1) FROM visits GROUP BY region"),
    "p90": ("SELECT region, QUANTILE_CONT(amount, 0.9) FROM visits GROUP BY region",
            "SELECT region, QUANTILE_CONT(amount, 0.9) FROM visits GROUP BY region"),
    "stddev": ("SELECT region, STDDEV(amount) FROM visits GROUP BY region",
               "SELECT region, STDDEV(amount) FROM visits GROUP BY region"),
    # the same against the clamped truth: the noise's share of the error, without the clamping bias
    "stddev/c": ("SELECT region, STDDEV(amount) FROM visits GROUP BY region",
                 "SELECT region, STDDEV(LEAST(GREATEST(amount, 0), 500)) FROM visits GROUP BY region"),
}


def measure(con: duckdb.DuckDBPyConnection, catalog: object, dp_sql: str, plain_sql: str, answers: int,
            epsilon: float) -> dict[str, float]:
    truth = {r: float(v) for r, v in con.execute(plain_sql).fetchall()}
    sampler = SecureSampler()
    errors, dp_times, plain_times = [], [], []
    for _ in range(answers):
        started = time.perf_counter()
        planned = plan(dp_sql, catalog, epsilon=epsilon, delta=1e-8, mechanism="laplace",  # type: ignore[arg-type]
                       salt=sampler.salt(), cells=False)
        rows = con.execute(planned.sql).fetchall()
        answer = release(rows, planned.analysis, planned.price, sampler)
        dp_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        con.execute(plain_sql).fetchall()
        plain_times.append(time.perf_counter() - started)
        errors += [abs(float(v if v is not None else 0.0) - truth[r]) / abs(truth[r]) for r, v in answer.rows
                   if r in truth]
    err = np.asarray(errors)
    dp, pl = np.asarray(dp_times) * 1e3, np.asarray(plain_times) * 1e3
    return {
        "within5": float(np.mean(err <= 0.05)), "median_rel": float(np.median(err)),
        "p95_rel": float(np.quantile(err, 0.95)),
        "dp_p50": float(np.median(dp)), "dp_p90": float(np.quantile(dp, 0.9)), "dp_p99": float(np.quantile(dp, 0.99)),
        "plain_p50": float(np.median(pl)), "ratio": float(np.median(dp) / np.median(pl)),
    }


JOINT = ("SELECT region, QUANTILE_CONT(amount, 0.1), MEDIAN(amount), QUANTILE_CONT(amount, 0.9) FROM visits "
         "GROUP BY region")


def measure_joint(con: duckdb.DuckDBPyConnection, catalog: object, answers: int, epsilon: float,
                  joint: bool) -> list[dict[str, float]]:
    """Per quantile of JOINT: within 5 %, median and p95 relative error, the 95 % rank error bar."""
    truth = {r: tuple(float(v) for v in vs) for r, *vs in con.execute(JOINT).fetchall()}
    sampler = SecureSampler()
    saved = quantiles.JOINT_AT_LEAST
    quantiles.JOINT_AT_LEAST = 3 if joint else 10**9  # the split: one mechanism per quantile
    try:
        errors: list[list[float]] = [[], [], []]
        bars: list[float] = []
        dp_times, plain_times = [], []
        for _ in range(answers):
            started = time.perf_counter()
            planned = plan(JOINT, catalog, epsilon=epsilon, delta=1e-8, mechanism="laplace",  # type: ignore[arg-type]
                           salt=sampler.salt(), cells=False)
            answer = release(con.execute(planned.sql).fetchall(), planned.analysis, planned.price, sampler)
            dp_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            con.execute(JOINT).fetchall()
            plain_times.append(time.perf_counter() - started)
            bars = [error_bar(planned.analysis, planned.price, k, 0.95).rank_error or 0.0 for k in range(3)]
            for region, *values in answer.rows:
                for k, v in enumerate(values):
                    errors[k].append(abs(float(v) - truth[region][k]) / abs(truth[region][k]))
    finally:
        quantiles.JOINT_AT_LEAST = saved
    dp, plain = np.asarray(dp_times) * 1e3, np.asarray(plain_times) * 1e3
    timing = {"dp_p50": float(np.median(dp)), "dp_p90": float(np.quantile(dp, 0.9)),
              "plain_p50": float(np.median(plain)), "ratio": float(np.median(dp) / np.median(plain))}
    return [{"within5": float(np.mean(np.asarray(e) <= 0.05)), "median_rel": float(np.median(e)),
             "p95_rel": float(np.quantile(e, 0.95)), "bar": bars[k], **timing} for k, e in enumerate(errors)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--answers", type=int, default=100)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-quantile")
    parser.add_argument("--only", nargs="*", default=list(WORKLOAD), choices=list(WORKLOAD))
    parser.add_argument("--joint", action="store_true", help="also compare the joint and the split release")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    files = build_demo(args.dir, users=args.users, rows=args.rows)
    # the mechanism at issue #15's fixed bounds (amount in [0, 500], 20 rows per user), as the plain SQL clamps:
    # the demo's own policy chooses its bounds per query ("auto"), which plan() + release() alone would not run
    fixed = files.policy.with_name("policy-fixed.toml")
    fixed.write_text(demo_fixed(files.policy.read_text()))
    catalog = load_policy(fixed).dataset("demo").catalog  # type: ignore[union-attr]
    con = duckdb.connect(str(files.database), read_only=True)
    print(f"demo: {args.users} users, {args.rows} rows; ε = {args.epsilon} per query; {args.answers} answers")
    print(f"{'query':8} {'within 5%':>9} {'median rel':>10} {'p95 rel':>8} {'DP p50':>8} {'p90':>8} {'p99':>8} "
          f"{'plain p50':>9} {'ratio':>6}")
    for name in args.only:
        dp_sql, plain_sql = WORKLOAD[name]
        m = measure(con, catalog, dp_sql, plain_sql, args.answers, args.epsilon)
        print(f"{name:8} {m['within5']:9.3f} {m['median_rel']:10.4f} {m['p95_rel']:8.4f} {m['dp_p50']:7.1f}ms "
              f"{m['dp_p90']:6.1f}ms {m['dp_p99']:6.1f}ms {m['plain_p50']:7.1f}ms {m['ratio']:6.1f}")
    if args.joint:
        print(f"\np10, median, p90 in one query ({JOINT!r}), ε = {args.epsilon}, same charge:")
        print(f"{'release':8} {'quantile':8} {'within 5%':>9} {'median rel':>10} {'p95 rel':>8} {'rank bar95':>10}")
        for joint in (True, False):
            results = measure_joint(con, catalog, args.answers, args.epsilon, joint)
            for label, m in zip(("p10", "median", "p90"), results, strict=True):
                print(f"{'joint' if joint else 'split':8} {label:8} {m['within5']:9.3f} {m['median_rel']:10.4f} "
                      f"{m['p95_rel']:8.4f} {m['bar']:10.1f}")
            m = results[0]
            print(f"{'':8} latency: DP p50 {m['dp_p50']:.1f}ms p90 {m['dp_p90']:.1f}ms, plain p50 "
                  f"{m['plain_p50']:.1f}ms, ratio {m['ratio']:.1f}")


if __name__ == "__main__":
    main()
