"""The oracle of automatic bounds (issue #29): for each workload query and ε, the error of the best FIXED bounds
chosen with hindsight, beside the product's own (automatic) answers.

    python bench/oracle_bounds.py [--rows 1000000] [--users 50000] [--epsilons 0.1,1] [--draws 40] [--answers 20]
                                  [--dir bench/data-1m] [--queries region,category,...] [--share 0.1,0.5]

For each query the demo policy (visits on "auto", the bounding store) plans it at ε; for every combination of
candidate bounds the query chooses (k on rows.bound_grid, g on bound_grid(G), a cap C on every second point of
total.cap_grid, a clamp's upper end on every second point of clamp.clamp_grid) the plan is re-planned at those
bounds exactly as the product would run it (auto_release.plan_at: the same SQL, the same noise scales at the
same charge), the engine computes its exact bounded statistics once, and `--draws` releases add simulated
noise at the charged scales (a numpy sampler: discrete Laplace as a difference of geometrics, rounded
Gaussians). The error is bench/utility.py's: |released − true| / |true| per (answer, group, aggregate) against
the plain unbounded DuckDB answer; a dropped group counts 1. The oracle is the candidate with the least median
(its p90 beside it), and the least p90 over all candidates tried: every combination of at most 600, else a
coordinate descent (each bound over its whole grid with the others fixed, two passes). The product's figures
are `--answers` answers through proxy.pipeline.answer with its real sampler (the selection included). The
cautious fixed policy of the issue (g = 4, k = 20, amount clamped to [0, 500]) is evaluated the same way where
it applies (a clamp at 500 stands for a cap: the fixed policy has no cap).

`--share` sets the demo's `auto_bounds_share` (one number: fixed; two: the limits the split by expected error
chooses in, proxy/query/auto/share.py); without it the generated policy's own.

The oracle spends nothing on selection: its query runs at the plan's ε_q (the selection's share is the price
of not knowing the bound), so it is a bound on what any automatic choice within the same charge can reach.
With share limits the plan's ε_q is the chosen share's, so compare the oracle against a fixed-share run's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import itertools
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "bench"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import sqlglot  # noqa: E402
from query_latency import build_bounding_store, close_env, ensure_dataset, fresh_ledger, set_bounding  # noqa: E402
from utility import request_epsilon  # noqa: E402

from proxy import pipeline  # noqa: E402
from proxy.app import build_env  # noqa: E402
from proxy.query import auto_release  # noqa: E402
from proxy.query.analyse.measures import fixed_point  # noqa: E402
from proxy.query.auto import bounds as auto  # noqa: E402
from proxy.query.auto import clamp, total  # noqa: E402
from proxy.query.release.publish import release  # noqa: E402
from proxy.schemas import QueryRequest  # noqa: E402
from proxy.settings import Settings  # noqa: E402

QUERIES = {  # the Targets workload (the shapes the demo policy chooses bounds for)
    "region": ("COUNT by region", "SELECT region, COUNT(*) FROM visits GROUP BY region"),
    "category": ("COUNT by category", "SELECT category, COUNT(*) FROM visits GROUP BY category"),
    "sum_cat": ("SUM, AVG(amount) by category",
                "SELECT category, SUM(amount), AVG(amount) FROM visits GROUP BY category"),
    "avg_region": ("AVG(amount) by region", "SELECT region, AVG(amount) FROM visits GROUP BY region"),
    "region_cat": ("COUNT by region × category",
                   "SELECT region, category, COUNT(*) FROM visits GROUP BY region, category"),
    "two_weeks": ("COUNT by category, two weeks",
                  "SELECT category, COUNT(*) FROM visits WHERE day BETWEEN DATE '2026-03-01' AND DATE '2026-03-14' "
                  "GROUP BY category"),
    "no_keys": ("COUNT, SUM(amount), no GROUP BY", "SELECT COUNT(*), SUM(amount) FROM visits"),
    "two_weeks_total": ("COUNT, two weeks, no GROUP BY",  # thin data, one cell per unit: small bounds must win
                        "SELECT COUNT(*) FROM visits WHERE day BETWEEN DATE '2026-03-01' AND DATE '2026-03-14'"),
    "duration": ("AVG(duration_s) by region", "SELECT region, AVG(duration_s) FROM visits GROUP BY region"),
    "median": ("MEDIAN and p90 of amount by region",
               "SELECT region, MEDIAN(amount), QUANTILE_CONT(amount, 0.9) FROM visits GROUP BY region"),
    "month": ("COUNT by month", "SELECT date_trunc('month', day) AS month, COUNT(*) FROM visits GROUP BY 1"),
    "week": ("COUNT by week", "SELECT date_trunc('week', day) AS week, COUNT(*) FROM visits GROUP BY 1"),
}


def key_text(value: Any) -> str:
    """A group key as text, one form for the reference and the release: DuckDB's `date_trunc` of a DATE is a
    TIMESTAMP at midnight, which the release gives as the day ('2026-01-01'); other values as `str`.

    Example:
        >>> import datetime as dt
        >>> key_text(dt.datetime(2026, 3, 1)), key_text(dt.date(2026, 3, 1)), key_text("2026-03-01"), key_text(4)
        ('2026-03-01', '2026-03-01', '2026-03-01', '4')
        >>> key_text(dt.datetime(2026, 3, 1, 12, 30))
        '2026-03-01 12:30:00'
    """
    if isinstance(value, dt.datetime):  # a date too (a subclass): midnight is the day
        return value.date().isoformat() if value.time() == dt.time(0) and value.tzinfo is None else str(value)
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def key_count(sql: str) -> int:
    """How many GROUP BY keys `sql` has (a key's own commas, as in date_trunc('month', day), are not separators).

    Example:
        >>> key_count("SELECT date_trunc('month', day) AS m, COUNT(*) FROM visits GROUP BY date_trunc('month', day)")
        1
        >>> key_count("SELECT region, category, COUNT(*) FROM visits GROUP BY region, category"), key_count(
        ...     "SELECT COUNT(*) FROM visits")
        (2, 0)
    """
    group = sqlglot.parse_one(sql, read="duckdb").args.get("group")
    return len(group.expressions) if group is not None else 0


class NumpySampler:
    """Simulated noise for the oracle (never for a release): discrete Laplace, rounded Gaussian, a float softmax."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def laplace(self, values: Any, scale: float) -> tuple[int, ...]:
        p = 1 - math.exp(-1 / scale)
        n = len(values)
        noise = self.rng.geometric(p, n) - self.rng.geometric(p, n)
        return tuple(int(v) + int(z) for v, z in zip(values, noise, strict=True))

    def gaussian(self, values: Any, sigma: float) -> tuple[int, ...]:
        noise = self.rng.normal(0, sigma, len(values))
        return tuple(int(v) + round(float(z)) for v, z in zip(values, noise, strict=True))

    def salt(self) -> int:
        return int(self.rng.integers(1, 2**62))

    def exponential_index(self, numerators: Any, denominator: int) -> int:
        x = np.array([float(n) / denominator for n in numerators])
        w = np.exp(-(x - x.min()))
        return int(self.rng.choice(len(w), p=w / w.sum()))


class NoNoise(NumpySampler):
    """The release without noise (`--decompose`): what the bounds alone do to the answer, their bias."""

    def laplace(self, values: Any, scale: float) -> tuple[int, ...]:
        return tuple(int(v) for v in values)

    def gaussian(self, values: Any, sigma: float) -> tuple[int, ...]:
        return tuple(int(v) for v in values)


def set_share(policy: Path, share: str) -> None:
    """Set the demo dataset's `auto_bounds_share`: "0.1" (fixed) or "0.1,0.5" (limits: the split by expected error,
    proxy/query/auto/share.py); "" leaves the generated policy's own."""
    if not share:
        return
    values = [float(v) for v in share.split(",")]
    value = f"{values[0]!r}" if len(values) == 1 else f"[{values[0]!r}, {values[1]!r}]"
    lines = [line for line in policy.read_text().split("\n") if not line.startswith("auto_bounds_share")]
    text = "\n".join(lines).replace("[datasets.demo]\n", f"[datasets.demo]\nauto_bounds_share = {value}\n", 1)
    policy.write_text(text)


def errors_of(truth: dict[tuple[str, ...], tuple[Any, ...]], released: Any, n_keys: int) -> list[float]:
    """Relative errors per (group of `truth`, aggregate) of one answer (bench/utility.py's rule)."""
    by_key = {tuple(key_text(v) for v in row[:n_keys]): row[n_keys:] for row in released}
    out = []
    for key, values in truth.items():
        got = by_key.get(key)
        for column, true in enumerate(values):
            if true is None or true == 0:
                continue
            out.append(1.0 if got is None or got[column] is None else abs(float(got[column]) - float(true)) / abs(
                float(true)))
    return out


def quantiles(errors: list[float]) -> tuple[float, float]:
    """(median, p90)."""
    ordered = sorted(errors)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def summary(p: np.ndarray, errors: list[float]) -> tuple[float, float]:
    """(expected error, p90 of the error) over a draw of candidates with probabilities `p` and these errors."""
    mean = float(np.dot(p, errors))
    acc = 0.0
    for j in np.argsort(errors):
        acc += p[j]
        if acc >= 0.9:
            return mean, errors[j]
    return mean, max(errors)


def demo_on_store(directory: Path) -> tuple[dict[str, Any], Any, Any, Any]:
    """The 1M demo under `directory` (made if missing) served from its bounding store, on a fresh ledger:
    (its metadata, the Env, the demo dataset's policy, its engine)."""
    meta, _ = ensure_dataset(directory, rows=1_000_000, users=50_000)
    set_bounding(directory / "policy.toml", "store")
    settings = Settings(policy=directory / "policy.toml", ledger=fresh_ledger(directory))
    build_bounding_store(settings)
    env = build_env(settings)
    dataset = env.policy.dataset("demo")
    assert dataset is not None
    return meta, env, dataset, env.engine("demo")


def candidates(planned: Any) -> tuple[list[str], list[list[float]]]:
    """Each part's name and candidate values (the grids the product chooses on, every second point of the long ones)."""
    names, grids = [], []
    analysis = planned.analysis
    for part in planned.auto.parts:
        if part.bound == "max_rows":
            grid: list[float] = list(auto.bound_grid(int(part.limit)))
        elif part.bound == "max_groups":
            grid = list(auto.bound_grid(int(part.limit)))
        elif part.bound == "total":
            spec = analysis.table.column(part.column)
            caps = sorted(set(total.cap_grid(total.total_limit(analysis, spec))))
            unit = fixed_point(spec)[0]
            grid = [c / unit for c in caps[::2] if c >= 2 * unit] + [caps[-1] / unit]
        else:
            spec = analysis.table.column(part.column)
            points = clamp.clamp_grid(spec.bounds, spec.type)
            grid = [p for p in points if p > 0][::2] if part.bound == "upper" else [spec.bounds[0]]
        names.append(part.bound if part.column is None else f"{part.bound}({part.column})")
        grids.append(grid)
    return names, grids


def chosen_at(planned: Any, values: tuple[float, ...]) -> auto.ChosenBounds:
    """The ChosenBounds of fixed candidate `values` (one per part), as auto_release.draw would report them."""
    analysis = planned.analysis
    k, g = analysis.table.max_rows, analysis.max_groups
    clamps: dict[str, list[float]] = {}
    caps = []
    parts = []
    for part, value in zip(planned.auto.parts, values, strict=True):
        if part.bound == "max_rows":
            k = int(value)
        elif part.bound == "max_groups":
            g = int(value)
        elif part.bound == "total":
            spec = analysis.table.column(part.column)
            caps.append((spec.name, max(1, round(value * fixed_point(spec)[0]))))
        else:
            spec = analysis.table.column(part.column)
            clamps.setdefault(spec.name, [spec.bounds[0], spec.bounds[1]])[1 if part.bound == "upper" else 0] = value
        parts.append(auto.ChosenBound(part.bound, part.column, value, part.limit, 0.0, part.q))
    return auto.ChosenBounds(tuple(parts), k, g, tuple((n, lo, hi) for n, (lo, hi) in clamps.items()), tuple(caps))


def evaluate(planned: Any, chosen: auto.ChosenBounds, engine: Any, truth: Any, draws: int,
             sampler: NumpySampler) -> tuple[float, float]:
    at = auto_release.plan_at(planned, chosen)
    rows = engine.run(pipeline.engine_sql(at, engine)).rows
    n_keys = len(at.analysis.keys)
    errors: list[float] = []
    for _ in range(draws):
        errors += errors_of(truth, release(rows, at.analysis, at.price, sampler).rows, n_keys)
    return quantiles(errors)


def search(grids: list[list[float]], error: Any, full: int = 600) -> dict[tuple[float, ...], Any]:
    """(median, p90) of every candidate tried: every combination when there are at most `full`, else coordinate
    descent by the median (each part over its whole grid with the others fixed, two passes, from the middle of
    each grid): the bounds interact weakly (a cap makes k and g matter little, §10.2)."""
    results: dict[tuple[float, ...], Any] = {}
    if math.prod(len(g) for g in grids) <= full:
        for values in itertools.product(*grids):
            results[values] = error(values)
        return results
    point = [g[len(g) // 2] for g in grids]
    for _ in range(2):
        for i, grid in enumerate(grids):
            for value in grid:
                trial = (*point[:i], value, *point[i + 1:])
                if trial not in results:
                    results[trial] = error(trial)
            point[i] = min(grid, key=lambda v: results[(*point[:i], v, *point[i + 1:])][0])
    return results


def cautious(planned: Any) -> tuple[float, ...] | None:
    """The issue's cautious fixed policy (g = 4, k = 20, amount clamped to [0, 500]) on this plan's parts, where
    every part has such a value: a cap stands in for the clamp as 20·4·500 would (the policy's largest total)."""
    values: list[float] = []
    for part in planned.auto.parts:
        if part.bound == "max_rows":
            values.append(20)
        elif part.bound == "max_groups":
            values.append(4)
        elif part.bound == "upper" and part.column == "amount":
            values.append(500.0)
        else:
            return None
    return tuple(values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--users", type=int, default=50_000)
    parser.add_argument("--epsilons", default="0.1,1")
    parser.add_argument("--draws", type=int, default=40, help="simulated noise draws per candidate bound")
    parser.add_argument("--answers", type=int, default=20, help="product answers per query and ε")
    parser.add_argument("--dir", type=Path, default=ROOT / "bench" / "data-1m")
    parser.add_argument("--queries", default=",".join(QUERIES))
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--share", default="", help='the auto_bounds_share: "0.1" fixed, "0.1,0.5" limits')
    parser.add_argument("--decompose", action="store_true",
                        help="also the bias (no noise) at the oracle's bounds and at the product's median bounds")
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    meta, key = ensure_dataset(directory, rows=args.rows, users=args.users)
    set_bounding(directory / "policy.toml", "store")
    set_share(directory / "policy.toml", args.share)
    names = [q for q in args.queries.split(",") if q]
    with duckdb.connect(str(directory / "demo.duckdb"), read_only=True) as conn:
        truths = {}
        for name in names:
            sql = QUERIES[name][1]
            n_keys = key_count(sql)
            truths[name] = {tuple(key_text(v) for v in row[:n_keys]): tuple(row[n_keys:])
                            for row in conn.execute(sql).fetchall()}
    settings = Settings(policy=directory / "policy.toml", ledger=fresh_ledger(directory))
    build_bounding_store(settings)
    env = build_env(settings)
    analyst = env.policy.analyst_by_key_hash(hashlib.sha256(key.encode()).hexdigest())
    assert analyst is not None
    engine = env.engine("demo")
    sampler = NumpySampler(args.seed)
    serial = itertools.count(1)
    lines = []
    started_all = time.perf_counter()
    try:
        for epsilon in (float(e) for e in args.epsilons.split(",")):
            for name in names:
                title, sql = QUERIES[name]
                started = time.perf_counter()
                prepared = pipeline.prepare(QueryRequest(sql=sql, epsilon=request_epsilon(epsilon, next(serial))),
                                            analyst, env.policy, env.sampler.salt())
                planned = prepared.plan
                parts, grids = candidates(planned)
                def error(values: tuple[float, ...], planned: Any = planned, truth: Any = truths[name]) -> Any:
                    return evaluate(planned, chosen_at(planned, values), engine, truth, args.draws, sampler)

                results = search(grids, error)
                best = min(results, key=lambda v: (results[v][0], results[v][1]))
                best_p90 = min(results, key=lambda v: (results[v][1], results[v][0]))
                fixed = cautious(planned)
                fixed_err = (None if fixed is None else
                             evaluate(planned, chosen_at(planned, fixed), engine, truths[name], args.draws, sampler))
                product: list[float] = []
                chosen = []
                for _ in range(args.answers):
                    req = QueryRequest(sql=sql, epsilon=request_epsilon(epsilon, next(serial)))
                    prep = pipeline.prepare(req, analyst, env.policy, env.sampler.salt())
                    result = pipeline.answer(prep, analyst, env, lambda charge: None)
                    product += errors_of(truths[name], result.release.rows, len(prep.plan.analysis.keys))
                    if result.bounds is not None:
                        chosen.append(tuple(p.value for p in result.bounds.parts))
                p50, p90 = quantiles(product)
                if args.decompose and chosen:
                    # the bias alone (a release without noise) at the oracle's bounds and at the product's median
                    # choice (each part's median, snapped to its candidate grid): is the error the bound or the noise?
                    median = tuple(_nearest(grid, statistics.median(c[i] for c in chosen))
                                   for i, grid in enumerate(grids))
                    for label, values in (("oracle", best), ("product median", median)):
                        bias = evaluate(planned, chosen_at(planned, values), engine, truths[name], 1, NoNoise(0))
                        noisy = results[values] if values in results else error(values)
                        print(f"    {title} ε={epsilon}: {label} {_fmt(values)}: bias {bias[0]:.2%} / {bias[1]:.2%}, "
                              f"with noise {noisy[0]:.2%} / {noisy[1]:.2%}", file=sys.stderr, flush=True)
                line = {"query": title, "epsilon": epsilon, "parts": parts, "best": best, "oracle": results[best],
                        "best_p90": best_p90, "oracle_p90": results[best_p90], "product": (p50, p90),
                        "cautious": fixed_err, "chosen": chosen, "candidates": len(results),
                        "seconds": time.perf_counter() - started}
                lines.append(line)
                print(f"  {title} ε={epsilon}: oracle {results[best][0]:.2%}/{results[best][1]:.2%} at {best}; "
                      f"product {p50:.2%}/{p90:.2%}; chosen {_chosen(chosen)} ({line['seconds']:.0f} s)",
                      file=sys.stderr, flush=True)
    finally:
        close_env(env)
    print(f"dataset {meta['rows']:,} visits of {meta['users']:,} users; {args.draws} simulated draws per candidate; "
          f"{args.answers} product answers per query; {time.perf_counter() - started_all:.0f} s")
    print("| query | ε | bounds | oracle median / p90 (at) | best p90 (at) | product median / p90 | "
          "ratio median, p90 | cautious fixed median / p90 | product's chosen bounds (median (range)) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in lines:
        (om, op), (pm, pp), (_, bp) = r["oracle"], r["product"], r["oracle_p90"]
        fixed = "–" if r["cautious"] is None else f"{r['cautious'][0]:.1%} / {r['cautious'][1]:.1%}"
        print(f"| {r['query']} | {r['epsilon']:g} | {', '.join(r['parts'])} | {om:.1%} / {op:.1%} "
              f"({_fmt(r['best'])}) | {bp:.1%} ({_fmt(r['best_p90'])}) | {pm:.1%} / {pp:.1%} | "
              f"{pm / om:.2f}, {pp / op:.2f} | {fixed} | {_chosen(r['chosen'])} |")
    return 0


def _nearest(grid: list[float], value: float) -> float:
    """The candidate nearest `value` in ratio."""
    return min(grid, key=lambda v: abs(math.log(max(v, 1e-9) / max(value, 1e-9))))


def _fmt(values: tuple[float, ...]) -> str:
    return ", ".join(f"{v:.4g}" for v in values)


def _chosen(chosen: list[tuple[float, ...]]) -> str:
    if not chosen:
        return "–"
    return "; ".join(f"{statistics.median(c[i] for c in chosen):.4g} ({min(c[i] for c in chosen):.4g}–"
                     f"{max(c[i] for c in chosen):.4g})" for i in range(len(chosen[0])))


if __name__ == "__main__":
    sys.exit(main())
