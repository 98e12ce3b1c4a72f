"""Error bars for every released aggregate at a chosen confidence (issue #15): public functions of the
noise parameters only, so they cost nothing and reveal nothing.

- COUNT, SUM: the noise's own interval: P[|Z| > ci] <= 1 − confidence (exact for the discrete noise).
- quantiles: a rank interval (mechanisms.dp_quantile.rank_error; joint releases mechanisms.joint_quantiles.
  rank_errors): with probability >= confidence the released value lies between the true quantiles of ranks
  q·n ± `rank_error`.
- AVG, VAR, STDDEV: two bars. `ci_times_count` (also in a preview) holds for any data: released − true =
  (Z_S − μ_c·Z_N)/N̂ exactly for AVG, |μ_c| <= R (R the half range, c its centre), so |error| <= (h_S + R·h_N)
  / N̂; VAR to first order, (h_Q + R²·h_N + 2R·(h_S + R·h_N))/N̂. Assuming averages up to the clamp, it is
  honest but wide. An answer's row `interval` (method `parts`, issue #29 item 8) is read from the row's
  released noisy parts instead: each part's exact noise interval at confidence^(1/k) (k parts, independent
  noises, so all k hold together with probability >= confidence exactly), and the value's range over that box
  of parts (`mean_interval`, `variance_interval`), clipped to the clamp range as the release is.
  Coverage is over the noise only, for the value the bounded rows give (the release at zero noise); what
  bounding removed is not in it.

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


def part_halfwidths(analysis: Analysis, price: Price, index: int, confidence: float) -> tuple[int, ...]:
    """The exact noise half-width of each released part of aggregate `index` (AVG: centred sum, count; VAR and
    STDDEV: count, centred sum, centred squares), in the parts' integer units, each at confidence^(1/k): the
    k noises are drawn independently, so all k intervals hold together with probability >= confidence."""
    measures = measures_of(analysis.aggregates[index], analysis.table)
    level = confidence ** (1 / len(measures))
    return tuple(int(_halfwidth(analysis, price, m, level)) for m in measures)


def row_interval(analysis: Analysis, price: Price, index: int, parts: tuple[int, ...], confidence: float
                 ) -> tuple[float, float] | None:
    """The interval of AVG/VAR/STDDEV aggregate `index` in one row from the row's noisy `parts` (the release's
    measures, as `Release.parts` holds them): None where the release is NULL (too small a noisy count)."""
    aggregate = analysis.aggregates[index]
    measures = measures_of(aggregate, analysis.table)
    widths = part_halfwidths(analysis, price, index, confidence)
    if aggregate.kind == "avg":
        return mean_interval(parts[0], parts[1], widths[0], widths[1], measures[0])
    return variance_interval(parts, widths, measures[1], aggregate.kind)


def mean_interval(s: int, n: int, h_s: int, h_n: int, measure: Measure) -> tuple[float, float] | None:
    """Where the pre-noise average lies if |Ŝ − S| <= h_s and |N̂ − N| <= h_n (Ŝ = `s`, N̂ = `n`).

    The true N is a whole number >= 1 where the average exists, so N ∈ [max(N̂ − h_n, 1), N̂ + h_n] and
    S ∈ [Ŝ ± h_s]; S/N is monotone in each, so its range over that box is spanned by the four corners,
    clipped to the clamp range as the release and the pre-noise value are (clipping is monotone). The
    any-data bar follows from the same event and |μ_c| <= R, so it never cuts this interval further.
    None where N̂ <= 0 (the release is NULL).

    Example (values in [0, 10], centre 5; Ŝ = 100 over N̂ = 100 rows, so the released average is 6):
        >>> m = Measure("centred_sum", "x", 1, 0, 10)
        >>> mean_interval(100, 100, 30, 10, m)  # corners (70, 130) / (90, 110): 5 + [70/110, 130/90]
        (5.636363636363637, 6.444444444444445)
        >>> mean_interval(100, 100, 30, 200, m)  # N could be 1: the top reaches the clamp; S >= 70 keeps it > 5
        (5.233333333333333, 10.0)
        >>> mean_interval(100, 0, 30, 10, m) is None
        True
    """
    if n <= 0:
        return None
    centre = measure.centre if measure.kind == "centred_sum" else 0
    n_lo, n_hi = max(n - h_n, 1), n + h_n
    ratios = [a / b for a in (s - h_s, s + h_s) for b in (n_lo, n_hi)]
    return (_clip(centre + min(ratios), measure.lo, measure.hi) / measure.grid,
            _clip(centre + max(ratios), measure.lo, measure.hi) / measure.grid)


def variance_interval(parts: tuple[int, ...], widths: tuple[int, ...], measure: Measure, kind: str
                      ) -> tuple[float, float] | None:
    """Where the pre-noise VAR (STDDEV: its root) lies if every noisy part (N̂, Ŝ, Q̂) is within its width.

    VAR_POP = Q·u − S²·u² with u = 1/N: increasing in Q, decreasing in S², concave in u. Over the box
    N ∈ [max(N̂ − h_N, 1), N̂ + h_N] (2 for the sample forms), S ∈ [Ŝ ± h_S], Q ∈ [Q̂ ± h_Q] its largest
    value is at the largest Q, the S nearest 0 and the vertex u = Q/(2S²) or an end of u's range; its smallest
    at the smallest Q, the S farthest from 0 and an end. Both are clipped to [0, R²] as the release is; the
    sample forms multiply by N/(N − 1) ∈ [N_hi/(N_hi − 1), N_lo/(N_lo − 1)]. None where the release is NULL.

    Example (values in [0, 10], centre 5: N̂ = 100, Ŝ = 0, Q̂ = 400, so VAR_POP is 4):
        >>> m = Measure("centred_sum", "x", 1, 0, 10)
        >>> variance_interval((100, 0, 400), (10, 20, 40), m, "var_pop")  # 360/110 − (20/110)², 440/90
        (3.239669421487603, 4.888888888888889)
        >>> variance_interval((100, 0, 400), (10, 20, 40), m, "stddev_pop")
        (1.79990817029303, 2.211083193570267)
    """
    n, s, q = parts
    h_n, h_s, h_q = widths
    sample = kind in ("var_samp", "stddev_samp")
    if n <= (1 if sample else 0):
        return None
    top = ((measure.hi - measure.lo) / 2) ** 2
    n_lo, n_hi = max(n - h_n, 2 if sample else 1), n + h_n
    ends = (1 / n_hi, 1 / n_lo)
    s_lo, s_hi = s - h_s, s + h_s
    near = 0 if s_lo <= 0 <= s_hi else min(abs(s_lo), abs(s_hi))
    far = max(abs(s_lo), abs(s_hi))
    q_lo, q_hi = q - h_q, q + h_q
    tops = list(ends)
    if near > 0 and ends[0] <= q_hi / (2 * near * near) <= ends[1]:
        tops.append(q_hi / (2 * near * near))
    high = _clip(max(q_hi * u - near * near * u * u for u in tops), 0, top)
    low = _clip(min(q_lo * u - far * far * u * u for u in ends), 0, top)
    if sample:
        low, high = _clip(low * n_hi / (n_hi - 1), 0, 2 * top), _clip(high * n_lo / (n_lo - 1), 0, 2 * top)
    low, high = low / measure.grid**2, high / measure.grid**2
    return (low**0.5, high**0.5) if kind.startswith("stddev") else (low, high)


def _clip(value: float, lo: float, hi: float) -> float:
    return min(max(value, lo), hi)
