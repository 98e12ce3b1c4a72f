"""How the per-unit total cap"s selection variants compare (issue #29): the exact output distribution of each on
the query"s real totals histogram, weighed by the error each candidate cap gives (bench/oracle_bounds.py).

    python bench/cap_scores.py [--dir bench/data-1m]

For SUM/AVG queries of the workload at ε 0.1 and 1, with k fixed (91 by region and without keys, 23 by category:
the product"s median choices) and g at its limit: the totals histogram the product reads, the error of each cap
within 14 grid points below and 6 above the largest value M (15 simulated releases each), and the expected
median error E and its p90 over the draw of C for: the product"s score (target t = √2·G/ε_sum, base measure
e^(−7/10) per step above M), t/2, t/4, t/8, a base measure of e^(−1/2), and t/4 with e^(−1). The mass the
distribution puts outside that window is printed too (not counted). Figures: bench/README.md.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import sys
from fractions import Fraction
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import oracle_bounds as ob  # noqa: E402
from query_latency import build_bounding_store, ensure_dataset, fresh_ledger, set_bounding  # noqa: E402
from utility import request_epsilon  # noqa: E402

from mechanisms import count_target  # noqa: E402
from proxy import pipeline  # noqa: E402
from proxy.app import build_env  # noqa: E402
from proxy.query import auto_release  # noqa: E402
from proxy.query.analyse.measures import fixed_point  # noqa: E402
from proxy.query.auto import total  # noqa: E402
from proxy.query.auto.histograms import slots  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402
from proxy.settings import Settings  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    args = parser.parse_args(argv)
    d = args.dir.resolve()
    meta, key = ensure_dataset(d, rows=1_000_000, users=50_000)
    set_bounding(d / "policy.toml", "store")
    settings = Settings(policy=d / "policy.toml", ledger=fresh_ledger(d))
    build_bounding_store(settings)
    env = build_env(settings)
    analyst = env.policy.analyst_by_key_hash(hashlib.sha256(key.encode()).hexdigest())
    assert analyst is not None
    engine = env.engine("demo")
    sampler = ob.NumpySampler(3)
    serial = itertools.count(1)
    conn = duckdb.connect(str(d / "demo.duckdb"), read_only=True)
    print(f"dataset {meta['rows']:,} visits; expected median error E and its p90 over the draw of C")
    for name, fixed_k in (("avg_region", 91), ("sum_cat", 23), ("no_keys", 91)):
        for eps in (0.1, 1.0):
            title, sql = ob.QUERIES[name]
            n_keys = len(sql.split("GROUP BY")[1].split(",")) if "GROUP BY" in sql else 0
            truth = {tuple(str(v) for v in r[:n_keys]): tuple(r[n_keys:]) for r in conn.execute(sql).fetchall()}
            planned = pipeline.prepare(QueryRequest(sql=sql, epsilon=request_epsilon(eps, next(serial))), analyst,
                                       env.policy, env.sampler.salt()).plan
            assert planned.auto is not None
            parts = planned.auto.parts
            ci = next(i for i, p in enumerate(parts) if p.bound == "total")
            part = parts[ci]
            rows = engine.run(auto_release.selection_text(planned)).rows
            got = [(int(a), int(b), int(n)) for s_, a, b, n in rows if int(s_) == slots(planned.auto)[ci]]
            spec = planned.analysis.table.column(part.column or "")
            assert spec is not None
            unit, lo, hi = fixed_point(spec)
            grid = total.cap_grid(total.total_limit(planned.analysis, spec))
            above = total.counts_above(got, len(grid))
            anchor = max(i for i, c in enumerate(grid) if c <= max(1, max(abs(lo), abs(hi))))
            window = list(range(max(0, anchor - 14), min(len(grid), anchor + 6)))

            def at(cap: int, parts: tuple = parts, k: int = fixed_k, unit: int = unit) -> tuple[float, ...]:
                return tuple(k if p.bound == "max_rows" else 8 if p.bound == "max_groups" else cap / unit
                             for p in parts)

            errors = [ob.evaluate(planned, ob.chosen_at(planned, at(grid[i])), engine, truth, 15, sampler)[0]
                      for i in window]
            t = Fraction(part.q)
            best = min(range(len(window)), key=lambda j: errors[j])
            print(f"{title} ε={eps}: t = {float(t):.1f}, best C {grid[window[best]] / unit:.4g} "
                  f"({errors[best]:.2%}, {above[window[best]]} units above it)")
            for label, target, step in (("product", t, Fraction(7, 10)), ("t/2", t / 2, Fraction(7, 10)),
                                        ("t/4", t / 4, Fraction(7, 10)), ("t/8", t / 8, Fraction(7, 10)),
                                        ("base 1/2", t, Fraction(1, 2)), ("t/4, base 1", t / 4, Fraction(1))):
                p = np.array(count_target.output_distribution(above, target, part.epsilon, 1, step, anchor))
                mean, p90 = ob.summary(p[window] / p[window].sum(), errors)
                print(f"   {label:12} E = {mean:.2%}, p90 = {p90:.2%} "
                      f"(mass outside the window {1 - p[window].sum():.3f})")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
