"""`mechanism = "auto"`: each query gets the noise with the smaller expected error for its shape (issue #29 item 7,
docs/privacy.md §2.1).

Laplace noise on a release over L0 groups per unit scales with L0 (its L1 sensitivity), discrete Gaussian noise
with √L0 (its L2 sensitivity) but pays a factor that grows as δ shrinks: one group per unit favours Laplace, a
time series or two row-level keys favour the Gaussian. The query is planned both ways — under the dataset's
accounting rule, at the requested (ε, δ) — and the plan whose error bars are narrower is run. A plan's error is
the geometric mean of the 95 % half-widths of its noisy quantities (each measure's `ci95`, in grid units, and
for private partitions the release threshold, the count below which a group is likely left out): scale-free,
so a count and a sum of amounts weigh alike. A tie goes to Laplace (pure ε, no δ spent on noise).

The choice reads only the request and the policy — both plans are priced before any data is read — so it is
free: it is post-processing of public inputs, and the query is then exactly the chosen mechanism's query. With
δ = 0 or a given `noise_multiplier` (the noise is then what was asked, per L1 sensitivity) it is Laplace; a
Gaussian plan the accounting cannot calibrate (σ outside the proven range under `gdp`) is not a candidate.

Example:
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("day", "INTEGER", groupable=True)),
    ...                 max_rows=5, max_groups=16)
    >>> def chosen(sql): return plan_by_error(sql, Catalog((t,)), epsilon=0.1, delta=1e-8).price.mechanism
    >>> chosen("SELECT day, COUNT(*) FROM v GROUP BY day"), chosen("SELECT COUNT(*) FROM v")
    ('gaussian', 'laplace')
"""

from __future__ import annotations

import math
from typing import Any

from proxy.query.catalog import Catalog, Mechanism, MechanismChoice
from proxy.query.errors import InvalidParameter
from proxy.query.planner import QueryPlan, plan
from proxy.query.price.charge import Price

CANDIDATES: tuple[Mechanism, ...] = ("laplace", "gaussian")  # in the order a tie is settled


def expected_error(price: Price) -> float:
    """The log of the geometric mean of a plan's 95 % half-widths: its noisy measures' and its threshold's.

    Example:
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"),), max_rows=5)
        >>> p = plan("SELECT COUNT(*) FROM v", Catalog((t,)), epsilon=1.0, delta=0.0, mechanism="laplace")
        >>> p.price.noise[0].ci95, round(math.exp(expected_error(p.price)), 6)  # b = 5, ⌈5·ln 20⌉ = 15
        (15, 15.0)
    """
    widths = [float(spec.ci95) for spec in price.noise]
    if price.selection is not None:
        widths.append(float(price.selection.threshold))
    if not widths:
        return 0.0
    return math.fsum(math.log(max(width, 1.0)) for width in widths) / len(widths)


def plan_by_error(sql: str, catalog: Catalog, *, epsilon: float, delta: float, **options: Any) -> QueryPlan:
    """The query planned with each mechanism the request allows, the one with the smaller `expected_error`.

    `options` are `planner.plan`'s other arguments. Refusals of the query itself (its SQL, its policy) come from
    the Laplace plan, planned first, exactly as a `laplace` dataset would raise them.
    """
    laplace = plan(sql, catalog, epsilon=epsilon, delta=delta, mechanism="laplace", **options)
    if delta <= 0.0 or options.get("noise_multiplier") is not None:
        return laplace
    try:
        gaussian = plan(sql, catalog, epsilon=epsilon, delta=delta, mechanism="gaussian", **options)
    except InvalidParameter:  # e.g. a σ outside the proven range under gdp: not a candidate
        return laplace
    return gaussian if expected_error(gaussian.price) < expected_error(laplace.price) else laplace


def plan_with(sql: str, catalog: Catalog, *, mechanism: MechanismChoice, epsilon: float, delta: float,
              **options: Any) -> QueryPlan:
    """`planner.plan` for a dataset's or a request's mechanism: the plan by error for "auto", else that one's.

    Example:
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> c = Catalog((TableSchema("v", "u", (ColumnSpec("u", "BIGINT"),)),))
        >>> plan_with("SELECT COUNT(*) FROM v", c, mechanism="gaussian", epsilon=1.0, delta=1e-6).price.mechanism
        'gaussian'
    """
    if mechanism == "auto":
        return plan_by_error(sql, catalog, epsilon=epsilon, delta=delta, **options)
    return plan(sql, catalog, epsilon=epsilon, delta=delta, mechanism=mechanism, **options)
