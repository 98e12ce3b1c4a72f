"""Pricing: parallel composition for disjoint GROUP BYs, L1/L2 sensitivity otherwise, exact events."""

from __future__ import annotations

import pytest

from accountant.events import ComposedEvent, GaussianEvent, LaplaceEvent, ParallelEvent, ThresholdEvent
from mechanisms import laplace, threshold
from proxy.query import plan
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import InvalidParameter
from tests.catalogs import CATALOG


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
    assert p.price.noise[0].sensitivity == max_groups * 7  # Δ1 = L0 · max_rows
    assert p.price.noise[0].scale == laplace.scale_for(max_groups * 7, 0.5)
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
