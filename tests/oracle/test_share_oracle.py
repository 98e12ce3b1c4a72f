"""The selection at the split chosen by expected error (docs/privacy.md §10.9, proxy/query/auto/share.py) on
neighbouring datasets: with share limits, the caps run at a larger ε than the even split gives them, the other
bounds at a smaller one. On D and D minus one unit, with data breaking every declaration (tests/oracle/
test_sensitivity.py's rows), every histogram the parts read, from the store's ranks and per query, gives exact
output distributions whose log ratio is at most each part's own ε (a per-unit total cap: every unit in one bin,
the score −|N_i − t| of sensitivity 1; max_rows and max_groups as tests/query/test_auto_groups_clamp.py checks
them), and the parts add up to at most the selection's share of the charge."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mechanisms.rounding import down
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import fixed_point
from proxy.query.auto import bounds as auto
from proxy.query.auto import total
from proxy.query.auto.histograms import standalone
from proxy.query.planner import plan
from proxy.query.rewrite.render import DUCKDB
from tests.oracle.test_sensitivity import rows
from tests.query.test_auto_groups_clamp import AUTO, CATALOG, _first_parts, _on_store, assert_choice_within

QUERIES = [
    "SELECT g, COUNT(*), SUM(x), AVG(n) FROM t GROUP BY g",  # rows, groups and two caps
    "SELECT COUNT(*), SUM(x) FROM t WHERE n > 2",  # rows and a cap, a row-level WHERE
    "SELECT r, AVG(x) FROM t GROUP BY r",  # a unit-level key: rows and a cap
]
LIMITS = (0.1, 0.5)


def cap_distribution(analysis: Analysis, part: auto.AutoPart, found: list[tuple[object, ...]],
                     target: Fraction) -> list[float]:
    """P[C = C_i] of the cap's mechanism (total.choose_cap) on the (bin, 0, units) rows, at the part's ε."""
    spec = AUTO.column(part.column or "")
    assert spec is not None
    grid = total.cap_grid(total.total_limit(analysis, spec))
    above = total.counts_above(found, len(grid))
    _, lo, hi = fixed_point(spec)
    anchor = max(i for i, c in enumerate(grid) if c <= max(1, max(abs(lo), abs(hi))))
    numerators, denominator = total.exponents(above, target, part.epsilon, anchor)
    least = min(numerators)
    weights = [math.exp(-(n - least) / denominator) for n in numerators]
    return [w / math.fsum(weights) for w in weights]


@pytest.mark.parametrize("query", QUERIES)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=rows, removed=st.integers(0, 5), epsilon=st.sampled_from([0.02, 0.1, 1.0]))
@example(data=[(0, g, r, "a", 1e300, 2**31 - 1) for g in "abcd" for r in "NSE" for _ in range(5)], removed=0,
         epsilon=0.1)
def test_every_part_at_the_chosen_split_stays_within_its_epsilon(
    query: str, data: list[tuple[object, ...]], removed: int, epsilon: float,
) -> None:
    planned = plan(query, CATALOG, epsilon=epsilon, delta=1e-7, mechanism="laplace", auto_share=LIMITS)
    chooser, analysis = planned.auto, planned.analysis
    assert chooser is not None and chooser.parts
    share, weights = auto.selection_share(analysis, epsilon, LIMITS)
    kinds = [p.bound for p in chooser.parts]
    assert share > LIMITS[0] and kinds.count("total") >= 1  # the caps' split, not the even one
    assert sum(weights) == 1 and chooser.epsilon <= Fraction(down(Fraction(epsilon) * Fraction(share)))
    for part, weight in zip(chooser.parts, weights, strict=True):
        assert part.epsilon <= Fraction(epsilon) * Fraction(share) * weight
    assert planned.price.epsilon <= epsilon
    firsts = _first_parts(chooser)
    sqls = [f"SELECT __a, __b, __n FROM ({sql})" for store in (True, False)
            for sql in standalone(analysis, chooser, store, DUCKDB)]
    smaller = [row for row in data if row[0] != removed]
    big, small = _on_store(sqls, data), _on_store(sqls, smaller)
    for i, (one, other) in enumerate(zip(big, small, strict=True)):
        part, _ = firsts[i % len(firsts)]
        if part.bound != "total":
            assert_choice_within(part, one, other, query)
            continue
        for target in (Fraction(0), Fraction(1, 3), Fraction(part.q), Fraction(40)):
            p, q = cap_distribution(analysis, part, one, target), cap_distribution(analysis, part, other, target)
            worst = max(abs(math.log(a / b)) for a, b in zip(p, q, strict=True))
            assert worst <= float(part.epsilon) * (1 + 1e-9), (query, part.column, float(target), worst)
