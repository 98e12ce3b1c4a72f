"""The sampler's memoised OpenDP measurements and their direct invocation (issue #32, docs/privacy.md §2,
"Built once, drawn every time").

A measurement is built once per parameter and invoked through OpenDP's own FFI calls: two invocations of one
memoised measurement must give independent draws, and the direct call must draw from the same distribution
as OpenDP's `Measurement.__call__`. Both are χ² tests at α = 1e-6, and each test must also reject a broken
variant (draws replayed, draws at another scale), so a pass means something.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence

import opendp.prelude as dp
import pytest
from opendp._lib import FfiSlice
from scipy import stats

from mechanisms.sampling import (
    MAX_ABS_VALUE,
    SecureSampler,
    _gaussian_measurement,
    _invoke,
    _laplace_measurement,
    _on_i64_vectors,
)

ALPHA = 1e-6
DRAWS = 20_000
ZEROS = [0] * DRAWS
BUILDERS = {"laplace": _laplace_measurement, "gaussian": _gaussian_measurement}


def _bin(value: int, reach: int) -> int:
    return max(-reach, min(reach, value)) + reach


def _independence_pvalue(first: Sequence[int], second: Sequence[int], reach: int = 2) -> float:
    """χ² test of independence of the pairs (first[i], second[i]), each binned to −reach…reach (tails pooled)."""
    width = 2 * reach + 1
    table = [[0] * width for _ in range(width)]
    for a, b in zip(first, second, strict=True):
        table[_bin(a, reach)][_bin(b, reach)] += 1
    return float(stats.chi2_contingency(table).pvalue)


def _same_distribution_pvalue(first: Sequence[int], second: Sequence[int], reach: int) -> float:
    """Two-sample χ² test (2 × bins contingency) that both samples come from one distribution."""
    width = 2 * reach + 1
    table = [[0] * width for _ in range(2)]
    for row, sample in enumerate((first, second)):
        for value in sample:
            table[row][_bin(value, reach)] += 1
    return float(stats.chi2_contingency(table).pvalue)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_a_measurement_is_built_once_per_parameter(kind: str) -> None:
    build = BUILDERS[kind]
    assert build(3.5) is build(3.5)
    assert build(3.5) is not build(4.5)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_two_invocations_of_a_memoised_measurement_are_independent(kind: str) -> None:
    measurement = BUILDERS[kind](1.5)
    first, second = _invoke(measurement, ZEROS), _invoke(measurement, ZEROS)
    assert _independence_pvalue(first, second) > ALPHA


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_the_independence_test_rejects_replayed_or_dependent_draws(kind: str) -> None:
    measurement = BUILDERS[kind](1.5)
    first = _invoke(measurement, ZEROS)
    assert _independence_pvalue(first, first) < ALPHA  # a memo that kept its draws
    nudged = _invoke(measurement, first)  # the second draw centred on the first: dependent
    assert _independence_pvalue(first, nudged) < ALPHA


@pytest.mark.parametrize(("kind", "scale", "reach"), [("laplace", 2.0, 8), ("gaussian", 2.0, 6),
                                                      ("laplace", 40.0, 120)])
def test_the_direct_call_draws_what_opendps_own_call_draws(kind: str, scale: float, reach: int) -> None:
    measurement = BUILDERS[kind](scale)
    direct, own = _invoke(measurement, ZEROS), measurement(ZEROS)
    assert all(type(v) is int for v in direct)
    assert _same_distribution_pvalue(direct, own, reach) > ALPHA


def test_the_same_distribution_test_rejects_another_scale() -> None:
    direct = _invoke(_laplace_measurement(2.0), ZEROS)
    other = _laplace_measurement(2.0 * 1.3)(ZEROS)
    assert _same_distribution_pvalue(direct, other, 8) < ALPHA


def test_each_value_keeps_its_place() -> None:
    """Values far apart come back in order, each with its own noise (scale 1: |noise| < 60 but with
    probability below 1e-20 per value), the extremes the sampler accepts included."""
    values = [0, 10**12, -7, MAX_ABS_VALUE - 1, -(MAX_ABS_VALUE - 1), 2**40] * 50
    for draw in (SecureSampler().laplace, SecureSampler().gaussian):
        noisy = draw(values, 1.0)
        assert all(abs(y - x) < 60 for x, y in zip(values, noisy, strict=True))


def test_a_measurement_on_another_carrier_type_is_refused() -> None:
    dp.enable_features("contrib")
    space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float)
    with pytest.raises(TypeError, match="Vec<f64>"):
        _on_i64_vectors(dp.m.make_laplace(*space, scale=1.0))



def test_an_error_from_opendp_is_raised_not_read_as_an_address() -> None:
    from opendp.mod import OpenDPException

    from mechanisms.sampling import _SLICE_AS_OBJECT, _ok

    empty = FfiSlice(None, 0)
    with pytest.raises(OpenDPException):
        _ok(_SLICE_AS_OBJECT(ctypes.byref(empty), b"Vec<no such type>"))


@pytest.mark.parametrize(("kind", "scale"), [("laplace", 0.7), ("laplace", 123.25), ("gaussian", 0.7),
                                             ("gaussian", 4096.5)])
def test_a_measurement_on_the_shared_space_is_the_one_built_afresh(kind: str, scale: float) -> None:
    """The domain and metric are built once and shared: the memoised measurement has the same input domain,
    metric, privacy measure and privacy map as one built from scratch with the same scale."""
    dp.enable_features("contrib")
    if kind == "laplace":
        space = dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l1_distance(T=dp.i64)
        fresh = dp.m.make_laplace(*space, scale=scale)
    else:
        space = dp.vector_domain(dp.atom_domain(T=dp.i64)), dp.l2_distance(T=dp.i64)
        fresh = dp.m.make_gaussian(*space, scale=scale)
    memoised = BUILDERS[kind](scale)
    assert str(memoised.input_domain) == str(fresh.input_domain)
    assert str(memoised.input_metric) == str(fresh.input_metric)
    assert str(memoised.output_measure) == str(fresh.output_measure)
    for d_in in (1, 2, 7, 1000):
        assert memoised.map(d_in) == fresh.map(d_in)


@pytest.mark.parametrize(("bad", "error"), [(MAX_ABS_VALUE, ValueError), (-MAX_ABS_VALUE, ValueError),
                                            (True, TypeError), (2.0, TypeError), ("3", TypeError)],
                         ids=["too-large", "too-small", "bool", "float", "str"])
def test_one_bad_value_among_many_is_refused(bad: object, error: type[Exception]) -> None:
    """The all-ints fast check and the per-value loop give one verdict: a single bad value anywhere fails."""
    for position in (0, 500, 999):
        values: list[object] = [MAX_ABS_VALUE - 1, -(MAX_ABS_VALUE - 1)] * 500
        values[position] = bad
        with pytest.raises(error):
            SecureSampler().laplace(values, 1.0)  # type: ignore[arg-type]


def test_integers_of_other_types_are_still_taken() -> None:
    import numpy as np

    noisy = SecureSampler().laplace([np.int64(5), 7, np.int32(-3)], 1.0)  # type: ignore[list-item]
    assert all(type(v) is int for v in noisy)
    assert all(abs(y - x) < 60 for x, y in zip((5, 7, -3), noisy, strict=True))


def test_the_gaussian_error_bar_is_memoised_per_sigma_and_confidence() -> None:
    """zcdp.ci_halfwidth costs O(σ) up to σ = 1e4 (pricing and error bars call it per answer): memoised, it
    returns what the computation returns, for each (σ, confidence) pair apart."""
    from mechanisms.gaussian import zcdp

    for sigma, confidence in [(3.0, 0.95), (3.0, 0.99), (1234.5, 0.95), (9999.0, 0.9), (2e4, 0.95)]:
        first = zcdp.ci_halfwidth(sigma, confidence)
        assert zcdp.ci_halfwidth(sigma, confidence) == first == zcdp.ci_halfwidth.__wrapped__(sigma, confidence)
    assert zcdp.ci_halfwidth(3.0, 0.95) < zcdp.ci_halfwidth(3.0, 0.99)
    with pytest.raises(ValueError):
        zcdp.ci_halfwidth(math.nan)


def test_threads_drawing_at_once_each_get_their_own_values_back() -> None:
    """Queries run on worker threads, and ctypes releases the GIL inside OpenDP: concurrent draws on one
    memoised measurement keep every value in its place (scale 1: |noise| < 60 but with probability < 1e-20)."""
    from concurrent.futures import ThreadPoolExecutor

    def draw(offset: int) -> bool:
        values = [offset * 10**9 + i for i in range(2000)]
        return all(abs(y - x) < 60 for x, y in zip(values, SecureSampler().laplace(values, 1.0), strict=True))

    with ThreadPoolExecutor(max_workers=4) as pool:
        assert all(pool.map(draw, range(40)))
