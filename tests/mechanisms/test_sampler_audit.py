"""A stochastic privacy audit of the production samplers on neighbouring inputs (docs/privacy.md §2).

For a mechanism M(x) = x + Z and neighbouring integer inputs 0 and Δ, (ε, δ)-DP requires, for every set S of
outcomes, P[M(0) ∈ S] ≤ e^ε P[M(Δ) ∈ S] + δ and the same with 0 and Δ swapped. The audit draws N samples of
each, counts them in a family of sets fixed before sampling (every single outcome in a central range, both
tails at every cut, all odd and all even outcomes), and declares a violation only when
    CP_lower(count_0) − e^ε · CP_upper(count_Δ) > δ
with one-sided Clopper–Pearson bounds at level a = α / (4·|family|). If the mechanism is (ε, δ)-DP, a
violation needs one of the two bounds to miss its true probability, so by the union bound over sets and
both directions the audit fails a correct sampler with probability at most α = 1e-6 (independent of N and
of how tight the mechanism is). Discrete Laplace of scale b is exactly ε = Δ/b-tight on every outcome
≤ 0, and the audit still passes it; the discrete Gaussian is checked against its exact privacy profile
δ(ε) = Σ_k max(0, p_0(k) − e^ε p_Δ(k)), computed from its probability mass function.

The same check must catch deliberately broken samplers: one whose scale is 2× too small (true ε doubled),
and one whose noise depends on the input's parity (the Mironov 2012 shape of leak: the low bit of the
output reveals the input). A goodness-of-fit check makes sure the audited sampler is the distribution it
claims (a sampler that returned a constant would pass any privacy audit).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats

from mechanisms.sampling import SecureSampler

ALPHA = 1e-6  # the false-failure rate of each test, split over the checks it runs
LAPLACE_N = 200_000  # samples per input (one vectorised call each: ~1.5 s)
GAUSSIAN_N = 100_000  # the discrete Gaussian samples about half as fast
LAPLACE_SCALE, LAPLACE_DELTA = 6.0, 3  # ε = Δ/b = 0.5; Δ odd so that a parity leak shows between 0 and Δ
GAUSSIAN_SIGMA, GAUSSIAN_DELTA = 2.0, 1
GAUSSIAN_EPSILONS = (0.5, 1.0)

Draw = Callable[[Sequence[int], float], Sequence[int]]


# --- the check -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """Sets of outcomes, fixed before sampling: singletons lo..hi, tails Z <= k and Z >= k, odd, even."""

    lo: int
    hi: int

    @property
    def names(self) -> list[str]:
        ks = range(self.lo, self.hi + 1)
        return [f"={k}" for k in ks] + [f"<={k}" for k in ks] + [f">={k}" for k in ks] + ["odd", "even"]

    def counts(self, sample: np.ndarray) -> np.ndarray:
        width = self.hi - self.lo + 1
        inside = sample[(sample >= self.lo) & (sample <= self.hi)] - self.lo
        single = np.bincount(inside, minlength=width)
        below = np.count_nonzero(sample < self.lo)
        above = np.count_nonzero(sample > self.hi)
        at_most = below + np.cumsum(single)  # Z <= k, everything below the range included
        at_least = above + np.cumsum(single[::-1])[::-1]  # Z >= k
        odd = np.count_nonzero(sample % 2)
        return np.concatenate([single, at_most, at_least, [odd, sample.size - odd]]).astype(np.int64)


@dataclass(frozen=True)
class Violation:
    bucket: str
    direction: str  # which input's probability exceeds the other's bound
    lower: float  # CP lower bound of the larger probability
    upper: float  # CP upper bound of the smaller one
    excess: float  # lower − e^ε · upper − δ, > 0


def cp_lower(count: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound: P[bound > p] <= a."""
    count = np.asarray(count, dtype=float)
    safe = np.maximum(count, 1.0)
    return np.where(count > 0, stats.beta.ppf(a, safe, n - count + 1), 0.0)


def cp_upper(count: np.ndarray, n: int, a: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound: P[bound < p] <= a."""
    count = np.asarray(count, dtype=float)
    safe = np.minimum(count, n - 1.0)
    return np.where(count < n, stats.beta.ppf(1 - a, safe + 1, n - safe), 1.0)


def audit(
    sample_0: np.ndarray, sample_d: np.ndarray, family: Family, epsilon: float, delta: float, alpha: float
) -> list[Violation]:
    """Every set of `family` on which the samples prove a breach of (ε, δ)-DP; [] if none.

    A correct (ε, δ)-DP mechanism yields a non-empty list with probability at most `alpha`."""
    a = alpha / (4 * len(family.names))  # sets × 2 directions × 2 bounds
    counts = family.counts(sample_0), family.counts(sample_d)
    sizes = sample_0.size, sample_d.size
    found = []
    for big, small, direction in ((0, 1, "M(0) > M(Δ)"), (1, 0, "M(Δ) > M(0)")):
        lower = cp_lower(counts[big], sizes[big], a)
        upper = cp_upper(counts[small], sizes[small], a)
        excess = lower - math.exp(epsilon) * upper - delta
        found += [
            Violation(family.names[i], direction, float(lower[i]), float(upper[i]), float(excess[i]))
            for i in np.flatnonzero(excess > 0)
        ]
    return found


def misfits(sample: np.ndarray, pmf: Callable[[np.ndarray], np.ndarray], lo: int, hi: int, alpha: float) -> list[int]:
    """Outcomes k in lo..hi whose exact probability lies outside the sample's two-sided CP interval."""
    ks = np.arange(lo, hi + 1)
    counts = np.bincount(sample[(sample >= lo) & (sample <= hi)] - lo, minlength=ks.size)
    a = alpha / (2 * ks.size)
    p = pmf(ks)
    outside = (p < cp_lower(counts, sample.size, a)) | (p > cp_upper(counts, sample.size, a))
    return [int(k) for k in ks[outside]]


# --- exact distributions --------------------------------------------------------------------------------


def laplace_pmf(scale: float) -> Callable[[np.ndarray], np.ndarray]:
    """Discrete Laplace: P[Z = k] = tanh(1/(2b)) · e^{−|k|/b}."""
    return lambda ks: math.tanh(1 / (2 * scale)) * np.exp(-np.abs(ks) / scale)


def gaussian_pmf(sigma: float) -> Callable[[np.ndarray], np.ndarray]:
    """Discrete Gaussian: P[Z = k] ∝ e^{−k²/(2σ²)}, normalised over |k| <= 40σ (the rest is < e^{−800})."""
    support = np.arange(-math.ceil(40 * sigma), math.ceil(40 * sigma) + 1)
    norm = np.exp(-(support**2) / (2 * sigma**2)).sum()
    return lambda ks: np.exp(-(np.asarray(ks, dtype=float) ** 2) / (2 * sigma**2)) / norm


def gaussian_delta(sigma: float, sensitivity: int, epsilon: float) -> float:
    """The exact privacy profile of the discrete Gaussian on a shift by `sensitivity`:
    δ(ε) = sup_S P[Z ∈ S] − e^ε P[Z + Δ ∈ S] = Σ_k max(0, p(k) − e^ε p(k − Δ)) (symmetric in the direction)."""
    pmf = gaussian_pmf(sigma)
    ks = np.arange(-math.ceil(40 * sigma), math.ceil(40 * sigma) + sensitivity + 1)
    return float(np.maximum(0.0, pmf(ks) - math.exp(epsilon) * pmf(ks - sensitivity)).sum())


# --- samplers: the production one and deliberately broken test doubles ---------------------------------


def secure_laplace(values: Sequence[int], scale: float) -> Sequence[int]:
    return SecureSampler().laplace(values, scale)


def secure_gaussian(values: Sequence[int], sigma: float) -> Sequence[int]:
    return SecureSampler().gaussian(values, sigma)


_rng = np.random.default_rng()  # test doubles only; the production sampler never uses numpy's generator


def exact_laplace_noise(size: int, scale: float) -> np.ndarray:
    """Exact discrete Laplace as the difference of two geometric variables (fast, for the test doubles)."""
    p = 1 - math.exp(-1 / scale)
    return _rng.geometric(p, size) - _rng.geometric(p, size)


def exact_gaussian_noise(size: int, sigma: float) -> np.ndarray:
    support = np.arange(-math.ceil(12 * sigma), math.ceil(12 * sigma) + 1)
    p = gaussian_pmf(sigma)(support)
    return _rng.choice(support, size=size, p=p / p.sum())


def half_scale_laplace(values: Sequence[int], scale: float) -> Sequence[int]:
    """Broken: noise of scale b/2, so the true ε is twice the claimed Δ/b."""
    return np.asarray(values) + exact_laplace_noise(len(values), scale / 2)


def half_sigma_gaussian(values: Sequence[int], sigma: float) -> Sequence[int]:
    """Broken: σ/2."""
    return np.asarray(values) + exact_gaussian_noise(len(values), sigma / 2)


def parity_leak(noise: Callable[[int, float], np.ndarray]) -> Draw:
    """Broken, Mironov-style: correct noise, but for odd inputs the output is moved to an even number, so
    the low bit of the output tells the input's parity."""

    def draw(values: Sequence[int], scale: float) -> Sequence[int]:
        x = np.asarray(values)
        out = x + noise(len(values), scale)
        return np.where(x % 2 == 1, out - (out % 2), out)

    return draw


def sample_pair(draw: Draw, scale: float, sensitivity: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """n draws of M(0) and n of M(Δ), each in one vectorised call."""
    zero = np.asarray(draw([0] * n, scale), dtype=np.int64)
    shifted = np.asarray(draw([sensitivity] * n, scale), dtype=np.int64)
    assert zero.shape == shifted.shape == (n,)
    return zero, shifted


LAPLACE_FAMILY = Family(-math.ceil(10 * LAPLACE_SCALE), LAPLACE_DELTA + math.ceil(10 * LAPLACE_SCALE))
GAUSSIAN_FAMILY = Family(-math.ceil(6 * GAUSSIAN_SIGMA), GAUSSIAN_DELTA + math.ceil(6 * GAUSSIAN_SIGMA))


# --- the production samplers pass ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def laplace_samples() -> tuple[np.ndarray, np.ndarray]:
    return sample_pair(secure_laplace, LAPLACE_SCALE, LAPLACE_DELTA, LAPLACE_N)


@pytest.fixture(scope="module")
def gaussian_samples() -> tuple[np.ndarray, np.ndarray]:
    return sample_pair(secure_gaussian, GAUSSIAN_SIGMA, GAUSSIAN_DELTA, GAUSSIAN_N)


def test_secure_laplace_is_pure_epsilon_dp(laplace_samples: tuple[np.ndarray, np.ndarray]) -> None:
    zero, shifted = laplace_samples
    epsilon = LAPLACE_DELTA / LAPLACE_SCALE
    assert audit(zero, shifted, LAPLACE_FAMILY, epsilon, 0.0, ALPHA / 3) == []
    # it is the distribution it claims: M(0) − 0 and M(Δ) − Δ both follow the discrete Laplace pmf
    pmf = laplace_pmf(LAPLACE_SCALE)
    assert misfits(zero, pmf, -30, 30, ALPHA / 3) == []
    assert misfits(shifted - LAPLACE_DELTA, pmf, -30, 30, ALPHA / 3) == []


def test_secure_gaussian_meets_its_exact_privacy_profile(gaussian_samples: tuple[np.ndarray, np.ndarray]) -> None:
    zero, shifted = gaussian_samples
    checks = len(GAUSSIAN_EPSILONS) + 2
    for epsilon in GAUSSIAN_EPSILONS:
        delta = gaussian_delta(GAUSSIAN_SIGMA, GAUSSIAN_DELTA, epsilon)
        assert 0 < delta < 0.1
        assert audit(zero, shifted, GAUSSIAN_FAMILY, epsilon, delta, ALPHA / checks) == []
    pmf = gaussian_pmf(GAUSSIAN_SIGMA)
    assert misfits(zero, pmf, -8, 8, ALPHA / checks) == []
    assert misfits(shifted - GAUSSIAN_DELTA, pmf, -8, 8, ALPHA / checks) == []


def test_reference_profiles_are_sane() -> None:
    """δ(ε) of the discrete Gaussian falls with ε; for the discrete Laplace the same formula is 0 at ε = Δ/b
    and positive just below it, so δ = 0 is the right reference there and Δ/b is tight."""
    deltas = [gaussian_delta(GAUSSIAN_SIGMA, GAUSSIAN_DELTA, e) for e in (0.1, 0.5, 1.0, 2.0)]
    assert deltas == sorted(deltas, reverse=True) and deltas[-1] < 1e-4
    ks = np.arange(-200, 204)
    pmf = laplace_pmf(LAPLACE_SCALE)

    def profile(epsilon: float) -> float:
        return float(np.maximum(0, pmf(ks) - math.exp(epsilon) * pmf(ks - LAPLACE_DELTA)).sum())

    assert profile(LAPLACE_DELTA / LAPLACE_SCALE) < 1e-12 < profile(0.9 * LAPLACE_DELTA / LAPLACE_SCALE)


# --- the same check catches broken samplers ------------------------------------------------------------


@pytest.mark.parametrize(
    "broken",
    [half_scale_laplace, parity_leak(exact_laplace_noise)],
    ids=["scale-halved", "parity-leak"],
)
def test_audit_catches_a_broken_laplace(broken: Draw) -> None:
    zero, shifted = sample_pair(broken, LAPLACE_SCALE, LAPLACE_DELTA, LAPLACE_N)
    violations = audit(zero, shifted, LAPLACE_FAMILY, LAPLACE_DELTA / LAPLACE_SCALE, 0.0, ALPHA)
    assert violations, "the audit passed a sampler that is not ε-DP"


@pytest.mark.parametrize(
    "broken",
    [half_sigma_gaussian, parity_leak(exact_gaussian_noise)],
    ids=["sigma-halved", "parity-leak"],
)
def test_audit_catches_a_broken_gaussian(broken: Draw) -> None:
    zero, shifted = sample_pair(broken, GAUSSIAN_SIGMA, GAUSSIAN_DELTA, GAUSSIAN_N)
    epsilon = GAUSSIAN_EPSILONS[-1]
    delta = gaussian_delta(GAUSSIAN_SIGMA, GAUSSIAN_DELTA, epsilon)
    assert audit(zero, shifted, GAUSSIAN_FAMILY, epsilon, delta, ALPHA), "the audit passed a non-(ε, δ)-DP sampler"


def test_audit_passes_the_exact_test_doubles_it_is_compared_with() -> None:
    """The broken samplers differ from correct ones only in the flaw: the same doubles at the right scale pass."""
    def correct(values: Sequence[int], scale: float) -> Sequence[int]:
        return np.asarray(values) + exact_laplace_noise(len(values), scale)

    zero, shifted = sample_pair(correct, LAPLACE_SCALE, LAPLACE_DELTA, LAPLACE_N)
    assert audit(zero, shifted, LAPLACE_FAMILY, LAPLACE_DELTA / LAPLACE_SCALE, 0.0, ALPHA) == []
