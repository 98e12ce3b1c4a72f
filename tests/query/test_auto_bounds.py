"""max_rows = "auto" (issue #12 part 2): policy, the exact event, the charge for any chosen bound, the
neighbouring-dataset oracle over both steps (selection histogram and query at the chosen k), the choice itself.
The HTTP end-to-end tests are in tests/http/test_auto_bounds_http.py."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from accountant import loss, report
from accountant.events import (
    AutoBoundsEvent,
    ComposedEvent,
    ExponentialEvent,
    LaplaceEvent,
    ParallelEvent,
    from_json,
    to_json,
)
from mechanisms import count_target, laplace
from mechanisms.sampling import SecureSampler
from proxy.policy.load import load_policy, policy_problems
from proxy.query.analyse.analysis import analyse
from proxy.query.auto import bounds as auto
from proxy.query.catalog import Catalog, TableSchema
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.rewrite import store_layout
from proxy.query.rewrite.on_store import rewrite_ranked
from proxy.query.rewrite.render import DUCKDB
from tests.oracle.test_sensitivity import TABLE, _run_on_store, rows
from tests.policy.test_policy import VALID, write
from tests.support import oracle_db, scratch_db

AUTO = TableSchema("t", "uid", TABLE.columns, max_groups=2, max_rows=6, auto_max_rows=True)
CATALOG = Catalog((AUTO,))

# --- policy -------------------------------------------------------------------------------------------------


def test_auto_max_rows_loads_with_its_limit_and_the_dataset_share(tmp_path: Path) -> None:
    text = VALID.replace("max_rows = 20", 'max_rows = "auto"\nmax_rows_limit = 300').replace(
        "max_epsilon = 1.0", "max_epsilon = 1.0\nauto_bounds_share = 0.2\nauto_bounds_quantile = 0.95")
    dataset = load_policy(write(tmp_path, text)).dataset("demo")
    assert dataset is not None
    (table,) = dataset.catalog.tables
    assert (table.auto_max_rows, table.max_rows) == (True, 300)
    assert (dataset.auto_bounds_share, dataset.auto_bounds_quantile) == (0.2, 0.95)


def test_defaults_are_a_limit_of_1000_and_a_tenth_of_epsilon(tmp_path: Path) -> None:
    dataset = load_policy(write(tmp_path, VALID.replace("max_rows = 20", 'max_rows = "auto"'))).dataset("demo")
    assert dataset is not None
    assert dataset.catalog.tables[0].max_rows == auto.DEFAULT_AUTO_LIMIT == 1000
    assert (dataset.auto_bounds_share, dataset.auto_bounds_quantile) == (0.1, 0.99)
    fixed = load_policy(write(tmp_path, VALID)).dataset("demo")
    assert fixed is not None
    assert (fixed.catalog.tables[0].auto_max_rows, fixed.catalog.tables[0].max_rows) == (False, 20)


@pytest.mark.parametrize(("old", "new", "location", "words"), [
    ("max_rows = 20", 'max_rows = "auto"\none_row_per_unit = true', "datasets.demo.tables.visits.max_rows",
     "meaningless on a table declared one_row_per_unit"),
    ("max_epsilon = 1.0", "max_epsilon = 1.0\nauto_bounds_share = 1.0", "datasets.demo.auto_bounds_share",
     "must be a number in (0, 1)"),
    ("max_epsilon = 1.0", "max_epsilon = 1.0\nauto_bounds_share = 0", "datasets.demo.auto_bounds_share",
     "must be a number in (0, 1)"),
    ("max_epsilon = 1.0", "max_epsilon = 1.0\nauto_bounds_quantile = 1", "datasets.demo.auto_bounds_quantile",
     "[0.5, 1)"),
    ("max_rows = 20", "max_rows = 20\nmax_rows_limit = 50", "datasets.demo.tables.visits.max_rows_limit",
     'only with max_rows = "auto"'),
    ("max_rows = 20", 'max_rows = "auto"\nmax_rows_limit = 20000', "datasets.demo.tables.visits.max_rows_limit",
     "[1, 10000]"),
    ("max_rows = 20", 'max_rows = "sometimes"', "datasets.demo.tables.visits.max_rows", "integer"),
])
def test_bad_auto_settings_are_refused_at_load(tmp_path: Path, old: str, new: str, location: str, words: str) -> None:
    problems = policy_problems(write(tmp_path, VALID.replace(old, new, 1)))
    assert any(p.startswith(location) and words in p for p in problems), problems


def test_a_one_row_table_cannot_be_built_auto_either() -> None:
    with pytest.raises(ValueError, match="meaningless"):
        TableSchema("t", "uid", TABLE.columns, one_row_per_unit=True, auto_max_rows=True)


# --- the event and the charge ---------------------------------------------------------------------------------

EVENT = AutoBoundsEvent(ExponentialEvent(2.0, 8.0), ComposedEvent((LaplaceEvent(12, 48.0), LaplaceEvent(6, 12.0))))


def test_the_event_round_trips_and_accounts_as_selection_then_query_under_every_rule() -> None:
    assert from_json(to_json(EVENT)) == EVENT
    composed = ComposedEvent((EVENT.selection, EVENT.query))
    assert loss.epsilon_delta(EVENT, 0.0) == loss.epsilon_delta(composed, 0.0) == (1.0, 0.0)  # 0.25 + 0.25 + 0.5
    assert loss.rho(EVENT) == loss.rho(composed)
    assert loss.approximate_rho(EVENT) == loss.approximate_rho(composed)
    assert loss.approximate_mu(EVENT) == loss.approximate_mu(composed)
    entries = [report.Entry(EVENT, 1.0, 0.0)] * 5
    assert report.pld_report(entries, 1e-6) == report.pld_report([report.Entry(composed, 1.0, 0.0)] * 5, 1e-6)
    with pytest.raises(ValueError, match="exponential"):
        from_json({"kind": "auto_bounds", "selection": to_json(LaplaceEvent(1.0, 1.0)), "query": to_json(EVENT.query)})


QUERIES = [
    "SELECT COUNT(*) FROM t",
    "SELECT r, COUNT(*), SUM(x), AVG(n) FROM t GROUP BY r",
    "SELECT g, COUNT(*), SUM(n), AVG(x) FROM t GROUP BY g",
    "SELECT g, r, COUNT(*), SUM(x) FROM t WHERE n > 2 GROUP BY g, r",
    "SELECT p, COUNT(*), COUNT(DISTINCT uid) FROM t GROUP BY p",
]


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("epsilon", [1.0, 0.3, 0.1234567])
def test_the_charge_is_fixed_before_k_and_bounds_the_query_at_every_k(query: str, epsilon: float) -> None:
    planned = plan(query, CATALOG, epsilon=epsilon, delta=1e-7, mechanism="laplace", bounding="store", auto_share=0.1)
    assert planned.auto is not None and isinstance(planned.price.event, AutoBoundsEvent)
    assert Fraction(planned.price.epsilon) <= Fraction(epsilon)
    (part,) = planned.auto.parts
    selection_epsilon = laplace.epsilon(part.selection.sensitivity, part.selection.scale)
    assert math.isclose(selection_epsilon, 0.1 * epsilon, rel_tol=1e-12)
    assert planned.auto.epsilon <= Fraction(selection_epsilon)  # the mechanism runs at most at what is charged
    recorded = [laplace.epsilon(e.sensitivity, e.scale) for e in _laplace(planned.price.event.query)]
    for k in range(1, AUTO.max_rows + 1):
        analysis = auto.at_bound(planned.analysis, k)
        at_k = auto.price_at(planned.price, analysis, k)
        assert at_k.event == planned.price.event and at_k.epsilon == planned.price.epsilon
        for spec, charged in zip(at_k.noise, recorded, strict=True):
            assert spec.sensitivity == analysis.max_groups * analysis.measures[spec.measure].sensitivity(k)
            assert laplace.epsilon(spec.sensitivity, spec.scale) <= charged if spec.sensitivity else True


def _laplace(event: object) -> list[LaplaceEvent]:
    match event:
        case ComposedEvent(events) | ParallelEvent(events):
            return [e for child in events for e in _laplace(child)]
        case LaplaceEvent():
            return [event]
        case _:
            return []


@pytest.mark.parametrize(("query", "mechanism", "multiplier", "chosen"), [
    ("SELECT COUNT(*) FROM t", "gaussian", None, True),  # σ at the chosen bound: proxy/query/auto/gauss.py
    ("SELECT COUNT(*) FROM t", "laplace", 3.0, False),
    ("SELECT MEDIAN(x) FROM t", "laplace", None, True),  # proxy/query/auto/quantile.py
    ("SELECT SUM(x + n) FROM t", "laplace", None, True),  # fixed x and n: its range fixed, k chosen (§10.10)
])
def test_what_the_selection_cannot_serve_runs_at_the_limits_and_the_rest_chooses(
    query: str, mechanism: str, multiplier: float | None, chosen: bool
) -> None:
    planned = plan(query, CATALOG, epsilon=0.5, delta=1e-7, mechanism=mechanism,  # type: ignore[arg-type]
                   noise_multiplier=multiplier, bounding="store")
    assert planned.auto is not None
    assert bool(planned.auto.parts) is chosen and (planned.auto.note is None) is chosen
    assert isinstance(planned.price.event, AutoBoundsEvent) is chosen
    if not chosen:
        assert planned.analysis.table.max_rows == AUTO.max_rows  # at the declared limit
        assert "declared limits (max_rows 6" in (planned.auto.note or "")


# --- the oracle over the whole two-step release ---------------------------------------------------------------

ORACLE_QUERIES = [*QUERIES, "SELECT g, COUNT(*) FROM t WHERE r = 'N' GROUP BY g",
                  "SELECT g, p, COUNT(*), SUM(n) FROM t WHERE x > 0 GROUP BY g, p"]


@pytest.mark.parametrize("query", ORACLE_QUERIES)
@settings(max_examples=oracle_db.examples(15), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 5), salt=st.integers(0, 2**62), k=st.integers(1, 6))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0, salt=1,
         k=6)
def test_both_steps_move_within_their_stated_sensitivity(
    query: str, data: list[tuple[object, ...]], removed: int, salt: int, k: int
) -> None:
    """On D and D minus one unit, with data that breaks every declaration (r varies within a unit, values
    beyond the bounds, a unit with 60 rows): the selection histogram moves by at most L0 cells in L1, and the
    query at any chosen k by at most its sensitivity at k."""
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    smaller = [row for row in data if row[0] != removed]
    selections = [auto.selection_sql(analysis, exp.table_("t", quoted=True)).sql("duckdb"),
                  auto.selection_text(analysis, True, DUCKDB)]  # the store's stored counts where they serve
    for selection in selections:
        big, small = (_histogram(_run_on_store(selection, d, 1, "key", AUTO)) for d in (data, smaller))
        assert sum(abs(big.get(c, 0) - small.get(c, 0)) for c in set(big) | set(small)) <= analysis.max_groups
        assert all(1 <= c <= AUTO.max_rows for c in big)
        # the whole choice (rows.choose_bound's mechanism) on both: its exact distributions within the part's ε
        grid = auto.bound_grid(AUTO.max_rows)
        above = [count_target.counts_above([sum(n for c, n in h.items() if (grid[i - 1] if i else 0) < c <= point)
                                            for i, point in enumerate(grid)]) for h in (big, small)]
        s, eps = analysis.max_groups, Fraction(1, 3)
        for target in (Fraction(0), Fraction(5, 2) * s):
            p, q = (count_target.output_distribution(a, target, eps, s) for a in above)
            assert max(abs(math.log(x / y)) for x, y in zip(p, q, strict=True)) <= float(eps) * (1 + 1e-9)
    at_k = auto.at_bound(analysis, k)
    sql = rewrite_ranked(at_k, salt)
    n_keys = len(analysis.keys)
    before, after = (_run_on_store(sql, d, n_keys, "key", at_k.table) for d in (data, smaller))
    zero = (0,) * (1 + len(analysis.measures))
    for column, measure in enumerate(analysis.measures, start=1):
        per_group = measure.sensitivity(k)
        moves = [abs(before.get(c, zero)[column] - after.get(c, zero)[column]) for c in set(before) | set(after)]
        assert all(m <= per_group for m in moves) and sum(moves) <= analysis.max_groups * per_group, (query, k)


def _histogram(result: dict[tuple[object, ...], tuple[int, ...]]) -> dict[int, int]:
    return {int(key[0]): values[0] for key, values in result.items()}  # type: ignore[call-overload]


# --- the choice -----------------------------------------------------------------------------------------------


def test_choice_reads_the_histogram_of_capped_rows_per_cell() -> None:
    con = scratch_db.connect()
    con.execute("ATTACH ':memory:' AS src")
    con.execute("CREATE TABLE src.t (uid BIGINT, g VARCHAR, r VARCHAR, p VARCHAR, x DOUBLE, n INTEGER)")
    # unit u has u rows in group 'a' and one in 'b'; unit 9 has 40 rows in each of 'a', 'b', 'c'
    data = [(u, "a", "N", "a", 1.0, 1) for u in range(1, 6) for _ in range(u)]
    data += [(u, "b", "N", "a", 1.0, 1) for u in range(1, 6)]
    data += [(9, g, "N", "a", 1.0, 1) for g in "abc" for _ in range(40)]
    con.executemany("INSERT INTO src.t VALUES (?, ?, ?, ?, ?, ?)", data)
    con.execute(store_layout.build_sql(AUTO, "key"))
    analysis = analyse(parse("SELECT g, COUNT(*) FROM t GROUP BY g"), CATALOG)
    sql = auto.selection_sql(analysis, exp.table_("t", quoted=True)).sql("duckdb")
    histogram = dict(con.execute(sql).fetchall())
    # cells: (u, a) = u rows for u = 1..5, (u, b) = 1 row, unit 9 keeps its L0 = 2 largest cells, capped at 6
    assert histogram == {1: 6, 2: 1, 3: 1, 4: 1, 5: 1, 6: 2}
    unit_level = analyse(parse("SELECT r, COUNT(*) FROM t GROUP BY r"), CATALOG)
    sql = auto.selection_sql(unit_level, exp.table_("t", quoted=True)).sql("duckdb")
    assert dict(con.execute(sql).fetchall()) == {2: 1, 3: 1, 4: 1, 5: 1, 6: 2}  # one cell per unit: its rows
    # the stored counts: unit-level keys read each unit's row count; a row-level key its stored groups' counts
    assert dict(con.execute(auto.selection_text(unit_level, True, DUCKDB)).fetchall()) == {2: 1, 3: 1, 4: 1, 5: 1,
                                                                                          6: 2}
    stored = dict(con.execute(auto.selection_text(analysis, True, DUCKDB)).fetchall())
    assert sum(stored.values()) == 12 and stored[6] == 2  # unit 9 keeps 2 of its 3 cells (by its group rank)


def test_chosen_bound_follows_the_exact_mechanism() -> None:
    """The bound is the exponential mechanism's draw by the error it causes (mechanisms/count_target.py): its
    frequencies over 4000 draws match the exact output distribution (chi-squared at a fixed error rate of 1e-4),
    and it lands where the cells it truncates balance the target (N(k) = t = 50 at k = 3 and 4) most of the time."""
    histogram_rows = [(1, 300), (2, 100), (3, 50), (5, 40), (8, 10)]
    grid = auto.bound_grid(8)
    assert grid == (1, 2, 3, 4, 6, 8)
    counts = [0] * len(grid)
    sampler = SecureSampler()
    draws = 4000
    for _ in range(draws):
        k = auto.choose_bound(histogram_rows, limit=8, target=50, epsilon=0.5, sensitivity=2, sampler=sampler)
        counts[grid.index(k)] += 1
    above = [200, 100, 50, 50, 10, 0]  # cells beyond each candidate (5 rows count at 6, the bound that keeps them)
    assert count_target.counts_above([300, 100, 50, 0, 40, 10]) == above
    expected = [p * draws for p in count_target.output_distribution(above, Fraction(50), Fraction(1, 2), 2)]
    pooled = [(o, e) for o, e in zip(counts, expected, strict=True) if e >= 5]
    rest = (sum(counts) - sum(o for o, _ in pooled), draws - sum(e for _, e in pooled))
    chi2 = sum((o - e) ** 2 / e for o, e in [*pooled, rest] if e > 0)
    assert chi2 < 25.74  # chi-squared quantile 1 − 1e-4 at up to 6 degrees of freedom (a fixed false-alarm rate)
    assert counts[2] + counts[3] > draws / 2


def test_one_cell_per_unit_draws_by_the_truncated_rows_too() -> None:
    """With one cell per unit (sensitivity 1) the bound is the joint draw (count_target.joint_numerators: the
    truncated cells at 2/3 of ε, the truncated rows clipped at 64 at the rest, base measure e^(−7/20)): its
    frequencies over 4000 draws match that exact distribution (chi-squared at a fixed error rate of 1e-4), not the
    count's alone, which a few heavy units (40 of 2 000 with 200 rows) cannot pull above them: the joint draws
    k >= 181 in most answers, the count's score in under a third."""
    histogram_rows = [(10, 2000), (200, 40)]
    grid = auto.bound_grid(256)
    counts = [0] * len(grid)
    sampler = SecureSampler()
    draws = 4000
    for _ in range(draws):
        k = auto.choose_bound(histogram_rows, limit=256, target=3, epsilon=Fraction(1, 4), sensitivity=1,
                              sampler=sampler)
        counts[grid.index(k)] += 1
    points = [0] * len(grid)
    for c, n in histogram_rows:
        points[next(i for i, k in enumerate(grid) if k >= c)] += n
    above = count_target.counts_above(points)
    truncated = count_target.clipped_truncation(histogram_rows, grid, 64)
    exact = count_target.joint_distribution(above, Fraction(3), truncated, grid, Fraction(1, 4), 1, 64,
                                            Fraction(7, 20), 0, Fraction(2, 3))
    expected = [p * draws for p in exact]
    pooled = [(o, e) for o, e in zip(counts, expected, strict=True) if e >= 5]
    rest = (sum(counts) - sum(o for o, _ in pooled), draws - sum(e for _, e in pooled))
    chi2 = sum((o - e) ** 2 / e for o, e in [*pooled, rest] if e > 0)
    assert chi2 < 27.88  # chi-squared quantile 1 − 1e-4 at up to 7 degrees of freedom (a fixed false-alarm rate)
    heavy = grid.index(181)
    assert sum(counts[heavy:]) > draws / 2
    assert sum(count_target.output_distribution(above, Fraction(3), Fraction(1, 4), 1)[heavy:]) < 1 / 3


@pytest.mark.parametrize("query", ["SELECT COUNT(DISTINCT uid) FROM t",
                                   "SELECT g, COUNT(DISTINCT uid) FROM t GROUP BY g"])
def test_a_count_of_units_spends_nothing_choosing_rows(query: str) -> None:
    """max_rows cannot move a count of units (1 per group whatever k is): no selection runs, the query gets the
    whole ε, and its noise is that of the same query on a table with max_rows fixed at the limit (issue #29)."""
    planned = plan(query, CATALOG, epsilon=0.5, delta=1e-6, mechanism="laplace")
    fixed = plan(query, Catalog((TableSchema("t", "uid", TABLE.columns, max_groups=2, max_rows=6),)), epsilon=0.5,
                 delta=1e-6, mechanism="laplace")
    assert not auto.needed(planned.analysis) and (planned.auto is None or not planned.auto.parts)
    assert planned.price.event == fixed.price.event and planned.price.epsilon == fixed.price.epsilon
    assert [(n.sensitivity, n.scale) for n in planned.price.noise] == [(n.sensitivity, n.scale)
                                                                       for n in fixed.price.noise]
