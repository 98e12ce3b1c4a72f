"""The DP quantile (mechanisms/dp_quantile.py): the score's sensitivity on neighbouring data (exhaustively on
small grids, tight), the exact output distribution's privacy loss, a stochastic audit of the production
sampler on neighbouring histograms that a deliberately broken variant fails, and utility.

Neighbours are add/remove: D' is D plus at most s rows of one unit, placed at any grid points.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from mechanisms.dp_quantile import (
    exponent_numerators,
    exponents,
    output_distribution,
    quantile_index,
    rank_distances,
    rank_error,
    score_sensitivity,
)
from mechanisms.sampling import FixedSampler, SecureSampler
from tests.mechanisms.test_sampler_audit import Family, audit, misfits

ALPHA = 1e-6
QS = (Fraction(0), Fraction(1, 10), Fraction(1, 4), Fraction(1, 2), Fraction(9, 10), Fraction(1))


def neighbours(histogram: tuple[int, ...], rows: int) -> list[tuple[int, ...]]:
    """Every histogram with at most `rows` more rows than `histogram`, at any grid points."""
    out = []
    for added in range(1, rows + 1):
        for where in itertools.combinations_with_replacement(range(len(histogram)), added):
            bigger = list(histogram)
            for i in where:
                bigger[i] += 1
            out.append(tuple(bigger))
    return out


def small_histograms(m: int, top: int) -> list[tuple[int, ...]]:
    return list(itertools.product(range(top + 1), repeat=m))


# --- the score's sensitivity ------------------------------------------------------------------------------


@pytest.mark.parametrize("s", [1, 2, 3])
@pytest.mark.parametrize("q", QS, ids=str)
def test_score_sensitivity_is_max_q_one_minus_q_times_s_and_tight(q: Fraction, s: int) -> None:
    delta = score_sensitivity(q, s)
    assert delta == max(q, 1 - q) * s
    worst = Fraction(0)
    for base in small_histograms(3, 3):
        near = rank_distances(base, q)
        for other in neighbours(base, s):
            far = rank_distances(other, q)
            worst = max(worst, *(abs(x - y) for x, y in zip(near, far, strict=True)))
    assert worst == delta  # never more (privacy), and reached (the bound is not loose)


def test_some_candidate_always_scores_zero() -> None:
    for base in small_histograms(4, 3):
        for q in QS:
            assert min(rank_distances(base, q)) == 0


def test_exact_exponents_and_distances() -> None:
    # n = 10, q·n = 5: intervals [0,5] [5,6] [6,6] [6,10]
    assert rank_distances([5, 1, 0, 4], Fraction(1, 2)) == (0, 0, 1, 1)
    # q = 0.9: q·n = 9, only [6,10] holds it; distances 4, 3, 3, 0; Δ = 0.9, ε = 1: exponents d/1.8
    assert exponents([5, 1, 0, 4], Fraction(9, 10), 1, 1) == (Fraction(20, 9), Fraction(5, 3), Fraction(5, 3), 0)
    # float q and ε convert exactly: 0.1 is not 1/10
    numerators, denominator = exponent_numerators([1, 1], 0.1, 0.5, 2)
    q = Fraction(0.1)  # n = 2, intervals [0,1] [1,2]: d_1 = 1 − 2q; Δ = (1 − q)·2
    assert Fraction(numerators[1], denominator) == Fraction(1, 2) * (1 - 2 * q) / (2 * (1 - q) * 2)


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(1)], ids=str)
def test_exact_output_distribution_is_epsilon_dp_on_all_small_neighbours(q: Fraction, epsilon: float) -> None:
    worst = 0.0
    for base in small_histograms(4, 2):
        p = output_distribution(base, q, epsilon, 2)
        for other in neighbours(base, 2):
            r = output_distribution(other, q, epsilon, 2)
            worst = max(worst, *(abs(math.log(a / b)) for a, b in zip(p, r, strict=True)))
    assert worst <= epsilon * (1 + 1e-12)


def test_bad_inputs_are_refused() -> None:
    sampler = SecureSampler()
    for q in (-0.01, 1.01, math.nan, math.inf):
        with pytest.raises(ValueError):
            quantile_index([1, 2], q, 1.0, 1, sampler)
    for epsilon in (0, -1.0, math.inf):
        with pytest.raises(ValueError):
            quantile_index([1, 2], 0.5, epsilon, 1, sampler)
    for histogram in ([], [1, -1], [1.5, 2]):
        with pytest.raises(ValueError):
            quantile_index(histogram, 0.5, 1.0, 1, sampler)
    for sensitivity in (0, True, 1.0):
        with pytest.raises(ValueError):
            quantile_index([1, 2], 0.5, 1.0, sensitivity, sampler)
    with pytest.raises(TypeError):
        SecureSampler().exponential_index([0.5, 0], 1)  # type: ignore[list-item]


def test_fixed_sampler_releases_the_true_quantile() -> None:
    assert quantile_index([0, 4, 0, 1], 0.5, 1.0, 1, FixedSampler()) == 1
    assert quantile_index([0, 4, 0, 1], 1, 1.0, 1, FixedSampler()) == 3  # the first grid point holding rank n


# --- the stochastic audit of the production sampler ------------------------------------------------------

AUDIT_N = 60_000  # draws per histogram (~50 µs each)
AUDIT_EPSILON = 1.0
# found by exhaustive search over 4-point grids: the pair on which the factor-2-less variant's breach
# P[M(D) ∈ S] − e^ε·P[M(D') ∈ S] is largest (0.058 on a single outcome)
AUDIT_D, AUDIT_D2 = (4, 1, 0, 4), (4, 1, 0, 5)
AUDIT_FAMILY = Family(0, 3)


def _secure_draws(histogram: tuple[int, ...], n: int) -> np.ndarray:
    sampler = SecureSampler()
    return np.array([quantile_index(histogram, 0.5, AUDIT_EPSILON, 1, sampler) for _ in range(n)], dtype=np.int64)


def _exact_draws(probabilities: tuple[float, ...], n: int) -> np.ndarray:
    # test doubles only: numpy's generator never draws privacy noise in the product
    return np.random.default_rng().choice(len(probabilities), size=n, p=np.asarray(probabilities))


def test_production_quantile_passes_the_audit_and_is_the_distribution_it_claims() -> None:
    zero, one = _secure_draws(AUDIT_D, AUDIT_N), _secure_draws(AUDIT_D2, AUDIT_N)
    assert audit(zero, one, AUDIT_FAMILY, AUDIT_EPSILON, 0.0, ALPHA / 3) == []
    for histogram, sample in ((AUDIT_D, zero), (AUDIT_D2, one)):
        p = output_distribution(histogram, 0.5, AUDIT_EPSILON, 1)
        assert misfits(sample, lambda ks, p=p: np.asarray(p)[ks], 0, 3, ALPHA / 3) == []


def test_audit_catches_a_quantile_without_the_factor_two() -> None:
    """Broken: weights exp(−ε·d/Δ), the exponential mechanism without the 2 that pays for the normaliser
    moving; its true loss on this pair is 1.40 > ε = 1."""
    broken = [output_distribution(h, 0.5, 2 * AUDIT_EPSILON, 1) for h in (AUDIT_D, AUDIT_D2)]
    true_loss = max(abs(math.log(a / b)) for a, b in zip(*broken, strict=True))
    assert true_loss > 1.35
    zero, one = _exact_draws(broken[0], AUDIT_N), _exact_draws(broken[1], AUDIT_N)
    assert audit(zero, one, AUDIT_FAMILY, AUDIT_EPSILON, 0.0, ALPHA), "the audit passed a non-ε-DP quantile"


def test_audit_passes_the_exact_double_at_the_right_epsilon() -> None:
    correct = [output_distribution(h, 0.5, AUDIT_EPSILON, 1) for h in (AUDIT_D, AUDIT_D2)]
    zero, one = _exact_draws(correct[0], AUDIT_N), _exact_draws(correct[1], AUDIT_N)
    assert audit(zero, one, AUDIT_FAMILY, AUDIT_EPSILON, 0.0, ALPHA) == []


# --- utility ---------------------------------------------------------------------------------------------


def test_rank_error_bound_holds_and_median_is_accurate() -> None:
    """1 000 rows spread over a 200-point grid, ε = 1: the released point's rank interval misses q·n by more
    than the 95% bound in at most 5% of draws (one-sided binomial test at ALPHA), and in practice far less."""
    grid = 200
    histogram = [5] * grid  # values 0..199, five rows each
    draws, beta = 400, 0.05
    bound = rank_error(0.5, 1.0, 1, grid, beta)
    assert bound == pytest.approx(2 * 0.5 / 1.0 * math.log(grid / beta), rel=1e-15)
    sampler = SecureSampler()
    distances = rank_distances(histogram, 0.5)
    misses = sum(distances[quantile_index(histogram, 0.5, 1.0, 1, sampler)] > bound for _ in range(draws))
    assert stats.binomtest(misses, draws, beta, alternative="greater").pvalue > ALPHA
    # the released median lies within 3 grid points (15 ranks of 1 000) of the true one in 95% of draws
    chosen = [quantile_index(histogram, 0.5, 1.0, 1, sampler) for _ in range(draws)]
    close = sum(abs(i - 99.5) <= 3.5 for i in chosen)
    assert stats.binomtest(close, draws, 0.95, alternative="less").pvalue > ALPHA
