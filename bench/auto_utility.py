"""Utility of automatic bounds (issue #12 part 2): median relative error per group with automatic bounds
beside the demo's fixed ones, on the demo data, through proxy.pipeline.answer in process.

    python bench/auto_utility.py [--rows 1000000] [--users 50000] [--answers 20] [--epsilon 1] [--dir bench/data-1m]
                                 [--variants fixed,rows,auto] [--share 0.1,0.5]

The policies are the generated demo policy with the bench budget and the bounding store; they differ only in
visits' bounds: `fixed` (max_rows 20, max_groups 4, amount clamped to [0, 500]); `rows` (max_rows "auto",
max_rows_limit 1000, the rest fixed); `auto` (max_rows "auto" <= 1000, max_groups "auto" <= 32, amount
bounds "auto" within [0, 100000]: SUM and AVG then cap each unit's total at a C chosen per query,
docs/privacy.md §10.2); each auto with the default share (10 % of ε, split over the bounds a query
chooses): rows, groups and caps by the error they cause (§10), a clamp at the default quantile (0.99). The
error is bench/utility.py's: |released − true| / |true| per (answer, group, aggregate) against the plain
unbounded DuckDB answer, median over all; a dropped group counts 1. Also printed: the bounds chosen
(median and range over the answers), and the engine's wall time per answer (selection + query) beside plain
DuckDB's.
"""

from __future__ import annotations

import argparse
import itertools
import re
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
from oracle_bounds import set_share  # noqa: E402
from query_latency import close_env, ensure_dataset, in_process, set_bounding  # noqa: E402
from utility import median_relative_error, request_epsilon  # noqa: E402

from proxy import pipeline  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402

QUERIES = (  # the utility targets, and the total
    ("COUNT by region (unit-level key)", "SELECT region, COUNT(*) FROM visits GROUP BY region", 0.03),
    ("SUM, AVG(amount) by category (row-level key)",
     "SELECT category, SUM(amount), AVG(amount) FROM visits GROUP BY category", 0.10),
    ("COUNT by region, category (two keys)",
     "SELECT region, category, COUNT(*) FROM visits GROUP BY region, category", 0.10),
    ("filtered COUNT by category (row-level WHERE)",
     "SELECT category, COUNT(*) FROM visits WHERE day BETWEEN DATE '2026-03-01' AND DATE '2026-05-31' "
     "GROUP BY category", 0.03),
    ("COUNT, SUM(amount), no GROUP BY", "SELECT COUNT(*), SUM(amount) FROM visits", None),
)


FIXED_AMOUNT = 'amount = { type = "DOUBLE", bounds = [0.0, 500.0] }'
VARIANTS = ("fixed", "rows", "auto")


def demo_fixed(text: str) -> str:
    """The generated demo policy (visits on "auto" since the demo went auto, proxy/cli/demo.py) with the fixed bounds
    it had before: the `fixed` variant, and what the others edit (tests/conftest.py `fixed_bounds` does the same)."""
    for pattern, line in ((r'^max_groups = "auto"\nmax_groups_limit = \d+$', "max_groups = 4"),
                          (r'^max_rows = "auto"\nmax_rows_limit = \d+$', "max_rows = 20"),
                          (r'bounds = "auto", bounds_limit = \[0\.0, 100000\.0\]', "bounds = [0.0, 500.0]"),
                          (r'bounds = "auto", bounds_limit = \[0, 86400\]', "bounds = [0, 3600]")):
        text, found = re.subn(pattern, line, text, flags=re.MULTILINE)
        assert found <= 1, "the demo policy changed shape"
    return text


def policy_variant(source: Path, variant: str) -> Path:
    """The demo policy with visits' bounds fixed (as generated before), max_rows "auto", or every bound "auto"."""
    text = demo_fixed(source.read_text())
    if variant in ("rows", "auto"):
        assert text.count("max_rows = 20\n") == 1 and text.count("max_groups = 4\n") == 1, "the demo policy changed"
        text = text.replace("max_rows = 20\n", 'max_rows = "auto"\nmax_rows_limit = 1000\n')
    if variant == "auto":
        assert text.count(FIXED_AMOUNT) == 1, "the demo policy changed shape"
        text = text.replace("max_groups = 4\n", 'max_groups = "auto"\nmax_groups_limit = 32\n').replace(
            FIXED_AMOUNT, 'amount = { type = "DOUBLE", bounds = "auto", bounds_limit = [0, 100000] }')
    target = source.with_name(f"policy-{variant}.toml")
    target.write_text(text)
    return target


def run(variant: str, policy: Path, directory: Path, key: str, args: argparse.Namespace,
        truths: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    env, analyst = in_process(policy, directory, key)
    serial = itertools.count(1)
    out: dict[str, dict[str, Any]] = {}
    try:
        for name, sql, _ in QUERIES:
            released, chosen, seconds = [], [], []
            n_keys = 0
            for _ in range(args.answers):
                req = QueryRequest(sql=sql, epsilon=request_epsilon(args.epsilon, next(serial)))
                prepared = pipeline.prepare(req, analyst, env.policy, env.sampler.salt())
                n_keys = len(prepared.plan.analysis.keys)
                started = time.perf_counter()
                result = pipeline.answer(prepared, analyst, env, lambda charge: None)
                seconds.append(time.perf_counter() - started)
                released.append(list(result.release.rows))
                if result.bounds is not None:
                    chosen.append(_chosen(result.bounds))
            truth = {tuple(row[:n_keys]): tuple(row[n_keys:]) for row in truths[sql]}
            out[name] = {"error": median_relative_error(truth, released, n_keys), "chosen": chosen,
                         "p50_ms": 1000 * statistics.median(seconds)}
            print(f"  {variant:5} {name}: {out[name]['error']:.4f} (bounds {_medians(chosen) if chosen else 'fixed'})",
                  file=sys.stderr, flush=True)
    finally:
        close_env(env)
    return out


def _chosen(bounds: Any) -> tuple[float, ...]:
    """The bounds one answer used: k rows, g groups, and amount's per-unit L1 cap C (or its clamp's upper end)."""
    caps = [p.value for p in bounds.parts if p.bound == "total"]
    return (bounds.max_rows, bounds.max_groups, *caps, *(hi for _, _, hi in bounds.clamps))


def _medians(chosen: list[tuple[float, ...]]) -> str:
    """Each bound's median over the answers, with its range."""
    if not chosen:
        return "–"
    names = ("k", "g", "amount C")
    return ", ".join(f"{name} {statistics.median(c[i] for c in chosen):.4g} ({min(c[i] for c in chosen):.4g}–"
                     f"{max(c[i] for c in chosen):.4g})" for i, name in enumerate(names) if len(chosen[0]) > i)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--answers", type=int, default=20)
    parser.add_argument("--epsilon", type=Decimal, default=Decimal(1))
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: fixed, rows, auto")
    parser.add_argument("--share", default="", help='the auto_bounds_share: "0.1" fixed, "0.1,0.5" limits')
    args = parser.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    assert variants and all(v in VARIANTS for v in variants), f"variants are {VARIANTS}"
    args.epsilon = float(args.epsilon)
    directory = args.dir.resolve()
    meta, key = ensure_dataset(directory, rows=args.rows, users=args.users)
    set_bounding(directory / "policy.toml", "store")
    set_share(directory / "policy.toml", args.share)
    with duckdb.connect(str(directory / "demo.duckdb"), read_only=True) as conn:
        truths, plain_ms = {}, {}
        for _, sql, _ in QUERIES:
            truths[sql] = conn.execute(sql).fetchall()
            started = time.perf_counter()
            for _ in range(5):
                conn.execute(sql).fetchall()
            plain_ms[sql] = 1000 * (time.perf_counter() - started) / 5
    results = {v: run(v, policy_variant(directory / "policy.toml", v), directory, key, args, truths)
               for v in variants}
    print(f"dataset {meta['rows']:,} visits of {meta['users']:,} users; epsilon {args.epsilon} per query; "
          f"{args.answers} answers per query; auto: 10 % of epsilon on the bounds, each chosen by the error it "
          "causes (a clamp: q = 0.99); fixed: max_rows 20, "
          "max_groups 4, amount [0, 500]; rows: max_rows auto <= 1000; auto: max_rows <= 1000, max_groups <= 32, "
          "amount within [0, 100000]")
    print("| query | target | " + " | ".join(f"error {v}" for v in variants)
          + " | bounds chosen (last variant: median (range)) | plain ms | "
          + " | ".join(f"{v} ms" for v in variants) + " |")
    print("|---|---|" + "---|" * (2 * len(variants) + 2))
    for name, sql, target in QUERIES:
        bounds = _medians(results[variants[-1]][name]["chosen"])
        errors = " | ".join(f"{results[v][name]['error']:.2%}" for v in variants)
        times = " | ".join(f"{results[v][name]['p50_ms']:.1f}" for v in variants)
        print(f"| {name} | {'–' if target is None else f'≤ {target:.0%}'} | {errors} | {bounds} | "
              f"{plain_ms[sql]:.1f} | {times} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
