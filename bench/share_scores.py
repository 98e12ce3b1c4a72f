"""The selection's share of ε against the error it buys (issue #29 item 3): for each workload query, ε and fixed
share s, the exact output distribution of one bound's mechanism (the cap, or max_rows) on the query's real
histogram at the ε that share gives it, weighed by the error of the release at each candidate at the ε the
share leaves (bench/oracle_bounds.py's simulated noise).

    python bench/share_scores.py [--dir bench/data-1m] [--shares 0.05,0.1,0.2,0.3,0.4,0.5] [--draws 30]
                                 [--queries sum_cat,avg_region,no_keys,category,two_weeks]

The other bounds stay at the product's median choices (k 23 by category, 91 by region and without keys; g 8),
so a row shows what the share does to the one bound varied, not to the whole selection. For each s the
query is planned with the fixed share s (`plan(..., auto_share=s)`); its part's ε_i and target come from that
plan. Printed: E (expected median error over the draw), its p90 over the draw, and the best fixed candidate's
error at that s (the oracle at that share). Figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import oracle_bounds as ob  # noqa: E402

from mechanisms import count_target  # noqa: E402
from proxy import pipeline  # noqa: E402
from proxy.query import auto_release  # noqa: E402
from proxy.query.analyse.measures import fixed_point  # noqa: E402
from proxy.query.auto import bounds as auto  # noqa: E402
from proxy.query.auto import total  # noqa: E402
from proxy.query.auto.histograms import slots  # noqa: E402
from proxy.query.planner import plan  # noqa: E402
from proxy.query.release.publish import release  # noqa: E402

FIXED = {"sum_cat": 23, "avg_region": 91, "no_keys": 91, "duration": 45, "category": 23, "two_weeks": 2,
         "region": 181, "region_cat": 11}


def distribution(planned: Any, part_index: int, rows: Any) -> tuple[list[int], np.ndarray, list[float]]:
    """(candidate indices, P over them, candidate values) of the part's mechanism at the plan's ε and target."""
    part = planned.auto.parts[part_index]
    got = [(int(a), int(b), int(n)) for s_, a, b, n in rows if int(s_) == slots(planned.auto)[part_index]]
    analysis = planned.analysis
    if part.bound == "total":
        spec = analysis.table.column(part.column or "")
        unit, lo, hi = fixed_point(spec)
        grid = total.cap_grid(total.total_limit(analysis, spec))
        above = total.counts_above(got, len(grid))
        anchor = max(i for i, c in enumerate(grid) if c <= max(1, max(abs(lo), abs(hi))))
        p = np.array(count_target.output_distribution(above, Fraction(part.q), part.epsilon, 1,
                                                      total.PRIOR_STEP, anchor))
        window = list(range(max(0, anchor - 14), min(len(grid), anchor + 6)))
        return window, p, [grid[i] / unit for i in range(len(grid))]
    grouped = planned.auto.part("max_groups") is not None
    g = 8 if grouped else 1
    cells = [(a, n) for a, r, n in got if not grouped or r <= g]
    grid = auto.bound_grid(int(part.limit))
    per_point = [0] * len(grid)
    for c, n in cells:
        per_point[next(i for i, k in enumerate(grid) if k >= c)] += n
    s = g if grouped else part.sensitivity
    p = np.array(count_target.output_distribution(count_target.counts_above(per_point), Fraction(part.q) * s,
                                                  part.epsilon, s))
    return list(range(len(grid))), p, [float(k) for k in grid]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    parser.add_argument("--shares", default="0.05,0.1,0.2,0.3,0.4,0.5")
    parser.add_argument("--epsilons", default="0.1,1")
    parser.add_argument("--draws", type=int, default=30)
    parser.add_argument("--queries", default="sum_cat,avg_region,no_keys,category,two_weeks")
    args = parser.parse_args(argv)
    d = args.dir.resolve()
    meta, env, dataset, engine = ob.demo_on_store(d)
    sampler = ob.NumpySampler(11)
    cache: dict[str, Any] = {}
    conn = duckdb.connect(str(d / "demo.duckdb"), read_only=True)
    shares = [float(s) for s in args.shares.split(",")]
    print(f"dataset {meta['rows']:,} visits; E = expected median error over the draw (its p90); best fixed at s")
    print("| query | bound | ε | " + " | ".join(f"s = {s:g}" for s in shares) + " |")
    print("|---|---|---|" + "---|" * len(shares))
    for name, eps in itertools.product(args.queries.split(","), (float(e) for e in args.epsilons.split(","))):
        title, sql = ob.QUERIES[name]
        n_keys = len(sql.split("GROUP BY")[1].split(",")) if "GROUP BY" in sql else 0
        truth = {tuple(str(v) for v in r[:n_keys]): tuple(r[n_keys:]) for r in conn.execute(sql).fetchall()}
        cells = []
        bound = "?"
        for s in shares:
            planned = plan(sql, dataset.catalog, epsilon=eps, delta=dataset.delta, mechanism=dataset.mechanism,
                           salt=env.sampler.salt(), cells=dataset.cell_accounting, bounding=dataset.bounding,
                           auto_share=(s, s))
            assert planned.auto is not None
            parts = planned.auto.parts
            ci = next((i for i, p in enumerate(parts) if p.bound == "total"),
                      next(i for i, p in enumerate(parts) if p.bound == "max_rows"))
            bound = parts[ci].bound
            text = auto_release.selection_text(planned)
            if text not in cache:
                cache[text] = engine.run(text).rows
            window, p, values = distribution(planned, ci, cache[text])

            def at(value: float, parts: Any = parts, ci: int = ci, k: int = FIXED[name]) -> tuple[float, ...]:
                return tuple(value if j == ci else k if q.bound == "max_rows" else 8
                             if q.bound == "max_groups" else 0 for j, q in enumerate(parts))

            errors = []
            for i in window:
                chosen = ob.chosen_at(planned, at(values[i]))
                bounded = auto_release.plan_at(planned, chosen)
                sql_at = pipeline.engine_sql(bounded, engine)
                if sql_at not in cache:
                    cache[sql_at] = engine.run(sql_at).rows
                errs: list[float] = []
                for _ in range(args.draws):
                    errs += ob.errors_of(truth, release(cache[sql_at], bounded.analysis, bounded.price, sampler).rows,
                                         n_keys)
                errors.append(ob.quantiles(errs)[0])
            mean, p90 = ob.summary(p[window] / p[window].sum(), errors)
            cells.append(f"{mean:.1%} ({p90:.1%}; best {min(errors):.1%})")
            print(f"  {title} ε={eps} s={s}: E {mean:.2%} p90 {p90:.2%} best {min(errors):.2%}", file=sys.stderr,
                  flush=True)
        print(f"| {title} | {bound} | {eps:g} | " + " | ".join(cells) + " |", flush=True)
    env.ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
