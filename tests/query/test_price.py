"""Pricing: parallel composition for disjoint GROUP BYs, L1/L2 sensitivity otherwise, exact events."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accountant import loss
from accountant.events import ComposedEvent, GaussianEvent, LaplaceEvent, ParallelEvent, ThresholdEvent
from mechanisms import laplace, threshold
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import InvalidParameter
from proxy.query.planner import plan
from tests.support.catalogs import CATALOG


def _domain_catalog(k: int, *, unit_level: bool, max_groups: int = 5) -> Catalog:
    domain = tuple(f"g{i}" for i in range(k))
    table = TableSchema(
        "t", "uid",
        (ColumnSpec("uid", "BIGINT"),
         ColumnSpec("g", "VARCHAR", groupable=True, unit_level=unit_level, public_domain=domain)),
        max_groups=max_groups, max_rows=7,
    )
    return Catalog((table,))


@pytest.mark.parametrize("k", [1, 2, 10, 1000])
def test_disjoint_group_by_costs_one_group_for_any_number_of_groups(k: int) -> None:
    catalog = _domain_catalog(k, unit_level=True)
    grouped = plan("SELECT g, COUNT(*) FROM t GROUP BY g", catalog, epsilon=0.3, delta=0.0, mechanism="laplace")
    single = plan("SELECT COUNT(*) FROM t", catalog, epsilon=0.3, delta=0.0, mechanism="laplace")
    assert grouped.price.composition == "parallel"
    assert grouped.price.event == ParallelEvent((ComposedEvent((LaplaceEvent(7, grouped.price.noise[0].scale),)),))
    assert grouped.price.noise[0].sensitivity == 7  # max_rows, one group per unit
    assert grouped.price.epsilon == single.price.epsilon <= 0.3
    assert grouped.price.noise[0].scale == single.price.noise[0].scale


@pytest.mark.parametrize("max_groups", [2, 5])
def test_row_level_group_by_charges_through_l1_sensitivity(max_groups: int) -> None:
    catalog = _domain_catalog(4, unit_level=False, max_groups=max_groups)
    p = plan("SELECT g, COUNT(*) FROM t GROUP BY g", catalog, epsilon=0.5, delta=0.0, mechanism="laplace")
    assert p.price.composition == "sequential"
    l0 = min(max_groups, 4)  # the domain has 4 cells: a unit changes at most min(g, d) released groups
    assert p.price.noise[0].sensitivity == l0 * 7  # Δ1 = L0 · max_rows
    assert p.price.noise[0].scale == laplace.scale_for(l0 * 7, 0.5)
    assert p.price.epsilon <= 0.5


def test_gaussian_uses_l2_sensitivity() -> None:
    catalog = _domain_catalog(4, unit_level=False, max_groups=4)
    p = plan("SELECT g, COUNT(*) FROM t GROUP BY g", catalog, epsilon=0.5, delta=1e-7, mechanism="gaussian")
    (event,) = p.price.event.events  # type: ignore[union-attr]
    assert isinstance(event, GaussianEvent)
    assert event.sensitivity >= 2 * 7 and event.sensitivity == pytest.approx(14, rel=1e-15)  # √4 · 7
    assert p.price.epsilon <= 0.5 and p.price.delta == 1e-7


def test_several_aggregates_split_the_budget_sequentially() -> None:
    p = plan("SELECT COUNT(*), SUM(amount), AVG(duration_s) FROM visits", CATALOG,
             epsilon=0.9, delta=0.0, mechanism="laplace")
    assert len(p.price.noise) == 4  # rows, sum, centred sum, values
    events = p.price.event.events  # type: ignore[union-attr]
    assert all(isinstance(e, LaplaceEvent) for e in events)
    parts = [e.sensitivity / e.scale for e in events]  # type: ignore[union-attr]
    assert all(part <= 0.9 / 4 for part in parts)
    assert p.price.epsilon <= 0.9


def test_private_partitions_charge_threshold_delta() -> None:
    p = plan("SELECT page, COUNT(*) FROM visits GROUP BY page", CATALOG,
             epsilon=1.0, delta=1e-6, mechanism="laplace")
    selection = p.price.selection
    assert selection is not None
    l0 = 3
    assert selection.threshold == threshold.threshold_for(l0, selection.scale, 1e-6)
    assert selection.delta <= 1e-6
    assert ThresholdEvent(selection.epsilon, selection.delta) in p.price.event.events  # type: ignore[union-attr]
    assert p.price.delta == selection.delta and p.price.epsilon <= 1.0


@pytest.mark.parametrize(("epsilon", "delta", "mechanism"), [
    (float("nan"), 0.0, "laplace"), (float("inf"), 0.0, "laplace"), (-1.0, 0.0, "laplace"),
    (5e-324, 0.0, "laplace"), (0.1, 0.0, "gaussian"), (0.1, 1e-2, "laplace"), (0.1, float("nan"), "laplace"),
])
def test_invalid_parameters_are_refused(epsilon: float, delta: float, mechanism: str) -> None:
    with pytest.raises(InvalidParameter):
        plan("SELECT COUNT(*) FROM visits", CATALOG, epsilon=epsilon, delta=delta, mechanism=mechanism)  # type: ignore[arg-type]


def test_private_partitions_need_delta() -> None:
    with pytest.raises(InvalidParameter, match="delta > 0"):
        plan("SELECT page, COUNT(*) FROM visits GROUP BY page", CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace")


# --- the noise split across measures ---------------------------------------------------------------------


def _epsilons(p: object) -> list[float]:
    return [e.sensitivity / e.scale for e in p.price.event.events]  # type: ignore[attr-defined]


def test_a_count_shared_by_two_aggregates_gets_a_larger_share_of_epsilon() -> None:
    # COUNT(amount) and AVG(amount) share the values count (n = 2); the centred sum serves AVG only (n = 1):
    # ε_j ∝ n_j^(1/3) minimises Σ n_j·2/ε_j² (docs/privacy.md §3)
    p = plan("SELECT COUNT(amount) AS n, AVG(amount) AS a FROM visits", CATALOG,
             epsilon=0.9, delta=0.0, mechanism="laplace")
    kinds = [m.kind for m in p.analysis.measures]
    assert sorted(kinds) == ["centred_sum", "values"]
    shares = dict(zip(kinds, _epsilons(p), strict=True))
    assert shares["values"] / shares["centred_sum"] == pytest.approx(2 ** (1 / 3), rel=1e-9)
    assert sum(map(Fraction, shares.values())) <= Fraction(0.9) and p.price.epsilon <= 0.9

    def objective(eps: dict[str, float]) -> float:
        return 2 * 2 / eps["values"] ** 2 + 2 / eps["centred_sum"] ** 2

    assert objective(shares) < objective({"values": 0.45, "centred_sum": 0.45})  # better than an even split


def test_gaussian_rho_is_split_in_proportion_to_the_square_root_of_uses() -> None:
    p = plan("SELECT COUNT(amount) AS n, AVG(amount) AS a FROM visits", CATALOG,
             epsilon=0.9, delta=1e-7, mechanism="gaussian")
    rhos = {m.kind: e.sensitivity**2 / (2 * e.sigma**2)  # type: ignore[union-attr]
            for m, e in zip(p.analysis.measures, p.price.event.events, strict=True)}  # type: ignore[union-attr]
    assert rhos["values"] / rhos["centred_sum"] == pytest.approx(math.sqrt(2), rel=1e-6)
    assert p.price.epsilon <= 0.9 and p.price.delta <= 1e-7


QUERIES = [
    "SELECT COUNT(*) FROM visits",
    "SELECT COUNT(amount), AVG(amount), SUM(duration_s) FROM visits",
    "SELECT region, AVG(delta_x), COUNT(delta_x) FROM visits GROUP BY region",
    "SELECT page, COUNT(*), AVG(amount) FROM visits GROUP BY page",
    "SELECT age, COUNT(DISTINCT user_id), AVG(age) FROM visits GROUP BY age",
]


@settings(max_examples=80, deadline=None)
@given(
    st.sampled_from(QUERIES),
    st.floats(min_value=1e-3, max_value=5.0),
    st.floats(min_value=1e-12, max_value=9e-4),
    st.sampled_from(["laplace", "gaussian"]),
)
def test_calibration_never_charges_more_than_asked(sql: str, epsilon: float, delta: float, mechanism: str) -> None:
    p = plan(sql, CATALOG, epsilon=epsilon, delta=delta, mechanism=mechanism)  # type: ignore[arg-type]
    assert p.price.epsilon <= epsilon and p.price.delta <= delta
    # and re-accounting the stored event gives the same charge: the event is all a ledger needs
    assert loss.epsilon_delta(p.price.event, p.price.gaussian_delta) == (p.price.epsilon, p.price.delta)
