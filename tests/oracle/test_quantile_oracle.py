"""The neighbouring-dataset oracle for the quantile aggregates (MEDIAN, QUANTILE_CONT, MIN, MAX, …).

Run the rewritten SQL on D and on D minus one unit (same salt: every other unit keeps the same rows), read
each group's histogram, and check, for any data (heavy units, extreme values, NaN, ±inf, NULL, a unit-level
column that is not constant per unit):
- the removed unit only removes rows: at most max_rows per group, in at most L0 groups;
- each candidate's score d_i moves by at most Δ = max(q, 1 − q)·max_rows (the score's sensitivity);
- the exact output distribution of the released values, over all groups, moves by at most the ε charged
  (the product of per-group likelihood ratios, worst outcome per group).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mechanisms import dp_quantile
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.price.quantiles import counts
from tests.support import oracle_db

TABLE = TableSchema(
    name="t",
    privacy_unit="uid",
    columns=(
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("g", "VARCHAR", groupable=True),
        ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True),
        ColumnSpec("p", "VARCHAR", groupable=True, public_domain=("a", "b")),
        ColumnSpec("x", "DOUBLE", bounds=(-3.0, 5.5)),
        ColumnSpec("n", "INTEGER", bounds=(0, 10)),
    ),
    max_groups=2,
    max_rows=3,
)
CATALOG = Catalog((TABLE,))

QUERIES = [
    "SELECT MEDIAN(x) FROM t",
    "SELECT MIN(n), MAX(n), QUANTILE_CONT(x, 0.9) FROM t WHERE n > 2",
    "SELECT g, MEDIAN(x), PERCENTILE_CONT(0.25) WITHIN GROUP (ORDER BY n), COUNT(*) FROM t GROUP BY g",
    "SELECT r, APPROX_QUANTILE(x, 0.1), SUM(x), MAX(x) FROM t GROUP BY r",
    "SELECT p, MEDIAN(n), AVG(x) FROM t GROUP BY p",
]

values = st.one_of(
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.floats(min_value=-10, max_value=10),
)
rows = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["N", "S", "E"]),  # deliberately NOT constant per unit
        st.sampled_from(["a", "b", "z", None]),
        values,
        st.one_of(st.none(), st.integers(-(2**31), 2**31 - 1), st.integers(-2, 12)),
    ),
    max_size=40,
)


def _run(sql: str, data: list[tuple[object, ...]], n_keys: int) -> dict[tuple[object, ...], tuple[object, ...]]:
    return oracle_db.run(sql, {"t": ("uid BIGINT, g VARCHAR, r VARCHAR, p VARCHAR, x DOUBLE, n INTEGER", data)}, n_keys)


def _log_ratio(p: tuple[float, ...], r: tuple[float, ...]) -> float:
    return max(abs(math.log(a / b)) for a, b in zip(p, r, strict=True))


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=oracle_db.examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 5), salt=st.integers(0, 2**62))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1)
@example(data=[(0, "a", "N", "a", 5.5, 10)] * 9 + [(1, "a", "N", "a", -3.0, 0)] * 9, removed=1, salt=2)
def test_removing_a_unit_moves_scores_and_outputs_within_the_charge(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=salt)
    analysis, price = planned.analysis, planned.price
    n_keys = len(analysis.keys)
    big = _run(planned.sql, data, n_keys)
    small = _run(planned.sql, [row for row in data if row[0] != removed], n_keys)
    cells = set(big) | set(small)
    assert price.quantiles
    total_loss = 0.0
    for spec in price.quantiles:
        measure = analysis.measures[spec.measure]
        changed = 0
        for cell in cells:
            h_big = counts(big[cell][1 + spec.measure] if cell in big else None, measure.points)
            h_small = counts(small[cell][1 + spec.measure] if cell in small else None, measure.points)
            assert all(a >= b for a, b in zip(h_big, h_small, strict=True))  # removal only removes rows
            removed_rows = sum(h_big) - sum(h_small)
            assert removed_rows <= TABLE.max_rows
            changed += removed_rows > 0
            delta = dp_quantile.score_sensitivity(spec.q, TABLE.max_rows)
            moves = [abs(a - b) for a, b in zip(dp_quantile.rank_distances(h_big, spec.q),
                                                dp_quantile.rank_distances(h_small, spec.q), strict=True)]
            assert max(moves) <= delta
            if removed_rows:
                p = dp_quantile.output_distribution(h_big, spec.q, spec.epsilon, TABLE.max_rows)
                r = dp_quantile.output_distribution(h_small, spec.q, spec.epsilon, TABLE.max_rows)
                total_loss += _log_ratio(p, r)
        assert changed <= analysis.max_groups
    # the released quantiles' worst-case loss never exceeds the whole query's charge
    assert total_loss <= price.epsilon * (1 + 1e-9)


def test_the_charge_is_the_pure_epsilon_of_the_exponential_mechanisms() -> None:
    planned = plan("SELECT p, MEDIAN(x), QUANTILE_CONT(n, 0.9) FROM t GROUP BY p", CATALOG, epsilon=1.0, delta=0.0,
                   mechanism="laplace")
    price = planned.price
    assert price.composition == "sequential" and len(price.quantiles) == 2
    # two parts, ε/2 each, spread over L0 = 2 groups: ε_group = 1/4; T = 2Δ/ε_group
    median, p90 = price.quantiles
    assert median.scale == pytest.approx(2 * 1.5 / 0.25, rel=1e-15)
    assert p90.scale == pytest.approx(2 * 0.9 * 3 / 0.25, rel=1e-15)
    assert median.event.sensitivity / median.event.scale == pytest.approx(0.5, rel=1e-15)
    assert price.epsilon <= 1.0 and price.epsilon == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("conversion", ["zcdp", "gdp"])
def test_gaussian_queries_charge_quantiles_as_pure_epsilon_beside_the_gaussians(conversion: str) -> None:
    planned = plan("SELECT p, MEDIAN(x), COUNT(n), COUNT(*) FROM t GROUP BY p", CATALOG, epsilon=1.0, delta=1e-6,
                   mechanism="gaussian", conversion=conversion)  # type: ignore[arg-type]
    price = planned.price
    (median,) = price.quantiles
    assert len(price.noise) == 2 and all(n.mechanism == "gaussian" for n in price.noise)
    # three parts: the median takes ε/3 as a pure ε over its L0 = 2 groups, the Gaussians the rest
    assert median.event.sensitivity / median.event.scale == pytest.approx(1 / 3, rel=1e-12)
    assert price.epsilon <= 1.0 and price.delta <= 1e-6
    assert price.epsilon == pytest.approx(1.0, rel=1e-6)
