"""Partition selection δ against a direct high-precision sum of the discrete Laplace pmf."""

from __future__ import annotations

import math

import mpmath
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mechanisms import threshold


def _reference_delta(max_groups: int, scale: float, threshold_: int) -> mpmath.mpf:
    """max_groups · P[Z >= T − 1], summing P[Z = k] = (1 − q)/(1 + q) q^|k| term by term (60 digits)."""
    with mpmath.workdps(60):
        q = mpmath.exp(-1 / mpmath.mpf(scale))
        pmf = lambda k: (1 - q) / (1 + q) * q ** abs(k)  # noqa: E731
        return max_groups * mpmath.nsum(pmf, [threshold_ - 1, mpmath.inf])


CASES = [
    (1, 1.0, 2),
    (1, 1.0, 20),
    (1, 0.5, 5),
    (4, 2.0, 40),
    (10, 10.0, 200),
    (3, 123.4, 3000),
    (1, 1e-3, 2),
]


@pytest.mark.parametrize(
    ("max_groups", "scale", "threshold_"), CASES, ids=[f"k={k}-b={b}-T={t}" for k, b, t in CASES]
)
def test_delta_matches_direct_sum(max_groups: int, scale: float, threshold_: int) -> None:
    ours = threshold.delta_of_threshold(max_groups, scale, threshold_)
    reference = _reference_delta(max_groups, scale, threshold_)
    assert ours >= min(reference, 1)  # rounded up
    assert ours <= reference * (1 + 1e-10) + 1e-300


def test_closed_form_tail_for_every_small_n() -> None:
    # P[Z >= n] = q^n / (1 + q) for n >= 0, the identity the module rests on
    with mpmath.workdps(50):
        for scale in (0.7, 3.0):
            q = mpmath.exp(-1 / mpmath.mpf(scale))
            for n in range(6):
                direct = mpmath.nsum(lambda k, q=q: (1 - q) / (1 + q) * q**k, [n, mpmath.inf])
                assert mpmath.almosteq(direct, q**n / (1 + q), rel_eps=mpmath.mpf(10) ** -40)


@pytest.mark.parametrize(
    ("max_groups", "scale", "delta", "expected"),
    # unit: e^{−(T−1)}/(1 + e^{−1}) <= 1e-6  <=>  T − 1 >= ln(1e6) − ln(1 + e^{−1}) = 13.50  =>  T = 15
    [(4, 2.0, 1e-8, 40), (1, 1.0, 1e-6, 15), (1, 1e-3, 0.5, 2)],
    ids=["four-groups", "unit", "tiny-scale-floor"],
)
def test_threshold_table(max_groups: int, scale: float, delta: float, expected: int) -> None:
    assert threshold.threshold_for(max_groups, scale, delta) == expected


@given(
    max_groups=st.integers(min_value=1, max_value=1000),
    scale=st.floats(min_value=1e-3, max_value=1e6),
    delta=st.floats(min_value=1e-15, max_value=0.5),
)
def test_threshold_is_the_smallest_that_fits(max_groups: int, scale: float, delta: float) -> None:
    found = threshold.threshold_for(max_groups, scale, delta)
    assert found >= 2
    assert threshold.delta_of_threshold(max_groups, scale, found) <= delta
    if found > 2:
        assert threshold.delta_of_threshold(max_groups, scale, found - 1) > delta


def test_threshold_with_huge_scale_terminates() -> None:
    found = threshold.threshold_for(1, 1e15, 1e-9)
    assert threshold.delta_of_threshold(1, 1e15, found) <= 1e-9
    assert found == pytest.approx(1e15 * (math.log(1e9) - math.log(2)), rel=1e-6)


@pytest.mark.parametrize(
    ("args", "function"),
    [
        ((0, 1.0, 1e-6), threshold.threshold_for),
        ((True, 1.0, 1e-6), threshold.threshold_for),
        ((1, 0.0, 1e-6), threshold.threshold_for),
        ((1, 1.0, 0.0), threshold.threshold_for),
        ((1, 1.0, 1.0), threshold.threshold_for),
        ((1, 1.0, 0), threshold.delta_of_threshold),
        ((1, 1.0, 2.5), threshold.delta_of_threshold),
    ],
    ids=[
        "no-groups",
        "bool-groups",
        "zero-scale",
        "zero-delta",
        "delta-one",
        "threshold-zero",
        "float-threshold",
    ],
)
def test_rejects_invalid_arguments(args: tuple[float, ...], function: object) -> None:
    with pytest.raises(ValueError):
        function(*args)  # type: ignore[operator]
