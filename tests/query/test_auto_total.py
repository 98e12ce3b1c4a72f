"""The per-unit L1 cap of SUM and AVG of a column with bounds = "auto" (proxy/query/auto/total.py, docs/privacy.md
§10.2): the target t, the grid, the exact scaling (Σ|scaled| <= C), the charge at every C, the selection's privacy
ratio, and a release without the scaling failing the neighbouring-dataset check the capped one passes."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from mechanisms import laplace
from mechanisms.sampling import FixedSampler
from proxy.query.analyse.analysis import analyse
from proxy.query.analyse.measures import Measure
from proxy.query.auto import bounds as auto
from proxy.query.auto import total as auto_total
from proxy.query.parse.statement import parse
from proxy.query.planner import plan
from proxy.query.rewrite import caps
from proxy.query.rewrite.on_store import rewrite_ranked
from proxy.query.rewrite.per_query import rewrite
from tests.query.test_auto_groups_clamp import AUTO, CATALOG, _keyed, _on_store, assert_release_within
from tests.support import scratch_db


def test_the_target_and_the_grid() -> None:
    assert auto_total.target_above(8, 0.5) == Fraction(math.sqrt(2) * 16)
    assert auto_total.target_above(0, 2.0) == Fraction(math.sqrt(2) / 2)  # no groups known: G = 1
    assert auto_total.cap_grid(1) == (1,)
    assert auto_total.cap_grid(5) == (1, 1, 2, 2, 4, 5)
    grid = auto_total.cap_grid(10**15)
    assert grid[-1] == 10**15 and grid[-2] < 10**15 and all(b / a <= 2 for a, b in itertools.pairwise(grid))
    assert grid[60] == 2**30 and grid[61] == math.isqrt(2**61)
    assert auto_total.counts_above([(0, 0, 2), (3, 0, 5), (99, 0, 1)], 5) == [6, 6, 6, 1, 0]


def test_the_plan_targets_t_from_its_groups_and_the_sums_epsilon() -> None:
    planned = plan("SELECT p, SUM(x), AVG(x) FROM t GROUP BY p", CATALOG, epsilon=1.0, delta=1e-7,
                   mechanism="laplace", bounding="store")
    assert planned.auto is not None
    total = planned.auto.part("total", "x")
    assert total is not None and total.sensitivity == 1 and total.limit == 3 * 6 * 5.5
    (sum_noise,) = [n for n in planned.price.noise if planned.analysis.measures[n.measure].kind == "sum"]
    epsilon_sum = laplace.epsilon(sum_noise.sensitivity, sum_noise.scale)
    assert total.q == float(auto_total.target_above(2, epsilon_sum))  # p's public domain: 2 groups
    assert [m.kind for m in planned.analysis.measures] == ["sum", "values"]  # AVG = capped SUM / COUNT


def test_the_charge_covers_every_cap() -> None:
    """At every C of the grid (and every k, g), each noise part costs at most what the admitted event records, and the
    capped sum's sensitivity is exactly min(C, g·k·max|bound|)."""
    planned = plan("SELECT g, COUNT(*), SUM(x), AVG(n) FROM t GROUP BY g", CATALOG, epsilon=0.7, delta=1e-7,
                   mechanism="laplace", bounding="store")
    recorded = [laplace.epsilon(n.sensitivity, n.scale) for n in planned.price.noise]
    grids = {c: auto_total.cap_grid(auto_total.total_limit(planned.analysis, AUTO.column(c)))  # type: ignore[arg-type]
             for c in ("x", "n")}
    checked = 0
    for k in auto.bound_grid(6):
        for g in (1, 2, 3):
            for i in range(0, max(len(v) for v in grids.values()), 3):
                caps = tuple((c, grid[min(i, len(grid) - 1)]) for c, grid in grids.items())
                at = auto.at_bound(planned.analysis, k, g, (), caps)
                priced = auto.price_at(planned.price, at, k)
                assert priced.event == planned.price.event and priced.epsilon == planned.price.epsilon
                for spec, part in zip(priced.noise, recorded, strict=True):
                    measure = at.measures[spec.measure]
                    full = g * measure.sensitivity(k)
                    assert spec.sensitivity == (min(full, measure.cap) if measure.cap else full)
                    assert laplace.epsilon(spec.sensitivity, spec.scale) <= part
                checked += 1
    assert checked > 100


values = st.one_of(st.integers(-(2**40), 2**40), st.integers(-(2**62), 2**62))


@settings(max_examples=30, deadline=None)
@given(cells=st.lists(st.tuples(st.integers(0, 4), values), max_size=30), cap=st.integers(1, 2**62))
@example(cells=[(0, 3), (0, 3), (0, 3)], cap=3)  # |v|·C/T exactly an integer
@example(cells=[(0, 2**62), (0, -(2**62)), (0, 2**62 - 1)], cap=2**62 - 3)  # totals beyond 2^53 and 2^63
def test_the_scaling_keeps_every_unit_within_its_cap(cells: list[tuple[int, int]], cap: int) -> None:
    con = scratch_db.connect()
    con.execute("CREATE TABLE c (__unit BIGINT, v BIGINT)")
    if cells:
        con.executemany("INSERT INTO c VALUES (?, ?)", cells)
    sql = caps.capped_cells([Measure("sum", "x", 1, 0, 1, cap=cap)], ["v"], "__unit", "c").sql("duckdb")
    rows = con.execute(f"SELECT __unit, v, v__capped FROM ({sql})").fetchall()
    totals: dict[int, int] = {}
    for unit, v, _ in rows:
        totals[unit] = totals.get(unit, 0) + abs(v)
    for unit, total in totals.items():
        mine = [(v, s) for u, v, s in rows if u == unit]
        assert sum(abs(s) for _, s in mine) <= cap or total <= cap
        for v, s in mine:
            assert abs(s) <= abs(v) and (s == 0 or (s > 0) == (v > 0))
            assert s == v if total <= cap else abs(s) <= abs(v) * cap // total
        assert sum(abs(s) for _, s in mine) <= min(cap, total)


def test_the_selection_is_epsilon_dp_between_neighbours() -> None:
    """The exact output distribution of the cap, for a histogram and the same one with one unit removed from any
    bin: every probability ratio is within e^ε (the base measure and t read no data)."""
    epsilon, t = Fraction(1, 10), Fraction(7, 2)
    base = [(0, 0, 40), (5, 0, 12), (9, 0, 3), (14, 0, 1)]

    def distribution(rows: list[tuple[int, int, int]]) -> list[float]:
        grid = auto_total.cap_grid(2**10)
        numerators, denominator = auto_total.exponents(auto_total.counts_above(rows, len(grid)), t, epsilon, 12)
        weights = [math.exp(-n / denominator) for n in numerators]
        return [w / math.fsum(weights) for w in weights]

    p = distribution(base)
    for i in range(len(base)):
        neighbour = [(a, b, n - (j == i)) for j, (a, b, n) in enumerate(base)]
        q = distribution(neighbour)
        assert max(max(x / y, y / x) for x, y in zip(p, q, strict=True)) <= math.exp(float(epsilon)) * (1 + 1e-12)
    # the most likely cap: C_5 = 5, the first candidate leaving 4 units above it (t = 3.5)
    assert auto_total.choose_cap(base, limit=2**10, magnitude=2**6, t=t, epsilon=epsilon, sampler=FixedSampler()) == 5


UNSCALED_DATA = [(0, g, "N", "a", 5.5, 10) for g in "abc" for _ in range(6)] + [(1, "a", "N", "a", 1.0, 1)]


@pytest.mark.parametrize("query", ["SELECT g, SUM(x), AVG(n) FROM t GROUP BY g",
                                   "SELECT g, SUM(n) FROM t WHERE n > 2 GROUP BY g"])
def test_a_release_without_the_scaling_fails_the_check_the_capped_one_passes(query: str) -> None:
    """Unit 0 puts 6 rows at the limit in each of 3 groups: at a small C its total moves the sums by far more than
    C unless its cells are scaled together. Both the store and the per-query SQL are checked."""
    analysis = analyse(parse(query), CATALOG, canonical_units=True)
    caps = tuple((c, 7) for c in ("x", "n") if analysis.table.column(c) and c in query)
    at = auto.at_bound(analysis, 6, 3, (), caps)
    unscaled = auto.at_bound(analysis, 6, 3)  # the same bounds, every cap left out of the SQL
    smaller = [row for row in UNSCALED_DATA if row[0] != 0]
    n_keys = len(analysis.keys)
    for render in (rewrite_ranked, rewrite):
        for sqls, passes in (((render(auto.for_sql(at, AUTO)),), True),
                             ((render(auto.for_sql(unscaled, AUTO)),), False)):
            (before,), (after,) = (_on_store(list(sqls), d) for d in (UNSCALED_DATA, smaller))
            if passes:
                assert_release_within(_keyed(before, n_keys), _keyed(after, n_keys), at, 6, query)
            else:
                with pytest.raises(AssertionError):
                    assert_release_within(_keyed(before, n_keys), _keyed(after, n_keys), at, 6, query)


def test_a_sum_keeps_its_cap_and_declared_clamp_when_the_columns_median_chooses_a_clamp() -> None:
    """SUM and MEDIAN of one auto column in one query: the sum is capped (its sensitivity min(C, g·k·M) reads the
    declared clamp M), the median's grid is the chosen clamp; the sum's measure is exactly the one a query of the
    sum alone runs at the same cap, so the clamp chosen for the median never reaches it."""
    mixed = analyse(parse("SELECT g, SUM(x), MEDIAN(x) FROM t GROUP BY g"), CATALOG, canonical_units=True)
    alone = analyse(parse("SELECT g, SUM(x) FROM t GROUP BY g"), CATALOG, canonical_units=True)
    spec = mixed.table.column("x")
    assert spec is not None and spec.bounds is not None
    assert ("total", spec) in auto.needed(mixed) and ("upper", spec) in auto.needed(mixed)
    assert auto.needed(alone) == (("total", spec),)
    lo, hi = spec.bounds
    chosen = (lo, lo + (hi - lo) / 4)
    at = auto.at_bound(mixed, 2, 1, (("x", *chosen),), (("x", 7),))
    (summed,) = [m for m in at.measures if m.kind == "sum"]
    (ranked,) = [m for m in at.measures if m.kind == "histogram"]
    assert summed == auto.at_bound(alone, 2, 1, (), (("x", 7),)).measures[0] and summed.cap == 7
    assert summed.release_l1(1, 2) == 7
    declared = auto.at_bound(alone, 2, 1).measures[0]
    assert (summed.lo, summed.hi) == (declared.lo, declared.hi) and (ranked.lo, ranked.hi) != (declared.lo, declared.hi)


@settings(max_examples=300, deadline=None)
@given(above=st.lists(st.integers(0, 10**7), min_size=1, max_size=90),
       t=st.fractions(min_value=0, max_value=10**6, max_denominator=10**9),
       epsilon=st.fractions(min_value=Fraction(1, 10**9), max_value=100, max_denominator=10**12),
       anchor=st.integers(0, 90))
def test_integer_exponents_equal_the_rational_scores(above: list[int], t: Fraction, epsilon: Fraction,
                                                     anchor: int) -> None:
    """`exponents` in integers is exactly ε·|N_i − t|/2 + (7/10)·max(0, i − anchor) over their least common
    denominator, as summing the Fractions gives it."""
    values = [epsilon * abs(n - t) / 2 + auto_total.PRIOR_STEP * max(0, i - anchor) for i, n in enumerate(above)]
    denominator = math.lcm(*(v.denominator for v in values))
    assert auto_total.exponents(above, t, epsilon, anchor) == ([int(v * denominator) for v in values], denominator)
