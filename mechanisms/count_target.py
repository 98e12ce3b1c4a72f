"""The exponential mechanism over counts with a target and a geometric base measure: how contribution bounds
are chosen by the error they cause (issue #29, docs/privacy.md §10).

Candidates i = 0 … m−1 are bounds, ascending; `above[i]` = N_i is how many items (a unit's cells, or units) a
bound i would truncate. Index i is drawn with probability

    P[J = i] ∝ π_i · exp(−ε·|N_i − t| / (2s)),    π_i = exp(−λ·max(0, i − a)),

for a target t, a base measure of λ per candidate above the anchor a (t, λ and a read no data), and s the most
one unit moves any N_i (every N_i of a neighbouring dataset differs by at most s). Each weight then moves by a
factor at most e^(ε/2), and so does the normaliser: the ratio of any output's probability between neighbours
is at most e^ε, in both directions. ε-DP, δ = 0 (McSherry and Talwar 2007: the exponential mechanism with a
base measure). The draw is exact: every exponent is an integer over one common denominator, sampled by
`Sampler.exponential_index` (no floating-point exponential reaches the output).

Why this score (Amin, Kulesza, Muñoz Medina, Vassilvitskii, ICML 2019): the error a bound k causes is
bias(k) + noise(k), bias(k) = Σ max(0, n − k) over the items and noise(k) = t·k, t the noise's slope per unit
of bound; d/dk = −N(k) + t is zero where N(k) = t. |N_i − t| measures how far candidate i is from that
balance in items, a count whose sensitivity is s, where the error itself has sensitivity s·(limit − k).
The base measure carries the noise's side of the error where the count cannot: above the data every
N_i is 0 and every candidate scores −t alike, so without π the draw would spread over them (a heavy tail up to
the limit), although each step up adds noise. λ = 1/2 per candidate (the grid's points are √2 apart, so
π ∝ 1/k on the geometric grid: a bound twice as large weighs e^(−1) as much).

Example:
    >>> from mechanisms.sampling import FixedSampler
    >>> exponent_numerators([9, 4, 0, 0], Fraction(4), Fraction(1), 1, Fraction(1, 2))
    ((5, 1, 6, 7), 2)
    >>> index([9, 4, 0, 0], target=4, epsilon=1, sensitivity=1, sampler=FixedSampler())
    1
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from mechanisms.sampling import Sampler

STEP = Fraction(1, 2)  # λ: the base measure's exponent per candidate above the anchor


def exponent_numerators(above: Sequence[int], target: Fraction, epsilon: Fraction, sensitivity: int,
                        step: Fraction = STEP, anchor: int = 0) -> tuple[tuple[int, ...], int]:
    """The exponents ε·|N_i − t|/(2s) + λ·max(0, i − a) as integers over one common denominator (reduced).

    Example:
        >>> exponent_numerators([3, 1, 0], Fraction(1), Fraction(1), 2, Fraction(0))
        ((2, 0, 1), 4)
    """
    if sensitivity < 1 or epsilon <= 0 or target < 0 or step < 0 or any(n < 0 for n in above) or not above:
        raise ValueError("need counts >= 0, a target >= 0, epsilon > 0, sensitivity >= 1 and a step >= 0")
    a, b, c, d = epsilon.numerator, epsilon.denominator, target.numerator, target.denominator
    p, q = step.numerator, step.denominator
    whole = math.lcm(2 * b * d * sensitivity, q)
    per_score, per_step = a * (whole // (2 * b * d * sensitivity)), p * (whole // q)
    numerators = [per_score * abs(n * d - c) + per_step * max(0, i - anchor) for i, n in enumerate(above)]
    common = math.gcd(whole, *numerators)
    return tuple(n // common for n in numerators), whole // common


def output_distribution(above: Sequence[int], target: Fraction, epsilon: Fraction, sensitivity: int,
                        step: Fraction = STEP, anchor: int = 0) -> tuple[float, ...]:
    """P[J = i] for every i, in floating point: for tests and analysis, never for sampling.

    Example:
        >>> [round(p, 3) for p in output_distribution([2, 0], Fraction(0), Fraction(2), 1, Fraction(0))]
        [0.119, 0.881]
    """
    numerators, denominator = exponent_numerators(above, target, epsilon, sensitivity, step, anchor)
    least = min(numerators)
    weights = [math.exp(-(n - least) / denominator) for n in numerators]
    total = math.fsum(weights)
    return tuple(w / total for w in weights)


def index(above: Sequence[int], *, target: float | Fraction, epsilon: float | Fraction, sensitivity: int,
          sampler: Sampler, step: Fraction = STEP, anchor: int = 0) -> int:
    """The candidate drawn, ε-DP when one unit moves every `above[i]` by at most `sensitivity`. `target` and
    `epsilon` are used as the exact rationals of the numbers given (a float converts exactly)."""
    return sampler.exponential_index(*exponent_numerators(above, Fraction(target), Fraction(epsilon), sensitivity,
                                                          step, anchor))


def share_numerators(above: Sequence[int], total: int, share: Fraction, epsilon: Fraction, sensitivity: int,
                     step: Fraction = STEP, anchor: int = 0) -> tuple[tuple[int, ...], int]:
    """The exponents with a target that is a share ρ of all the items, t = ρ·C (C = `total`, the items counted at
    every candidate, so N_i <= C): ε·|N_i − ρ·C|/(2·max(ρ, 1 − ρ)·s) + λ·max(0, i − a), as integers over one
    denominator. One unit adds or removes c <= s items, a_i <= c of them counted in N_i, so N_i − ρ·C moves by
    a_i − ρ·c ∈ [−ρ·s, (1 − ρ)·s]: the score's sensitivity is max(ρ, 1 − ρ)·s (as a DP quantile's, §9), and the
    draw is ε-DP with the target read from the data (docs/privacy.md §10, *Quantiles*).

    Example:
        >>> share_numerators([6, 2, 0], 8, Fraction(1, 2), Fraction(1), 1, Fraction(0))
        ((2, 2, 4), 1)
    """
    if not 0 < share < 1 or total < max(above, default=0):
        raise ValueError("need 0 < share < 1 and every count at most the total")
    a, b = share.numerator, share.denominator
    # |N − (a/b)·C| / (2·max(a/b, 1 − a/b)·s) = |b·N − a·C| / (2·max(a, b − a)·s): ρ = a/b, the counts scaled by b
    return exponent_numerators([abs(b * n - a * total) for n in above], Fraction(0), epsilon,
                               max(a, b - a) * sensitivity, step, anchor)


def share_index(above: Sequence[int], total: int, *, share: Fraction, epsilon: float | Fraction, sensitivity: int,
                sampler: Sampler, step: Fraction = STEP, anchor: int = 0) -> int:
    """The candidate drawn with the target ρ·C (`share_numerators`): ε-DP when one unit adds or removes at most
    `sensitivity` items."""
    return sampler.exponential_index(*share_numerators(above, total, share, Fraction(epsilon), sensitivity, step,
                                                       anchor))


def counts_above(counts: Sequence[int]) -> list[int]:
    """N_i = Σ_{j > i} counts[j]: the items beyond candidate i, from the histogram of items per candidate (an item
    at candidate j is one the bound j keeps whole and any bound below it truncates).

    Example:
        >>> counts_above([5, 0, 3, 1])
        [4, 4, 1, 0]
    """
    out, beyond = [0] * len(counts), 0
    for i in range(len(counts) - 1, -1, -1):
        out[i] = beyond
        beyond += counts[i]
    return out


def truncation_numerators(truncated: Sequence[int], points: Sequence[int], slope: Fraction, epsilon: Fraction,
                          sensitivity: int, clip: int, step: Fraction = STEP,
                          anchor: int = 0) -> tuple[tuple[int, ...], int]:
    """The exponents of the error score, ε·(R_i + t·k_i)/(s·D) + λ·max(0, i − a), as integers over one denominator
    (reduced): R_i = `truncated[i]`, the rows bound k_i = `points[i]` truncates with each item's truncation clipped at
    D = `clip` (Σ_items min(D, max(0, n − k_i)), `clipped_truncation`), t = `slope` the noise's rows per unit of
    bound. One unit adds or removes at most s items, so every R_i moves by a_i ∈ [0, s·D], all in the same
    direction: the score is monotone, and ε/(s·D) (no 2) is ε-DP (McSherry and Talwar 2007; docs/privacy.md §10,
    *The rows target by truncated rows*).

    Example:
        >>> truncation_numerators([9, 4, 0], [1, 2, 4], Fraction(1), Fraction(1), 1, 4, Fraction(0))
        ((5, 3, 2), 2)
    """
    if (sensitivity < 1 or clip < 1 or epsilon <= 0 or slope < 0 or step < 0 or not truncated
            or len(points) != len(truncated) or any(r < 0 for r in truncated)):
        raise ValueError("need truncations >= 0, one per point, a slope >= 0, epsilon > 0, sensitivity, clip >= 1")
    a, b, c, d = epsilon.numerator, epsilon.denominator, slope.numerator, slope.denominator
    p, q = step.numerator, step.denominator
    whole = math.lcm(b * d * sensitivity * clip, q)
    per_score, per_step = a * (whole // (b * d * sensitivity * clip)), p * (whole // q)
    numerators = [per_score * (r * d + c * k) + per_step * max(0, i - anchor)
                  for i, (r, k) in enumerate(zip(truncated, points, strict=True))]
    common = math.gcd(whole, *numerators)
    return tuple(n // common for n in numerators), whole // common


def clipped_truncation(items: Sequence[tuple[int, int]], points: Sequence[int], clip: int) -> list[int]:
    """R_i = Σ_items min(D, max(0, n − k_i)) for every point k_i, from (n, how many items have n) pairs: what each
    bound truncates, each item counted at most D = `clip` rows (so one unit's s items move it by at most s·D).

    Example:
        >>> clipped_truncation([(5, 2), (1, 10)], [1, 2, 4], clip=3)
        [6, 6, 2]
    """
    return [sum(count * min(clip, max(0, n - k)) for n, count in items) for k in points]


def truncation_distribution(truncated: Sequence[int], points: Sequence[int], slope: Fraction, epsilon: Fraction,
                            sensitivity: int, clip: int, step: Fraction = STEP,
                            anchor: int = 0) -> tuple[float, ...]:
    """P[J = i] of the error score, in floating point: for tests and analysis, never for sampling."""
    numerators, denominator = truncation_numerators(truncated, points, slope, epsilon, sensitivity, clip, step,
                                                    anchor)
    least = min(numerators)
    weights = [math.exp(-(n - least) / denominator) for n in numerators]
    total = math.fsum(weights)
    return tuple(w / total for w in weights)


def joint_numerators(above: Sequence[int], target: Fraction, truncated: Sequence[int], points: Sequence[int],
                     epsilon: Fraction, sensitivity: int, clip: int, step: Fraction = STEP, anchor: int = 0,
                     weight: Fraction = Fraction(1, 2)) -> tuple[tuple[int, ...], int]:
    """Both scores, the count's at a share w of the ε (`weight`) and the truncated rows' at the rest:
    w·ε·|N_i − t|/(2s) + (1 − w)·ε·(R_i + t·k_i)/(s·D) + λ·max(0, i − a), as integers over one denominator
    (reduced). One unit moves the first term by at most w·ε/2 either way and the second by [0, (1 − w)·ε] one way,
    so each weight by a factor in [e^(−(1 − w/2)·ε), e^(w·ε/2)], the normaliser too: every output's probability
    by at most e^ε (docs/privacy.md §10, *The rows target by truncated rows*). The count of truncated
    items resolves thin data, the truncated rows the few heavy units a large bound keeps.

    Example:
        >>> joint_numerators([9, 4, 0], Fraction(1), [9, 4, 0], [1, 2, 4], Fraction(1), 1, 4, Fraction(0))
        ((13, 6, 3), 4)
    """
    if (sensitivity < 1 or clip < 1 or epsilon <= 0 or target < 0 or step < 0 or not above
            or not len(above) == len(truncated) == len(points) or any(n < 0 for n in (*above, *truncated))):
        raise ValueError("need counts and truncations >= 0, one per point, a target >= 0, epsilon > 0, "
                         "sensitivity and clip >= 1")
    if not 0 < weight < 1:
        raise ValueError("need 0 < weight < 1")
    a, b, c, d = epsilon.numerator, epsilon.denominator, target.numerator, target.denominator
    p, q, wn, wd = step.numerator, step.denominator, weight.numerator, weight.denominator
    # w·ε·|N − t|/(2s) + (1 − w)·ε·(R + t·k)/(s·D) over 2·b·d·s·D·w_d
    whole = math.lcm(2 * b * d * sensitivity * clip * wd, q)
    unit, per_step = a * (whole // (2 * b * d * sensitivity * clip * wd)), p * (whole // q)
    numerators = [unit * (wn * clip * abs(n * d - c) + 2 * (wd - wn) * (r * d + c * k)) + per_step * max(0, i - anchor)
                  for i, (n, r, k) in enumerate(zip(above, truncated, points, strict=True))]
    common = math.gcd(whole, *numerators)
    return tuple(n // common for n in numerators), whole // common


def joint_distribution(above: Sequence[int], target: Fraction, truncated: Sequence[int], points: Sequence[int],
                       epsilon: Fraction, sensitivity: int, clip: int, step: Fraction = STEP, anchor: int = 0,
                       weight: Fraction = Fraction(1, 2)) -> tuple[float, ...]:
    """P[J = i] of `joint_numerators`, in floating point: for tests and analysis, never for sampling."""
    numerators, denominator = joint_numerators(above, target, truncated, points, epsilon, sensitivity, clip, step,
                                               anchor, weight)
    least = min(numerators)
    weights = [math.exp(-(n - least) / denominator) for n in numerators]
    total = math.fsum(weights)
    return tuple(w / total for w in weights)


def joint_index(above: Sequence[int], truncated: Sequence[int], points: Sequence[int], *, target: float | Fraction,
                epsilon: float | Fraction, sensitivity: int, clip: int, sampler: Sampler, step: Fraction = STEP,
                anchor: int = 0, weight: Fraction = Fraction(1, 2)) -> int:
    """The candidate drawn by `joint_numerators`: ε-DP when one unit adds or removes at most `sensitivity` items."""
    return sampler.exponential_index(*joint_numerators(above, Fraction(target), truncated, points, Fraction(epsilon),
                                                       sensitivity, clip, step, anchor, weight))
