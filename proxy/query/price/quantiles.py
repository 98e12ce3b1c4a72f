"""Calibration and release of the DP quantiles of a query (mechanisms/dp_quantile.py, docs/privacy.md §9).

Each quantile aggregate runs the exponential mechanism once per released group, on that group's histogram
of bounded rows (at most max_rows per unit: s = max_rows). With per-group budget ε_k, candidates are drawn
with probability ∝ exp(−d/T), T = 2Δ/ε_k rounded up, Δ = max(q, 1 − q)·s: the mechanism's true ε is
2Δ/T <= ε_k. A unit reaches at most L0 groups, so the release is charged ExponentialEvent(L0·2Δ, T)
(pure ε = L0·2Δ/T, basic composition over the groups; L0 = 1 is parallel composition). Given a noise
multiplier m instead of ε, T = m·2Δ (ε_k = 1/m, as for Laplace b = m·Δ1). Three or more distinct quantiles
of one histogram are one joint release (`JointSpec`, mechanisms/joint_quantiles.py) at the budget they would
have had together: more accurate, monotone, the same charge.

Example:
    >>> from fractions import Fraction
    >>> from proxy.query.analyse.measures import Aggregate
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

from accountant.events import Event, ExponentialEvent, LaplaceEvent
from mechanisms import dp_quantile, joint_quantiles, laplace
from mechanisms.rounding import up
from mechanisms.sampling import Sampler
from proxy.query.analyse.measures import Aggregate, Measure

JOINT_AT_LEAST = 3  # quantiles of one histogram released jointly from this many distinct q (fewer: no saving)
COUNT_SHARE = Fraction(1, 16)  # of a joint release's ε: the noisy row count that anchors the chains


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

    @property
    def events(self) -> tuple[Event, ...]:
        return (self.event,)

    @property
    def aggregates(self) -> tuple[int, ...]:
        return (self.aggregate,)

    def rank_error(self, points: int, beta: float) -> float:
        return dp_quantile.rank_error(self.q, float(self.epsilon), self.max_rows, max(points, 1), beta)


@dataclass(frozen=True, slots=True)
class JointSpec:
    """Several quantiles of one histogram released jointly (mechanisms/joint_quantiles.py): a noisy row
    count, the root quantile, then the two anchored chains, one level at a time."""

    aggregates: tuple[int, ...]  # indices into Analysis.aggregates
    positions: tuple[int, ...]  # for each aggregate, the index of its q in qs
    measure: int
    qs: tuple[Fraction, ...]  # distinct, ascending
    max_rows: int
    count_scale: float  # discrete Laplace scale of the row count (rows)
    root_scale: float  # T of the root: P ∝ exp(−d/T)
    level_scale: float  # T of every chain step
    events: tuple[Event, ...]  # the count, the root, one per chain level

    @property
    def root_epsilon(self) -> Fraction:
        q = self.qs[joint_quantiles.root(self.qs)]
        return 2 * dp_quantile.score_sensitivity(q, self.max_rows) / Fraction(self.root_scale)

    @property
    def level_epsilon(self) -> Fraction:
        return 2 * Fraction(self.max_rows) / Fraction(self.level_scale)

    def rank_error(self, points: int, beta: float, aggregate: int) -> float:
        errors = joint_quantiles.rank_errors(
            self.qs, Fraction(self.root_scale), Fraction(self.level_scale),
            lambda confidence: laplace.ci_halfwidth(self.count_scale, confidence), points, beta)
        return errors[self.positions[self.aggregates.index(aggregate)]]


def calibrate_joint(
    aggregate_indices: tuple[int, ...], measure_index: int, qs: tuple[Fraction, ...], epsilon: float | Fraction, *,
    max_rows: int, max_groups: int,
) -> JointSpec:
    """The joint release of the aggregates' quantiles at per-group budget `epsilon` (what they would have
    had together, one share each): 1/16 to the count, the rest over the root and the chain levels in
    proportion to Δ^(2/3) (a level's Δ = s, the root's max(q, 1 − q)·s), the root at least one share.

    Example:
        >>> spec = calibrate_joint((0, 1, 2), 0, (Fraction(1, 10), Fraction(1, 2), Fraction(9, 10)), 3.0,
        ...                        max_rows=1, max_groups=1)
        >>> spec.count_scale, round(spec.root_scale, 4), round(spec.level_scale, 4)
        (5.333333333333334, 0.92, 1.1591)
        >>> [type(e).__name__ for e in spec.events]
        ['LaplaceEvent', 'ExponentialEvent', 'ExponentialEvent']
    """
    distinct = tuple(sorted(set(qs)))
    levels = joint_quantiles.levels(distinct)
    total = Fraction(epsilon)
    count_epsilon = total * COUNT_SHARE
    s = max_rows
    root_q = distinct[joint_quantiles.root(distinct)]
    two_delta_root = 2 * dp_quantile.score_sensitivity(root_q, s)
    # T = 2Δ/ε: the split minimising Σ T² gives each stage ε ∝ Δ^(2/3) (a level's Δ is s, the root's
    # max(q, 1 − q)·s), the root never less than its share as a separate quantile; the levels share what the
    # root leaves, so the parts sum exactly
    weight = Fraction(float(max(root_q, 1 - root_q)) ** (2 / 3)).limit_denominator(10**6)
    root_part = max((total - count_epsilon) * weight / (weight + levels), total / len(distinct))
    level_part = (total - count_epsilon - root_part) / levels
    count_scale = up(s / count_epsilon)
    root_scale, level_scale = up(two_delta_root / root_part), up(2 * s / level_part)
    events: list[Event] = [LaplaceEvent(s * max_groups, count_scale), ExponentialEvent(up(two_delta_root * max_groups),
                                                                                       root_scale)]
    events += [ExponentialEvent(2 * s * max_groups, level_scale)] * levels
    return JointSpec(aggregate_indices, tuple(distinct.index(q) for q in qs), measure_index, distinct, s,
                     count_scale, root_scale, level_scale, tuple(events))


def release_joint(spec: JointSpec, measure: Measure, histograms: Sequence[object], sampler: Sampler) -> dict[
        int, list[float | int | str]]:
    """Every aggregate's released values per cell: one noisy count and one joint draw per cell."""
    points = max(measure.points, 1)
    cells = [counts(h, points) for h in histograms]
    noisy = sampler.laplace([sum(c) for c in cells], spec.count_scale) if cells else ()
    drawn = [joint_quantiles.joint_indices(c, spec.qs, n, spec.root_epsilon, spec.level_epsilon, spec.max_rows,
                                           sampler) for c, n in zip(cells, noisy, strict=True)]
    return {aggregate: [point_value(measure, indices[position]) for indices in drawn]
            for aggregate, position in zip(spec.aggregates, spec.positions, strict=True)}


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


def release_quantile(spec: QuantileSpec | JointSpec, measure: Measure, histograms: Sequence[object],
                     sampler: Sampler) -> dict[int, list[float | int | str]]:
    """The released grid values per cell of each aggregate of `spec`: one exponential-mechanism draw per
    cell, or one joint release per cell."""
    if isinstance(spec, JointSpec):
        return release_joint(spec, measure, histograms, sampler)
    points = max(measure.points, 1)
    epsilon = spec.epsilon
    return {spec.aggregate: [
        point_value(measure, dp_quantile.quantile_index(counts(h, points), spec.q, epsilon, spec.max_rows, sampler))
        for h in histograms
    ]}


def calibrate_all(
    quantiles: Sequence[tuple[int, int, Aggregate, int]], epsilon: float, *, max_rows: int, max_groups: int,
    noise_multiplier: float | None = None,
) -> tuple[QuantileSpec | JointSpec, ...]:
    """The specs of a query's quantile aggregates, given as (aggregate index, measure index, aggregate,
    points), each at per-group budget `epsilon`: those of one histogram with at least JOINT_AT_LEAST distinct
    q are released jointly, with the budget they would have had together; the others (and every quantile
    under a given noise multiplier) one by one."""
    by_measure: dict[int, list[tuple[int, int, Aggregate, int]]] = {}
    for item in quantiles:
        by_measure.setdefault(item[1], []).append(item)
    specs: list[QuantileSpec | JointSpec] = []
    for measure, items in by_measure.items():
        qs = tuple(a.q for _, _, a, _ in items if a.q is not None)
        if noise_multiplier is None and len(set(qs)) >= JOINT_AT_LEAST:
            specs.append(calibrate_joint(tuple(k for k, _, _, _ in items), measure, qs, Fraction(epsilon) * len(items),
                                         max_rows=max_rows, max_groups=max_groups))
            continue
        specs += [calibrate(k, j, a, epsilon, max_rows=max_rows, max_groups=max_groups, points=points,
                            noise_multiplier=noise_multiplier) for k, j, a, points in items]
    return tuple(specs)
