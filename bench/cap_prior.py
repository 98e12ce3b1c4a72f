"""The per-unit total cap's base measure below the largest value M (issue #29): the exact output distribution of
the cap's mechanism, as the product plans it (share limits [0.1, 0.5]), on the query's real totals histogram, with
a base measure of e^(−λ_b) per √2 step below the anchor M (λ_b = 0: flat, as before) beside the e^(−7/10) above it,
weighed by the error of the release at each candidate (bench/oracle_bounds.py's simulated noise).

    python bench/cap_prior.py [--dir bench/data-1m] [--below 0,0.2,0.35,0.5] [--draws 30] [--share 0.1,0.5]

The other bounds stay at the product's median choices (share_scores.FIXED; g 8). Printed per query and ε: the
expected median error E over the draw of C (its p90 over the draw) per λ_b, and the best fixed C's error. Two
queries over two weeks of data (few units, totals far below M) test the side where a pull toward M is wrong.
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
from share_scores import FIXED  # noqa: E402

from proxy import pipeline  # noqa: E402
from proxy.query import auto_release  # noqa: E402
from proxy.query.analyse.measures import fixed_point  # noqa: E402
from proxy.query.auto import total  # noqa: E402
from proxy.query.auto.histograms import slots  # noqa: E402
from proxy.query.planner import plan  # noqa: E402
from proxy.query.release.publish import release  # noqa: E402

TWO_WEEKS = "day BETWEEN DATE '2026-03-01' AND DATE '2026-03-14'"
QUERIES = {**{k: ob.QUERIES[k] for k in ("sum_cat", "avg_region", "no_keys", "duration")},
           "sum_weeks": ("SUM(amount) by category, two weeks",
                         f"SELECT category, SUM(amount) FROM visits WHERE {TWO_WEEKS} GROUP BY category"),
           "duration_weeks": ("AVG(duration_s) by region, two weeks",
                              f"SELECT region, AVG(duration_s) FROM visits WHERE {TWO_WEEKS} GROUP BY region")}
FIXED_K = {**FIXED, "sum_weeks": 2, "duration_weeks": 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    parser.add_argument("--below", default="0,0.2,0.35,0.5")
    parser.add_argument("--share", default="0.1,0.5")
    parser.add_argument("--epsilons", default="0.1,1")
    parser.add_argument("--draws", type=int, default=30)
    parser.add_argument("--queries", default=",".join(QUERIES))
    args = parser.parse_args(argv)
    d = args.dir.resolve()
    meta, env, dataset, engine = ob.demo_on_store(d)
    sampler = ob.NumpySampler(13)
    limits = tuple(float(v) for v in args.share.split(","))
    share_limits = (limits[0], limits[-1])
    belows = [Fraction(v) for v in args.below.split(",")]
    cache: dict[str, Any] = {}
    conn = duckdb.connect(str(d / "demo.duckdb"), read_only=True)
    print(f"dataset {meta['rows']:,} visits; share {share_limits}; E = expected median error over the draw of C "
          f"(p90 over the draw); best fixed C")
    print("| query | ε | best fixed C: error | " + " | ".join(f"λ_b = {float(b):g}" for b in belows) + " |")
    print("|---|---|---|" + "---|" * len(belows))
    for name, eps in itertools.product(args.queries.split(","), (float(e) for e in args.epsilons.split(","))):
        title, sql = QUERIES[name]
        n_keys = len(sql.split("GROUP BY")[1].split(",")) if "GROUP BY" in sql else 0
        truth = {tuple(str(v) for v in r[:n_keys]): tuple(r[n_keys:]) for r in conn.execute(sql).fetchall()}
        planned = plan(sql, dataset.catalog, epsilon=eps, delta=dataset.delta, mechanism=dataset.mechanism,
                       salt=env.sampler.salt(), cells=dataset.cell_accounting, bounding=dataset.bounding,
                       auto_share=share_limits)
        assert planned.auto is not None
        parts = planned.auto.parts
        ci = next(i for i, p in enumerate(parts) if p.bound == "total")
        part = parts[ci]
        text = auto_release.selection_text(planned)
        rows = cache.setdefault(text, engine.run(text).rows)
        got = [(int(a), int(b), int(n)) for s_, a, b, n in rows if int(s_) == slots(planned.auto)[ci]]
        spec = planned.analysis.table.column(part.column or "")
        unit, lo, hi = fixed_point(spec)
        grid = total.cap_grid(total.total_limit(planned.analysis, spec))
        above = total.counts_above(got, len(grid))
        anchor = max(i for i, c in enumerate(grid) if c <= max(1, max(abs(lo), abs(hi))))
        window = list(range(max(0, anchor - 24), min(len(grid), anchor + 8)))
        errors = []
        for i in window:
            values = tuple(grid[i] / unit if j == ci else FIXED_K[name] if q.bound == "max_rows" else 8
                           for j, q in enumerate(parts))
            bounded = auto_release.plan_at(planned, ob.chosen_at(planned, values))
            sql_at = pipeline.engine_sql(bounded, engine)
            answer = cache.setdefault(sql_at, engine.run(sql_at).rows)
            errs: list[float] = []
            for _ in range(args.draws):
                errs += ob.errors_of(truth, release(answer, bounded.analysis, bounded.price, sampler).rows, n_keys)
            errors.append(ob.quantiles(errs)[0])
        cells = []
        for below in belows:
            numerators, denominator = total.exponents(above, Fraction(part.q), part.epsilon, anchor, below)
            x = np.array([n / denominator for n in numerators])
            p = np.exp(-(x - x.min()))
            p = p / p.sum()
            outside = 1 - p[window].sum()
            mean, p90 = ob.summary(p[window] / p[window].sum(), errors)
            cells.append(f"{mean:.1%} ({p90:.1%}){'' if outside < 0.01 else f' [{outside:.2f} outside]'}")
        best = min(range(len(window)), key=lambda j: errors[j])
        print(f"| {title} | {eps:g} | {grid[window[best]] / unit:.4g}: {errors[best]:.1%} | " + " | ".join(cells)
              + " |", flush=True)
    env.ledger.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
