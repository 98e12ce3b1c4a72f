"""`mechanism = "auto"` (issue #29 item 7, docs/privacy.md §2.1): each query runs with the mechanism whose plan
has the narrower error bars, decided from the request and the policy alone."""

from __future__ import annotations

import math

import mpmath
import pytest

from proxy.cli.demo import DemoFiles
from proxy.policy.dataset import DatasetPolicy
from proxy.policy.load import load_policy
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.mechanism_choice import expected_error, plan_by_error, plan_with
from proxy.query.planner import plan

DAYS = tuple(f"d{i:03}" for i in range(365))


def catalog(max_groups: int, *, domain: bool = True) -> Catalog:
    columns = (ColumnSpec("u", "BIGINT"),
               ColumnSpec("day", "VARCHAR", groupable=True, public_domain=DAYS if domain else None),
               ColumnSpec("a", "DOUBLE", bounds=(0.0, 10.0)))
    return Catalog((TableSchema("v", "u", columns, max_rows=5, max_groups=max_groups),))


SERIES = "SELECT day, COUNT(*) AS n FROM v GROUP BY day"


def test_the_error_of_a_laplace_count_is_its_95_percent_half_width() -> None:
    """One COUNT, Δ1 = 5 at ε = 0.5: b = 10 grid units; the discrete Laplace's P[|Z| > k] = 2q^(k+1)/(1 + q),
    q = e^(−1/b), is first ≤ 5 % at k = 30, and the score is ln 30."""
    priced = plan("SELECT COUNT(*) FROM v", catalog(1), epsilon=0.5, delta=0.0, mechanism="laplace").price
    (spec,) = priced.noise
    q = mpmath.exp(mpmath.mpf(-1) / 10)
    tail = [2 * q ** (k + 1) / (1 + q) for k in (29, 30)]
    assert spec.scale == 10.0 and spec.ci95 == 30 and tail[0] > mpmath.mpf("0.05") >= tail[1]
    assert expected_error(priced) == math.log(30)


def test_the_score_is_the_mean_log_width_of_every_noisy_quantity_threshold_included() -> None:
    priced = plan(SERIES, catalog(4, domain=False), epsilon=0.5, delta=1e-8, mechanism="laplace").price
    assert priced.selection is not None
    widths = [spec.ci95 for spec in priced.noise] + [priced.selection.threshold]
    assert expected_error(priced) == pytest.approx(sum(math.log(w) for w in widths) / len(widths), rel=1e-15)


@pytest.mark.parametrize("domain", [True, False])
@pytest.mark.parametrize("epsilon", [0.1, 1.0])
def test_the_choice_is_the_plan_with_the_smaller_error_and_it_crosses_over_with_the_groups_per_unit(
    domain: bool, epsilon: float
) -> None:
    """Laplace grows with g (L1), the Gaussian with √g (L2): one group per unit is Laplace's, many are the
    Gaussian's, and at every g the choice is exactly the argmin of the two plans' scores."""
    chosen = []
    for groups in (1, 2, 4, 8, 16, 32, 64, 128):
        c = catalog(groups, domain=domain)
        both = {m: plan(SERIES, c, epsilon=epsilon, delta=1e-8, mechanism=m) for m in ("laplace", "gaussian")}
        best = min(both, key=lambda m: (expected_error(both[m].price), m != "laplace"))
        picked = plan_by_error(SERIES, c, epsilon=epsilon, delta=1e-8)
        assert picked.price == both[best].price  # the very plan, not a re-pricing
        chosen.append(picked.price.mechanism)
    assert chosen[0] == "laplace" and chosen[-1] == "gaussian"
    assert chosen == sorted(chosen, key=("laplace", "gaussian").index)  # one crossover, no flip-flop


def test_without_delta_or_with_a_given_noise_it_is_laplace() -> None:
    c = catalog(128)
    assert plan_by_error(SERIES, c, epsilon=0.1, delta=0.0).price.mechanism == "laplace"
    assert plan(SERIES, c, epsilon=0.1, delta=1e-8, mechanism="gaussian").price.mechanism == "gaussian"
    given = plan_by_error(SERIES, c, epsilon=0.1, delta=1e-8, noise_multiplier=10.0)
    assert given.price.mechanism == "laplace" and given.price.noise[0].scale == 10.0 * 128 * 5


def test_a_gaussian_the_gdp_rule_cannot_calibrate_is_no_candidate() -> None:
    """Under gdp a σ beyond the proven range is refused when priced; auto then runs Laplace rather than fail."""
    sql = "SELECT day, SUM(a) AS s FROM v GROUP BY day"
    with pytest.raises(Exception, match="proven"):
        plan(sql, catalog(128), epsilon=0.01, delta=1e-8, mechanism="gaussian", conversion="gdp")
    assert plan_by_error(sql, catalog(128), epsilon=0.01, delta=1e-8, conversion="gdp").price.mechanism == "laplace"


def test_a_named_mechanism_is_planned_as_named() -> None:
    c = catalog(128)
    for m in ("laplace", "gaussian"):
        assert plan_with(SERIES, c, mechanism=m, epsilon=0.1, delta=1e-8).price == plan(
            SERIES, c, mechanism=m, epsilon=0.1, delta=1e-8).price


def test_refusals_are_the_laplace_plans_own() -> None:
    with pytest.raises(Exception, match="GROUP BY the privacy unit"):
        plan_by_error("SELECT u, COUNT(*) FROM v GROUP BY u", catalog(1), epsilon=0.1, delta=1e-8)


def test_a_dataset_may_declare_auto_and_nothing_else_new() -> None:
    DatasetPolicy("d", __file__, catalog(1), mechanism="auto")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="auto"):
        DatasetPolicy("d", __file__, catalog(1), mechanism="exponential")  # type: ignore[arg-type]


def test_the_readmes_figures_on_the_demo_policy(demo: DemoFiles) -> None:
    """README, *Laplace or Gaussian, by error*: at ε = 0.1 on the demo's policy a daily series' bars are 1.8×
    narrower with the Gaussian, a count by region's 3.2× narrower with Laplace, and auto picks accordingly."""
    dataset = load_policy(demo.policy).dataset("demo")
    assert dataset is not None

    def bars(sql: str) -> dict[str, float]:
        return {m: math.exp(expected_error(plan(sql, dataset.catalog, epsilon=0.1, delta=dataset.delta,
                                                mechanism=m, bounding=dataset.bounding).price))
                for m in ("laplace", "gaussian")}

    series, region = (bars("SELECT day, COUNT(*) FROM visits GROUP BY day"),
                      bars("SELECT region, COUNT(*) FROM visits GROUP BY region"))
    assert round(series["laplace"] / series["gaussian"], 1) == 1.8
    assert round(region["gaussian"] / region["laplace"], 1) == 3.2
    for sql, expected in (("SELECT day, COUNT(*) FROM visits GROUP BY day", "gaussian"),
                          ("SELECT region, COUNT(*) FROM visits GROUP BY region", "laplace")):
        assert plan_by_error(sql, dataset.catalog, epsilon=0.1, delta=dataset.delta,
                             bounding=dataset.bounding).price.mechanism == expected
