"""Several DP quantiles of one histogram released jointly: a root quantile, then two anchored chains.

For quantiles q_0 < … < q_{k−1} of the rows of one histogram (one unit adds or removes at most s rows), the
release is (docs/privacy.md §9, joint quantiles):

1. ñ = n + Z, Z discrete Laplace of scale b (ε_c = s/b): the noisy row count, clipped at 0.
2. The root q_r, the middle q (`root`): the exponential mechanism of mechanisms/dp_quantile.py on the whole histogram
   (its own n, Δ = max(q_r, 1 − q_r)·s, budget ε_root) releases index J_r.
3. The left chain q_{r−1}, q_{r−2}, …, q_0 and the right chain q_{r+1}, …, q_{k−1}, one step of each per
   level. A left step with bound B (the previous left release, J_r at first) scores the candidates 0 … B
   on the rows at points < B only, against the fixed target rank q·ñ counted from the bottom:
   d_K = dist(q·ñ, [L_K, R_K]) for K < B, and the bound itself stands for "B or above": [L_B, ∞). A right
   step with bound B scores B … m − 1 on the rows at points > B only, against (1 − q)·ñ counted from the
   top, the bound standing for "B or below". Each draws ∝ exp(−ε_level·d/(2s)).

The rows of a left step and of a right step of one level are disjoint (< J_r and > J_r; the rows at a
bound are read by neither), and a step's scores read only its own rows and the public ñ: a unit with b_L
rows on the left and b_R on the right moves them by at most b_L and b_R, so the level costs
ε_level·(b_L + b_R)/s <= ε_level. The candidates' intervals cover [0, ∞), so some score is 0 whatever the
bound: a chain never inherits the rows tied at its bound as error (rank_errors). In all,
ε_c + ε_root + levels·ε_level with levels = max(r, k − 1 − r), against k parts for k separate quantiles.
The outputs are monotone by construction (left steps never pass their bound, right steps never fall
below it), and every step is an exact draw (Sampler.exponential_index, integers over one denominator).

Example:
    >>> from mechanisms.sampling import FixedSampler
    >>> joint_indices([0, 5, 0, 0, 5, 0], (Fraction(1, 10), Fraction(1, 2), Fraction(9, 10)), noisy_count=10,
    ...               root_epsilon=1, level_epsilon=1, sensitivity=1, sampler=FixedSampler())
    (1, 1, 4)
    >>> levels([Fraction(i, 10) for i in (1, 5, 9)]), levels([Fraction(i, 10) for i in (1, 5, 9, 10)])
    (1, 2)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

from mechanisms import dp_quantile
from mechanisms.sampling import Sampler


def root(qs: Sequence[Fraction]) -> int:
    """The index of the root among sorted qs: the middle one (of two middles, the one nearer 1/2, whose score
    moves least), so that the chains are as balanced as they can be.

    Example:
        >>> root((Fraction(1, 10), Fraction(1, 2), Fraction(9, 10), Fraction(1)))
        1
    """
    k = len(qs)
    return min({(k - 1) // 2, k // 2}, key=lambda i: (abs(qs[i] - Fraction(1, 2)), i))


def levels(qs: Sequence[Fraction]) -> int:
    """Chain levels after the root: the longer chain's length (the two chains of a level run in parallel)."""
    r = root(qs)
    return max(r, len(qs) - 1 - r)


def _exact(value: float | Fraction, name: str) -> Fraction:
    exact = Fraction(value)
    if exact <= 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return exact


def anchored_numerators(
    rows: Sequence[int], q: Fraction, noisy_count: int, epsilon: float | Fraction, sensitivity: int
) -> tuple[tuple[int, ...], int]:
    """Exponents ε·d_K/(2s) of one chain step as integers over one denominator, d_K = dist(q·ñ, [L_K, R_K])
    with L_K, R_K counted from the bottom of `rows` (the step's own rows, the bound last) and
    ñ = max(noisy_count, 0); the last candidate, the bound, covers [L, ∞) (its own rows are not read).

    With q = a/b and ε = e/f: ε·d/(2s) = e·(b·d) / (2·f·s·b), and b·d = max(b·L − a·ñ, a·ñ − b·R, 0).

    Example:
        >>> anchored_numerators([2, 0, 3, 0], Fraction(1, 2), noisy_count=10, epsilon=1, sensitivity=1)
        ((6, 6, 0, 0), 4)
        >>> anchored_numerators([2, 0, 3, 0], Fraction(0), noisy_count=4, epsilon=1, sensitivity=1)
        ((0, 2, 2, 5), 2)
    """
    eps = _exact(epsilon, "epsilon")
    a, b = q.numerator, q.denominator
    target = a * max(noisy_count, 0)
    scaled, below = [], 0
    for count in rows[:-1]:
        at_most = below + count
        scaled.append(max(b * below - target, target - b * at_most, 0))
        below = at_most
    scaled.append(max(b * below - target, 0))  # the bound: "here or beyond", so the target is always covered
    return tuple(eps.numerator * d for d in scaled), 2 * eps.denominator * sensitivity * b


def left_rows(histogram: Sequence[int], bound: int) -> list[int]:
    """A left step's rows: the points 0 … bound − 1, then the bound (its rows not read: 0)."""
    return [*histogram[:bound], 0]


def right_rows(histogram: Sequence[int], bound: int) -> list[int]:
    """A right step's rows, reversed so that it is scored from the top: points m − 1 … bound + 1, then the
    bound (its rows not read: 0)."""
    return [*histogram[bound + 1:][::-1], 0]


def chain_step(
    histogram: Sequence[int], q: Fraction, bound: int, side: str, noisy_count: int, epsilon: float | Fraction,
    sensitivity: int, sampler: Sampler,
) -> int:
    """One chain step: the index released for q on the `side` ("left" or "right") of `bound`."""
    if side == "left":
        return sampler.exponential_index(*anchored_numerators(
            left_rows(histogram, bound), q, noisy_count, epsilon, sensitivity))
    top = sampler.exponential_index(*anchored_numerators(
        right_rows(histogram, bound), 1 - q, noisy_count, epsilon, sensitivity))
    return len(histogram) - 1 - top


def chains(qs: Sequence[Fraction]) -> tuple[list[Fraction], list[Fraction]]:
    """The left chain (descending from the root) and the right chain (ascending) of sorted distinct qs."""
    r = root(qs)
    return list(qs[:r][::-1]), list(qs[r + 1:])


def joint_indices(
    histogram: Sequence[int], qs: Sequence[Fraction], noisy_count: int, root_epsilon: float | Fraction,
    level_epsilon: float | Fraction, sensitivity: int, sampler: Sampler,
) -> tuple[int, ...]:
    """The released indices for the sorted distinct quantiles `qs`, in their order (non-decreasing), given
    the already noised row count. Root: ε_root-DP; each level of the chains: ε_level-DP (module docstring)."""
    if list(qs) != sorted(set(qs)) or not qs:
        raise ValueError("qs must be distinct and ascending")
    r = root(qs)
    out: dict[int, int] = {r: dp_quantile.quantile_index(histogram, qs[r], root_epsilon, sensitivity, sampler)}
    for side, indices in (("left", range(r - 1, -1, -1)), ("right", range(r + 1, len(qs)))):
        bound = out[r]
        for i in indices:
            bound = chain_step(histogram, qs[i], bound, side, noisy_count, level_epsilon, sensitivity, sampler)
            out[i] = bound
    return tuple(out[i] for i in range(len(qs)))


def step_distribution(
    histogram: Sequence[int], q: Fraction, bound: int, side: str, noisy_count: int, epsilon: float | Fraction,
    sensitivity: int,
) -> dict[int, float]:
    """P[chain_step = K] for every K, in floating point: for tests and analysis, never for sampling."""
    rows = left_rows(histogram, bound) if side == "left" else right_rows(histogram, bound)
    numerators, denominator = anchored_numerators(rows, q if side == "left" else 1 - q, noisy_count, epsilon,
                                                  sensitivity)
    least = min(numerators)
    weights = [math.exp(-(x - least) / denominator) for x in numerators]
    total = math.fsum(weights)
    m = len(histogram)
    return {(i if side == "left" else m - 1 - i): w / total for i, w in enumerate(weights)}


def rank_errors(
    qs: Sequence[Fraction], root_scale: float | Fraction, level_scale: float | Fraction,
    count_halfwidth: Callable[[float], float], points: int, beta: float,
) -> tuple[float, ...]:
    """For each q, a rank r_q valid on any data: with probability >= 1 − β the released point's rank
    interval comes within r_q of q·n (docs/privacy.md §9). `root_scale`, `level_scale` are the temperatures
    T (P ∝ exp(−d/T)); `count_halfwidth(confidence)` bounds |ñ − n| at that confidence.

    The root: T_root·ln(m/β). Chain step j (1 = next to the root), with a = q (1 − q on the right) and
    a_1 the first step's: some candidate scores 0, so the released one scores at most T·ln(m/β'); a candidate
    below the bound has its true interval; the bound itself, released, is within T·ln(m/β') of the target on
    its own side and, on the other, within what its release was of that release's (further) target. So
    |rank − a·ñ| <= E_j = max(T·ln(m/β'), T_root·ln(m/β') + a_1·c), and a·ñ is within a·c of a·n: r = E_j + a·c,
    with β' = β/(j + 2) for the j + 2 events of the union bound (the count, the root, j steps), c at 1 − β'.

    Example:
        >>> [round(e, 3) for e in rank_errors((Fraction(1, 2),), Fraction(2), Fraction(4), lambda c: 0, 100, 0.05)]
        [15.202]
    """
    r = root(qs)
    m = max(points, 1)
    out = [float(root_scale) * math.log(m / beta)] * len(qs)
    left, right = chains(qs)
    for chain, outer in ((left, False), (right, True)):
        first = None
        for j, q in enumerate(chain, start=1):
            share = beta / (j + 2)
            c = float(count_halfwidth(1 - share))
            a = float(1 - q if outer else q)
            first = a if first is None else first
            inherited = float(root_scale) * math.log(m / share) + first * c
            out[r - j if not outer else r + j] = max(float(level_scale) * math.log(m / share), inherited) + a * c
    return tuple(out)
