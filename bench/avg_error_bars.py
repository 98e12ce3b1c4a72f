"""AVG / STDDEV error bars from the released noisy parts (issue #29 item 8) beside the any-data bar they replace.

    python bench/avg_error_bars.py [--rows 1000000] [--users 50000] [--answers 20] [--epsilons 0.1,1]
                                   [--dir bench/data-1m] [--confidence 0.95]

On the demo data with the demo policy (visits on "auto", the bounding store), each query is answered `--answers`
times through proxy.pipeline.prepare/answer (fresh bounds every time: nothing is reused), and for every released
row it records: the half-width of the any-data bar (`ci_times_count` over the row's noisy count, what the
answer's `ci_rows` was before), the half-width from the parts (`ci_rows` now), whether each flags the row (bar
wider than the value), and whether the interval from the parts covers the row's pre-noise value (the same plan's
SQL run again on the engine and released with zero noise: the value of the bounded rows; coverage is over the
noise only). Printed per query and ε: median of each half-width, the share of rows each flags, the coverage,
and the median relative error of the released value against the plain unbounded DuckDB answer.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import duckdb  # noqa: E402
from query_latency import close_env, ensure_dataset, in_process, set_bounding  # noqa: E402
from utility import request_epsilon  # noqa: E402

from mechanisms.sampling import FixedSampler  # noqa: E402
from proxy import pipeline  # noqa: E402
from proxy.http.views.answer import noise, with_row_bars  # noqa: E402
from proxy.query.release.publish import release  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402

QUERIES = (
    ("AVG(amount) by region", "SELECT region, AVG(amount) FROM visits GROUP BY region"),
    ("AVG(amount) by category", "SELECT category, AVG(amount) FROM visits GROUP BY category"),
    ("AVG(duration_s) by region", "SELECT region, AVG(duration_s) FROM visits GROUP BY region"),
    ("STDDEV(duration_s) by region", "SELECT region, STDDEV(duration_s) FROM visits GROUP BY region"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--epsilons", default="0.1,1")
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    meta, key = ensure_dataset(directory, rows=args.rows, users=args.users)
    set_bounding(directory / "policy.toml", "store")
    with duckdb.connect(str(directory / "demo.duckdb"), read_only=True) as conn:
        truths = {sql: {str(row[0]): row[1] for row in conn.execute(sql).fetchall()} for _, sql in QUERIES}
    env, analyst = in_process(directory / "policy.toml", directory, key)
    engine = env.engine("demo")
    serial = itertools.count(1)
    print(f"dataset {meta['rows']:,} visits of {meta['users']:,} users; {args.answers} answers per query and ε; "
          f"confidence {args.confidence}")
    print("| query | ε | rows | any-data bar (median ±) | bar from the parts (median ±) | flagged: any-data / parts | "
          "coverage of the pre-noise value | median relative error |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            for title, sql in QUERIES:
                old, new, flags_old, flags_new, covered, errors, n = [], [], 0, 0, 0, [], 0
                for _ in range(args.answers):
                    request = QueryRequest(sql=sql, epsilon=request_epsilon(epsilon, next(serial)),
                                           confidence=args.confidence)
                    prepared = pipeline.prepare(request, analyst, env.policy, env.sampler.salt())
                    result = pipeline.answer(prepared, analyst, env, lambda charge: None)
                    planned = result.prepared.plan
                    bars = with_row_bars(planned.analysis, planned.price, result.release.rows, result.release.parts,
                                         noise(planned.analysis, planned.price, args.confidence))
                    bar = bars[0]
                    exact = engine.run(pipeline.engine_sql(planned, engine)).rows  # the same salt: the same rows
                    truth_bounded = release(exact, planned.analysis, planned.price, FixedSampler((0,))).rows
                    for i, row in enumerate(result.release.rows):
                        value = row[1]
                        if value is None or bar.ci_rows is None or bar.ci_rows[i] is None:
                            continue
                        n += 1
                        count = (result.release.counts[i][1] or 0)
                        any_data = bar.ci_times_count / count if count > 0 else float("inf")  # type: ignore[operator]
                        wide = bar.ci_rows[i]
                        old.append(any_data)
                        new.append(wide)
                        magnitude = value * value if title.startswith("STDDEV") else abs(value)
                        flags_old += any_data > magnitude  # the rule before: STDDEV in variance units
                        flags_new += wide > abs(value)  # type: ignore[operator]
                        lo, hi = bar.interval_rows[i]  # type: ignore[index, misc]
                        covered += lo - 1e-9 <= truth_bounded[i][1] <= hi + 1e-9  # type: ignore[operator]
                        true = truths[sql].get(str(row[0]))
                        if true:
                            errors.append(abs(value - float(true)) / abs(float(true)))
                print(f"| {title} | {epsilon:g} | {n} | {statistics.median(old):.4g} | {statistics.median(new):.4g} | "
                      f"{flags_old / n:.0%} / {flags_new / n:.0%} | {covered / n:.1%} | "
                      f"{statistics.median(errors):.1%} |", flush=True)
    finally:
        close_env(env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
