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


def sqrt_up(exact: Fraction | int) -> float:
    """The smallest float x >= 0 with x² >= `exact`, exactly: one upward rounding of √exact.

    Privacy sensitivities such as Δ2 = √L0 · s are computed this way: the float square root and a second
    product would round twice, and can land below the true value (√73 · 3 does).

    Example:
        >>> x = sqrt_up(73 * 3 * 3)
        >>> Fraction(x) ** 2 >= 73 * 9, Fraction(math.nextafter(x, 0.0)) ** 2 < 73 * 9
        (True, True)
        >>> sqrt_up(Fraction(9, 4)), sqrt_up(0)
        (1.5, 0.0)
    """
    exact = Fraction(exact)
    if exact < 0:
        raise ValueError(f"cannot take the square root of {exact!r}")
    if exact == 0:
        return 0.0
    root = math.sqrt(float(exact))  # within an ulp or two; the loops settle the last bit exactly
    while Fraction(root) ** 2 < exact:
        root = math.nextafter(root, math.inf)
    while root > 0 and Fraction(below := math.nextafter(root, 0.0)) ** 2 >= exact:
        root = below
    return root
