"""The samplers: χ² goodness of fit against the exact pmfs at α = 1e-6, and the input contract.

The same test function must also reject deliberately broken samplers, so a pass means something.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import opendp.prelude as dp
import pytest
from scipy import stats

from mechanisms.sampling import MAX_ABS_VALUE, FixedSampler, Sampler, SecureSampler

ALPHA = 1e-6
DRAWS = 20_000
# one vectorised call per release, with values far apart: noise must not depend on them
VALUES = tuple((0, 10**12, -7, 2**61)[i % 4] for i in range(DRAWS))


def _laplace_pmf(scale: float) -> Callable[[int], float]:
    q = math.exp(-1 / scale)
    return lambda k: (1 - q) / (1 + q) * q ** abs(k)


def _gaussian_pmf(sigma: float) -> Callable[[int], float]:
    reach = math.ceil(40 * sigma) + 1
    norm = math.fsum(math.exp(-k * k / (2 * sigma * sigma)) for k in range(-reach, reach + 1))
    return lambda k: math.exp(-k * k / (2 * sigma * sigma)) / norm


def _chi2_pvalue(noise: Sequence[int], pmf: Callable[[int], float]) -> float:
    """χ² p-value of the noise against a symmetric `pmf`: one bin per k with |k| < reach, and the two tails
    k <= −reach and k >= reach as one bin each, reach the largest with an expected count >= 5 in each tail.

    Pooling the tails beyond the last bin of >= 5 instead left a bin expecting ~0.07 draws (σ = 0.8): one draw
    there gave p ≈ 1e-3, two p ≈ 1e-10, far more often than α (seen as a flaky failure)."""
    n = len(noise)

    def tail(r: int) -> float:  # P[K >= r], r >= 1; pmf decays at least geometrically past the bins used
        terms, k = [], r
        while not terms or terms[-1] > 1e-300:
            terms.append(pmf(k))
            k += 1
        return math.fsum(terms)

    reach = 1
    while n * tail(reach + 1) >= 5:
        reach += 1
    counts = Counter(noise)
    observed = [sum(c for k, c in counts.items() if k <= -reach)]
    expected = [n * tail(reach)]
    observed += [counts[k] for k in range(-reach + 1, reach)]
    expected += [n * pmf(k) for k in range(-reach + 1, reach)]
    observed.append(sum(c for k, c in counts.items() if k >= reach))
    expected.append(n - math.fsum(expected))
    return float(stats.chisquare(observed, expected).pvalue)


def _noise(sampler: Sampler, kind: str, scale: float) -> tuple[int, ...]:
    noisy = sampler.laplace(VALUES, scale) if kind == "laplace" else sampler.gaussian(VALUES, scale)
    return tuple(y - x for x, y in zip(VALUES, noisy, strict=True))


@dataclass(frozen=True)
class TooLittleNoise:
    """Broken on purpose: the secure sampler at 1/1.3 of the requested scale."""

    def laplace(self, values: Sequence[int], scale: float) -> tuple[int, ...]:
        return SecureSampler().laplace(values, scale / 1.3)

    def gaussian(self, values: Sequence[int], sigma: float) -> tuple[int, ...]:
        return SecureSampler().gaussian(values, sigma / 1.3)


@dataclass(frozen=True)
class RoundedContinuousLaplace:
    """Broken on purpose: rounded floating-point Laplace (the textbook sampler) at the wrong scale."""

    def laplace(self, values: Sequence[int], scale: float) -> tuple[int, ...]:
        dp.enable_features("contrib")
        space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.l1_distance(T=float)
        continuous = dp.m.make_laplace(*space, scale=scale / 1.3)
        return tuple(round(x) for x in continuous([float(v) for v in values]))

    def gaussian(self, values: Sequence[int], sigma: float) -> tuple[int, ...]:
        raise NotImplementedError


@pytest.mark.parametrize("scale", [0.7, 3.0, 25.0], ids=lambda s: f"scale={s}")
def test_secure_laplace_fits_the_discrete_laplace(scale: float) -> None:
    assert _chi2_pvalue(_noise(SecureSampler(), "laplace", scale), _laplace_pmf(scale)) > ALPHA


@pytest.mark.parametrize("sigma", [0.8, 3.0, 25.0], ids=lambda s: f"sigma={s}")
def test_secure_gaussian_fits_the_discrete_gaussian(sigma: float) -> None:
    assert _chi2_pvalue(_noise(SecureSampler(), "gaussian", sigma), _gaussian_pmf(sigma)) > ALPHA


@pytest.mark.parametrize(
    ("sampler", "kind"),
    [(TooLittleNoise(), "laplace"), (RoundedContinuousLaplace(), "laplace"), (TooLittleNoise(), "gaussian")],
    ids=["laplace-scale-too-small", "laplace-rounded-continuous", "gaussian-sigma-too-small"],
)
def test_the_same_test_rejects_a_broken_sampler(sampler: Sampler, kind: str) -> None:
    pmf = _laplace_pmf(3.0) if kind == "laplace" else _gaussian_pmf(3.0)
    assert _chi2_pvalue(_noise(sampler, kind, 3.0), pmf) < ALPHA


def test_secure_sampler_is_not_seeded() -> None:
    first = SecureSampler().laplace([0] * 200, 10.0)
    second = SecureSampler().laplace([0] * 200, 10.0)
    assert first != second  # equal with probability < 0.06^200
    assert all(type(v) is int for v in first)


@pytest.mark.parametrize("method", ["laplace", "gaussian"])
def test_empty_release_draws_nothing(method: str) -> None:
    assert getattr(SecureSampler(), method)([], 1.0) == ()
    assert getattr(FixedSampler(), method)([], 1.0) == ()


@pytest.mark.parametrize("sampler", [SecureSampler(), FixedSampler()], ids=["secure", "fixed"])
@pytest.mark.parametrize("method", ["laplace", "gaussian"])
@pytest.mark.parametrize(
    ("values", "scale", "error"),
    [
        ([MAX_ABS_VALUE], 1.0, ValueError),
        ([-MAX_ABS_VALUE], 1.0, ValueError),
        ([1], 0.0, ValueError),  # OpenDP reads scale 0 as "no noise"
        ([1], -1.0, ValueError),
        ([1], math.nan, ValueError),
        ([1], math.inf, ValueError),
        ([1.5], 1.0, TypeError),
        ([True], 1.0, TypeError),
    ],
    ids=["too-large", "too-small", "zero-scale", "negative-scale", "nan-scale", "inf-scale", "float", "bool"],
)
def test_rejects_invalid_input(
    sampler: Sampler, method: str, values: list[object], scale: float, error: type[Exception]
) -> None:
    with pytest.raises(error):
        getattr(sampler, method)(values, scale)


def test_largest_allowed_value_is_accepted() -> None:
    (noisy,) = SecureSampler().gaussian([MAX_ABS_VALUE - 1], 1.0)
    assert abs(noisy - (MAX_ABS_VALUE - 1)) < 100


def test_fixed_sampler_cycles_its_offsets() -> None:
    sampler: Sampler = FixedSampler((1, -2, 0))
    assert sampler.laplace([10, 10, 10, 10], 1.0) == (11, 8, 10, 11)
    assert sampler.gaussian([5], 1.0) == (6,)
    with pytest.raises(ValueError):
        FixedSampler(())
