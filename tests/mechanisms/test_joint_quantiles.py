"""The joint release of several quantiles of one histogram (mechanisms/joint_quantiles.py, docs/privacy.md §9):
the exact privacy loss of every stage on all small neighbours (a level of the two chains costs at most its
ε_level whatever the public prefix), monotone outputs, the true quantiles without noise, a stochastic audit
of the production release that a variant without the factor two fails, the rank error bound, and the query
path: one charge with the count, the root and one event per level, at the split's ε.

Neighbours are add/remove: D' is D plus at most s rows of one unit, placed at any grid points.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mechanisms import dp_quantile, laplace
from mechanisms.joint_quantiles import (
    anchored_numerators,
    chain_step,
    chains,
    joint_indices,
    left_rows,
    levels,
    rank_errors,
    right_rows,
    root,
    step_distribution,
)
from mechanisms.sampling import FixedSampler, SecureSampler
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.price.quantiles import JointSpec, QuantileSpec
from tests.mechanisms.test_dp_quantile import neighbours, small_histograms
from tests.mechanisms.test_sampler_audit import Family, audit
from tests.support import scratch_db

ALPHA = 1e-6
P10_50_90 = (Fraction(1, 10), Fraction(1, 2), Fraction(9, 10))


def _level(histogram: tuple[int, ...], left: Fraction | None, right: Fraction | None, bound: int, noisy: int,
           epsilon: float, s: int) -> dict[tuple[int, int], float]:
    """The exact distribution of one level: a left step and a right step from `bound` (None: no step)."""
    lp = step_distribution(histogram, left, bound, "left", noisy, epsilon, s) if left is not None else {bound: 1.0}
    rp = step_distribution(histogram, right, bound, "right", noisy, epsilon, s) if right is not None else {
        bound: 1.0}
    return {(a, b): p * r for a, p in lp.items() for b, r in rp.items()}


def _loss(p: dict[tuple[int, int], float], r: dict[tuple[int, int], float]) -> float:
    return max(abs(math.log(p[k] / r[k])) for k in p)


@pytest.mark.parametrize("s", [1, 2])
@pytest.mark.parametrize(("left", "right"), [(Fraction(1, 10), Fraction(9, 10)), (Fraction(2, 5), Fraction(3, 5)),
                                             (Fraction(0), Fraction(1)), (Fraction(1, 4), None)])
def test_a_level_of_the_chains_costs_at_most_its_epsilon_on_all_small_neighbours(
    left: Fraction, right: Fraction | None, s: int
) -> None:
    """Every histogram on 3 points with up to 2 rows each, every neighbour with up to s more rows anywhere,
    every bound and several noisy counts: the level's worst log-ratio (over both chains' outputs) <= ε."""
    epsilon, worst = 1.0, 0.0
    for base in small_histograms(3, 2):
        for near in neighbours(base, s):
            for bound in range(3):
                for noisy in (0, 3, 7):
                    p = _level(base, left, right, bound, noisy, epsilon, s)
                    r = _level(near, left, right, bound, noisy, epsilon, s)
                    worst = max(worst, _loss(p, r))
    assert worst <= epsilon * (1 + 1e-12)
    assert worst > 0.4 * epsilon  # and not vacuous


def test_the_steps_read_only_their_own_rows() -> None:
    """Left of bound B: the points below B; right: the points above B, from the top; the rows at B neither."""
    assert left_rows((1, 2, 3, 4), 1) == [1, 0]
    assert right_rows((1, 2, 3, 4), 1) == [4, 3, 0]
    # a right step's scores do not move when rows are added at or below its bound
    for extra in ((5, 0, 0, 0), (0, 7, 0, 0)):
        bigger = tuple(a + b for a, b in zip((1, 2, 3, 4), extra, strict=True))
        assert anchored_numerators(right_rows(bigger, 1), Fraction(1, 3), 9, 1, 1) == anchored_numerators(
            right_rows((1, 2, 3, 4), 1), Fraction(1, 3), 9, 1, 1)


def test_chains_root_and_levels() -> None:
    qs = tuple(Fraction(k, 20) for k in (1, 5, 10, 15, 19))
    assert root(qs) == 2 and chains(qs) == ([qs[1], qs[0]], [qs[3], qs[4]]) and levels(qs) == 2
    assert root(P10_50_90) == 1 and levels(P10_50_90) == 1


def test_outputs_are_monotone_and_without_noise_the_true_quantiles() -> None:
    rng = np.random.default_rng(7)  # test data only
    qs = (Fraction(0), *P10_50_90, Fraction(1))
    sampler = SecureSampler()
    for _ in range(30):
        histogram = [int(v) for v in rng.integers(0, 4, size=12)]
        drawn = joint_indices(histogram, qs, sum(histogram), 0.5, 0.5, 1, sampler)
        assert list(drawn) == sorted(drawn)
        exact = joint_indices(histogram, qs, sum(histogram), 1, 1, 1, FixedSampler())
        n = sum(histogram)
        for q, index in zip(qs, exact, strict=True):  # the released point's rank interval holds q·n
            assert dp_quantile.rank_distances(histogram, q)[index] == 0 or n == 0


# --- the stochastic audit -------------------------------------------------------------------------------

AUDIT_N = 40_000
# found by exhaustive search over 4-point histograms: the pair, bound and noisy count on which the level
# without the factor two breaches e^ε most on a single outcome (0.059; its true loss is 1.31 > ε = 1)
AUDIT_D, AUDIT_D2, AUDIT_BOUND, AUDIT_COUNT = (0, 0, 2, 0), (1, 0, 2, 0), 3, 12


def _encode(pairs: list[tuple[int, int]]) -> np.ndarray:
    return np.array([4 * a + b for a, b in pairs], dtype=np.int64)


def _secure_level(histogram: tuple[int, ...], n: int) -> np.ndarray:
    sampler = SecureSampler()
    # at the last point the right step has one candidate, its bound: drawn once, the left step n times
    (right,) = {chain_step(histogram, P10_50_90[2], AUDIT_BOUND, "right", AUDIT_COUNT, 1.0, 1, sampler)
                for _ in range(3)}
    return _encode([(chain_step(histogram, P10_50_90[0], AUDIT_BOUND, "left", AUDIT_COUNT, 1.0, 1, sampler), right)
                    for _ in range(n)])


def _exact_draws(distribution: dict[tuple[int, int], float], n: int) -> np.ndarray:
    keys = list(distribution)
    rng = np.random.default_rng()  # test doubles only: numpy's generator never draws privacy noise
    picked = rng.choice(len(keys), size=n, p=np.asarray([distribution[k] for k in keys]))
    return _encode([keys[i] for i in picked])


def test_production_level_passes_the_audit() -> None:
    zero, one = _secure_level(AUDIT_D, AUDIT_N), _secure_level(AUDIT_D2, AUDIT_N)
    assert audit(zero, one, Family(0, 15), 1.0, 0.0, ALPHA) == []


def test_audit_catches_a_level_without_the_factor_two() -> None:
    """Broken: steps drawn ∝ exp(−ε·d/s), forgetting that the normaliser moves too."""
    broken = [_level(h, P10_50_90[0], P10_50_90[2], AUDIT_BOUND, AUDIT_COUNT, 2.0, 1) for h in (AUDIT_D, AUDIT_D2)]
    assert _loss(*broken) > 1.3
    zero, one = _exact_draws(broken[0], AUDIT_N), _exact_draws(broken[1], AUDIT_N)
    assert audit(zero, one, Family(0, 15), 1.0, 0.0, ALPHA), "the audit passed a non-ε-DP level"


# --- error bars and the query path ----------------------------------------------------------------------


TIED = [10] * 30 + [1600] + [10] * 10 + [0] * 59  # the point 30 holds the ranks 300 … 1 900 of 2 000


@pytest.mark.parametrize("histogram", [[20] * 100, TIED], ids=["spread", "tied"])
def test_rank_error_bound_holds(histogram: list[int]) -> None:
    """2 000 rows on 100 points, joint p10/p50/p90 at a low ε: each released point's rank interval misses
    q·n by more than its 90% bound in at most 10% of draws (binomial test at ALPHA); also when the root's
    point holds the p90 too, and the right chain's rows (above it) are fewer than its target."""
    n, s, beta, draws = 2000, 1, 0.1, 150
    count_scale, root_scale, level_scale = 40.0, 8.0, 16.0
    bounds = rank_errors(P10_50_90, root_scale, level_scale, lambda c: laplace.ci_halfwidth(count_scale, c), 100,
                         beta)
    assert bounds[0] == bounds[2] > bounds[1]
    sampler = SecureSampler()
    misses = [0, 0, 0]
    for _ in range(draws):
        noisy = sampler.laplace([n], count_scale)[0]
        root_epsilon = 2 * dp_quantile.score_sensitivity(Fraction(1, 2), s) / Fraction(root_scale)
        drawn = joint_indices(histogram, P10_50_90, noisy, root_epsilon, Fraction(2 * s) / Fraction(level_scale), s,
                              sampler)
        for k, (q, index) in enumerate(zip(P10_50_90, drawn, strict=True)):
            misses[k] += dp_quantile.rank_distances(histogram, q)[index] > bounds[k]
    for k in range(3):
        assert stats.binomtest(misses[k], draws, beta, alternative="greater").pvalue > ALPHA


TABLE = TableSchema("t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("x", "INTEGER", bounds=(0, 10)),
                                 ColumnSpec("g", "VARCHAR", groupable=True, public_domain=("a", "b"))),
                    max_groups=2, max_rows=3)


def test_three_quantiles_of_a_column_are_one_joint_release_at_the_split_charge() -> None:
    sql = "SELECT g, QUANTILE_CONT(x, 0.9) AS hi, MEDIAN(x) AS m, MIN(x) AS lo, QUANTILE(x, 0.5) FROM t GROUP BY 1"
    planned = plan(sql, Catalog((TABLE,)), epsilon=1.0, delta=0.0, mechanism="laplace")
    (spec,) = planned.price.quantiles
    assert isinstance(spec, JointSpec) and spec.qs == (0, Fraction(1, 2), Fraction(9, 10))
    # MEDIAN(x) and QUANTILE(x, 0.5) are one aggregate: three, ε in all, over L0 = 2 groups: 1/2 per group;
    # the count 1/32 of it, the root (Δ = s/2) and the level (Δ = s) the rest, as (1/2)^(2/3) : 1
    assert spec.positions == (2, 1, 0) and planned.analysis.outputs[4].expr == planned.analysis.outputs[2].expr
    kinds = [type(e).__name__ for e in spec.events]
    assert kinds == ["LaplaceEvent", "ExponentialEvent", "ExponentialEvent"]
    count, root_event, level = spec.events
    rest, weight = 15 / 32, 0.5 ** (2 / 3)
    assert count.sensitivity / count.scale == pytest.approx(2 / 32, rel=1e-12)
    assert root_event.sensitivity / root_event.scale == pytest.approx(2 * rest * weight / (1 + weight), rel=1e-6)
    assert level.sensitivity / level.scale == pytest.approx(2 * rest / (1 + weight), rel=1e-6)
    assert spec.level_epsilon == Fraction(2 * 3) / Fraction(spec.level_scale)  # Δ = s for an anchored step
    assert planned.price.epsilon <= 1.0 and planned.price.epsilon == pytest.approx(1.0, rel=1e-9)
    # two quantiles of a column, or any under a noise multiplier, stay one mechanism each
    two = plan("SELECT MEDIAN(x), MAX(x) FROM t", Catalog((TABLE,)), epsilon=1.0, delta=0.0, mechanism="laplace")
    assert all(isinstance(q, QuantileSpec) for q in two.price.quantiles)
    given = plan("SELECT MIN(x), MEDIAN(x), MAX(x) FROM t", Catalog((TABLE,)), delta=0.0, mechanism="laplace",
                 epsilon=1.0, noise_multiplier=4.0)
    assert len(given.price.quantiles) == 3


def test_every_joint_stage_on_sql_neighbours_stays_within_the_charge() -> None:
    """The rewritten SQL on D and on D minus one unit: per group, the count, the root and the level losses
    (worst over every public prefix) sum, over the groups, to at most the query's charge."""
    data = [(u, (u * 3 + r) % 11, "ab"[(u + r) % 2]) for u in range(6) for r in range(5)] + [(9, 10, "a")] * 6
    planned = plan("SELECT g, QUANTILE_CONT(x, 0.1), MEDIAN(x), QUANTILE_CONT(x, 0.9) FROM t GROUP BY g",
                   Catalog((TABLE,)), epsilon=1.0, delta=0.0, mechanism="laplace", salt=5)
    (spec,) = planned.price.quantiles
    assert isinstance(spec, JointSpec)

    def histograms(rows: list[tuple[int, int, str]]) -> dict[str, list[int]]:
        con = scratch_db.connect()
        con.execute("CREATE TABLE t (uid BIGINT, x INTEGER, g VARCHAR)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
        out = {}
        for row in con.execute(planned.sql).fetchall():
            out[row[0]] = [0] * 11
            for index, count in (row[2 + spec.measure] or {}).items():
                out[row[0]][int(index)] += int(count)
        return out

    for removed in (0, 9):
        big, small = histograms(data), histograms([r for r in data if r[0] != removed])
        total = 0.0
        for g in ("a", "b"):
            h, h2 = tuple(big.get(g, [0] * 11)), tuple(small.get(g, [0] * 11))
            if h == h2:
                continue
            total += abs(sum(h) - sum(h2)) / spec.count_scale
            total += max(abs(math.log(a / b)) for a, b in zip(
                dp_quantile.output_distribution(h, spec.qs[1], spec.root_epsilon, 3),
                dp_quantile.output_distribution(h2, spec.qs[1], spec.root_epsilon, 3), strict=True))
            total += max(_loss(_level(h, spec.qs[0], spec.qs[2], b, n, float(spec.level_epsilon), 3),
                               _level(h2, spec.qs[0], spec.qs[2], b, n, float(spec.level_epsilon), 3))
                         for b in range(11) for n in (0, 5, 15, 40))
        assert 0 < total <= planned.price.epsilon * (1 + 1e-9)
