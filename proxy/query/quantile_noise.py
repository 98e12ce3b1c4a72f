"""Calibration and release of the DP quantiles of a query (mechanisms/dp_quantile.py, docs/privacy.md §9).

Each quantile aggregate runs the exponential mechanism once per released group, on that group's histogram
of bounded rows (at most max_rows per unit: s = max_rows). With per-group budget ε_k, candidates are drawn
with probability ∝ exp(−d/T), T = 2Δ/ε_k rounded up, Δ = max(q, 1 − q)·s: the mechanism's true ε is
2Δ/T <= ε_k. A unit reaches at most L0 groups, so the release is charged ExponentialEvent(L0·2Δ, T)
(pure ε = L0·2Δ/T, basic composition over the groups; L0 = 1 is parallel composition). Given a noise
multiplier m instead of ε, T = m·2Δ (ε_k = 1/m, as for Laplace b = m·Δ1).

Example:
    >>> from fractions import Fraction
    >>> from proxy.query.measures import Aggregate
    >>> spec = calibrate(0, 3, Aggregate("quantile", "x", Fraction(1, 2)), 1.0, max_rows=2, max_groups=1,
    ...                  points=101)
    >>> spec.scale, spec.event
    (2.0, ExponentialEvent(sensitivity=2.0, scale=2.0))
    >>> round(spec.rank_error95, 3)
    15.222
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from accountant.events import ExponentialEvent
from mechanisms import dp_quantile
from mechanisms.rounding import up
from mechanisms.sampling import Sampler
from proxy.query.measures import Aggregate, Measure


@dataclass(frozen=True, slots=True)
class QuantileSpec:
    """How one quantile aggregate is released: the exponential mechanism's temperature and its charge."""

    aggregate: int  # index into Analysis.aggregates
    measure: int  # index into Analysis.measures (the column's histogram)
    q: Fraction
    max_rows: int  # s: rows one unit adds to one group's histogram
    scale: float  # T: P[point i] ∝ exp(−d_i / T)
    event: ExponentialEvent
    rank_error95: float  # with probability 0.95 the released point's rank is within this of q·n (per group)

    @property
    def epsilon(self) -> Fraction:
        """The mechanism's exact per-group ε = 2Δ/T, given to dp_quantile so that its exponent is d/T."""
        return 2 * dp_quantile.score_sensitivity(self.q, self.max_rows) / Fraction(self.scale)


def calibrate(
    aggregate_index: int, measure_index: int, aggregate: Aggregate, epsilon: float | None, *, max_rows: int,
    max_groups: int, points: int, noise_multiplier: float | None = None,
) -> QuantileSpec:
    """The spec of one quantile at per-group budget `epsilon` (or at a given `noise_multiplier`)."""
    assert aggregate.q is not None
    two_delta = 2 * dp_quantile.score_sensitivity(aggregate.q, max_rows)
    if noise_multiplier is None:
        assert epsilon is not None and epsilon > 0
        scale = up(two_delta / Fraction(epsilon))
    else:
        scale = up(two_delta * Fraction(noise_multiplier))
    event = ExponentialEvent(up(two_delta * max_groups), scale)
    per_group = float(two_delta / Fraction(scale))
    bound = dp_quantile.rank_error(aggregate.q, per_group, max_rows, max(points, 1), 0.05)
    return QuantileSpec(aggregate_index, measure_index, aggregate.q, max_rows, scale, event, bound)


def point_value(measure: Measure, index: int) -> float | int | str:
    """The value of grid point `index` of a histogram measure (an int on an integer grid of step 1; on a DATE
    column's grid, the day as ISO text, a coarse grid's point rounded to the nearest day).

    Example:
        >>> point_value(Measure("histogram", "x", 1, 18, 90, 73), 5)
        23
        >>> point_value(Measure("histogram", "x", 4, 0, 400, 101), 50)
        50.0
        >>> point_value(Measure("histogram", "d", 1, 0, 364, 365, epoch="2026-01-01"), 31)
        '2026-02-01'
    """
    lo, hi = Fraction(measure.lo, measure.grid), Fraction(measure.hi, measure.grid)
    last = max(measure.points - 1, 1)
    value = lo + (hi - lo) * index / last
    if measure.epoch:
        return (dt.date.fromisoformat(measure.epoch) + dt.timedelta(days=round(value))).isoformat()
    return int(value) if measure.grid == 1 and hi - lo == last else float(value)


def counts(histogram: object, points: int) -> list[int]:
    """The group's histogram as DuckDB returns it (a MAP point → rows, or NULL) as a list of `points` counts.

    Example:
        >>> counts({0: 2, 3: 1}, 4), counts(None, 2)
        ([2, 0, 0, 1], [0, 0])
    """
    out = [0] * points
    for index, rows in (histogram or {}).items():  # type: ignore[attr-defined]
        if index is not None and 0 <= int(index) < points:  # the SQL clamps the index; NULL is not a row
            out[int(index)] += int(rows)
    return out


def release_quantile(spec: QuantileSpec, measure: Measure, histograms: Sequence[object], sampler: Sampler) -> list[
        float | int | str]:
    """One released grid value per cell, each from its own exponential-mechanism draw."""
    points = max(measure.points, 1)
    epsilon = spec.epsilon
    return [
        point_value(measure, dp_quantile.quantile_index(counts(h, points), spec.q, epsilon, spec.max_rows, sampler))
        for h in histograms
    ]
