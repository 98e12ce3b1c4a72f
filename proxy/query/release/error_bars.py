"""Error bars for every released aggregate at a chosen confidence (issue #15): public functions of the
noise parameters only, so they cost nothing and reveal nothing.

- COUNT, SUM: the noise's own interval: P[|Z| > ci] <= 1 − confidence (exact for the discrete noise).
- quantiles: a rank interval (mechanisms.dp_quantile.rank_error; joint releases mechanisms.joint_quantiles.
  rank_errors): with probability >= confidence the released value lies between the true quantiles of ranks
  q·n ± `rank_error`.
- AVG: released c + Ŝ/N̂ with Ŝ = S + Z_S, N̂ = N + Z_N; exactly, released − true = (Z_S − μ_c·Z_N)/N̂ with
  |μ_c| <= R (R the half range, c its centre). With |Z_S| <= h_S and |Z_N| <= h_N, each at confidence
  1 − β/2 (union bound, β = 1 − confidence): |error| <= (h_S + R·h_N) / N̂. `ci_times_count` is that
  numerator: divide by the row's noisy count (COUNT of the column) for the row's half-width.
- VAR: to first order in 1/N̂, |error| <= (h_Q + R²·h_N + 2R·(h_S + R·h_N)) / N̂, each h at 1 − β/3
  (Q̂/N̂ − Q/N = (Z_Q − (Q/N)·Z_N)/N̂ with Q/N <= R², and (Ŝ/N̂)² − (S/N)² ≈ 2(S/N)·(Ŝ/N̂ − S/N)).
  STDDEV: the same numerator, in variance units: the row's interval is √(max(0, s² ∓ w)), w = numerator/N̂.

Example:
    >>> from proxy.query.planner import plan
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("o", "cid", (ColumnSpec("cid", "BIGINT"), ColumnSpec("x", "INTEGER", bounds=(0, 10))))
    >>> p = plan("SELECT COUNT(*), AVG(x) FROM o", Catalog((t,)), epsilon=1.0, delta=0.0, mechanism="laplace")
    >>> [error_bar(p.analysis, p.price, k, 0.95) for k in range(2)]
    [ErrorBar(ci=9.0, ci_times_count=None, rank_error=None), ErrorBar(ci=None, ci_times_count=110.0, rank_error=None)]
"""

from __future__ import annotations

from dataclasses import dataclass

from mechanisms import laplace
from mechanisms.gaussian import zcdp
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import SPREAD_KINDS, Measure, measures_of
from proxy.query.price.charge import NoiseSpec, Price
from proxy.query.price.quantiles import JointSpec


@dataclass(frozen=True, slots=True)
class ErrorBar:
    ci: float | None = None  # half-width in the column's units
    ci_times_count: float | None = None  # AVG/VAR/STDDEV: half-width × the row's noisy count
    rank_error: float | None = None  # quantiles: in ranks (rows)


def error_bar(analysis: Analysis, price: Price, index: int, confidence: float) -> ErrorBar:
    """The error bar of aggregate `index` of the query at `confidence` (0 < confidence < 1)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    aggregate = analysis.aggregates[index]
    beta = 1 - confidence
    if aggregate.kind == "quantile":
        spec = next(q for q in price.quantiles if index in q.aggregates)
        points = analysis.measures[spec.measure].points
        if isinstance(spec, JointSpec):
            return ErrorBar(rank_error=spec.rank_error(points, beta, index))
        return ErrorBar(rank_error=spec.rank_error(points, beta))
    measures = measures_of(aggregate, analysis.table)
    if aggregate.kind == "avg":
        centred, count = measures
        h_s, h_n = (_halfwidth(analysis, price, m, 1 - beta / 2) for m in (centred, count))
        # |S/N| <= half the range after centring; an uncentred capped sum (auto/total.py): <= max(|lo|, |hi|)
        half = _half_range(centred) if centred.kind == "centred_sum" else max(
            abs(centred.lo), abs(centred.hi)) / centred.grid
        return ErrorBar(ci_times_count=(h_s / centred.grid) + half * h_n)
    if aggregate.kind in SPREAD_KINDS:
        count, centred, squares = measures
        h_n, h_s, h_q = (_halfwidth(analysis, price, m, 1 - beta / 3) for m in (count, centred, squares))
        half = _half_range(centred)
        first_order = h_q / centred.grid**2 + half**2 * h_n + 2 * half * (h_s / centred.grid + half * h_n)
        return ErrorBar(ci_times_count=first_order)
    (measure,) = measures
    return ErrorBar(ci=_halfwidth(analysis, price, measure, confidence) / measure.grid)


def _spec(analysis: Analysis, price: Price, measure: Measure) -> NoiseSpec:
    j = analysis.measures.index(measure)
    return next(n for n in price.noise if n.measure == j)


def _halfwidth(analysis: Analysis, price: Price, measure: Measure, confidence: float) -> float:
    spec = _spec(analysis, price, measure)
    halfwidth = laplace.ci_halfwidth if spec.mechanism == "laplace" else zcdp.ci_halfwidth
    return float(halfwidth(spec.scale, confidence))


def _half_range(measure: Measure) -> float:
    """R: the largest |x − c| in the column's units."""
    return max(measure.hi - measure.centre, measure.centre - measure.lo) / measure.grid
