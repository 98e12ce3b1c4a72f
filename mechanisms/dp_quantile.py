"""The DP quantile: the exponential mechanism over a finite ordered grid, sampled exactly.

The data arrive as a histogram over grid points g_0 < g_1 < … < g_{m−1} (histogram[i] = rows at g_i, after
clamping and bounding). Candidate i covers the ranks [L_i, R_i] with L_i = #(rows < g_i) and
R_i = #(rows <= g_i); its score is minus the distance from the target rank q·n to that interval,

    d_i = max(L_i − q·n, q·n − R_i, 0),

so every grid point holding the q-quantile scores 0 however many ties it carries (the plain
−|#(rows <= g_i) − q·n| would penalise a heavily tied true quantile). One unit adding or removing at
most s rows moves every d_i by at most Δ = max(q, 1 − q)·s (docs/privacy.md §9), and index i is drawn with
probability ∝ exp(−ε·d_i / (2Δ)): ε-DP under add/remove adjacency. All arithmetic is exact (rationals),
and the draw is exact (`Sampler.exponential_index`), so no floating-point exponential reaches the output.

Example:
    >>> from mechanisms.sampling import SecureSampler
    >>> quantile_index([0, 0, 500, 0, 0], q=0.5, epsilon=1.0, sensitivity=1, sampler=SecureSampler())
    2
    >>> rank_distances([2, 0, 3], q=Fraction(1, 2))  # n = 5, target rank 5/2, intervals [0,2] [2,2] [2,5]
    (Fraction(1, 2), Fraction(1, 2), Fraction(0, 1))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from mechanisms.sampling import Sampler


def _exact(value: float | Fraction, name: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return Fraction(value)  # a float converts exactly: the mechanism uses the very number it was given


def _checked_q(q: float | Fraction) -> Fraction:
    exact = _exact(q, "q")
    if not 0 <= exact <= 1:
        raise ValueError(f"q must lie in [0, 1], got {q!r}")
    return exact


def _checked_histogram(histogram: Sequence[int]) -> list[int]:
    if len(histogram) == 0:
        raise ValueError("the grid must have at least one point")
    counts = []
    for count in histogram:
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"histogram counts must be non-negative integers, got {count!r}")
        counts.append(count)
    return counts


def _checked_sensitivity(sensitivity: int) -> int:
    if isinstance(sensitivity, bool) or not isinstance(sensitivity, int) or sensitivity < 1:
        raise ValueError(f"sensitivity must be an integer >= 1, got {sensitivity!r}")
    return sensitivity


def score_sensitivity(q: float | Fraction, sensitivity: int) -> Fraction:
    """Δ = max(q, 1 − q)·s: the most one unit with at most s rows moves any candidate's distance d_i.

    Example:
        >>> score_sensitivity(0.5, 3), score_sensitivity(0.9, 1), score_sensitivity(0, 2)
        (Fraction(3, 2), Fraction(8106479329266893, 9007199254740992), Fraction(2, 1))
    """
    exact = _checked_q(q)
    return max(exact, 1 - exact) * _checked_sensitivity(sensitivity)


def _scaled_distances(counts: Sequence[int], q: Fraction) -> list[int]:
    # b·d_i for q = a/b, in integers: b·L_i − a·n and a·n − b·R_i
    a, b = q.numerator, q.denominator
    target = a * sum(counts)
    scaled, below = [], 0
    for count in counts:
        at_most = below + count
        scaled.append(max(b * below - target, target - b * at_most, 0))
        below = at_most
    return scaled


def rank_distances(histogram: Sequence[int], q: float | Fraction) -> tuple[Fraction, ...]:
    """d_i = distance from the target rank q·n to candidate i's rank interval [L_i, R_i]; 0 at the quantile.

    The intervals tile [0, n] (L_0 = 0, R_i = L_{i+1}, R_{m−1} = n), so some d_i is 0 on any data.

    Example:
        >>> rank_distances([1, 1, 1, 1], q=0)  # the minimum: every rank interval after the first is away
        (Fraction(0, 1), Fraction(1, 1), Fraction(2, 1), Fraction(3, 1))
    """
    exact = _checked_q(q)
    scaled = _scaled_distances(_checked_histogram(histogram), exact)
    return tuple(Fraction(d, exact.denominator) for d in scaled)


def exponent_numerators(
    histogram: Sequence[int], q: float | Fraction, epsilon: float | Fraction, sensitivity: int
) -> tuple[tuple[int, ...], int]:
    """The exponents ε·d_i / (2Δ) of the exponential mechanism as integers over one common denominator.

    With q = a/b and ε = e/f: ε·d_i/(2Δ) = e·(b·d_i) / (2·f·max(a, b − a)·s), all integers.

    Example:
        >>> exponent_numerators([2, 0, 3], q=0.5, epsilon=1, sensitivity=1)
        ((1, 1, 0), 2)
    """
    counts, exact_q = _checked_histogram(histogram), _checked_q(q)
    eps = _exact(epsilon, "epsilon")
    if eps <= 0:
        raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
    a, b = exact_q.numerator, exact_q.denominator
    denominator = 2 * eps.denominator * max(a, b - a) * _checked_sensitivity(sensitivity)
    return tuple(eps.numerator * d for d in _scaled_distances(counts, exact_q)), denominator


def exponents(
    histogram: Sequence[int], q: float | Fraction, epsilon: float | Fraction, sensitivity: int
) -> tuple[Fraction, ...]:
    """The exact exponents ε·d_i / (2Δ) (P[i] ∝ exp(−exponent_i)), as fractions.

    Example:
        >>> exponents([2, 0, 3], q=0.5, epsilon=1, sensitivity=1)
        (Fraction(1, 2), Fraction(1, 2), Fraction(0, 1))
    """
    numerators, denominator = exponent_numerators(histogram, q, epsilon, sensitivity)
    return tuple(Fraction(x, denominator) for x in numerators)


def output_distribution(
    histogram: Sequence[int], q: float | Fraction, epsilon: float | Fraction, sensitivity: int
) -> tuple[float, ...]:
    """P[quantile_index = i] for every i, in floating point: for tests and analysis, never for sampling.

    Example:
        >>> [round(p, 4) for p in output_distribution([2, 0, 3], q=0.5, epsilon=1, sensitivity=1)]
        [0.2741, 0.2741, 0.4519]
    """
    weights = [math.exp(-float(x)) for x in exponents(histogram, q, epsilon, sensitivity)]
    total = math.fsum(weights)
    return tuple(w / total for w in weights)


def rank_error(q: float | Fraction, epsilon: float, sensitivity: int, grid_size: int, beta: float) -> float:
    """A bound r, valid on any data, with P[d_J > r] <= β for the released index J: with probability
    1 − β the released grid point's rank interval comes within r of the target rank q·n.

    Proof: some d_i is 0, so the normaliser is >= 1 and P[d_J > r] <= m·exp(−ε·r/(2Δ)); solve for β.

    Example:
        >>> round(rank_error(0.5, epsilon=1.0, sensitivity=1, grid_size=1000, beta=0.05), 3)
        9.903
    """
    if not 0 < beta < 1 or grid_size < 1 or not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError("need 0 < beta < 1, grid_size >= 1 and a finite epsilon > 0")
    delta = float(score_sensitivity(q, sensitivity))
    return 2 * delta / epsilon * math.log(grid_size / beta)


def quantile_index(
    histogram: Sequence[int], q: float | Fraction, epsilon: float | Fraction, sensitivity: int, sampler: Sampler
) -> int:
    """The grid index released as the ε-DP q-quantile of the histogram's rows (add/remove adjacency, one
    unit adding or removing at most `sensitivity` rows). q = 0 is the DP minimum, q = 1 the DP maximum.

    Example:
        >>> from mechanisms.sampling import FixedSampler
        >>> quantile_index([5, 1, 0, 4], q=0.5, epsilon=1.0, sensitivity=1, sampler=FixedSampler())
        0
        >>> quantile_index([5, 1, 0, 4], q=0.9, epsilon=1.0, sensitivity=1, sampler=FixedSampler())
        3
    """
    return sampler.exponential_index(*exponent_numerators(histogram, q, epsilon, sensitivity))
