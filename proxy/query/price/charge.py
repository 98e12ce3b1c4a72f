"""Choose the noise for every measure and build the exact event to charge (docs/privacy.md §1–§5).

The requested (ε, δ) is split across the noisy parts of the release, each part rounded down so the parts
never add up to more than was asked: partition selection (if any) takes an even share, and the measures
share the rest so as to minimise the total expected error of the released aggregates (`_weights`).
Sensitivities over the whole release follow from the enforced contribution bounds: with L0 the number of
released groups one unit can change (`release_l0`: max_groups, or the d cells of a public domain when d is
smaller), a measure of per-group sensitivity s has L1 = L0·s and L2 = √L0·s. One group per unit (max_groups
= 1) is parallel composition: the release costs what one group costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from accountant import loss
from accountant.events import (
    ComposedEvent,
    Event,
    GaussianEvent,
    GaussianThresholdEvent,
    LaplaceEvent,
    ParallelEvent,
    ThresholdEvent,
)
from accountant.loss import Conversion
from mechanisms import gdp, laplace, threshold
from mechanisms.gaussian import gdp_bound, zcdp
from mechanisms.rounding import down, sqrt_up, up
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import measures_of
from proxy.query.analyse.spread import spread_weight
from proxy.query.catalog import Mechanism
from proxy.query.errors import InvalidParameter
from proxy.query.price.quantiles import JointSpec, QuantileSpec, calibrate_all

Composition = Literal["parallel", "sequential"]


@dataclass(frozen=True, slots=True)
class NoiseSpec:
    """The noise added to one measure: all values in grid units (value = grid · x)."""

    measure: int  # index into Analysis.measures
    mechanism: Mechanism
    scale: float  # Laplace b or Gaussian σ
    sensitivity: float  # L1 (Laplace) or L2 (Gaussian) over the whole release
    grid: int
    ci95: float  # half-width of the 95% interval of the noise


@dataclass(frozen=True, slots=True)
class Selection:
    """Private partition selection: release a group iff distinct units + noise of `scale` >= threshold.

    Laplace noise (`scale` = b, pure `epsilon` = L0/b) for Laplace queries; discrete Gaussian noise
    (`scale` = σ) for Gaussian queries, whose counts are accounted with the query's other Gaussians
    (`epsilon` 0 here: GaussianThresholdEvent, docs/privacy.md §8.5).
    """

    scale: float
    threshold: int
    epsilon: float
    delta: float
    mechanism: Mechanism = "laplace"


@dataclass(frozen=True, slots=True)
class Price:
    mechanism: Mechanism
    noise: tuple[NoiseSpec, ...]
    selection: Selection | None
    event: Event
    epsilon: float  # the charge under basic composition
    delta: float
    gaussian_delta: float  # δ at which the Gaussian part is converted to (ε, δ)
    composition: Composition
    quantiles: tuple[QuantileSpec | JointSpec, ...] = ()  # the exponential mechanisms of the quantile aggregates


def price_for_noise(
    analysis: Analysis, *, noise_multiplier: float, delta: float, mechanism: Mechanism, conversion: Conversion = "zcdp"
) -> Price:
    """The charge of a query whose noise is given instead of its ε: calibration read the other way.

    Every noised quantity gets noise of `noise_multiplier` times its sensitivity over the release: Laplace
    b_j = m·Δ1_j (so ε_j = 1/m), Gaussian σ_j = m·Δ2_j (so ρ_j = 1/(2m²), i.e. μ = 1/m for continuous noise),
    and private partition selection Laplace noise of scale m·L0. The charge is the exact privacy map of the
    resulting events, rounded up.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("orders", "cid", (ColumnSpec("cid", "BIGINT"),), max_rows=5)
        >>> a = analyse(parse("SELECT COUNT(*) FROM orders"), Catalog((t,)))
        >>> p = price_for_noise(a, noise_multiplier=4.0, delta=0.0, mechanism="laplace")
        >>> p.noise[0].scale, p.epsilon
        (20.0, 0.25)
    """
    if not (isinstance(noise_multiplier, int | float) and math.isfinite(noise_multiplier)
            and 1e-3 <= noise_multiplier <= 1e9):
        raise InvalidParameter(
            f"noise_multiplier must be a number in [0.001, 1e9], got {noise_multiplier!r}",
            parameter="noise_multiplier",
        )
    _check(1.0, delta, mechanism)
    return _price_at(analysis, 1.0, delta, mechanism, conversion, noise_multiplier=float(noise_multiplier))


def price(
    analysis: Analysis, *, epsilon: float, delta: float, mechanism: Mechanism, conversion: Conversion = "zcdp"
) -> Price:
    """Noise scales and the charge for `analysis` at the requested (ε, δ).

    Gaussian noise is calibrated, and its (ε, δ) computed, in zCDP (CKS20) or, with `conversion` "gdp" (a
    dataset under the gdp rule), through the proven μ-GDP bound of the discrete Gaussian and the exact GDP
    conversion (docs/privacy.md §8): μ(ε, δ) is split into μ_j with Σμ_j² <= μ², and σ_j inverts μ_Z.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("orders", "cid", (ColumnSpec("cid", "BIGINT"),
        ...     ColumnSpec("region", "VARCHAR", groupable=True, public_domain=("N", "S"))), max_groups=2)
        >>> a = analyse(parse("SELECT region, COUNT(*) FROM orders GROUP BY region"), Catalog((t,)))
        >>> p = price(a, epsilon=1.0, delta=1e-6, mechanism="laplace")
        >>> p.noise[0].sensitivity, p.noise[0].scale, p.epsilon, p.delta, p.composition
        (2, 2.0, 1.0, 0.0, 'sequential')
    """
    _check(epsilon, delta, mechanism)
    target = epsilon
    for _ in range(64):
        priced = _price_at(analysis, target, delta, mechanism, conversion)
        if priced.epsilon <= epsilon and priced.delta <= delta:
            return priced
        # each part is rounded up on its own (σ, ρ, the zCDP conversion), so their composition can overshoot
        # the request by a few ulps: aim a hair lower until the charge fits what was asked
        target = target * (1 - 2**-40)
    raise AssertionError(f"cannot price within epsilon={epsilon!r}, delta={delta!r}")  # unreachable in practice


def release_l0(analysis: Analysis) -> int:
    """How many released groups one unit can change: min(max_groups, d) for public partitions, d the number of
    cells of the domain product, else max_groups (docs/privacy.md §1, "L0 of the release").

    The rewrite still enforces max_groups groups per unit; only the d cells of the domain product are released
    (rows outside it are dropped, and no other cell is read: release/publish.py), so a unit's kept groups meet
    at most min(max_groups, d) of them. Private partitions keep max_groups: which groups exist is not public.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("p", "VARCHAR", groupable=True, public_domain=("a", "b"))), max_groups=8)
        >>> [release_l0(analyse(parse(f"SELECT {k}, COUNT(*) FROM t GROUP BY {k}"), Catalog((t,)))) for k in "pg"]
        [2, 8]
    """
    if analysis.partitions != "public" or not analysis.keys:
        return analysis.max_groups
    cells = math.prod(len(domain) for domain in analysis.domains)
    return max(1, min(analysis.max_groups, cells))  # no cell at all releases nothing: 1 is still an upper bound


def _price_at(
    analysis: Analysis, epsilon: float, delta: float, mechanism: Mechanism, conversion: Conversion = "zcdp", *,
    noise_multiplier: float | None = None,
) -> Price:
    """Price at a target ε, or, with `noise_multiplier`, at a given noise (scale = multiplier · sensitivity)."""
    l0 = release_l0(analysis)
    max_rows = analysis.table.max_rows
    private = analysis.partitions == "private"
    if delta == 0 and (private or mechanism == "gaussian"):
        why = "Gaussian noise" if mechanism == "gaussian" else "choosing which groups to release"
        raise InvalidParameter(
            f"this query needs delta > 0 for {why}; send a delta, or group by keys with a public domain",
            parameter="delta",
        )
    laplace_selection = private and mechanism == "laplace"
    noised = [j for j, m in enumerate(analysis.measures) if m.kind != "histogram"]  # quantiles are not noised
    n_quantiles = sum(a.kind == "quantile" for a in analysis.aggregates)
    parts = len(noised) + n_quantiles + (1 if laplace_selection else 0)
    share = _share(epsilon, parts)
    # each quantile takes an even share as a pure ε (the exponential mechanism); the rest is as before
    quantiles = _quantiles(analysis, share, noise_multiplier)
    epsilon = down(Fraction(epsilon) - n_quantiles * Fraction(share)) if n_quantiles else epsilon

    selection = None
    children: list[Event] = []
    if laplace_selection:
        selection_delta = delta
        # the distinct-unit counts have L1 sensitivity L0
        scale = laplace.scale_for(l0, share) if noise_multiplier is None else _noise(noise_multiplier, l0)
        cut = threshold.threshold_for(l0, scale, selection_delta)
        selection = Selection(
            scale, cut, laplace.epsilon(l0, scale), threshold.delta_of_threshold(l0, scale, cut)
        )
        children.append(ThresholdEvent(selection.epsilon, selection.delta))

    noise: list[NoiseSpec] = []
    gaussian_delta = 0.0
    uses = _weights(analysis)
    if mechanism == "laplace":
        # ε_j ∝ n_j^(1/3) minimises Σ n_j·Var_j/s_j² = Σ 2n_j/ε_j² subject to Σε_j = the measures' ε
        measures_epsilon = down(Fraction(share) * len(noised))
        epsilons = dict(zip(noised, _split(measures_epsilon, tuple(uses[j] ** (1 / 3) for j in noised), share),
                            strict=True))
        for j, measure in enumerate(analysis.measures):
            if measure.kind == "histogram":
                continue
            sensitivity = measure.release_l1(l0, max_rows)  # Δ1 = L0 · per-group sensitivity (§2), or the cap
            if not sensitivity:
                scale = 1.0
            elif noise_multiplier is None:
                scale = laplace.scale_for(sensitivity, epsilons[j])
            else:
                scale = _noise(noise_multiplier, sensitivity)
            noise.append(NoiseSpec(j, "laplace", scale, sensitivity, measure.grid, laplace.ci_halfwidth(scale)))
            children.append(LaplaceEvent(sensitivity, scale))
    elif noised or private:
        gaussian_delta = _share(delta, 2) if private else delta
        if conversion == "gdp":
            # μ-GDP composes as √Σμ_j²: split μ² exactly as ρ (∝ μ²) is split below
            total = Fraction(_gdp_mu(epsilon, gaussian_delta)) ** 2 if noise_multiplier is None else 1
        else:
            total = Fraction(zcdp.rho_for(epsilon, gaussian_delta)) if noise_multiplier is None else 1
        # ρ_j ∝ √n_j minimises Σ n_j·Var_j/s_j² = Σ n_j/(2ρ_j) subject to Σρ_j = ρ (zCDP adds); private
        # partitions add the distinct-unit counts as one more Gaussian part, of weight 1
        weights = tuple(math.sqrt(uses[j]) for j in noised) + ((1.0,) if private else ())
        split = _split(down(Fraction(total)), weights, _share(down(Fraction(total)), len(weights)))
        rhos: dict[int, float] = dict(zip(noised, split, strict=False))
        rhos[-1] = split[-1]  # the distinct-unit counts' part, read only when partitions are private

        def calibrated(sensitivity: float, part: float) -> float:
            if noise_multiplier is not None:
                sigma = _noise(noise_multiplier, sensitivity)
                if conversion == "gdp":
                    _check_gdp_sigma(sigma)
                return sigma
            if conversion == "gdp":
                return _gdp_sigma(sensitivity, _sqrt_down(Fraction(part)))
            return zcdp.sigma_for(sensitivity, part)

        if private:
            # Gaussian partition selection: noise σ on the distinct-unit counts (L2 sensitivity √L0), release
            # iff count + noise >= T, T the smallest threshold whose δ fits the other half of δ (§8.5)
            selection_delta = _share(delta, 2)
            sigma = calibrated(sqrt_up(l0), rhos[-1])
            cut = threshold.gaussian_threshold_for(l0, sigma, selection_delta)
            selection = Selection(
                sigma, cut, 0.0, threshold.gaussian_delta_of_threshold(l0, sigma, cut), "gaussian"
            )
            children.append(GaussianThresholdEvent(l0, sigma, cut))
        for j, measure in enumerate(analysis.measures):
            if measure.kind == "histogram":
                continue
            # Δ2 = √(L0 · s²) for per-group sensitivity s (§2): one upward rounding of the exact value
            sensitivity = sqrt_up(l0 * measure.sensitivity(max_rows) ** 2)
            if measure.cap:  # a capped unit's vector has L2 <= L1 <= cap (privacy.md §10.2)
                sensitivity = min(sensitivity, float(measure.cap))
            sigma = calibrated(sensitivity, rhos[j]) if sensitivity else 1.0
            noise.append(
                NoiseSpec(j, "gaussian", sigma, sensitivity, measure.grid, zcdp.ci_halfwidth(sigma))
            )
            children.append(GaussianEvent(sensitivity, sigma))

    children += [event for spec in quantiles for event in spec.events]
    per_partition = ComposedEvent(tuple(children))
    disjoint_groups = bool(analysis.keys) and analysis.disjoint
    # One group per unit: the release is the same mechanism on disjoint partitions, costing one (§3).
    event: Event = ParallelEvent((per_partition,)) if disjoint_groups else per_partition
    charged_epsilon, charged_delta = loss.epsilon_delta(event, gaussian_delta, conversion)
    return Price(
        mechanism=mechanism, noise=tuple(noise), selection=selection, event=event,
        epsilon=charged_epsilon, delta=charged_delta, gaussian_delta=gaussian_delta,
        composition="parallel" if disjoint_groups else "sequential", quantiles=quantiles,
    )


def _quantiles(analysis: Analysis, share: float, noise_multiplier: float | None) -> tuple[
        QuantileSpec | JointSpec, ...]:
    """Each quantile aggregate at per-group budget share / L0 (its L0 groups compose: L0 · share in all);
    several of one column together (quantiles.calibrate_all)."""
    l0 = release_l0(analysis)
    per_group = down(Fraction(share) / l0)
    quantiles = []
    for k, aggregate in enumerate(analysis.aggregates):
        if aggregate.kind == "quantile":
            (measure,) = measures_of(aggregate, analysis.table)
            quantiles.append((k, analysis.measures.index(measure), aggregate, measure.points))
    return calibrate_all(quantiles, per_group, max_rows=analysis.table.max_rows, max_groups=l0,
                         noise_multiplier=noise_multiplier)


def _weights(analysis: Analysis) -> tuple[int, ...]:
    """n_j: how many of the query's aggregates use measure j (AVG(x) and COUNT(x) share x's count).

    The noise split minimises Σ_aggregates Σ_(its measures j) Var_j / s_j², the expected squared error of
    each released aggregate in units of its sensitivity s_j. For AVG, (S + Z_S)/(N + Z_N) − S/N ≈
    (Z_S − (S/N)·Z_N)/N, and after centring |S/N| <= half the range, so both terms weigh alike in the worst
    case: AVG counts once for its centred sum and once for its count.
    """
    uses = [0] * len(analysis.measures)
    for aggregate in analysis.aggregates:
        for measure in measures_of(aggregate, analysis.table):
            uses[analysis.measures.index(measure)] += spread_weight(aggregate, measure)
    return tuple(max(1, n) for n in uses)


def _split(whole: float, weights: tuple[float, ...], equal: float) -> tuple[float, ...]:
    """`whole` split in proportion to `weights`, each part rounded down so they never add to more.

    Equal weights give `equal` for every part (the even share, as `_share` computes it).

    Example:
        >>> _split(1.0, (1.0, 1.0), 0.5)
        (0.5, 0.5)
        >>> parts = _split(0.3, (2 ** (1 / 3), 1.0), 0.15)
        >>> [round(x, 4) for x in parts], sum(map(Fraction, parts)) <= Fraction(0.3)
        ([0.1673, 0.1327], True)
    """
    if len(set(weights)) <= 1:
        return (equal,) * len(weights)
    total = sum(weights)
    parts = [down(Fraction(whole) * Fraction(w) / Fraction(total)) for w in weights]
    while sum(map(Fraction, parts), Fraction(0)) > Fraction(whole):  # rounding of the weights themselves
        parts = [math.nextafter(x, 0.0) for x in parts]
    return tuple(parts)




def _share(whole: float, parts: int) -> float:
    """The largest float x with parts · x <= whole exactly: shares never add up to more than the whole.

    Example:
        >>> _share(0.5, 1), _share(1.0, 2), 3 * Fraction(_share(0.1, 3)) <= Fraction(0.1)
        (0.5, 0.5, True)
    """
    share = whole / parts
    while parts * Fraction(share) > Fraction(whole):
        share = math.nextafter(share, 0.0)
    return share


def _noise(multiplier: float, sensitivity: float) -> float:
    """multiplier · sensitivity, rounded up: the noise is never below what was asked."""
    return up(Fraction(multiplier) * Fraction(sensitivity))


def _down(value: float) -> float:
    """One float below `value`: a remainder that must not round up past the whole."""
    return math.nextafter(value, 0.0)


def _sqrt_down(exact: Fraction) -> float:
    """The largest float whose square is <= `exact`."""
    root = math.sqrt(float(exact))
    while root > 0 and Fraction(root) ** 2 > exact:
        root = math.nextafter(root, 0.0)
    while Fraction(above := math.nextafter(root, math.inf)) ** 2 <= exact:
        root = above
    return root


def _gdp_mu(epsilon: float, delta: float) -> float:
    """μ(ε, δ) of GDP (`gdp.mu_for`), or a clear refusal where the δ(ε) curve is not computed precisely."""
    if epsilon < gdp.MIN_BUDGET_EPSILON:
        raise InvalidParameter(
            f"Gaussian noise under accounting = \"gdp\" needs epsilon >= {gdp.MIN_BUDGET_EPSILON} for its part of "
            f"the query, got {epsilon!r}", parameter="epsilon",
        )
    return gdp.mu_for(epsilon, delta)


def _gdp_message(sigma: float) -> str:
    return (
        f"this query needs discrete Gaussian noise of sigma {sigma:.6g} grid units, outside "
        f"[{gdp_bound.SIGMA_MIN}, {gdp_bound.SIGMA_MAX}] where its μ-GDP bound is proven "
        '(docs/privacy.md §8); this dataset accounts with "gdp": use mechanism "laplace" or a larger epsilon'
    )


def _check_gdp_sigma(sigma: float) -> None:
    if not gdp_bound.SIGMA_MIN <= sigma <= gdp_bound.SIGMA_MAX:
        raise InvalidParameter(_gdp_message(sigma), parameter="epsilon", sigma=sigma)


def _gdp_sigma(sensitivity: float, mu: float) -> float:
    """The σ whose proven μ_Z fits `mu` (`discrete_gaussian.sigma_for`), or a clear refusal outside the range."""
    estimate = sensitivity / mu  # σ >= Δ2/μ: c(σ) > 1
    if estimate > gdp_bound.SIGMA_MAX:
        raise InvalidParameter(_gdp_message(estimate), parameter="epsilon", sigma=estimate)
    try:
        return gdp_bound.sigma_for(sensitivity, mu)
    except ValueError as err:
        raise InvalidParameter(_gdp_message(estimate), parameter="epsilon", sigma=estimate) from err


def _check(epsilon: float, delta: float, mechanism: str) -> None:
    if not (isinstance(epsilon, int | float) and math.isfinite(epsilon) and epsilon >= 1e-6):
        raise InvalidParameter(f"epsilon must be a finite number >= 1e-6, got {epsilon!r}", parameter="epsilon")
    if not (isinstance(delta, int | float) and math.isfinite(delta) and 0 <= delta < 1e-3):
        raise InvalidParameter(f"delta must be in [0, 0.001), got {delta!r}", parameter="delta")
    if delta != 0 and delta < 1e-300:
        raise InvalidParameter(f"delta {delta!r} is too small to be meaningful", parameter="delta")
    if mechanism not in ("laplace", "gaussian"):
        raise InvalidParameter(f"mechanism must be 'laplace' or 'gaussian', got {mechanism!r}", parameter="mechanism")
