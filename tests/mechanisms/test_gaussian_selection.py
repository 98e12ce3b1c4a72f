"""Gaussian partition selection: the δ of its threshold against mpmath, and a Gaussian query with private keys
priced and accounted in one (Gaussian) family under zcdp and gdp (docs/privacy.md §8.5)."""

from __future__ import annotations

import mpmath
import pytest

from accountant.events import ComposedEvent, GaussianThresholdEvent, ThresholdEvent, from_json, to_json
from accountant.loss import approximate_mu, approximate_rho, epsilon_delta
from mechanisms import threshold
from proxy.query.analyse.analysis import analyse
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.price.charge import price


def _mp_tail(n: int, sigma: float) -> mpmath.mpf:
    with mpmath.workdps(50):
        s = mpmath.mpf(sigma)
        norm = mpmath.sqrt(2 * mpmath.pi) * s * mpmath.nsum(
            lambda m: mpmath.exp(-2 * mpmath.pi**2 * s * s * m * m), [-mpmath.inf, mpmath.inf])
        return mpmath.nsum(lambda j: mpmath.exp(-j * j / (2 * s * s)), [n, mpmath.inf]) / norm


@pytest.mark.parametrize(("max_groups", "sigma", "cut"), [(1, 0.7, 4), (1, 2.0, 12), (3, 5.0, 30), (8, 40.0, 250)])
def test_gaussian_threshold_delta_is_an_upper_bound_and_tight(max_groups: int, sigma: float, cut: int) -> None:
    ours = threshold.gaussian_delta_of_threshold(max_groups, sigma, cut)
    exact = max_groups * _mp_tail(cut - 1, sigma)
    assert exact <= ours <= exact * (1 + 1e-9)  # tight to the float evaluation


@pytest.mark.parametrize(("max_groups", "sigma", "delta"), [(1, 2.0, 1e-6), (4, 10.0, 1e-9), (2, 123.4, 5e-8)])
def test_gaussian_threshold_is_the_smallest_that_fits(max_groups: int, sigma: float, delta: float) -> None:
    cut = threshold.gaussian_threshold_for(max_groups, sigma, delta)
    assert threshold.gaussian_delta_of_threshold(max_groups, sigma, cut) <= delta
    assert cut == 2 or threshold.gaussian_delta_of_threshold(max_groups, sigma, cut - 1) > delta


TABLE = TableSchema(
    "t", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("page", "VARCHAR", groupable=True)), max_groups=3, max_rows=2
)


@pytest.mark.parametrize("conversion", ["zcdp", "gdp"])
def test_a_gaussian_query_with_private_keys_is_accounted_in_one_family(conversion: str) -> None:
    a = analyse(parse("SELECT page, COUNT(*) FROM t GROUP BY page"), Catalog((TABLE,)))
    p = price(a, epsilon=1.0, delta=1e-6, mechanism="gaussian", conversion=conversion)  # type: ignore[arg-type]
    assert p.selection is not None and p.selection.mechanism == "gaussian"
    events = p.event.events  # type: ignore[union-attr]
    (selection,) = [e for e in events if isinstance(e, GaussianThresholdEvent)]
    assert not any(isinstance(e, ThresholdEvent) for e in events)
    assert selection == GaussianThresholdEvent(3, p.selection.scale, p.selection.threshold)
    assert p.epsilon <= 1.0 and p.delta <= 1e-6 and p.selection.delta <= 5e-7
    assert epsilon_delta(p.event, p.gaussian_delta, conversion) == (p.epsilon, p.delta)  # type: ignore[arg-type]
    mu, delta_sel = approximate_mu(p.event)
    rho, same = approximate_rho(p.event)
    assert delta_sel == same == p.selection.delta and mu > 0 and rho > 0
    assert from_json(to_json(p.event)) == p.event


def test_a_laplace_query_keeps_the_laplace_threshold() -> None:
    a = analyse(parse("SELECT page, COUNT(*) FROM t GROUP BY page"), Catalog((TABLE,)))
    p = price(a, epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert p.selection is not None and p.selection.mechanism == "laplace"
    assert any(isinstance(e, ThresholdEvent) for e in p.event.events)  # type: ignore[union-attr]


def test_selection_counts_pool_with_the_measures() -> None:
    # the counts are a Gaussian of L2 sensitivity √L0: ρ = L0/(2σ²) joins the measures' ρ
    event = ComposedEvent((GaussianThresholdEvent(2, 4.0, 30),))
    rho, delta = approximate_rho(event)
    assert rho >= 2 / 32 and rho == pytest.approx(2 / 32, rel=1e-15)
    assert delta == threshold.gaussian_delta_of_threshold(2, 4.0, 30)
