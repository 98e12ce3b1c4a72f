"""Rounding in the safe direction: exact rationals to the nearest float on the side that keeps privacy.

Privacy numbers are computed exactly (Fractions) and converted once: costs and noise scales round up,
capacities and budget shares round down (Tumult's round_up=True).
"""

from __future__ import annotations

import math
from fractions import Fraction


def up(exact: Fraction) -> float:
    """The smallest float >= `exact`.

    Example:
        >>> up(Fraction(1, 10)) >= Fraction(1, 10), up(Fraction(1, 2))
        (True, 0.5)
    """
    nearest = float(exact)
    return nearest if Fraction(nearest) >= exact else math.nextafter(nearest, math.inf)


def down(exact: Fraction) -> float:
    """The largest float <= `exact`.

    Example:
        >>> down(Fraction(1, 10)) <= Fraction(1, 10), down(Fraction(1, 2))
        (True, 0.5)
    """
    nearest = float(exact)
    return nearest if Fraction(nearest) <= exact else math.nextafter(nearest, -math.inf)
