"""The selection's share of a query's ε, chosen by the error it causes (issue #29 item 3, docs/privacy.md §10.9).

A dataset's `auto_bounds_share` is one number (a fixed share, the default 0.1) or limits [low, high]: the share s
is then the minimiser, within the limits, of a model of the release's expected error relative to the error at
the best bound,

    E(s) = 1/(1 − s) + Σ_caps 2/(H·ε_i(s)),    ε_i(s) = s·ε/n,

n the bounds the query chooses (the selection's ε is split evenly over them, auto/bounds.py). The first term is
the release's noise: every measure's share of ε_q = (1 − s)·ε is fixed by the query's shape (§5), so each noise
scale grows as 1/(1 − s). The second is what the selection cannot resolve: the exponential mechanism cannot tell
apart candidates whose counts differ by less than about 2Δ/ε_i items (Δ = 1 for a per-unit total cap, §10.2),
and a cap's items are the few units with the heaviest totals, so the resolution is measured against a fixed
reference of H = 100 such units (on the demo about 600 of 50 000 users have a total above the 2 048 cap,
`bench/share_scores.py`). Counts of cells and of units (max_rows, max_groups) resolve at any share the bench
tried (their counts move by thousands per candidate), so they add no term and a query that chooses no cap keeps
the low limit. dE/ds = 0 gives s/(1 − s) = √B with B = 2·n·c/(H·ε), c the caps, so

    s = clip(⌊1000·√B/(1 + √B)⌋/1000, low, high)

(rounded down to a thousandth so the shares read as numbers). Every input — ε, the limits, the number of bounds
chosen and which are caps (from the query's shape and the declared bounds, `bounds.needed`) — is known before any
data is read: the share is a function of the request and the policy, as the fixed share was, so choosing it
costs nothing and the charge (ε_sel + ε_q ≤ ε, bounds.split_epsilon) is unchanged.

Example:
    >>> choose((0.1, 0.5), epsilon=0.1, bounds=2, caps=1), choose((0.1, 0.5), epsilon=1.0, bounds=2, caps=1)
    (0.387, 0.166)
    >>> choose((0.1, 0.5), epsilon=0.1, bounds=2, caps=0), choose(0.25, epsilon=0.1, bounds=2, caps=1)
    (0.1, 0.25)
"""

from __future__ import annotations

import math

Limits = tuple[float, float]

# H: the reference number of units a cap's selection must resolve among (the heavy units whose totals it cuts)
HEAVY_UNITS = 100


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


def expected_error(share: float, *, epsilon: float, bounds: int, caps: int) -> float:
    """E(s), the model the share minimises (relative to the error at the best bound with the whole ε).

    Example:
        >>> round(expected_error(0.1, epsilon=1.0, bounds=2, caps=1), 4)  # 1/0.9 + 2/(100·0.05)
        1.5111
    """
    return 1 / (1 - share) + caps * 2 * bounds / (HEAVY_UNITS * share * epsilon)


def choose(share: float | Limits, *, epsilon: float, bounds: int, caps: int) -> float:
    """The share of ε the selection spends: the fixed share, or E's minimiser within the limits (a thousandth)."""
    low, high = limits_of(share)
    if low == high or caps == 0 or epsilon <= 0:
        return low
    root = math.sqrt(2 * bounds * caps / (HEAVY_UNITS * epsilon))
    return min(high, max(low, math.floor(1000 * root / (1 + root)) / 1000))
