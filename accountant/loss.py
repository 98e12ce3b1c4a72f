"""The privacy map of every event: what an `Event` costs, as (ε, δ), as ρ-zCDP, or as approximate
zCDP or GDP (a ρ or μ together with the δ of partition selection).

One `match` over the closed union of `events.py`; anything else raises `UnsupportedEvent`. Every number is
rounded up. The children of a `ComposedEvent` are mechanisms whose parameters the plan fixed before
execution, run on the same data: their losses compose sequentially.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from typing import Literal

from accountant.errors import UnsupportedEvent
from accountant.events import (
    AutoBoundsEvent,
    ComposedEvent,
    Event,
    ExponentialEvent,
    GaussianEvent,
    GaussianThresholdEvent,
    LaplaceEvent,
    ParallelEvent,
    ThresholdEvent,
)
from mechanisms import gdp, laplace, threshold
from mechanisms.gaussian import gdp_bound, zcdp
from mechanisms.rounding import sqrt_up
from mechanisms.rounding import up as _up


def _sum_up(values: Iterable[float]) -> float:
    """math.fsum, raised to the next float when it rounded below the exact sum."""
    values = tuple(values)
    total = math.fsum(values)
    if Fraction(total) < sum(map(Fraction, values), Fraction(0)):
        total = math.nextafter(total, math.inf)
    return total


def _selection_parts(event: GaussianThresholdEvent) -> tuple[GaussianEvent, float]:
    """Gaussian partition selection as its two parts: the noisy counts of shared groups, a Gaussian of L2
    sensitivity √max_groups, and δ = max_groups·P[Z >= T − 1] for the groups only the unit creates."""
    counts = GaussianEvent(sqrt_up(event.max_groups), event.sigma)
    return counts, threshold.gaussian_delta_of_threshold(event.max_groups, event.sigma, event.threshold)


def _unsupported(event: object) -> UnsupportedEvent:
    return UnsupportedEvent(
        f"unsupported event {event!r}: expected LaplaceEvent, GaussianEvent, ThresholdEvent, "
        "GaussianThresholdEvent, ComposedEvent or ParallelEvent",
        event=type(event).__name__,
    )


def as_composed(event: AutoBoundsEvent) -> ComposedEvent:
    """An auto-bounds release as what it is to every accountant: its selection, then its query, on the same
    data (accountant/events.py: the query's recorded parts bound its parts at the chosen bound).

    Example:
        >>> from accountant.events import ExponentialEvent
        >>> epsilon_delta(AutoBoundsEvent(ExponentialEvent(1, 10.0), LaplaceEvent(5, 5.0)), 0.0)
        (1.1, 0.0)
    """
    return ComposedEvent((event.selection, *event.more, event.query))


_Parts = tuple[tuple[Fraction, ...], tuple[tuple[float, float], ...]]
Conversion = Literal["zcdp", "gdp"]


def _sequential(event: Event, gaussian_delta: float, conversion: Conversion) -> _Parts:
    """What every Gaussian reachable through `ComposedEvent`s adds (ρ, or μ² under "gdp"), and the (ε, δ) of
    everything else."""
    match event:
        case AutoBoundsEvent():
            return _sequential(as_composed(event), gaussian_delta, conversion)
        case GaussianEvent(sensitivity, sigma) if conversion == "gdp":
            # discrete Gaussian: μ_Z-GDP (docs/privacy.md §8); μ-GDP composes as √Σμᵢ² (DRS19 Cor. 3.3)
            return (Fraction(gdp_bound.mu(sensitivity, sigma)) ** 2,), ()
        case GaussianEvent(sensitivity, sigma):
            # discrete Gaussian: Δ2²/(2σ²)-zCDP (CKS20), kept in zCDP to compose exactly
            return (Fraction(zcdp.rho(sensitivity, sigma)),), ()
        case LaplaceEvent(sensitivity, scale):
            return (), ((laplace.epsilon(sensitivity, scale), 0.0),)  # pure ε = Δ1/b (CKS20 §5.2)
        case ThresholdEvent(epsilon, delta):
            return (), ((epsilon, delta),)
        case GaussianThresholdEvent():
            # the counts pool with the query's Gaussians; δ of created groups adds (docs/privacy.md §5.4, §8.5)
            counts, delta = _selection_parts(event)
            pooled, _ = _sequential(counts, gaussian_delta, conversion)
            return pooled, ((0.0, delta),)
        case ComposedEvent(events):
            parts = [_sequential(child, gaussian_delta, conversion) for child in events]
            return (
                tuple(r for rhos, _ in parts for r in rhos),
                tuple(c for _, charges in parts for c in charges),
            )
        case ParallelEvent(events):
            return (), (_parallel(events, gaussian_delta, conversion),)
        case _:
            raise _unsupported(event)


def _parallel(events: tuple[Event, ...], gaussian_delta: float, conversion: Conversion) -> tuple[float, float]:
    # disjoint sets of privacy units: (max εᵢ, max δᵢ) under add/remove adjacency (docs/privacy.md §4)
    costs = [epsilon_delta(child, gaussian_delta, conversion) for child in events]
    return max((e for e, _ in costs), default=0.0), max((d for _, d in costs), default=0.0)


def epsilon_delta(event: Event, gaussian_delta: float, conversion: Conversion = "zcdp") -> tuple[float, float]:
    """The (ε, δ) the event satisfies under sequential composition, rounded up.

    Gaussian events reachable through `ComposedEvent`s are pooled and converted once to (ε, `gaussian_delta`):
    with `conversion` "zcdp", ρ adds (Bun–Steinke 2016) and CKS20 §2.3 converts; with "gdp", μ = √Σμᵢ² of
    the proven μ_Z of each (docs/privacy.md §8) converts exactly through δ(ε) of μ-GDP (DRS19 Cor. 2.13).
    Both are valid for the discrete Gaussian; a dataset under `gdp` prices with "gdp". Laplace events add
    their pure ε, threshold events their (ε, δ), and each `ParallelEvent` adds the maximum ε and maximum δ
    of its children, each child accounted on its own. Basic composition adds all of these (Dwork–Roth
    Thm. 3.16). `gaussian_delta` may be 0 only for events without Gaussian noise.

    Example:
        >>> epsilon_delta(LaplaceEvent(1, 10.0), 1e-6)
        (0.1, 0.0)
        >>> composed = ComposedEvent((LaplaceEvent(1, 10.0), ThresholdEvent(0.1, 1e-8)))
        >>> epsilon_delta(composed, 1e-6)
        (0.2, 1e-08)
        >>> e, d = epsilon_delta(GaussianEvent(1, 4.0), 1e-6)
        >>> round(e, 3), d
        (1.143, 1e-06)
        >>> e, d = epsilon_delta(GaussianEvent(1, 4.0), 1e-6, "gdp")
        >>> round(e, 3), d
        (1.064, 1e-06)
    """
    if not (math.isfinite(gaussian_delta) and 0 <= gaussian_delta < 1):
        raise ValueError(f"gaussian_delta must be in [0, 1), got {gaussian_delta!r}")
    pooled, charges = _sequential(event, gaussian_delta, conversion)
    total = sum(pooled, Fraction(0))
    if total > 0:
        if gaussian_delta == 0:  # neither zCDP nor GDP implies a pure ε: a Gaussian always needs some δ
            raise ValueError("an event with Gaussian noise needs gaussian_delta > 0")
        if conversion == "gdp":
            epsilon = zcdp.epsilon_of(_sqrt_up(total), gaussian_delta)
        else:
            epsilon = zcdp.epsilon_from_rho(_up(total), gaussian_delta)
        charges += ((epsilon, gaussian_delta),)
    return _sum_up(e for e, _ in charges), _sum_up(d for _, d in charges)


def rho(event: Event) -> float:
    """The ρ-zCDP of an event made of Gaussian and Laplace events only, rounded up.

    Gaussian: Δ2²/(2σ²) (CKS20). Laplace: pure ε implies ε²/2-zCDP (Bun–Steinke 2016, Prop. 1.4).
    Sequential composition adds ρ; parallel composition over disjoint units takes the maximum, as the
    Rényi divergence of the whole is that of the one part a unit's data lies in. Threshold events are
    (ε, δ)-DP with δ > 0, which implies no zCDP bound.

    Example:
        >>> rho(ComposedEvent((GaussianEvent(1, 2.0), LaplaceEvent(1, 2.0))))
        0.25
        >>> rho(ParallelEvent((GaussianEvent(1, 2.0), GaussianEvent(2, 2.0))))
        0.5
    """
    match event:
        case AutoBoundsEvent():
            return rho(as_composed(event))
        case GaussianEvent(sensitivity, sigma):
            return zcdp.rho(sensitivity, sigma)
        case ExponentialEvent(sensitivity, scale):
            return bounded_range_rho(laplace.epsilon(sensitivity, scale))
        case LaplaceEvent(sensitivity, scale):
            return _pure_rho(laplace.epsilon(sensitivity, scale))
        case ThresholdEvent() | GaussianThresholdEvent():
            raise UnsupportedEvent(
                "a threshold (partition selection) event is (ε, δ)-DP and has no zCDP bound; "
                "account for it with epsilon_delta",
                event=type(event).__name__,
            )
        case ComposedEvent(events):
            return _sum_up(rho(child) for child in events)
        case ParallelEvent(events):
            return max((rho(child) for child in events), default=0.0)
        case _:
            raise _unsupported(event)


def _square_up(value: float) -> Fraction:
    return Fraction(value) ** 2


def _sqrt_up(exact: Fraction) -> float:
    """The smallest float whose square is >= `exact`."""
    root = math.sqrt(float(exact))
    while Fraction(root) ** 2 < exact:
        root = math.nextafter(root, math.inf)
    while root > 0 and Fraction(below := math.nextafter(root, 0.0)) ** 2 >= exact:
        root = below
    return root


def _float_up(exact: Fraction) -> float:
    value = float(exact)
    return value if Fraction(value) >= exact else math.nextafter(value, math.inf)


def _pure_rho(epsilon: float) -> float:
    return _float_up(Fraction(epsilon) ** 2 / 2)  # pure ε-DP implies ε²/2-zCDP (Bun–Steinke 2016, Prop. 1.4)


def bounded_range_rho(epsilon: float) -> float:
    """ε²/8 rounded up: the zCDP of an ε-bounded-range mechanism (docs/privacy.md §5.2.1; Cesar–Rogers 2021).

    An `ExponentialEvent` of pure ε is ε-bounded-range: every score moves by at most half its sensitivity, in
    either direction, so the log-ratio of output probabilities spans at most ε over the outputs.

    Example:
        >>> bounded_range_rho(0.5), _pure_rho(0.5)
        (0.03125, 0.125)
    """
    return _float_up(Fraction(epsilon) ** 2 / 8)


def approximate_rho(event: Event) -> tuple[float, float]:
    """(ρ, δ) such that the event is δ-approximately ρ-zCDP (Bun–Steinke 2016, Def. 8.1), rounded up.

    Gaussian: (Δ2²/(2σ²), 0) (CKS20). Laplace: (ε²/2, 0) (pure ε-DP, Bun–Steinke Prop. 1.4). Threshold
    (private partition selection, `mechanisms/threshold.py`): (ε²/2, δ); with Gaussian noise on the counts,
    (max_groups/(2σ²), δ). Its ε is the pure ε of the noisy
    counts of groups both neighbours have, and its δ bounds the probability that a group which exists only
    because of the added unit is released; conditioned on that not happening, the release is pure ε-DP
    (docs/privacy.md §5 gives the argument, which also covers the adaptive sequence). Sequential
    composition adds ρ and δ; parallel composition over disjoint units takes each maximum, as a unit's data
    lie in one part.

    Example:
        >>> approximate_rho(ComposedEvent((GaussianEvent(1, 2.0), ThresholdEvent(0.5, 1e-9))))
        (0.25, 1e-09)
        >>> approximate_rho(ParallelEvent((LaplaceEvent(1, 2.0), ThresholdEvent(0.25, 1e-8))))
        (0.125, 1e-08)
    """
    match event:
        case AutoBoundsEvent():
            return approximate_rho(as_composed(event))
        case GaussianEvent(sensitivity, sigma):
            return zcdp.rho(sensitivity, sigma), 0.0
        case ExponentialEvent(sensitivity, scale):  # ε-bounded-range: ε²/8 (docs/privacy.md §5.2.1)
            return bounded_range_rho(laplace.epsilon(sensitivity, scale)), 0.0
        case LaplaceEvent(sensitivity, scale):
            return _pure_rho(laplace.epsilon(sensitivity, scale)), 0.0
        case ThresholdEvent(epsilon, delta):
            return _pure_rho(epsilon), delta
        case GaussianThresholdEvent():
            counts, delta = _selection_parts(event)
            return zcdp.rho(counts.sensitivity, counts.sigma), delta
        case ComposedEvent(events):
            parts = [approximate_rho(child) for child in events]
            return _sum_up(r for r, _ in parts), _sum_up(d for _, d in parts)
        case ParallelEvent(events):
            parts = [approximate_rho(child) for child in events]
            return max((r for r, _ in parts), default=0.0), max((d for _, d in parts), default=0.0)
        case _:
            raise _unsupported(event)


def approximate_mu(event: Event) -> tuple[float, float]:
    """(μ, δ) such that the event is δ-approximately μ-GDP (as `approximate_rho`, with GDP), rounded up.

    Laplace: pure ε = Δ1/b gives μ = −2Φ⁻¹(1/(1 + e^ε)) (`gdp.pure_mu`). Threshold: (μ of its ε, δ).
    Discrete Gaussian: μ = μ_Z(σ, 1)·Δ2, the proven bound of docs/privacy.md §8 (μ = Δ2/σ is false for it:
    §5.3); for σ outside [0.5, 2²⁰] grid units nothing is proven here and the event raises `UnsupportedEvent`.
    Sequential composition: μ = √Σμᵢ² (DRS19 Cor. 3.3), δ adds; parallel: each maximum.

    Example:
        >>> mu, delta = approximate_mu(ComposedEvent((LaplaceEvent(1, 10.0), ThresholdEvent(0.1, 1e-9))))
        >>> round(mu, 6), delta
        (0.177214, 1e-09)
        >>> mu, delta = approximate_mu(GaussianEvent(1, 2.0))
        >>> round(mu, 6), mu > 1 / 2.0, delta
        (0.505325, True, 0.0)
        >>> approximate_mu(GaussianEvent(1, 4e6))
        Traceback (most recent call last):
        ...
        accountant.errors.UnsupportedEvent: the discrete Gaussian's μ-GDP bound is proven for sigma in \
[0.5, 1.04858e+06] (grid units), got 4000000.0; account for it with accounting = "zcdp"
    """
    match event:
        case AutoBoundsEvent():
            return approximate_mu(as_composed(event))
        case GaussianEvent(sensitivity, _) if sensitivity == 0:
            return 0.0, 0.0  # no sensitivity: the output does not depend on the data
        case GaussianEvent(sensitivity, sigma):
            try:
                return gdp_bound.mu(sensitivity, sigma), 0.0
            except ValueError as err:
                raise UnsupportedEvent(
                    f'{err}; account for it with accounting = "zcdp"', event="GaussianEvent", sigma=sigma
                ) from err
        case LaplaceEvent(sensitivity, scale):
            return gdp.pure_mu(laplace.epsilon(sensitivity, scale)), 0.0
        case ThresholdEvent(epsilon, delta):
            return gdp.pure_mu(epsilon), delta
        case GaussianThresholdEvent():
            counts, delta = _selection_parts(event)
            mu, _ = approximate_mu(counts)
            return mu, delta
        case ComposedEvent(events):
            parts = [approximate_mu(child) for child in events]
            squares = sum((_square_up(m) for m, _ in parts), Fraction(0))
            return _sqrt_up(squares), _sum_up(d for _, d in parts)
        case ParallelEvent(events):
            parts = [approximate_mu(child) for child in events]
            return max((m for m, _ in parts), default=0.0), max((d for _, d in parts), default=0.0)
        case _:
            raise _unsupported(event)
