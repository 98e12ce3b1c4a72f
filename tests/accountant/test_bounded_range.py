"""The exponential mechanism is ε-bounded-range, so `zcdp` charges it ε²/8 (docs/privacy.md §5.2.1).

Checked exactly on every pair of small neighbouring inputs of each mechanism recorded as an ExponentialEvent:
the privacy loss L(i) = ln P_D[i] − ln P_D′[i] spans at most the recorded ε over the outputs (in exact rationals,
where the normaliser cancels, and again from the probabilities themselves with mpmath at 50 digits), and the
Rényi divergences stay within αε²/8. Randomised response, pure ε-DP but not of that form, breaks ε²/8: the test
can fail. The charge itself is ε²/8, the nearest float above it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from fractions import Fraction

import mpmath
import pytest

from accountant import events, loss
from accountant.events import AutoBoundsEvent, ComposedEvent, ExponentialEvent, LaplaceEvent
from mechanisms import count_target, dp_quantile, joint_quantiles, laplace
from proxy.query.auto import total

mpmath.mp.dps = 50
ALPHAS = (Fraction(101, 100), Fraction(3, 2), Fraction(2), Fraction(4), Fraction(16), Fraction(64))


def _additions(points: int, rows: int) -> Iterator[tuple[int, ...]]:
    """Every way to add between 1 and `rows` rows over `points` grid points, as a histogram increment."""
    for n in range(1, rows + 1):
        for placed in itertools.combinations_with_replacement(range(points), n):
            yield tuple(placed.count(i) for i in range(points))


def _histograms(points: int, most: int) -> Iterator[tuple[int, ...]]:
    yield from itertools.product(range(most + 1), repeat=points)


def _exact_range(small: Sequence[Fraction], big: Sequence[Fraction]) -> Fraction:
    """sup L − inf L for P ∝ exp(−x): L(i) = x_i(big) − x_i(small) + ln Z(big)/Z(small), so the normaliser cancels."""
    moves = [b - s for s, b in zip(small, big, strict=True)]
    return max(moves) - min(moves)


def _probabilities(x: Sequence[Fraction]) -> list[mpmath.mpf]:
    weights = [mpmath.exp(-mpmath.mpf(v.numerator) / v.denominator) for v in x]
    z = mpmath.fsum(weights)
    return [w / z for w in weights]


def _loss_range(small: Sequence[Fraction], big: Sequence[Fraction]) -> mpmath.mpf:
    p, q = _probabilities(small), _probabilities(big)
    losses = [mpmath.log(a) - mpmath.log(b) for a, b in zip(p, q, strict=True)]
    return max(losses) - min(losses)


def _renyi(p: Sequence[mpmath.mpf], q: Sequence[mpmath.mpf], alpha: Fraction) -> mpmath.mpf:
    a = mpmath.mpf(alpha.numerator) / alpha.denominator
    return mpmath.log(mpmath.fsum(x**a * y ** (1 - a) for x, y in zip(p, q, strict=True))) / (a - 1)


def _assert_bounded_range(small: Sequence[Fraction], big: Sequence[Fraction], epsilon: Fraction) -> Fraction:
    exact = _exact_range(small, big)
    assert exact <= epsilon, (small, big, exact, epsilon)
    assert abs(_loss_range(small, big) - mpmath.mpf(exact.numerator) / exact.denominator) < mpmath.mpf(10) ** -40
    return exact


def _assert_zcdp(small: Sequence[Fraction], big: Sequence[Fraction], epsilon: Fraction) -> None:
    p, q = _probabilities(small), _probabilities(big)
    bound = mpmath.mpf(epsilon.numerator) ** 2 / epsilon.denominator**2 / 8
    for alpha in ALPHAS:
        a = mpmath.mpf(alpha.numerator) / alpha.denominator
        assert _renyi(p, q, alpha) <= a * bound + mpmath.mpf(10) ** -40
        assert _renyi(q, p, alpha) <= a * bound + mpmath.mpf(10) ** -40


@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(9, 10), Fraction(1)])
@pytest.mark.parametrize("sensitivity", [1, 2])
def test_dp_quantile_is_epsilon_bounded_range(q: Fraction, sensitivity: int) -> None:
    epsilon = Fraction(1, 3)
    widest = Fraction(0)
    for h in _histograms(3, 2):
        small = dp_quantile.exponents(h, q, epsilon, sensitivity)
        for added in _additions(3, sensitivity):
            big = dp_quantile.exponents([a + b for a, b in zip(h, added, strict=True)], q, epsilon, sensitivity)
            widest = max(widest, _assert_bounded_range(small, big, epsilon))
            _assert_zcdp(small, big, epsilon)
    assert widest >= epsilon / 2  # the pairs are not trivial: scores move


def test_dp_quantile_range_reaches_epsilon() -> None:
    """The range ε is attained (q = 1/2, s = 1: a row added below the only one moves the scores apart by Δ each
    way), so Lemma 1's bound, and the ε²/8 charged from it, cannot be lowered for this mechanism."""
    epsilon = Fraction(1)
    small = dp_quantile.exponents([0, 0, 0, 1], Fraction(1, 2), epsilon, 1)
    big = dp_quantile.exponents([0, 1, 0, 1], Fraction(1, 2), epsilon, 1)
    assert _exact_range(small, big) == epsilon


def _level(hist: Sequence[int], q: Fraction, bound_left: int, bound_right: int, noisy_count: int,
           epsilon: Fraction, s: int) -> tuple[list[Fraction], list[Fraction]]:
    """The exact exponents of a level's left step (q below `bound_left`) and right step (above `bound_right`)."""
    left = joint_quantiles.anchored_numerators(joint_quantiles.left_rows(hist, bound_left), q, noisy_count, epsilon, s)
    right = joint_quantiles.anchored_numerators(
        joint_quantiles.right_rows(hist, bound_right), 1 - q, noisy_count, epsilon, s)
    return [Fraction(n, left[1]) for n in left[0]], [Fraction(n, right[1]) for n in right[0]]


@pytest.mark.parametrize("q", [Fraction(1, 10), Fraction(1, 4), Fraction(9, 10)])
def test_joint_quantile_level_is_epsilon_bounded_range(q: Fraction) -> None:
    """A level: a left step below B_L and a right step above B_R, independent given the prefix; the unit's b_L
    rows on the left and b_R on the right (b_L + b_R <= s): the product's range is the sum of the two."""
    epsilon, s, points = Fraction(1, 2), 2, 5
    for h in _histograms(points, 1):
        for bound_left, bound_right in ((1, 3), (2, 2), (3, 4)):
            for noisy_count in (0, 2, 5):
                small_left, small_right = _level(h, q, bound_left, bound_right, noisy_count, epsilon, s)
                for added in _additions(points, s):
                    big = [a + b for a, b in zip(h, added, strict=True)]
                    big_left, big_right = _level(big, q, bound_left, bound_right, noisy_count, epsilon, s)
                    spread = _exact_range(small_left, big_left) + _exact_range(small_right, big_right)
                    assert spread <= epsilon, (h, added, bound_left, bound_right)
                    product_small = [a + b for a in small_left for b in small_right]
                    product_big = [a + b for a in big_left for b in big_right]
                    assert _exact_range(product_small, product_big) == spread


def test_total_cap_selection_is_epsilon_bounded_range() -> None:
    """The per-unit cap (auto/total.py): a unit adds 1 to N(C_i) below its bin; the base measure reads no data."""
    epsilon, t = Fraction(2, 5), Fraction(3, 2)
    for above in itertools.product(range(3), repeat=4):
        if list(above) != sorted(above, reverse=True):
            continue  # N(C_i) is non-increasing in i
        for anchor in (0, 2, 3):
            numerators, denominator = total.exponents(above, t, epsilon, anchor)
            small = [Fraction(n, denominator) for n in numerators]
            for reach in range(len(above) + 1):  # the added unit is above C_0 … C_(reach − 1)
                more = [n + (1 if i < reach else 0) for i, n in enumerate(above)]
                numerators, denominator = total.exponents(more, t, epsilon, anchor)
                big = [Fraction(n, denominator) for n in numerators]
                _assert_bounded_range(small, big, epsilon)
                _assert_zcdp(small, big, epsilon)


def test_randomised_response_is_not_bounded_range_and_breaks_an_eighth() -> None:
    """Pure ε-DP alone is only 2ε-BR: the charge ε²/8 is for the exponential mechanism's form, not any ε-DP."""
    epsilon = Fraction(1)
    e = mpmath.e ** (mpmath.mpf(epsilon.numerator) / epsilon.denominator)
    p, q = [e / (1 + e), 1 / (1 + e)], [1 / (1 + e), e / (1 + e)]
    losses = [mpmath.log(a / b) for a, b in zip(p, q, strict=True)]
    assert abs(max(losses) - min(losses) - 2) < mpmath.mpf(10) ** -40  # range 2ε
    assert _renyi(p, q, Fraction(101, 100)) > Fraction(101, 100) * mpmath.mpf(1) / 8  # above αε²/8


@pytest.mark.parametrize(("sensitivity", "scale"), [(1.0, 2.0), (2.0, 4.0), (1.0, 10.0), (8.0, 80.0), (3.0, 7.0),
                                                     (198.0, 1981.0), (1.0, 0.1), (0.9, 3.0)])
def test_charge_is_an_eighth_of_epsilon_squared_exactly(sensitivity: float, scale: float) -> None:
    event = ExponentialEvent(sensitivity, scale)
    epsilon = laplace.epsilon(sensitivity, scale)  # the pure ε every rule reads, rounded up
    assert Fraction(epsilon) >= Fraction(sensitivity) / Fraction(scale)
    exact = Fraction(epsilon) ** 2 / 8
    rho, delta = loss.approximate_rho(event)
    assert delta == 0.0 and rho == loss.rho(event)
    assert Fraction(rho) >= exact > Fraction(math.nextafter(rho, 0.0))  # the nearest float at or above ε²/8
    pure, _ = loss.approximate_rho(LaplaceEvent(sensitivity, scale))
    assert Fraction(pure) >= Fraction(epsilon) ** 2 / 2 > Fraction(math.nextafter(pure, 0.0))


def test_exact_values() -> None:
    assert loss.approximate_rho(ExponentialEvent(1.0, 2.0)) == (0.03125, 0.0)  # ε = 1/2: 1/32
    assert loss.approximate_rho(LaplaceEvent(1.0, 2.0)) == (0.125, 0.0)  # Laplace keeps ε²/2
    # the selection and the query compose: ρ adds (0.1²/8 + 1²/2)
    composed = AutoBoundsEvent(ExponentialEvent(1.0, 10.0), LaplaceEvent(5.0, 5.0))
    rho, _ = loss.approximate_rho(composed)
    assert Fraction(rho) >= Fraction(laplace.epsilon(1.0, 10.0)) ** 2 / 8 + Fraction(1, 2)
    assert rho == loss.approximate_rho(ComposedEvent((ExponentialEvent(1.0, 10.0), LaplaceEvent(5.0, 5.0))))[0]
    # basic composition and gdp read the pure ε, unchanged (docs/privacy.md §5.2.1: the BR curve is not used)
    assert loss.epsilon_delta(ExponentialEvent(1.0, 2.0), 0.0) == (0.5, 0.0)
    assert loss.approximate_mu(ExponentialEvent(1.0, 2.0)) == loss.approximate_mu(LaplaceEvent(1.0, 2.0))


def test_stored_exponential_charges_read_back_at_an_eighth() -> None:
    """The wire form is unchanged: an event stored before the rule reads back as the same mechanism."""
    stored = {"kind": "exponential", "sensitivity": 2.0, "scale": 4.0}
    event = events.from_json(stored)
    assert event == ExponentialEvent(2.0, 4.0) and events.to_json(event) == stored
    assert loss.approximate_rho(event) == (0.03125, 0.0)


@pytest.mark.parametrize("s", [1, 2])
def test_count_target_selection_is_epsilon_bounded_range(s: int) -> None:
    """The bound selection by error (mechanisms/count_target.py): each exponent ε·|N_i − t|/(2s) moves by at most
    ε/2 when one unit moves every N_i by at most s, and the base measure reads no data, so the loss spans at
    most ε over the outputs: ε-bounded-range, charged ε²/8 under zcdp like every ExponentialEvent."""
    reached = Fraction(0)
    for epsilon, t, step in itertools.product((Fraction(1, 2), Fraction(2)), (Fraction(0), Fraction(5, 2)),
                                              (Fraction(0), count_target.STEP)):
        for above in itertools.product(range(4), repeat=3):
            numerators, denominator = count_target.exponent_numerators(above, t, epsilon, s, step)
            small = [Fraction(n, denominator) for n in numerators]
            for move in itertools.product(range(-s, s + 1), repeat=3):
                other = [a + d for a, d in zip(above, move, strict=True)]
                if min(other) < 0:
                    continue
                numerators, denominator = count_target.exponent_numerators(other, t, epsilon, s, step)
                big = [Fraction(n, denominator) for n in numerators]
                exact = _exact_range(small, big)
                assert exact <= epsilon, (above, other, t, epsilon, step)
                reached = max(reached, exact / epsilon)
    assert reached == 1  # the range ε is reached: the bound is tight
