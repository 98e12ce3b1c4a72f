"""The selection's share of a query's ε, and its split over the bounds, chosen by the error they cause (issue #29
item 3, docs/privacy.md §10.9).

A dataset's `auto_bounds_share` is one number (a fixed share s, split evenly over the n bounds a query chooses:
the default, 0.1) or limits [low, high]. With limits, a query that chooses no per-unit total cap keeps s = low,
split evenly; one that chooses c ≥ 1 caps gives each other bound low·ε/n (what a query of those bounds alone
would give it) and the caps the rest, (s − a)·ε in all with a = low·(n − c)/n, where s minimises a model of the
release's expected error relative to its error at the best bounds with the whole ε:

    E(s) = 1/(1 − s) + Σ_caps 2/(H·ε_cap(s)),    ε_cap(s) = (s − a)·ε/c.

The first term is the release's noise: every measure's share of ε_q = (1 − s)·ε is fixed by the query's shape
(§5), so each noise scale grows as 1/(1 − s). The second is what a cap's selection cannot resolve: the
exponential mechanism cannot tell apart candidates whose counts differ by less than about 2Δ/ε_cap items (Δ = 1
unit, §10.2), and the units a cap decides about are the few with the heaviest totals, so that resolution is
measured against a fixed reference of H = 100 units (on the demo about 600 of 50 000 users have a total above
the 2 048 cap, `bench/share_scores.py`). Counts of cells and of units (max_rows, max_groups) resolve at the low
share already (their counts move by thousands per candidate: the bench's errors are flat in the share), so they
add no term. dE/ds = 0 gives (s − a)/(1 − s) = √B with B = 2c²/(H·ε):

    s = clip(⌊1000·(a + √B)/(1 + √B)⌋/1000, low, high)

(a thousandth, so the shares read as numbers; at s = low each cap gets low·ε/n, the even split). Every input —
ε, the limits, how many bounds the query chooses and which are caps (from its shape and the declared bounds,
`bounds.needed`) — is known before any data is read: the split is a function of the request and the policy, as
the fixed share was, so choosing it costs nothing, and the parts' ε add up to at most s·ε (`weights`).

Example:
    >>> choose((0.1, 0.5), epsilon=0.1, bounds=2, caps=1), choose((0.1, 0.5), epsilon=1.0, bounds=2, caps=1)
    (0.343, 0.167)
    >>> choose((0.1, 0.5), epsilon=0.1, bounds=2, caps=0), choose(0.25, epsilon=0.1, bounds=2, caps=1)
    (0.1, 0.25)
    >>> [str(w) for w in weights((0.1, 0.5), 0.343, ("max_rows", "total"))]
    ['50/343', '293/343']
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

Limits = tuple[float, float]

# H: the reference number of units a cap's selection must resolve among (the heavy units whose totals it cuts)
HEAVY_UNITS = 100
CAP = "total"  # the bound kind of a per-unit total cap (auto/parts.py Bound)


def limits_of(share: float | Limits) -> Limits:
    """A dataset's `auto_bounds_share`: one number (a fixed share) or (low, high), the limits the rule chooses in.

    Example:
        >>> limits_of(0.1), limits_of((0.05, 0.5))
        ((0.1, 0.1), (0.05, 0.5))
    """
    if isinstance(share, tuple):
        return float(share[0]), float(share[1])
    return float(share), float(share)


def read_limits(value: object) -> float | Limits | str:
    """A policy's `auto_bounds_share` as read from TOML: a number in (0, 1), or [low, high] with 0 < low <= high < 1;
    otherwise the problem, as a message.

    Example:
        >>> read_limits(0.2), read_limits([0.1, 0.5]), read_limits([0.5, 0.1])[:28]
        (0.2, (0.1, 0.5), 'must be a number in (0, 1) o')
    """
    def number(v: object) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < 1

    if number(value):
        return float(value)  # type: ignore[arg-type]
    if isinstance(value, list) and len(value) == 2 and all(number(v) for v in value) and value[0] <= value[1]:
        return float(value[0]), float(value[1])
    return (f"must be a number in (0, 1) or limits [low, high] with 0 < low <= high < 1 (the share of a query's "
            f"epsilon spent on choosing its bounds: fixed, or chosen in the limits by expected error), got {value!r}")


def expected_error(share: float, *, low: float, epsilon: float, bounds: int, caps: int) -> float:
    """E(s), the model the share minimises (relative to the error at the best bounds with the whole ε).

    Example:
        >>> round(expected_error(0.2, low=0.1, epsilon=1.0, bounds=2, caps=1), 4)  # 1/0.8 + 2/(100·0.15)
        1.3833
    """
    floor = low * (bounds - caps) / bounds
    return 1 / (1 - share) + caps * 2 * caps / (HEAVY_UNITS * (share - floor) * epsilon)


def choose(share: float | Limits, *, epsilon: float, bounds: int, caps: int) -> float:
    """The share of ε the selection spends: the fixed share, or E's minimiser within the limits (a thousandth)."""
    low, high = limits_of(share)
    if low == high or caps == 0 or epsilon <= 0:
        return low
    floor = low * (bounds - caps) / bounds
    root = math.sqrt(2 * caps * caps / (HEAVY_UNITS * epsilon))
    return min(high, max(low, math.floor(1000 * (floor + root) / (1 + root)) / 1000))


def weights(share: float | Limits, chosen: float, kinds: Sequence[str]) -> tuple[Fraction, ...]:
    """Each bound's fraction of the selection's ε (exact, adding up to 1): even for a fixed share or without a cap;
    with limits and caps, low/(n·s) for each other bound and the rest split evenly over the caps.

    Example:
        >>> weights(0.1, 0.1, ("max_rows", "total")), weights((0.1, 0.5), 0.1, ("max_rows", "total"))
        ((Fraction(1, 2), Fraction(1, 2)), (Fraction(1, 2), Fraction(1, 2)))
    """
    low, high = limits_of(share)
    n, caps = len(kinds), sum(k == CAP for k in kinds)
    if low == high or caps == 0:
        return tuple(Fraction(1, n) for _ in kinds)
    # the shortest decimals of the floats (0.1 as 1/10): exact fractions that read as the numbers shown
    other = Fraction(repr(low)) / (n * Fraction(repr(chosen)))  # <= 1/n, as chosen >= low
    cap = (1 - (n - caps) * other) / caps
    return tuple(cap if k == CAP else other for k in kinds)
