"""The demo on automatic bounds (proxy/cli/demo.py) beside its former fixed bounds, for the shapes that used to be
refused on auto tables: median relative error per group over the answers, through proxy.pipeline in process.

    python bench/demo_auto.py [--rows 1000000] [--users 50000] [--answers 20] [--epsilon 1] [--dir bench/data-1m]

`fixed`: the demo's former bounds (max_rows 20, max_groups 4, amount [0, 500], duration_s [0, 3600]); `demo`:
the demo as generated (max_rows <= 1000, max_groups <= 8, amount within [0, 100000], duration_s within
[0, 86400], all "auto"). The error is bench/utility.py's, against the plain unbounded DuckDB answer.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import duckdb  # noqa: E402
from auto_utility import demo_fixed  # noqa: E402
from query_latency import close_env, ensure_dataset, in_process, set_bounding  # noqa: E402
from utility import median_relative_error, request_epsilon  # noqa: E402

from proxy import pipeline  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402

QUERIES = (  # (name, DP SQL, plain SQL, request fields)
    ("Gaussian COUNT by category", "SELECT category, COUNT(*) FROM visits GROUP BY category", None,
     {"mechanism": "gaussian", "delta": Decimal("1e-7")}),
    ("MEDIAN(amount) by region", "SELECT region, MEDIAN(amount) FROM visits GROUP BY region", None, {}),
    ("COUNT by plan (join to users)", "SELECT plan, COUNT(*) FROM visits JOIN users USING (user_id) GROUP BY plan",
     None, {}),
    ("STDDEV(duration_s) by region", "SELECT region, STDDEV(duration_s) FROM visits GROUP BY region", None, {}),
    ("COUNT FILTER (amount > 30) by category",
     "SELECT category, COUNT(*) FILTER (WHERE amount > 30) FROM visits GROUP BY category", None, {}),
)


def run(policy: Path, directory: Path, key: str, args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    env, analyst = in_process(policy, directory, key)
    serial = itertools.count(1)
    out = {}
    try:
        with duckdb.connect(str(directory / "demo.duckdb"), read_only=True) as conn:
            for name, sql, plain, extra in QUERIES:
                released, seconds, n_keys = [], [], 0
                for _ in range(args.answers):
                    req = QueryRequest(sql=sql, epsilon=request_epsilon(args.epsilon, next(serial)), **extra)
                    prepared = pipeline.prepare(req, analyst, env.policy, env.sampler.salt())
                    n_keys = len(prepared.plan.analysis.keys)
                    started = time.process_time()
                    result = pipeline.answer(prepared, analyst, env, lambda charge: None)
                    seconds.append(time.process_time() - started)
                    released.append(list(result.release.rows))
                truth = {tuple(r[:n_keys]): tuple(r[n_keys:]) for r in conn.execute(plain or sql).fetchall()}
                error = median_relative_error(truth, released, n_keys)
                out[name] = (error if error is not None else float("nan"), 1000 * statistics.median(seconds))
                print(f"  {policy.name} {name}: {out[name][0]:.4f}", file=sys.stderr, flush=True)
    finally:
        close_env(env)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    meta, key = ensure_dataset(directory, rows=args.rows, users=args.users)
    set_bounding(directory / "policy.toml", "store")
    generated = (directory / "policy.toml").read_text()
    fixed = directory / "policy-fixed.toml"
    fixed.write_text(demo_fixed(generated))
    demo = directory / "policy-demo.toml"
    demo.write_text(generated)
    results: dict[str, dict[str, Any]] = {name: run(p, directory, key, args) for name, p in
                                          (("fixed", fixed), ("demo", demo))}
    print(f"dataset {meta['rows']:,} visits of {meta['users']:,} users; epsilon {args.epsilon} per query; "
          f"{args.answers} answers per query (error: median relative error per group; CPU ms per answer, p50)")
    print("| query | error fixed | error demo (auto) | CPU ms fixed | CPU ms demo |")
    print("|---|---|---|---|---|")
    for name, *_ in QUERIES:
        (ef, tf), (ed, td) = results["fixed"][name], results["demo"][name]
        print(f"| {name} | {ef:.2%} | {ed:.2%} | {tf:.1f} | {td:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
