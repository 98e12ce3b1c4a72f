"""Automatic bounds beyond Laplace counts and sums (docs/privacy.md §10.3–§10.5): discrete Gaussian noise at the
chosen bounds, quantiles at the chosen bounds, joins and computed keys (the neighbouring-dataset oracle over
the selection and the query at k, g), and the shapes answered at the declared limits (no selection, no
refusal)."""

from __future__ import annotations

import itertools
import math
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from accountant import loss
from accountant.events import AutoBoundsEvent, GaussianEvent
from mechanisms import dp_quantile, joint_quantiles, laplace
from mechanisms.gaussian import gdp_bound, zcdp
from proxy import pipeline
from proxy.app import build_env
from proxy.cli.demo import DemoFiles
from proxy.query import auto_release
from proxy.query.auto import bounds as auto
from proxy.query.auto import clamp as auto_clamp
from proxy.query.auto.gauss import sigma_at
from proxy.query.auto.histograms import standalone
from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
from proxy.query.planner import plan
from proxy.query.price.quantiles import JointSpec, counts
from proxy.query.rewrite import store_layout
from proxy.query.rewrite.render import DUCKDB
from proxy.schemas import QueryRequest
from proxy.settings import Settings
from tests.oracle.test_quantile_oracle import _log_ratio, _run
from tests.oracle.test_quantile_oracle import rows as quantile_rows
from tests.oracle.test_sensitivity import rows
from tests.query.test_auto_bounds import _laplace
from tests.query.test_auto_groups_clamp import AUTO, CATALOG, _distances, _first_parts
from tests.support import oracle_db, scratch_db
from tests.support.live import policy_copy


def _gaussians(event: object) -> list[GaussianEvent]:
    match event:
        case AutoBoundsEvent():
            return _gaussians(event.query)
        case GaussianEvent():
            return [event]
        case _ if hasattr(event, "events"):
            return [e for child in event.events for e in _gaussians(child)]  # type: ignore[attr-defined]
        case _:
            return []


GAUSSIAN_QUERIES = [
    "SELECT COUNT(*) FROM t",
    "SELECT g, COUNT(*), SUM(n) FROM t GROUP BY g",
    "SELECT p, g, COUNT(*), AVG(n) FROM t GROUP BY p, g",
]


@pytest.mark.parametrize("query", GAUSSIAN_QUERIES)
@pytest.mark.parametrize("conversion", ["zcdp", "gdp"])
def test_gaussian_noise_at_every_chosen_bound_costs_no_more_than_its_charged_event(query: str, conversion: str) -> None:
    """Charged at the limits; at every (k, g, clamp) the σ run has ρ and proven μ at most the charged event's,
    so every rule (basic, zcdp, gdp, the PLD report) reads the event as a bound of what ran."""
    planned = plan(query, CATALOG, epsilon=0.8, delta=1e-6, mechanism="gaussian", bounding="store",
                   conversion=conversion)  # type: ignore[arg-type]
    assert planned.auto is not None and planned.auto.parts and isinstance(planned.price.event, AutoBoundsEvent)
    assert planned.price.epsilon <= 0.8
    assert loss.epsilon_delta(planned.price.event, planned.price.gaussian_delta, conversion)[0] == planned.price.epsilon
    charged = _gaussians(planned.price.event)
    assert len(charged) == len(planned.price.noise)
    clamps = [(), (("n", 0.0, 1.0),), (("n", 0.0, 10.0),)] if "n)" in query else [()]
    groups = (1, 3) if planned.analysis.max_groups > 1 else (1,)
    for k, g, clamp in itertools.product((1, 2, 6), groups, clamps):
        analysis = auto.at_bound(planned.analysis, k, g, clamp)
        priced = auto.price_at(planned.price, analysis, k)  # what auto_release.plan_at runs, without the SQL
        assert priced.event == planned.price.event and priced.epsilon == planned.price.epsilon
        for spec, event in zip(priced.noise, charged, strict=True):
            measure = analysis.measures[spec.measure]
            assert spec.mechanism == "gaussian" and spec.sensitivity ** 2 >= g * measure.sensitivity(k) ** 2
            assert spec.sensitivity <= event.sensitivity
            assert zcdp.rho(spec.sensitivity, spec.scale) <= zcdp.rho(event.sensitivity, event.sigma)
            assert gdp_bound.mu(spec.sensitivity, spec.scale) <= gdp_bound.mu(event.sensitivity,
                                                                                               event.sigma)


def test_scaling_sigma_with_the_sensitivity_alone_would_break_the_gdp_charge() -> None:
    """The broken variant σ_k = σ_L·Δ_k/Δ_L keeps ρ but not the discrete Gaussian's proven μ (μ_Z(σ, 1)·σ falls
    as σ grows): sigma_at searches σ upward instead."""
    naive = 2000.0 * 1 / 1000
    assert gdp_bound.mu(1, naive) > gdp_bound.mu(1000, 2000.0)
    assert gdp_bound.mu(1, sigma_at(1, 1000, 2000.0)) <= gdp_bound.mu(1000, 2000.0)
    assert sigma_at(1, 1000, 2000.0) > naive


# --- quantiles at the chosen bounds ---------------------------------------------------------------------------

QUANTILE_QUERIES = [
    "SELECT MEDIAN(x) FROM t",
    "SELECT g, MEDIAN(x), COUNT(*) FROM t GROUP BY g",
    "SELECT r, QUANTILE_CONT(n, 0.9), MAX(x) FROM t GROUP BY r",
]


@pytest.mark.parametrize("query", QUANTILE_QUERIES)
@settings(max_examples=oracle_db.examples(4), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=quantile_rows, removed=st.integers(0, 5), salt=st.integers(0, 2**62), k=st.integers(1, 6),
       g=st.integers(1, 3))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1,
         k=6, g=3)
@example(data=[(0, "a", "N", "a", 5.5, 10)] * 9 + [(1, "a", "N", "a", -3.0, 0)] * 9, removed=1, salt=2, k=2, g=1)
def test_quantiles_at_the_chosen_bounds_move_within_the_charge(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int, k: int, g: int
) -> None:
    """The query at (k, g), on D and D minus one unit with data that breaks every declaration: at most k rows
    leave each group, in at most g groups, each score moves by at most Δ(q, k), and the exact output
    distributions over all groups move by at most the charged ε of the quantiles' events."""
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=salt)
    assert planned.auto is not None and planned.auto.parts and planned.price.quantiles
    g = min(g, planned.analysis.max_groups)
    at = auto_release.plan_at(planned, auto.ChosenBounds((), k, g))
    n_keys = len(at.analysis.keys)
    big = _run(at.sql, data, n_keys)
    small = _run(at.sql, [row for row in data if row[0] != removed], n_keys)
    charged = math.fsum(s.event.sensitivity / s.event.scale for s in planned.price.quantiles)
    total_loss = 0.0
    for spec in at.price.quantiles:
        assert spec.max_rows == k and spec.epsilon <= planned.price.quantiles[at.price.quantiles.index(spec)].epsilon
        measure = at.analysis.measures[spec.measure]
        changed = 0
        for cell in set(big) | set(small):
            h_big = counts(big[cell][1 + spec.measure] if cell in big else None, measure.points)
            h_small = counts(small[cell][1 + spec.measure] if cell in small else None, measure.points)
            removed_rows = sum(h_big) - sum(h_small)
            assert all(a >= b for a, b in zip(h_big, h_small, strict=True)) and removed_rows <= k
            changed += removed_rows > 0
            moves = [abs(a - b) for a, b in zip(dp_quantile.rank_distances(h_big, spec.q),
                                                dp_quantile.rank_distances(h_small, spec.q), strict=True)]
            assert max(moves) <= dp_quantile.score_sensitivity(spec.q, k)
            if removed_rows:
                p = dp_quantile.output_distribution(h_big, spec.q, spec.epsilon, k)
                r = dp_quantile.output_distribution(h_small, spec.q, spec.epsilon, k)
                total_loss += _log_ratio(p, r)
        assert changed <= g
    assert total_loss <= charged * (1 + 1e-9)


def test_a_quantile_query_charges_its_selection_and_its_quantiles_at_the_limits() -> None:
    planned = plan("SELECT g, MEDIAN(x) FROM t GROUP BY g", CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert planned.auto is not None
    # the median's grid is x's chosen clamp; no max_groups: a quantile's per-group ε does not depend on g, so a
    # smaller g could only drop groups (bounds.needed)
    assert [(p.bound, p.column) for p in planned.auto.parts] == [("max_rows", None), ("lower", "x"), ("upper", "x")]
    (median,) = planned.price.quantiles
    # 0.9 for the query, half of it for the median (g has no public domain: the other half selects groups),
    # over L0 = 3 groups: per group 0.15 = 2·Δ(1/2, 6)/T, T = 40
    assert (median.max_rows, median.scale, median.event.sensitivity) == (6, pytest.approx(40, rel=1e-14), 18.0)
    assert planned.price.epsilon == pytest.approx(1.0, rel=1e-12)
    at = auto_release.plan_at(planned, auto.ChosenBounds((), 2, 1))
    (spec,) = at.price.quantiles
    assert (spec.max_rows, spec.scale, spec.event) == (2, pytest.approx(40 / 3, rel=1e-14), median.event)


# --- three or more quantiles of one column: the joint release at the chosen bounds -------------------------------

JOINT_QUERIES = [
    "SELECT g, MIN(x), MEDIAN(x), MAX(x), QUANTILE_CONT(x, 0.9) FROM t GROUP BY g",
    "SELECT r, QUANTILE_CONT(n, 0.1), MEDIAN(n), QUANTILE_CONT(n, 0.9) FROM t GROUP BY r",
]


def _step_losses(big: tuple[int, ...], small: tuple[int, ...], q: Fraction | None, side: str, bounds: list[int],
                 noisy: list[int], epsilon: Fraction, k: int) -> dict[int, float]:
    """The worst log ratio of one chain step's exact output distributions over the noisy counts, per bound."""
    if q is None:
        return dict.fromkeys(bounds, 0.0)
    return {b: max(_loss(joint_quantiles.step_distribution(big, q, b, side, n, epsilon, k),
                         joint_quantiles.step_distribution(small, q, b, side, n, epsilon, k)) for n in noisy)
            for b in bounds}


def _loss(p: dict[int, float], r: dict[int, float]) -> float:
    return max(abs(math.log(p[i] / r[i])) for i in p)


@pytest.mark.parametrize("query", JOINT_QUERIES)
@settings(max_examples=oracle_db.examples(3), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=quantile_rows, removed=st.integers(0, 5), salt=st.integers(0, 2**62), k=st.integers(1, 6),
       g=st.integers(1, 3), ends=st.tuples(st.integers(0, 65), st.integers(0, 65)))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1,
         k=6, g=3, ends=(0, 65))
@example(data=[(0, "a", "N", "a", 5.5, 10)] * 9 + [(1, "a", "N", "a", -3.0, 0)] * 9, removed=1, salt=2, k=2, g=1,
         ends=(20, 40))
def test_joint_quantiles_at_the_chosen_bounds_move_within_the_charge(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int, k: int, g: int, ends: tuple[int, int]
) -> None:
    """The joint release at random chosen (k, g, clamp), on D and D minus one unit with data breaking every
    declaration: at most k rows leave each group, in at most g groups; per group the count moves by at most k
    (loss <= k/b_k <= its per-group ε at the limits), the root's scores by at most Δ(q_r, k) and its exact output
    distribution by at most ε_root, every level (a left step at any bound B_L <= any right step's bound B_R, at any
    noisy count) by at most ε_level; and the losses over all groups add up to at most the charged events."""
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=salt)
    assert planned.auto is not None and planned.auto.parts and planned.auto.note is None
    (limits,) = planned.price.quantiles
    assert isinstance(limits, JointSpec)
    spec_column = AUTO.column(planned.analysis.measures[limits.measure].column or "")
    assert spec_column is not None and spec_column.bounds is not None
    grid = auto_clamp.clamp_grid(spec_column.bounds, spec_column.type)
    lo, hi = sorted((grid[min(ends[0], len(grid) - 1)], grid[min(ends[1], len(grid) - 1)]))
    g = min(g, planned.analysis.max_groups)
    at = auto_release.plan_at(planned, auto.ChosenBounds((), k, g, ((spec_column.name, lo, hi),)))
    (spec,) = at.price.quantiles
    assert isinstance(spec, JointSpec) and spec.max_rows == k and spec.events == limits.events
    count_epsilon = Fraction(k) / Fraction(spec.count_scale)
    assert count_epsilon <= Fraction(limits.max_rows) / Fraction(limits.count_scale)
    assert spec.root_epsilon <= limits.root_epsilon and spec.level_epsilon <= limits.level_epsilon
    measure = at.analysis.measures[spec.measure]
    n_keys = len(at.analysis.keys)
    big, small = _run(at.sql, data, n_keys), _run(at.sql, [row for row in data if row[0] != removed], n_keys)
    root_q = spec.qs[joint_quantiles.root(spec.qs)]
    left, right = joint_quantiles.chains(spec.qs)
    total_loss, changed = 0.0, 0
    for cell in set(big) | set(small):
        h_big = tuple(counts(big[cell][1 + spec.measure] if cell in big else None, measure.points))
        h_small = tuple(counts(small[cell][1 + spec.measure] if cell in small else None, measure.points))
        removed_rows = sum(h_big) - sum(h_small)
        assert all(a >= b for a, b in zip(h_big, h_small, strict=True)) and removed_rows <= k
        if not removed_rows:
            continue
        changed += 1
        count_loss = removed_rows / Fraction(spec.count_scale)  # discrete Laplace: |Δn|/b
        assert count_loss <= count_epsilon
        moves = [abs(a - b) for a, b in zip(dp_quantile.rank_distances(h_big, root_q),
                                            dp_quantile.rank_distances(h_small, root_q), strict=True)]
        assert max(moves) <= dp_quantile.score_sensitivity(root_q, k)
        root_loss = _log_ratio(dp_quantile.output_distribution(h_big, root_q, spec.root_epsilon, k),
                               dp_quantile.output_distribution(h_small, root_q, spec.root_epsilon, k))
        assert root_loss <= spec.root_epsilon * (1 + 1e-9)
        near = {j for i, c in enumerate(h_big) if c for j in (i - 1, i, i + 1) if 0 <= j < measure.points}
        bounds = sorted(near | {0, measure.points - 1, measure.points // 2})
        noisy = sorted({0, sum(h_small), sum(h_big), 3 * sum(h_big) + 5})
        level_losses = []
        for level in range(joint_quantiles.levels(spec.qs)):
            lq, rq = (left[level] if level < len(left) else None), (right[level] if level < len(right) else None)
            lefts = _step_losses(h_big, h_small, lq, "left", bounds, noisy, spec.level_epsilon, k)
            rights = _step_losses(h_big, h_small, rq, "right", bounds, noisy, spec.level_epsilon, k)
            # the left step's bound is at most the root's release, the right's at least: B_L <= B_R
            worst = max(lefts[a] + rights[b] for a in bounds for b in bounds if a <= b)
            assert worst <= spec.level_epsilon * (1 + 1e-9)
            level_losses.append(worst)
        total_loss += float(count_loss) + root_loss + math.fsum(level_losses)
    assert changed <= g
    charged = math.fsum(e.sensitivity / e.scale for e in limits.events)
    assert total_loss <= charged * (1 + 1e-9)


def test_three_quantiles_choose_their_bounds_and_keep_the_limits_charge() -> None:
    """MIN, MEDIAN, MAX and p90 of one column: every bound chosen (no note), the clamp drawn at q_L = 0 and q_U = 1
    (halfway from the quantiles asked to the ends), the charge the joint events at the limits plus the selection."""
    planned = plan("SELECT g, MIN(x), MEDIAN(x), MAX(x), QUANTILE_CONT(x, 0.9) FROM t GROUP BY g", CATALOG,
                   epsilon=1.0, delta=1e-6, mechanism="laplace")
    assert planned.auto is not None and planned.auto.note is None
    parts = {(p.bound, p.column): p for p in planned.auto.parts}
    assert set(parts) == {("max_rows", None), ("lower", "x"), ("upper", "x")}  # quantiles alone: g at its limit
    assert (parts[("lower", "x")].q, parts[("upper", "x")].q) == (1.0, 1.0)  # the lower bound draws 1 − q = 0
    assert parts[("max_rows", None)].relative and parts[("max_rows", None)].q == 0.5
    assert isinstance(planned.price.event, AutoBoundsEvent) and planned.price.epsilon <= 1.0
    (joint,) = planned.price.quantiles
    assert isinstance(joint, JointSpec) and joint.max_rows == AUTO.max_rows
    assert planned.price.event.query.events[-len(joint.events):] == joint.events  # type: ignore[union-attr]


# --- shapes answered at the declared limits ---------------------------------------------------------------------

AT_LIMITS = [
    ("SELECT COUNT(*) FROM t", 3.0, "noise_multiplier"),
    ("SELECT SUM(x + n) FROM t", 3.0, "noise_multiplier"),
]


@pytest.mark.parametrize(("query", "multiplier", "words"), AT_LIMITS)
def test_what_the_selection_cannot_read_runs_at_the_declared_limits(
    query: str, multiplier: float | None, words: str
) -> None:
    """Not refused: answered as a fixed-bounds table at its limits (valid bounds), with no selection in the
    charge, and the report says so."""
    planned = plan(query, CATALOG, epsilon=0.5, delta=1e-7, mechanism="laplace", noise_multiplier=multiplier,
                   bounding="store")
    fixed = Catalog((AUTO.__class__(AUTO.name, AUTO.privacy_unit, tuple(
        c.__class__(c.name, c.type, c.bounds, c.unit_level, c.public_domain, c.groupable) for c in AUTO.columns),
        max_groups=AUTO.max_groups, max_rows=AUTO.max_rows),))
    at_limits = plan(query, fixed, epsilon=0.5, delta=1e-7, mechanism="laplace", noise_multiplier=multiplier,
                     bounding="store")
    assert planned.auto is not None and planned.auto.parts == () and words in (planned.auto.note or "")
    assert planned.price == at_limits.price and planned.sql == at_limits.sql
    assert not isinstance(planned.price.event, AutoBoundsEvent)
    report = auto_release.preview(planned.auto, planned.analysis).report()
    assert report["chosen"] is False and report["parts"] == [] and report["epsilon"] == 0.0
    assert report["max_rows"] == AUTO.max_rows and report["note"] == planned.auto.note
    assert auto_release.plan_at(planned, 2) is planned  # a repeat's bars: the plan at the limits itself


# --- joins and computed keys: the oracle over every selection and the query at the chosen bounds ---------------

W = TableSchema("w", "uid", (ColumnSpec("uid", "BIGINT"), ColumnSpec("q", "VARCHAR", unit_level=True, groupable=True)),
                one_row_per_unit=True)
JOINED = Catalog((AUTO, W))
JOIN_QUERIES = [
    "SELECT q, COUNT(*), SUM(x) FROM t JOIN w USING (uid) GROUP BY q",
    "SELECT g, COUNT(*), AVG(n) FROM t JOIN w USING (uid) WHERE q = 'A' GROUP BY g",
    "SELECT CASE WHEN n > 3 THEN 'hi' ELSE 'lo' END AS m, COUNT(*), SUM(x) FROM t GROUP BY m",
    "SELECT q, MEDIAN(x) FROM t JOIN w USING (uid) WHERE n > 1 GROUP BY q",
    "SELECT g, VARIANCE(x), COUNT(*) FROM t GROUP BY g",  # spreads and FILTER (§10.6 no more)
    "SELECT r, SUM(x) FILTER (WHERE n > 2), COUNT_IF(n > 5) FROM t GROUP BY r",
    "SELECT q, STDDEV(n) FROM t JOIN w USING (uid) GROUP BY q",
    # expressions inside aggregates, each column through its chosen clamp (§10.10)
    "SELECT g, SUM(x * n), AVG(x - n) FROM t GROUP BY g",
    "SELECT r, SUM(CASE WHEN n > 2 THEN x ELSE x / 2 END), SUM(x) FROM t GROUP BY r",
    "SELECT q, AVG(-x + 2 * n) FROM t JOIN w USING (uid) GROUP BY q",
    "SELECT p, g, SUM(x * n) FILTER (WHERE n < 9) FROM t WHERE x > -1 GROUP BY p, g",  # a row-level WHERE, FILTER
]


def _joined_store(sqls: list[str], data: list[tuple[object, ...]], units: list[tuple[object, ...]]
                  ) -> list[list[tuple[object, ...]]]:
    con = scratch_db.connect()
    con.execute("ATTACH ':memory:' AS src")
    con.execute("CREATE TABLE src.t (uid BIGINT, g VARCHAR, r VARCHAR, p VARCHAR, x DOUBLE, n INTEGER)")
    con.execute("CREATE TABLE src.w (uid BIGINT, q VARCHAR)")
    if data:
        con.executemany("INSERT INTO src.t VALUES (?, ?, ?, ?, ?, ?)", data)
    if units:
        con.executemany("INSERT INTO src.w VALUES (?, ?)", units)
    con.execute(store_layout.build_sql(AUTO, "key"))
    con.execute(store_layout.build_sql(W, "key"))
    try:
        return [con.execute(sql).fetchall() for sql in sqls]
    finally:
        con.close()


@pytest.mark.parametrize("query", JOIN_QUERIES)
@settings(max_examples=oracle_db.examples(3), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, labels=st.lists(st.sampled_from(["A", "B", None]), min_size=6, max_size=6),
       removed=st.integers(0, 5), salt=st.integers(0, 2**62), k=st.integers(1, 6), g=st.integers(1, 3),
       ends=st.tuples(st.integers(0, 65), st.integers(0, 65), st.integers(0, 12), st.integers(0, 12)))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)],
         labels=["A"] * 6, removed=0, salt=1, k=6, g=3, ends=(0, 65, 0, 12))
def test_joins_computed_keys_spreads_and_filters_move_every_step_within_its_sensitivity(
    query: str, data: list[tuple[object, ...]], labels: list[str | None], removed: int, salt: int, k: int, g: int,
    ends: tuple[int, int, int, int],
) -> None:
    """The selection reads the query's own virtual table (the join over the store, the computed key): on D and
    D minus one unit (its rows in t and its row in w), with t's data breaking every declaration (w is one row
    per unit, which the store build checks), each histogram moves by at most its sensitivity, per query and
    from the stored ranks; and the query at (k, g, clamps) by at most its sensitivity there."""
    units = [(u, label) for u, label in enumerate(labels)]
    planned = plan(query, JOINED, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=salt, bounding="store")
    assert planned.auto is not None and planned.auto.parts, query
    analysis, chooser = planned.analysis, planned.auto
    selections = [f"SELECT __a, __b, __n FROM ({sql})" for store in (True, False)
                  for sql in standalone(analysis, chooser, store, DUCKDB)]
    clamps = []
    for name, (i, j) in (("x", ends[:2]), ("n", ends[2:])):
        if chooser.part("upper", name) is not None:  # the columns whose clamp the query chooses
            grid = auto_clamp.clamp_grid(AUTO.column(name).bounds, AUTO.column(name).type)  # type: ignore[union-attr, arg-type]
            a, b = grid[min(i, len(grid) - 1)], grid[min(j, len(grid) - 1)]
            clamps.append((name, min(a, b), max(a, b)))
    at = auto_release.plan_at(planned, auto.ChosenBounds((), k, min(g, analysis.max_groups), tuple(clamps)))
    smaller = ([r for r in data if r[0] != removed], [u for u in units if u[0] != removed])
    (*big, before), (*small, after) = (_joined_store([*selections, at.sql], *d) for d in ((data, units), smaller))
    firsts = _first_parts(chooser)
    for i, (b, s) in enumerate(zip(big, small, strict=True)):
        part, _ = firsts[i % len(firsts)]
        for distance, sensitivity in _distances(part, b, s):
            assert distance <= sensitivity, (query, part.bound, i)
    if at.price.quantiles:
        return  # the quantile's histograms: test_quantiles_at_the_chosen_bounds_move_within_the_charge
    n_keys = len(analysis.keys)
    keyed = [{tuple(r[:n_keys]): tuple(int(v or 0) for v in r[n_keys:]) for r in res}  # type: ignore[call-overload]
             for res in (before, after)]
    zero = (0,) * (1 + len(at.analysis.measures))
    for column, measure in enumerate(at.analysis.measures, start=1):
        per_group = measure.sensitivity(k)
        moves = [abs(keyed[0].get(c, zero)[column] - keyed[1].get(c, zero)[column])
                 for c in set(keyed[0]) | set(keyed[1])]
        assert all(m <= per_group for m in moves) and sum(moves) <= at.analysis.max_groups * per_group, query


def _plan_with_clamp_grids(query: str) -> tuple[Any, list[float], dict[str, list[float]]]:
    """The plan of `query` at the limits, each Laplace part's recorded pure ε, and the clamp grid of every column
    whose upper clamp it chooses (x, n)."""
    planned = plan(query, CATALOG, epsilon=0.7, delta=1e-7, mechanism="laplace", bounding="store")
    assert planned.auto is not None and planned.auto.parts and isinstance(planned.price.event, AutoBoundsEvent)
    recorded = [laplace.epsilon(e.sensitivity, e.scale) for e in _laplace(planned.price.event.query)]
    columns = [c for c in ("x", "n") if planned.auto.part("upper", c) is not None]
    ends = {c: auto_clamp.clamp_grid(AUTO.column(c).bounds, AUTO.column(c).type)  # type: ignore[union-attr, arg-type]
            for c in columns}
    return planned, recorded, ends


@pytest.mark.parametrize("query", ["SELECT g, VARIANCE(x), STDDEV(n) FROM t GROUP BY g",
                                   "SELECT r, SUM(x) FILTER (WHERE n > 2), COUNT_IF(n > 5), AVG(n) FROM t GROUP BY r"])
def test_spreads_and_filters_cost_no_more_than_charged_at_every_chosen_bound(query: str) -> None:
    """Every Laplace part at every (k, g, clamps) of a grid has pure ε at most its recorded part (each measure's
    sensitivity, the centred squares' included, is monotone in every bound)."""
    planned, recorded, ends = _plan_with_clamp_grids(query)
    columns = list(ends)
    clamp_choices = [tuple((c, ends[c][i], ends[c][j]) for c in columns) for i, j in ((0, -1), (0, 1), (2, -3))]
    groups = (1, 3) if planned.analysis.max_groups > 1 else (1,)
    for k, g, clamps in itertools.product((1, 4, 6), groups, clamp_choices):
        at = auto.at_bound(planned.analysis, k, g, clamps)
        priced = auto.price_at(planned.price, at, k)
        assert priced.event == planned.price.event and len(priced.noise) == len(recorded)
        for spec, part in zip(priced.noise, recorded, strict=True):
            assert spec.sensitivity == g * at.measures[spec.measure].sensitivity(k)
            assert laplace.epsilon(spec.sensitivity, spec.scale) <= part if spec.sensitivity else True


# --- expressions inside aggregates at the chosen clamps (§10.10) --------------------------------------------------

EXPRESSION_READS = {  # each query and the columns its expressions read
    "SELECT SUM(x + n) FROM t": ("x", "n"),
    "SELECT g, AVG(x * 2), COUNT(*) FILTER (WHERE n > 2) FROM t GROUP BY g": ("x",),
    "SELECT g, SUM(x * n), AVG(x - n) FROM t GROUP BY g": ("x", "n"),
    "SELECT r, SUM(CASE WHEN n > 2 THEN x ELSE x / 2 END), SUM(x) FROM t GROUP BY r": ("x",),
    "SELECT AVG(-(x * x) + 3 * n), SUM(n / -4) FROM t": ("x", "n"),
}
EXPRESSION_QUERIES = list(EXPRESSION_READS)


@pytest.mark.parametrize("query", EXPRESSION_QUERIES)
def test_an_expression_chooses_the_clamps_of_the_columns_it_reads(query: str) -> None:
    """Every auto column an expression reads gets a clamp (the lower end too where its limit's is not 0); nothing
    runs at the limits; the selection is charged as any other part. A column also summed keeps its cap."""
    planned = plan(query, CATALOG, epsilon=0.7, delta=1e-7, mechanism="laplace", bounding="store")
    assert planned.auto is not None and planned.auto.note is None and isinstance(planned.price.event, AutoBoundsEvent)
    assert set(auto.expression_columns(planned.analysis)) == set(EXPRESSION_READS[query])
    assert (planned.auto.part("total", "x") is not None) is ("SUM(x)" in query)
    for column in EXPRESSION_READS[query]:
        assert planned.auto.part("upper", column) is not None, (query, column)
        assert (planned.auto.part("lower", column) is not None) is (column == "x")  # x's limit is [-3, 5.5]
    assert planned.price.epsilon <= 0.7


@pytest.mark.parametrize("query", EXPRESSION_QUERIES)
def test_expressions_cost_no_more_than_charged_at_every_chosen_clamp(query: str) -> None:
    """At every (k, g, clamps) of a grid, each Laplace part's pure ε is at most its recorded part: the range by
    interval arithmetic over clamps inside the declared ones lies inside the declared range, on its grid."""
    planned, recorded, ends = _plan_with_clamp_grids(query)
    columns = list(ends)
    choices = [tuple((c, ends[c][i], ends[c][j]) for c in columns) for i, j in ((0, -1), (0, 1), (2, -3), (-2, -1),
                                                                                 (5, 5))]
    groups = (1, 3) if planned.analysis.max_groups > 1 else (1,)
    for k, g, clamps in itertools.product((1, 4, 6), groups, choices):
        at = auto.at_bound(planned.analysis, k, g, clamps)
        priced = auto.price_at(planned.price, at, k)
        assert priced.event == planned.price.event and len(priced.noise) == len(recorded)
        for aggregate in at.aggregates:
            if aggregate.expr:  # inside the declared range, on its grid
                declared = next(a for a in planned.analysis.aggregates if a.label().split("(")[0] ==
                                aggregate.label().split("(")[0] and a.expr and a.where == aggregate.where
                                and a.kind == aggregate.kind and a.bounds and aggregate.grid_bounds == a.bounds)
                assert declared.bounds[0] <= aggregate.bounds[0] <= aggregate.bounds[1] <= declared.bounds[1]  # type: ignore[index]
        for spec, part in zip(priced.noise, recorded, strict=True):
            assert spec.sensitivity == g * at.measures[spec.measure].sensitivity(k)
            assert laplace.epsilon(spec.sensitivity, spec.scale) <= part if spec.sensitivity else True


def _rows_of(result: list[tuple[object, ...]], keys: int) -> dict[tuple[object, ...], tuple[object, ...]]:
    return {tuple(r[:keys]): tuple(r[keys:]) for r in result}


DIFFERENTIAL = [  # (query, its expression with {x} and {n} where it reads a value (a condition reads the row), keys)
    ("SELECT g, SUM(x * n) FROM t GROUP BY g", "{x} * {n}", "g"),
    ("SELECT r, SUM(CASE WHEN n > 2 THEN x ELSE x / 2 END) FROM t GROUP BY r",
     "CASE WHEN n > 2 THEN {x} ELSE {x} / 2 END", "r"),
    ("SELECT SUM(-x + 2 * n) FROM t", "-{x} + 2 * {n}", ""),
]


@pytest.mark.parametrize(("query", "expression", "key"), DIFFERENTIAL)
@settings(max_examples=oracle_db.examples(6), deadline=None)
@given(cells=st.lists(st.tuples(st.integers(0, 4), st.sampled_from("ab"), st.integers(-4, 10), st.integers(0, 6)),
                      max_size=24),
       clamp_x=st.tuples(st.integers(-6, 11), st.integers(-6, 11)), clamp_n=st.tuples(st.integers(0, 10),
                                                                                   st.integers(0, 10)))
def test_the_expression_at_the_chosen_clamps_is_the_query_with_its_inputs_clamped(
    query: str, expression: str, key: str, cells: list[tuple[int, str, int, int]], clamp_x: tuple[int, int],
    clamp_n: tuple[int, int],
) -> None:
    """Before noise, the query at chosen clamps [L, U] (k and g at the limits, every unit within them) is exactly
    DuckDB's answer to the analyst's SQL with each input clamped to its [L, U]: the same query as asked when the
    data lie inside the clamps (then also DuckDB's unclamped answer)."""
    lx, ux = sorted(v / 2 for v in clamp_x)  # x in halves within [-3, 5.5]
    ln, un = sorted(clamp_n)
    # at most 2 rows per (unit, g) and one region per unit: nothing is dropped at k = 6, g = 3
    seen: dict[tuple[int, str], int] = {}
    data = []
    for uid, g, x, n in cells:
        if seen.get((uid, g), 0) < 2:
            seen[(uid, g)] = seen.get((uid, g), 0) + 1
            data.append((uid, g, "NSE"[uid % 3], "a", x / 2, n))
    planned = plan(query, CATALOG, epsilon=1.0, delta=1e-6, mechanism="laplace", salt=3, bounding="store")
    assert planned.auto is not None and planned.auto.parts
    at = auto_release.plan_at(planned, auto.ChosenBounds((), 6, planned.analysis.max_groups,
                                                          (("x", lx, ux), ("n", ln, un))))
    (measure,) = (m for m in at.analysis.measures if m.expr)
    clamped = expression.format(x=f"LEAST(GREATEST(x, {lx}), {ux})", n=f"LEAST(GREATEST(n, {ln}), {un})")
    by = f" GROUP BY {key}" if key else ""
    select = f"{key}, " if key else ""
    asked = expression.format(x="x", n="n")
    reference = [f"SELECT {select}SUM({clamped}) FROM src.t{by}", f"SELECT {select}SUM({asked}) FROM src.t{by}",
                 f"SELECT COUNT(*) FROM src.t WHERE x < {lx} OR x > {ux} OR n < {ln} OR n > {un}"]
    ours, theirs, plain, ((outside,),) = _joined_store([at.sql, *reference], data, [])
    keys = 1 if key else 0
    got = {k: (int(v[1]) / measure.grid if v[1] is not None else None) for k, v in _rows_of(ours, keys).items()}
    want = {k: v[0] for k, v in _rows_of(theirs, keys).items() if v[0] is not None}
    assert {k: v for k, v in got.items() if v is not None or k in want} == want, (query, lx, ux, ln, un)
    if outside == 0:  # the data inside the clamps: the query as asked, unclamped
        assert want == {k: v[0] for k, v in _rows_of(plain, keys).items() if v[0] is not None}


def test_the_proxy_answers_an_expression_at_its_chosen_clamps_with_noise_sized_for_them(
    demo: DemoFiles, tmp_path: Path
) -> None:
    """End to end (pipeline.answer, the demo's auto policy: amount in [0, 100000], max_rows <= 1000): AVG(amount * 2)
    by category reports its bounds chosen, amount's clamp [0, U] among them, and its centred sum's noise is
    exactly the limits' ε at the sensitivity L0·k·⌈⌊2U·4096⌋/2⌉ (the range [0, 2U] on the declared range
    [0, 200000]'s grid, 4096 steps per unit), not 8·1000·409 600 000."""
    # a clamp worth its name on 300 users: half of ε selects
    policy = policy_copy(demo, tmp_path, epsilon=20.0, delta=1e-5, auto=True, share="0.5")
    env = build_env(Settings(policy=str(policy), ledger=str(tmp_path / "ledger.sqlite")))
    analyst = next(a for a in env.policy.analysts if a.role == "analyst")
    sql = "SELECT category, AVG(amount * 2) FROM visits GROUP BY category"
    prepared = pipeline.prepare(QueryRequest(sql=sql, epsilon=Decimal("1.0")), analyst, env.policy, 5)
    charges: list[object] = []
    answer = pipeline.answer(prepared, analyst, env, charges.append)
    assert len(charges) == 1 and answer.bounds is not None and answer.selected is not None
    assert answer.bounds.report()["chosen"] is True
    assert [(p.bound, p.column) for p in answer.bounds.parts] == [("max_rows", None), ("max_groups", None),
                                                                   ("upper", "amount")]
    ((name, lo, upper),) = answer.bounds.clamps
    k, g = answer.bounds.max_rows, answer.bounds.max_groups
    assert (name, lo) == ("amount", 0.0) and 0 <= upper <= 100000 and 1 <= k <= 1000 and 1 <= g <= 16
    at_limits, at_chosen = answer.selected.price.noise[0], answer.prepared.plan.price.noise[0]
    assert at_limits.sensitivity == 8 * 1000 * 409_600_000  # L0 = min(16, 8 categories)
    top = math.floor(2 * upper * 4096)
    assert at_chosen.sensitivity == min(g, 8) * k * (top - top // 2)
    part = laplace.epsilon(at_limits.sensitivity, at_limits.scale)
    assert at_chosen.scale == laplace.scale_for(at_chosen.sensitivity, part)
    # the clamp is a draw (35 355 seen on these 300 users): the noise is the limits' scaled by the chosen bounds,
    # whatever they are, and below it
    assert at_chosen.scale == pytest.approx(at_limits.scale * at_chosen.sensitivity / at_limits.sensitivity, rel=1e-9)
    assert at_chosen.scale < at_limits.scale, (k, g, upper)
