"""The one calibration search: a mechanism's parameter found from its privacy map, as OpenDP's binary search
over a measurement's map does. Every calibration that has no closed form (the μ of a GDP budget, the ρ of a
zCDP one, the ε of a μ-GDP history, the thresholds of partition selection) asks one of these for the
extreme value that still passes a monotone check (`ok(x)`: the map at x within the budget): double until the
check flips, then bisect to the last representable value, so the answer is on the passing side by
construction, whatever the rounding of the steps.

Example:
    >>> largest(lambda x: x * x <= 2.0, 0.0, 1.0)
    1.414213562373095
    >>> smallest(lambda x: x * x >= 2.0, 0.0, 1.0)
    1.4142135623730951
    >>> smallest_int(lambda n: 2**n >= 1000, 1, 2)
    10
"""

from __future__ import annotations

from collections.abc import Callable


def largest(ok: Callable[[float], bool], lo: float, hi: float) -> float:
    """The largest float that passes `ok` (true up to some point, false beyond it), from `lo`, which passes:
    `hi` doubles until it fails, then bisection keeps `ok(lo)` and `not ok(hi)` until they are adjacent."""
    while ok(hi):
        lo, hi = hi, 2 * hi
    while True:
        mid = lo + (hi - lo) / 2
        if not lo < mid < hi:
            return lo
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)


def smallest(ok: Callable[[float], bool], lo: float, hi: float) -> float:
    """The smallest float that passes `ok` (false up to some point, true beyond it): `lo` itself if it passes;
    else `hi` doubles until it passes, then bisection keeps `not ok(lo)` and `ok(hi)` until they are adjacent."""
    if ok(lo):
        return lo
    while not ok(hi):
        lo, hi = hi, 2 * hi
    while True:
        mid = lo + (hi - lo) / 2
        if not lo < mid < hi:
            return hi
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)


def smallest_int(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """The smallest integer above `lo` (which fails `ok`) that passes `ok` (false up to some point, true beyond
    it): `hi` doubles until it passes, then bisection until `lo` and `hi` are adjacent."""
    while not ok(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    return hi
