"""Discrete Laplace maps: calibration is conservative and tight, error bars match the exact pmf."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import mpmath
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mechanisms import laplace

positive = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


@pytest.mark.parametrize(
    ("sensitivity", "epsilon", "expected_scale"),
    [
        (1, 1.0, 1.0),
        (1, 0.5, 2.0),
        (1, 0.1, 10.0),
        (4, 0.25, 16.0),
        (10, 2.0, 5.0),
    ],
    ids=["unit", "half", "tenth", "four-groups", "sum-range-10"],
)
def test_scale_for_table(sensitivity: float, epsilon: float, expected_scale: float) -> None:
    # exact by construction: Δ/ε is representable or rounds to the listed float
    assert laplace.scale_for(sensitivity, epsilon) == expected_scale
    assert laplace.epsilon(sensitivity, expected_scale) <= epsilon


@given(sensitivity=positive, epsilon=positive)
def test_calibration_is_conservative_and_smallest(sensitivity: float, epsilon: float) -> None:
    scale = laplace.scale_for(sensitivity, epsilon)
    assert laplace.epsilon(sensitivity, scale) <= epsilon
    assert Fraction(sensitivity) / Fraction(scale) <= Fraction(epsilon)  # the true ε, not just the float
    smaller = math.nextafter(scale, 0.0)
    assert Fraction(sensitivity) / Fraction(smaller) > Fraction(epsilon)


@given(sensitivity=positive, scale=positive)
def test_epsilon_rounds_up(sensitivity: float, scale: float) -> None:
    value = laplace.epsilon(sensitivity, scale)
    exact = Fraction(sensitivity) / Fraction(scale)
    assert Fraction(value) >= exact
    assert Fraction(math.nextafter(value, 0.0)) < exact


def test_zero_sensitivity_costs_nothing() -> None:
    assert laplace.epsilon(0, 1.0) == 0.0  # exact: 0 / b


@pytest.mark.parametrize(
    ("function", "args"),
    [
        (laplace.epsilon, (1, 0.0)),
        (laplace.epsilon, (-1, 1.0)),
        (laplace.epsilon, (1, math.inf)),
        (laplace.epsilon, (math.nan, 1.0)),
        (laplace.scale_for, (0, 1.0)),
        (laplace.scale_for, (1, 0.0)),
        (laplace.scale_for, (1, math.inf)),
        (laplace.ci_halfwidth, (0.0,)),
        (laplace.ci_halfwidth, (1.0, 1.0)),
        (laplace.ci_halfwidth, (1.0, 0.0)),
    ],
    ids=[
        "zero-scale",
        "negative-sensitivity",
        "infinite-scale",
        "nan-sensitivity",
        "calibrate-zero-sensitivity",
        "calibrate-zero-epsilon",
        "calibrate-infinite-epsilon",
        "ci-zero-scale",
        "ci-certain",
        "ci-zero-confidence",
    ],
)
def test_rejects_invalid_arguments(function: Callable[..., object], args: tuple[float, ...]) -> None:
    with pytest.raises(ValueError):
        function(*args)


def _exact_two_sided_tail(scale: float, k: int) -> mpmath.mpf:
    """P[|Z| > k] by summing the discrete Laplace pmf directly (to 60 digits)."""
    with mpmath.workdps(60):
        q = mpmath.exp(-1 / mpmath.mpf(scale))
        pmf = (1 - q) / (1 + q)
        return 2 * pmf * mpmath.nsum(lambda j: q**j, [k + 1, mpmath.inf])


@pytest.mark.parametrize("scale", [0.3, 1.0, 2.5, 10.0, 123.4], ids=lambda s: f"scale={s}")
@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.999], ids=lambda c: f"conf={c}")
def test_ci_halfwidth_is_the_exact_quantile(scale: float, confidence: float) -> None:
    k = laplace.ci_halfwidth(scale, confidence)
    alpha = 1 - mpmath.mpf(confidence)
    assert _exact_two_sided_tail(scale, k) <= alpha
    if k > 0:
        assert _exact_two_sided_tail(scale, k - 1) > alpha


def test_ci_halfwidth_grows_with_scale_and_confidence() -> None:
    assert laplace.ci_halfwidth(1e-3) == 0
    widths = [laplace.ci_halfwidth(s) for s in (1.0, 10.0, 100.0, 1e15)]
    assert widths == sorted(widths)
    assert laplace.ci_halfwidth(10.0, 0.99) > laplace.ci_halfwidth(10.0, 0.9)
