"""Discrete Laplace on the integer grid: the privacy map, its inverse, and error bars.

Noise Z has P[Z = k] = (1 − q)/(1 + q) · q^|k| with q = e^(−1/scale) (CKS20, arXiv:2004.00010 §5.2).
Every privacy number is rounded in the safe direction: ε up, scale up (computed exactly with Fractions).
"""

from __future__ import annotations

import math
from fractions import Fraction

from mechanisms.rounding import up as _up


def _check(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ValueError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {value!r}")


def epsilon(sensitivity: float, scale: float) -> float:
    """Pure ε of discrete Laplace noise of `scale` on a vector of L1 `sensitivity`: Δ1 / scale, rounded up.

    The log-ratio of the pmfs at k and k + d is |d| / scale, and the L1 distance bounds the sum over
    coordinates (GRS12; CKS20 §5.2).

    Example:
        >>> epsilon(1, 10.0)
        0.1
        >>> epsilon(0, 3.0)
        0.0
    """
    _check("sensitivity", sensitivity, allow_zero=True)
    _check("scale", scale)
    return _up(Fraction(sensitivity) / Fraction(scale))


def scale_for(sensitivity: float, epsilon: float) -> float:
    """The smallest scale with `epsilon(sensitivity, scale) <= epsilon`: Δ1 / ε, rounded up.

    Example:
        >>> scale_for(1, 0.5)
        2.0
        >>> e = 0.3
        >>> epsilon(2, scale_for(2, e)) <= e
        True
    """
    _check("sensitivity", sensitivity)
    _check("epsilon", epsilon)
    return _up(Fraction(sensitivity) / Fraction(epsilon))


def _log_tail(k: int, scale: float) -> float:
    """ln P[|Z| > k] = ln 2 − (k + 1)/scale − ln(1 + q), for integers k >= 0."""
    return math.log(2.0) - (k + 1) / scale - math.log1p(math.exp(-1.0 / scale))


def ci_halfwidth(scale: float, confidence: float = 0.95) -> int:
    """The smallest integer k >= 0 with P[|Z| > k] <= 1 − confidence for discrete Laplace noise of `scale`.

    P[Z >= n] = q^n / (1 + q) for n >= 0, so P[|Z| > k] = 2 q^(k+1) / (1 + q): solve for k, then step to
    the exact boundary. This is an error bar for analysts; it carries no privacy guarantee.

    Example:
        >>> ci_halfwidth(10.0)
        30
        >>> ci_halfwidth(10.0, confidence=0.99)
        46
    """
    _check("scale", scale)
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    log_alpha = math.log1p(-confidence)
    q = math.exp(-1.0 / scale)
    k = max(0, math.ceil(scale * (math.log(2.0) - math.log1p(q) - log_alpha)) - 1)
    # The estimate is off by a few ulps of `scale` at most; past 2^52 a step of 1 no longer moves the float
    # tail at all, so the steps are bounded (a huge scale used to loop for ever before admission).
    for _ in range(64):
        if _log_tail(k, scale) <= log_alpha:
            break
        k += 1
    for _ in range(64):
        if not (k > 0 and _log_tail(k - 1, scale) <= log_alpha):
            break
        k -= 1
    return k
