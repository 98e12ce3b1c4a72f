"""How max_rows' selection scores compare (issue #29): the exact output distribution of each alternative score on
the query's real selection histogram, weighed by the error each candidate bound gives (bench/oracle_bounds.py).

    python bench/bound_scores.py [--dir bench/data-1m] [--queries region,category,region_cat,two_weeks] [--draws 20]

For each COUNT query of the workload and ε (0.1, 1), with max_groups fixed at its limit: the rows histogram the
product reads (auto_release.selection_text, on the bounding store), the error of every candidate k (median
relative error over `--draws` simulated releases at the charged scales, oracle_bounds.evaluate), and for each
score its exact distribution over the candidates at the part's ε and sensitivity. Printed per score: the expected
median error E[err(k)] and the 90th percentile of err(k) over the draw of k. The scores:

- `quantile .99`: the DP 0.99-quantile of cells (mechanisms/dp_quantile.py), what the product did before;
- `count λ`: −|N_i − τ·s| with the base measure e^(−λ·i) (mechanisms/count_target.py; λ = 0.5 is the product's
  where a unit keeps several cells); `t/√2`: its target balanced against the noise's mean absolute value b rather
  than its standard deviation √2·b;
- `clipped τc`: −(Σ_cells min(τc, max(0, n − k_i)) + t·k_i), the error with each cell's truncation clipped at
  τc rows (sensitivity s·τc), drawn at ε/(2·s·τc): the direct bias + noise score;
- `rows D λ`: the same error score as the product may draw it (count_target.truncation_numerators): monotone, so
  at ε/(s·D) without the 2, with the base measure e^(−λ·i); D = L is the unclipped truncation.

The error is the first aggregate's (the COUNT's): a query with a capped SUM beside it (no GROUP BY) runs its cap at
the limit, which moves the sum's error only.
"""

from __future__ import annotations

import argparse
import itertools
import math
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
from query_latency import close_env, ensure_dataset, in_process, set_bounding  # noqa: E402
from utility import request_epsilon  # noqa: E402

from mechanisms import count_target, dp_quantile  # noqa: E402
from proxy import pipeline  # noqa: E402
from proxy.query import auto_release  # noqa: E402
from proxy.query.auto import bounds as auto  # noqa: E402
from proxy.query.auto.histograms import slots  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402


def softmax(exponents: list[float]) -> np.ndarray:
    x = np.array(exponents, dtype=float)
    w = np.exp(-(x - x.min()))
    return w / w.sum()


def summary(p: np.ndarray, errors: list[float]) -> tuple[float, float]:
    """(E[err], the 90th percentile of err) over the candidate drawn with probabilities p."""
    mean = float(sum(pi * e for pi, e in zip(p, errors, strict=True)))
    acc = 0.0
    for i in sorted(range(len(errors)), key=lambda i: errors[i]):
        acc += p[i]
        if acc >= 0.9:
            return mean, errors[i]
    return mean, max(errors)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    parser.add_argument("--queries", default="region,category,region_cat,two_weeks,no_keys,month")
    parser.add_argument("--draws", type=int, default=20)
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    _, key = ensure_dataset(directory, rows=1_000_000, users=50_000)
    set_bounding(directory / "policy.toml", "store")
    env, analyst = in_process(directory / "policy.toml", directory, key)
    engine = env.engine("demo")
    sampler = ob.NumpySampler(7)
    serial = itertools.count(1)
    rows_variants = [(64, Fraction(1, 4)), (128, Fraction(1, 4))]
    joint_variants = [(64, Fraction(35, 100), Fraction(1, 2)), (64, Fraction(1, 2), Fraction(2, 3)),
                      (64, Fraction(35, 100), Fraction(2, 3)), (64, Fraction(1, 4), Fraction(2, 3)),
                      (128, Fraction(35, 100), Fraction(2, 3)), (64, Fraction(1, 2), Fraction(3, 4))]
    scores = ["quantile .99", "count λ=0", "count λ=0.35", "count λ=0.5", "count λ=0.7", "count λ=0.5 t/√2",
              "clipped τc=4",
              "clipped τc=16", "clipped τc=64", *(f"rows D={d or 'L'} λ={float(lam):g}" for d, lam in rows_variants),
              *(f"joint D={d} λ={float(lam):g} w={w}" for d, lam, w in joint_variants)]
    table: list[tuple[str, float, str, list[tuple[float, float]]]] = []
    with duckdb.connect(str(directory / "demo.duckdb"), read_only=True) as conn:
        for name, epsilon in itertools.product(args.queries.split(","), (0.1, 1.0)):
            title, sql = ob.QUERIES[name]
            n_keys = ob.key_count(sql)
            truth = {tuple(ob.key_text(v) for v in r[:n_keys]): tuple(r[n_keys:n_keys + 1])
                     for r in conn.execute(sql).fetchall()}
            prepared = pipeline.prepare(QueryRequest(sql=sql, epsilon=request_epsilon(epsilon, next(serial))),
                                        analyst, env.policy, env.sampler.salt())
            planned: Any = prepared.plan
            parts = planned.auto.parts
            rows_part = next(i for i, p in enumerate(parts) if p.bound == "max_rows")
            part = parts[rows_part]
            grouped = planned.auto.part("max_groups") is not None
            g = planned.analysis.max_groups
            rows = engine.run(auto_release.selection_text(planned)).rows
            slot = slots(planned.auto)[rows_part]
            cells = [(int(a), int(n)) for s_, a, b, n in rows if int(s_) == slot and (not grouped or int(b) <= g)]
            grid = auto.bound_grid(int(part.limit))
            at = [ob.chosen_at(planned, tuple(k if p.bound == "max_rows" else g if p.bound == "max_groups"
                                              else p.limit for p in parts)) for k in grid]
            errors = [ob.evaluate(planned, chosen, engine, truth, args.draws, sampler)[0] for chosen in at]
            per_point = [0] * len(grid)
            for c, n in cells:
                per_point[next(i for i, k in enumerate(grid) if k >= c)] += n
            above = count_target.counts_above(per_point)
            s = g if grouped else part.sensitivity
            eps = part.epsilon
            t = Fraction(part.q) * s
            dists = [softmax([float(x) for x in dp_quantile.exponents(per_point, 0.99, eps, s)])]
            for lam in (0, Fraction(35, 100), Fraction(1, 2), Fraction(7, 10)):
                dists.append(np.array(count_target.output_distribution(above, t, eps, s, Fraction(lam))))
            # the target of the mean absolute noise (E|Laplace(b)| = b) rather than its standard deviation √2·b
            dists.append(np.array(count_target.output_distribution(above, t / Fraction(math.sqrt(2)), eps, s)))
            for clip in (4, 16, 64):
                biased = [sum(n * min(clip, max(0, c - k)) for c, n in cells) for k in grid]
                dists.append(softmax([float(eps) * (b + float(t) * k) / (2 * s * clip) for b, k in zip(biased, grid,
                                                                                                     strict=True)]))
            for d, lam in rows_variants:
                clip = d or int(part.limit)
                dists.append(np.array(count_target.truncation_distribution(
                    count_target.clipped_truncation(cells, grid, clip), grid, t, Fraction(eps), s, clip, lam)))
            for clip, lam, w in joint_variants:
                dists.append(np.array(count_target.joint_distribution(
                    above, t, count_target.clipped_truncation(cells, grid, clip), grid, Fraction(eps), s, clip, lam,
                    weight=w)))
            best = min(range(len(grid)), key=lambda i: errors[i])
            table.append((title, epsilon, f"{grid[best]}: {errors[best]:.2%}", [summary(d, errors) for d in dists]))
            print(f"  {title} ε={epsilon}: τ·s = {float(t):.1f}, best k {grid[best]}", file=sys.stderr, flush=True)
    close_env(env)
    print(f"expected median error (and its p90 over the draw of k), max_groups at its limit, {args.draws} draws")
    print("| query | ε | best fixed k: error | " + " | ".join(scores) + " |")
    print("|---|---|---|" + "---|" * len(scores))
    for title, epsilon, best, results in table:
        cells_text = " | ".join(f"{m:.2%} ({p:.2%})" for m, p in results)
        print(f"| {title} | {epsilon:g} | {best} | {cells_text} |")
    return 0 if all(math.isfinite(m) for *_, r in table for m, _ in r) else 1


if __name__ == "__main__":
    sys.exit(main())
