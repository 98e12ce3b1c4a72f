"""Expressions inside aggregates on the demo's automatic bounds (issue #29 item 4, docs/privacy.md §10.10): the
relative error of each (answer, group), median and p90, through proxy.pipeline in process over the bounding store.

    python bench/expr_auto.py [--rows 1000000] [--users 50000] [--answers 30] [--epsilons 0.1,1] [--dir DIR]

The demo policy as generated (visits: max_rows <= 1000, max_groups <= 8, amount within [0, 100000], all "auto"),
with `auto_bounds_reuse = 0` so every answer draws its own bounds (the spread of the draws, not of a few kept
ones). Run from a tree before branch expr29 it measures the expressions at the declared limits (`chosen: false`).
The truth is DuckDB's answer to the same SQL; a group missing from a release counts as 100 %.
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

from proxy import pipeline  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402

QUERIES = (
    ("SUM(CASE age > 50: amount, else amount/2) by region",
     "SELECT region, SUM(CASE WHEN age > 50 THEN amount ELSE amount / 2 END) FROM visits GROUP BY region"),
    ("AVG(amount * 2) by category", "SELECT category, AVG(amount * 2) FROM visits GROUP BY category"),
)


def errors(truth: dict[str, float], released: list[tuple[object, ...]]) -> list[float]:
    got = {str(r[0]): r[1] for r in released}
    return [1.0 if got.get(k) is None else abs(float(got[k]) - v) / abs(v)  # type: ignore[arg-type]
            for k, v in truth.items() if v]


def p90(values: list[float]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--answers", type=int, default=30)
    parser.add_argument("--epsilons", default="0.1,1")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    meta, key = ensure_dataset(directory, rows=args.rows, users=args.users)
    set_bounding(directory / "policy.toml", "store")
    policy = directory / "policy-expr.toml"
    text = (directory / "policy.toml").read_text()
    assert text.count("[datasets.demo]\n") == 1, "the demo policy changed shape"
    policy.write_text(text.replace("[datasets.demo]\n", "[datasets.demo]\nauto_bounds_reuse = 0\n"))
    env, analyst = in_process(policy, directory, key)
    serial = itertools.count(1)
    print(f"dataset {meta['rows']:,} visits of {meta['users']:,} users; {args.answers} answers per query and ε; "
          f"relative error per (answer, group), from {ROOT}")
    print("| query | ε | median | p90 | chosen | median noise scale / limits' |")
    print("|---|---|---|---|---|---|")
    try:
        with duckdb.connect(str(directory / "demo.duckdb"), read_only=True) as conn:
            for (name, sql), epsilon in itertools.product(QUERIES, (float(e) for e in args.epsilons.split(","))):
                truth = {str(k): float(v) for k, v in conn.execute(sql).fetchall()}
                found: list[float] = []
                ratios: list[float] = []
                chosen = set()
                for _ in range(args.answers):
                    req = QueryRequest(sql=sql, epsilon=request_epsilon(epsilon, next(serial)))
                    prepared = pipeline.prepare(req, analyst, env.policy, env.sampler.salt())
                    answer = pipeline.answer(prepared, analyst, env, lambda charge: None)
                    found += errors(truth, list(answer.release.rows))
                    chosen.add(answer.bounds.report()["chosen"] if answer.bounds else None)
                    if answer.selected is not None:  # bounds chosen now: the first noise at them vs at the limits
                        ratios.append(answer.prepared.plan.price.noise[0].scale / answer.selected.price.noise[0].scale)
                ratio = f"{statistics.median(ratios):.2e}" if ratios else "1 (at the limits)"
                print(f"| {name} | {epsilon:g} | {statistics.median(found):.2%} | {p90(found):.2%} | "
                      f"{'/'.join(str(c) for c in sorted(chosen, key=str))} | {ratio} |", flush=True)
    finally:
        close_env(env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
