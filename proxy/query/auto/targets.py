"""Each bound's target, the balance of bias and noise its selection aims at (issue #29, Amin et al., ICML 2019;
docs/privacy.md §10, §10.2): a function of the plan alone (the released groups, the measures' ε at the limits),
never of the data, so every selection score stays a count with a public target.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

from mechanisms import laplace
from proxy.query.analyse.analysis import Analysis
from proxy.query.auto import total
from proxy.query.auto.parts import AutoBounds
from proxy.query.price.charge import Price


def with_targets(chooser: AutoBounds, analysis: Analysis, priced: Price) -> AutoBounds:
    """The selection with each part's target in its `q` (the bound is then chosen by the error it causes,
    mechanisms/count_target.py): an L1 cap's t = √2·G/ε_sum (total.target_above); max_rows' and max_groups'
    τ = √2·G/ε_count (`cell_target`), the items a bound may leave truncated per cell a unit may keep. G is the
    number of groups released (the public domains' product; 1 without keys, or when the groups are not public: a
    smaller target chooses a larger bound, the unbiased side), ε the ε the plan gives the measure. A query of quantiles
    alone chooses max_rows at a share ρ of its cells instead (`rows_share`)."""
    groups = released_groups(analysis)
    parts = []
    for part in chooser.parts:
        if part.bound == "total":
            j = next(j for j, m in enumerate(analysis.measures) if m.kind == "sum" and m.column == part.column)
            spec = next(n for n in priced.noise if n.measure == j)
            epsilon = laplace.epsilon(spec.sensitivity, spec.scale)
            # a sum of sensitivity 0 (bounds that round to 0 on the grid, as ±1e-300) is 0 whatever the cap: any
            # target serves, and t = 0 keeps the planner from dividing by its ε of 0
            target = total.target_above(groups, epsilon) if epsilon > 0 else 0
            part = dataclasses.replace(part, q=float(target))
        elif part.bound == "max_rows" and (share := rows_share(analysis)) is not None:
            part = dataclasses.replace(part, q=float(share), relative=True)
        elif part.bound in ("max_rows", "max_groups"):
            part = dataclasses.replace(part, q=cell_target(analysis, priced))
        parts.append(part)
    return dataclasses.replace(chooser, parts=tuple(parts))


def released_groups(analysis: Analysis) -> int:
    """G: the groups a release shows, where they are public (the domains' product), else 1 (no keys, or private
    partitions: their number is itself private)."""
    return math.prod(len(d) for d in analysis.domains) if analysis.partitions == "public" and analysis.keys else 1


# measures whose per-group sensitivity is one per kept row: a truncated row costs them exactly 1 (bias), and their
# noise grows by √2·b/k per unit of the bound (Laplace; σ/k Gaussian)
COUNTED = ("rows", "values")


def cell_target(analysis: Analysis, priced: Price) -> float:
    """τ: the error-optimal number of truncated cells per cell a unit may keep (Amin et al., ICML 2019). For a count
    over G released groups at bounds (k, g), the error is bias(k) + G·std(k), bias(k) = Σ_cells max(0, n − k) and
    std(k) = √2·g·k/ε_j (Laplace of scale g·k/ε_j per group); d/dk = −N(k) + √2·G·g/ε_j vanishes where N(k) = τ·g,
    τ = √2·G/ε_j: rows.choose_bound aims at N = τ·g, max_groups at τ units beyond g (a dropped group costs about
    k rows, a group more about √2·G·k/ε_j of noise). ε_j is the count's share at the limits (fixed before any data
    is read); with several counts, the largest (the smallest τ: the larger bound, the unbiased side). Gaussian:
    std(k) = σ_L·k/K at g = L0, so τ = G·σ_L/(Δ2_L·√L0). Without a count (a sum on a one-row table, quantiles),
    the count form of the query's ε: the same slope for a measure whose bias per truncated row is at most its
    noise per unit of bound. A public function of the plan, so the score stays a count with a target.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> from proxy.query.price.charge import price
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True,
        ...     public_domain=("a", "b"))), max_rows=100, auto_max_rows=True)
        >>> a = analyse(parse("SELECT g, COUNT(*) FROM t GROUP BY g"), Catalog((t,)))
        >>> round(cell_target(a, price(a, epsilon=0.5, delta=0.0, mechanism="laplace")), 3)  # √2·2/0.5
        5.657
    """
    groups = released_groups(analysis)
    targets = []
    for spec in priced.noise:
        if not spec.sensitivity or analysis.measures[spec.measure].kind not in COUNTED:
            continue
        if spec.mechanism == "gaussian":
            targets.append(groups * spec.scale / (spec.sensitivity * math.sqrt(max(1, analysis.max_groups))))
        else:
            targets.append(math.sqrt(2) * groups / float(laplace.epsilon(spec.sensitivity, spec.scale)))
    if not targets:
        targets.append(math.sqrt(2) * groups / priced.epsilon if priced.epsilon > 0 else 0.0)
    return min(targets)


# ρ: a quantile-only query's max_rows is drawn where this share of the cells has more rows (rows_share); an
# AVG-only query's where a tenth has (AVG_SHARE)
ROWS_SHARE = Fraction(1, 2)
AVG_SHARE = Fraction(1, 10)


def rows_share(analysis: Analysis) -> Fraction | None:
    """ρ for a query whose every measure is a quantile's histogram, or whose every aggregate is an AVG (None
    otherwise): its max_rows is drawn where N(k) = ρ·C, C the cells the selection reads (count_target.share_index),
    not at a count's τ·g.

    Why (the error objective of `cell_target`, for a quantile). A quantile's exponential mechanism pays k in its
    score's sensitivity Δ(q, k) = max(q, 1 − q)·k: its rank error is ∝ T_k = 2Δ(q, k)/ε_L = k·T_1, and what that
    error means is its share of the rows ranked, T_k/n'(k), n'(k) = Σ_c min(n_c, k) the kept rows. n'(k) <= k·C,
    so T_k/n'(k) >= T_1/C for every k: the least, reached at k = 1. Where N(k) >= ρ·C cells have more than k rows,
    n'(k) >= k·ρ·C and T_k/n'(k) <= T_1/(ρ·C): within 1/ρ of the least. Truncation, against it, displaces a
    quantile's rank only as far as a unit's dropped rows differ from the rows kept (rows alike: not at all in
    expectation; what remains is the kept subsample's own sampling error √(q(1 − q)·(1/n' − 1/n)) in quantile
    level, which falls as k grows): a truncated row costs a quantile far less than the one row of bias it costs a
    count, whose target τ·g = √2·G·g/ε_j balances exactly that. So the bound is the largest whose noise stays
    within 1/ρ of its least: N(k) = ρ·C; ρ = 1/2 (at most twice the least, k about the median cell). ρ reads no
    data; C does, and the score −|N_i − ρ·C| moves by at most max(ρ, 1 − ρ)·s for s cells a unit adds (as a DP
    quantile's score, docs/privacy.md §9), which the draw is calibrated to: the same ε_i, the same event.

    A query whose every aggregate is an AVG draws at ρ = 1/10 (`AVG_SHARE`, k about the cells' 90th percentile):
    a truncated row costs an average only as far as the dropped rows differ from the kept ones, while a larger k
    lets the unit's total cap (docs/privacy.md §10.2) scale its sum and not its count, a bias that grows with k
    (AVG(duration_s) by region: 0.2 % at k = 23, 0.5–1.2 % at k = 128–362, bench/README.md); the count's target
    drew k = 91–181 there. A tenth rather than a half keeps the rows of units with many rows where they carry a
    different average (AVG(amount) by region: k = 23 costs 1.5× the error of k = 128).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("x", "DOUBLE", bounds=(0, 9))),
        ...     max_rows=100, auto_max_rows=True)
        >>> [rows_share(analyse(parse(q), Catalog((t,)))) for q in ("SELECT MEDIAN(x), QUANTILE_CONT(x, 0.9) FROM t",
        ...     "SELECT MEDIAN(x), COUNT(*) FROM t", "SELECT AVG(x) FROM t", "SELECT AVG(x), COUNT(*) FROM t")]
        [Fraction(1, 2), None, Fraction(1, 10), None]
    """
    measures, aggregates = analysis.measures, analysis.aggregates
    if measures and all(m.kind == "histogram" for m in measures):
        return ROWS_SHARE
    return AVG_SHARE if aggregates and all(a.kind == "avg" for a in aggregates) else None
