"""Quantiles (MEDIAN, QUANTILE_CONT, MIN, MAX …) under automatic bounds (docs/privacy.md §10.4).

A quantile's exponential mechanism scores each grid point by its rank distance d_i to q·n; one unit with at
most s rows in a group moves every d_i by at most Δ(q, s) = max(q, 1 − q)·s (mechanisms/dp_quantile.py), so
its per-group ε is 2Δ(q, s)/T. The query is charged at the limits (s = K, G groups: ExponentialEvent(2Δ(q, K)·G,
T_L)); at the chosen max_rows k <= K and max_groups g <= G the temperature is rescaled to
T_k = 2Δ(q, k)/ε_L rounded up, ε_L = 2Δ(q, K)/T_L, so each group's ε is at most ε_L and the g groups a unit
reaches compose to at most the charged ε. On a column with `bounds = "auto"` the grid is the chosen clamp
[L, U] (auto/clamp.py), not the declared limit: Δ does not depend on the grid, which is a function of the
privately chosen bound, and 1001 points over [0, 100000] could not resolve a median of 20. Several quantiles
of one column released jointly (quantiles.JointSpec: a noisy count, the root, the chain levels) are rescaled
alike, stage by stage (`joint_at_bound`): each stage keeps its per-group ε at the limits.

Example:
    >>> from fractions import Fraction
    >>> from accountant.events import ExponentialEvent
    >>> at_limit = QuantileSpec(0, 0, Fraction(1, 2), 1000, 100.0, ExponentialEvent(8000, 100.0), 0.0)
    >>> spec = at_bound(at_limit, 10, 40)
    >>> spec.max_rows, spec.scale, spec.epsilon <= at_limit.epsilon, spec.event == at_limit.event
    (10, 1.0, True, True)
    >>> from proxy.query.price.quantiles import calibrate_joint
    >>> joint = calibrate_joint((0, 1, 2), 0, (Fraction(0), Fraction(1, 2), Fraction(1)), 0.3, max_rows=100,
    ...                         max_groups=1)
    >>> small = joint_at_bound(joint, 4)
    >>> small.max_rows, small.events == joint.events, small.level_epsilon <= joint.level_epsilon
    (4, True, True)
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from mechanisms import dp_quantile, joint_quantiles
from mechanisms.rounding import up
from proxy.query.analyse.analysis import Analysis
from proxy.query.price.quantiles import JointSpec, QuantileSpec


def serves(analysis: Analysis) -> bool:
    """Whether the bound selection serves this query: aggregates of columns (not of expressions, whose range
    is fixed by interval arithmetic at the declared bounds; a DATE column's day number is no such expression).
    Quantiles are served one by one and jointly (three or
    more of one column, `joint_at_bound`), spreads and FILTER too (every measure's sensitivity is monotone in every
    bound), and so are joins and computed keys: the selection reads the query's own virtual table
    (auto/histograms.py), whose every row is one unit's (joins are on the unit, docs/privacy.md §10.5).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("x", "DOUBLE", bounds=(0, 9))))
        >>> [serves(analyse(parse(q), Catalog((t,)))) for q in ("SELECT MEDIAN(x), COUNT(*) FROM t",
        ...     "SELECT MIN(x), MEDIAN(x), MAX(x) FROM t", "SELECT MEDIAN(x), VARIANCE(x) FROM t",
        ...     "SELECT SUM(x * 2) FROM t")]
        [True, True, True, False]
    """
    # a DATE histogram's per-row day number (measures.date_histogram) is ours, not an analyst's expression: its grid
    # is the declared days, which no chosen bound changes
    return not any(m.expr and not m.epoch for m in analysis.measures)


def at_bound(spec: QuantileSpec, k: int, points: int) -> QuantileSpec:
    """`spec` (at the limit's max_rows) at max_rows k <= spec.max_rows: the same per-group ε at most, the same
    charged event."""
    assert 1 <= k <= spec.max_rows
    two_delta = 2 * dp_quantile.score_sensitivity(spec.q, k)
    scale = up(two_delta / spec.epsilon)
    per_group = two_delta / Fraction(scale)
    assert per_group <= spec.epsilon
    bound = dp_quantile.rank_error(spec.q, float(per_group), k, max(points, 1), 0.05)
    return dataclasses.replace(spec, max_rows=k, scale=scale, rank_error95=bound)


def joint_at_bound(spec: JointSpec, k: int) -> JointSpec:
    """`spec` (a joint release priced at the limit's max_rows K) at max_rows k <= K: every stage keeps its per-group
    ε at the limits, each scale rescaled from it and rounded up (docs/privacy.md §10.4): the count's b_k = ⌈k/ε_c⌉
    (ε_c = K/b_K), the root's T_k = ⌈2Δ(q_r, k)/ε_root⌉, a level's T_k = ⌈2k/ε_level⌉; the charged events unchanged."""
    assert 1 <= k <= spec.max_rows
    count = Fraction(spec.max_rows) / Fraction(spec.count_scale)
    root_q = spec.qs[joint_quantiles.root(spec.qs)]
    rescaled = dataclasses.replace(
        spec, max_rows=k, count_scale=up(Fraction(k) / count),
        root_scale=up(2 * dp_quantile.score_sensitivity(root_q, k) / spec.root_epsilon),
        level_scale=up(2 * Fraction(k) / spec.level_epsilon))
    assert Fraction(k) / Fraction(rescaled.count_scale) <= count
    assert rescaled.root_epsilon <= spec.root_epsilon and rescaled.level_epsilon <= spec.level_epsilon
    return rescaled


def clamp_q(analysis: Analysis, column: str, upper: bool, q: float) -> float:
    """The quantile a clamp bound of `column` draws (the lower bound draws 1 − this, auto_release.draw): `q` where
    the column is summed; where it is only ranked, halfway from its quantiles to the end, so the clamp keeps
    every quantile asked (MEDIAN: the upper bound at the 0.75-quantile) while the grid stays fine. A function
    of the query alone, fixed before any data is read.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("x", "DOUBLE", bounds=(-9, 9))))
        >>> a = analyse(parse("SELECT MEDIAN(x), QUANTILE_CONT(x, 0.9) FROM t"), Catalog((t,)))
        >>> clamp_q(a, "x", True, 0.99), clamp_q(a, "x", False, 0.99)
        (0.95, 0.75)
    """
    name = column.lower()
    if any((m.column or "").lower() == name and m.kind != "histogram" for m in analysis.measures):
        return q
    asked = [a.q for a in analysis.aggregates if a.kind == "quantile" and (a.column or "").lower() == name]
    assert asked and all(x is not None for x in asked)
    return float((1 + max(asked)) / 2) if upper else float(1 - min(asked) / 2)  # type: ignore[type-var, operator]

