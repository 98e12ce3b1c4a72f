"""DP quantiles, MIN and MAX of a DATE column with declared date bounds (issue #15): the grid is the declared
days (measures.date_histogram), the answer a day as ISO text, and the neighbouring-dataset oracle holds for
any data (NULL days, days outside the bounds, a unit in many groups)."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mechanisms import dp_quantile
from mechanisms.sampling import FixedSampler
from proxy.query.analyse.measures import date_histogram
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.errors import PolicyError
from proxy.query.planner import plan
from proxy.query.price.quantiles import counts, point_value
from proxy.query.release.publish import release
from tests.support import oracle_db, scratch_db

TABLE = TableSchema(
    name="t",
    privacy_unit="uid",
    columns=(
        ColumnSpec("uid", "BIGINT"),
        ColumnSpec("g", "VARCHAR", groupable=True),
        ColumnSpec("d", "DATE", groupable=True, date_bounds=("2026-01-01", "2026-01-20")),
        ColumnSpec("free", "DATE"),
    ),
    max_groups=2,
    max_rows=3,
)
CATALOG = Catalog((TABLE,))
FIRST = dt.date(2026, 1, 1)

days = st.one_of(st.none(), st.integers(-40, 60).map(lambda k: FIRST + dt.timedelta(days=k)))
rows = st.lists(st.tuples(st.integers(0, 4), st.sampled_from(["a", "b", "c"]), days), max_size=30)


def _run(sql: str, data: list[tuple[object, ...]], n_keys: int) -> dict[tuple[object, ...], tuple[object, ...]]:
    return oracle_db.run(sql, {"t": ("uid BIGINT, g VARCHAR, d DATE, free DATE", data)}, n_keys)


def test_the_grid_is_every_declared_day_or_a_coarse_public_step() -> None:
    (day,) = [c for c in TABLE.columns if c.name == "d"]
    measure = date_histogram(day)
    assert (measure.lo, measure.hi, measure.points, measure.epoch) == (0, 19, 20, "2026-01-01")
    assert [point_value(measure, i) for i in (0, 19)] == ["2026-01-01", "2026-01-20"]
    wide = date_histogram(ColumnSpec("w", "DATE", date_bounds=("1950-01-01", "2049-12-31")))
    span = (dt.date(2049, 12, 31) - dt.date(1950, 1, 1)).days
    assert (wide.hi, wide.points) == (span, 10_001)
    # point i is the day nearest span·i/10 000 days after the first: public, and monotone in i
    assert point_value(wide, 5_000) == (dt.date(1950, 1, 1) + dt.timedelta(days=round(span / 2))).isoformat()
    assert point_value(wide, 10_000) == "2049-12-31"


def test_a_date_quantile_answers_a_day_and_the_fixed_sampler_the_true_one() -> None:
    data = [(u, "a", FIRST + dt.timedelta(days=u)) for u in range(10)]
    data += [(20, "a", None), (21, "a", dt.date(2030, 1, 1))]
    planned = plan("SELECT MIN(d) AS lo, MEDIAN(d) AS m, MAX(d) AS hi FROM t", CATALOG, epsilon=1.0, delta=0.0,
                   mechanism="laplace")
    con = scratch_db.connect()
    con.execute("CREATE TABLE t (uid BIGINT, g VARCHAR, d DATE, free DATE)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, NULL)", data)
    answer = release(con.execute(planned.sql).fetchall(), planned.analysis, planned.price, FixedSampler())
    # 11 dated rows (the day past the bounds clamps to the last day); the NULL day is no row
    assert answer.rows == (("2026-01-01", "2026-01-06", "2026-01-20"),)


def test_a_date_without_bounds_is_refused_with_a_hint() -> None:
    with pytest.raises(PolicyError) as refused:
        plan("SELECT MEDIAN(free) FROM t", CATALOG, epsilon=1.0, delta=0.0, mechanism="laplace")
    assert "date bounds" in str(refused.value) and "bounds = [first, last]" in refused.value.detail["hint"]


@pytest.mark.parametrize("query", [
    "SELECT g, MEDIAN(d), MAX(d), COUNT(*) FROM t GROUP BY g",
    "SELECT QUANTILE_CONT(d, 0.9) FILTER (WHERE g = 'a'), MIN(d) FROM t",
])
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 4), salt=st.integers(0, 2**62))
@example(data=[(0, g, FIRST) for g in "abc" for _ in range(5)] + [(1, "a", dt.date(2027, 1, 1))] * 4, removed=0,
         salt=1)
def test_removing_a_unit_moves_date_quantiles_within_the_charge(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int
) -> None:
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=salt)
    analysis, price = planned.analysis, planned.price
    n_keys = len(analysis.keys)
    big = _run(planned.sql, data, n_keys)
    small = _run(planned.sql, [row for row in data if row[0] != removed], n_keys)
    total_loss = 0.0
    for spec in price.quantiles:
        measure = analysis.measures[spec.measure]
        changed = 0
        for cell in set(big) | set(small):
            h_big = counts(big[cell][1 + spec.measure] if cell in big else None, measure.points)
            h_small = counts(small[cell][1 + spec.measure] if cell in small else None, measure.points)
            assert all(a >= b for a, b in zip(h_big, h_small, strict=True))
            gone = sum(h_big) - sum(h_small)
            assert gone <= TABLE.max_rows
            changed += gone > 0
            if gone:
                p = dp_quantile.output_distribution(h_big, spec.q, spec.epsilon, TABLE.max_rows)
                r = dp_quantile.output_distribution(h_small, spec.q, spec.epsilon, TABLE.max_rows)
                total_loss += max(abs(math.log(a / b)) for a, b in zip(p, r, strict=True))
        assert changed <= analysis.max_groups
    assert total_loss <= price.epsilon * (1 + 1e-9)


AUTO = TableSchema("t", "uid", TABLE.columns, max_groups=2, max_rows=6, auto_max_rows=True)


@pytest.mark.parametrize("query", ["SELECT MEDIAN(d) FROM t", "SELECT g, MIN(d), MEDIAN(d), MAX(d) FROM t GROUP BY g"])
@settings(max_examples=oracle_db.examples(5), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 4), salt=st.integers(0, 2**62), k=st.integers(1, 6))
@example(data=[(0, g, FIRST) for g in "abc" for _ in range(7)] + [(1, "a", dt.date(2027, 1, 1))] * 8, removed=0,
         salt=1, k=6)
def test_date_quantiles_on_an_auto_table_choose_max_rows_and_stay_within_the_charge_at_it(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int, k: int
) -> None:
    """A DATE column's day number is not an analyst's expression: its quantiles choose max_rows (the grid is the
    declared days, which no bound changes), and at any chosen k at most k rows of a unit leave a group and the
    output distributions (one mechanism, or the joint release's root) move within the part at the limits."""
    from proxy.query import auto_release
    from proxy.query.auto import bounds as auto

    planned = plan(query, Catalog((AUTO,)), epsilon=1.0, delta=1e-6, mechanism="laplace", salt=salt)
    assert planned.auto is not None and planned.auto.note is None
    assert [p.bound for p in planned.auto.parts] == ["max_rows"] and planned.auto.parts[0].relative
    at = auto_release.plan_at(planned, auto.ChosenBounds((), k, planned.analysis.max_groups))
    n_keys = len(at.analysis.keys)
    big = _run(at.sql, data, n_keys)
    small = _run(at.sql, [row for row in data if row[0] != removed], n_keys)
    (spec,) = at.price.quantiles
    (limits,) = planned.price.quantiles
    assert spec.max_rows == k and spec.events == limits.events
    q = getattr(spec, "q", None)
    epsilon = spec.epsilon if q is not None else spec.root_epsilon  # type: ignore[union-attr]
    assert epsilon <= (limits.epsilon if q is not None else limits.root_epsilon)  # type: ignore[union-attr]
    q = q if q is not None else spec.qs[1]  # type: ignore[union-attr]  # the joint release's root: the median
    measure = at.analysis.measures[spec.measure]
    for cell in set(big) | set(small):
        h_big = counts(big[cell][1 + spec.measure] if cell in big else None, measure.points)
        h_small = counts(small[cell][1 + spec.measure] if cell in small else None, measure.points)
        assert all(a >= b for a, b in zip(h_big, h_small, strict=True)) and sum(h_big) - sum(h_small) <= k
        p = dp_quantile.output_distribution(h_big, q, epsilon, k)
        r = dp_quantile.output_distribution(h_small, q, epsilon, k)
        assert max(abs(math.log(a / b)) for a, b in zip(p, r, strict=True)) <= float(epsilon) * (1 + 1e-9)
