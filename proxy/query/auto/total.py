"""A per-unit L1 contribution cap C for SUM and AVG of a column with `bounds = "auto"`, chosen per query
(issue #12, docs/privacy.md §10.2).

A per-row clamp cannot serve heavy-tailed values: a clamp high enough to keep the rare large rows makes the
sum's sensitivity g·k·hi enormous, and the q-quantile clamp cuts exactly those rows. Instead every row is
clamped at the declared limit and each unit's kept contributions to the query's cells are scaled together:

    T_u = Σ |v| over all the unit's cells (after max_rows, max_groups and the clamp),
    v  ->  sign(v)·⌊|v|·C/T_u⌋   when T_u > C   (grid units, toward zero),

so Σ_cells |scaled| <= C exactly: the unit's contribution vector has L1 <= C and L2 <= C whatever the number
of groups, and the sum's sensitivity is min(C, g·k·max|bound|). The scaling reads the unit's own rows only.

C is drawn by the exponential mechanism (exact: Sampler.exponential_index) from the histogram of T_u under
the query's WHERE on the grid C_i = ⌊2^(i/2)⌋ (grid units), each unit in one bin (L1 sensitivity 1), with the
score −|N(C_i) − t|, N(c) = #units with T_u > c: the rank-from-the-top target t = √2·G/ε_sum of Amin et al.
(`target_above`). Above the largest per-row value M the candidates get the data-independent base measure
(M/C)^2 (weight e^(−7/10) per √2 step): at a small selection ε the score cannot tell apart the dozens of
candidates above every unit's total, which would otherwise hold most of the mass.

Example:
    >>> cap_grid(40)
    (1, 1, 2, 2, 4, 5, 8, 11, 16, 22, 32, 40)
    >>> round(float(target_above(8, 0.5)), 3)
    22.627
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from sqlglot import exp

from mechanisms.sampling import Sampler
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import fixed_point
from proxy.query.catalog import ColumnSpec
from proxy.query.rewrite import store_layout

PRIOR_STEP = Fraction(7, 10)  # the base measure's exponent per √2 step above M (about ln 2: (M/C)^2)
MAX_CAP = 2**62  # the largest candidate cap (grid units)


def total_limit(analysis: Analysis, spec: ColumnSpec) -> int:
    """The largest total a unit can reach in grid units: L0 · max_rows · max(|lo|, |hi|) at the limits (<= 2^62).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, TableSchema
        >>> x = ColumnSpec("x", "INTEGER", bounds=(0, 100), auto_bounds=True)
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), x), max_rows=5)
        >>> total_limit(analyse(parse("SELECT SUM(x) FROM t"), Catalog((t,))), x)
        500
    """
    _, lo, hi = fixed_point(spec)
    # at most 2^62: a cap there bounds nothing a BIGINT sum can hold anyway, and every scaled value fits BIGINT
    return max(1, min(MAX_CAP, analysis.max_groups * analysis.table.max_rows * max(abs(lo), abs(hi))))


def cap_grid(limit: int) -> tuple[int, ...]:
    """C_i = ⌊2^(i/2)⌋ for i = 0 … I, the first reaching `limit` cut to it: the candidate caps (grid units).
    Bin i of the histogram holds the units with 2^((i−1)/2) < T_u <= 2^(i/2) (bin 0: T_u <= 1)."""
    top = max(0, math.ceil(2 * math.log2(limit)))
    while math.isqrt(2**top) < limit:  # floor(2^(top/2)) by integers: log2 may round
        top += 1
    return tuple(min(limit, _floor_power(i)) for i in range(top + 1))


def _floor_power(i: int) -> int:
    """⌊2^(i/2)⌋ exactly."""
    return 2 ** (i // 2) if i % 2 == 0 else math.isqrt(2**i)


def target_above(groups: int, epsilon_sum: float) -> Fraction:
    """t = √2·G/ε_sum: how many units the error-optimal cap leaves above it (Amin et al., ICML 2019).

    The released sum's error over G groups is bias(C) + G·√2·C/ε_sum (each group's Laplace noise has standard
    deviation √2·C/ε_sum), with bias(C) = Σ_u max(0, T_u − C); its derivative −N(C) + √2·G/ε_sum vanishes at
    N(C) = t. An exact rational of a data-independent number, so the score stays exact.
    """
    return Fraction(math.sqrt(2) * max(1, groups) / epsilon_sum)


def exponents(above: Sequence[int], t: Fraction, epsilon: Fraction, anchor: int,
              below: Fraction = Fraction(0)) -> tuple[list[int], int]:
    """The exponents ε·|N_i − t|/2 + (7/10)·max(0, i − anchor) (P[i] ∝ exp(−exponent)) as integers over one
    denominator; `above[i]` = N(C_i), `anchor` the index of the largest candidate <= M.

    Example:
        >>> exponents([3, 1, 0], Fraction(1), Fraction(1), 2), exponents([3, 1, 0], Fraction(1), Fraction(1), 0)
        (([2, 0, 1], 2), ([10, 7, 19], 10))
    """
    # In integers over D = lcm(2·den(ε)·den(t), den(step)), then reduced: the same pair as summing the Fractions
    # (the least common denominator of Nᵢ/D is D/gcd(D, N…)), at a tenth of the cost (~80 candidates per query).
    a, b, c, d = epsilon.numerator, epsilon.denominator, t.numerator, t.denominator
    p, q = PRIOR_STEP.numerator, PRIOR_STEP.denominator
    r, w = below.numerator, below.denominator
    whole = math.lcm(2 * b * d, q, w)
    per_score, per_step, per_below = a * (whole // (2 * b * d)), p * (whole // q), r * (whole // w)
    numerators = [per_score * abs(n * d - c) + per_step * max(0, i - anchor) + per_below * max(0, anchor - i)
                  for i, n in enumerate(above)]
    common = math.gcd(whole, *numerators)
    return [n // common for n in numerators], whole // common


def counts_above(rows: Sequence[Sequence[object]], size: int) -> list[int]:
    """N(C_i) for i < size from the (bin, _, units) rows of `histogram_sql`: the units of bins above i.

    Example:
        >>> counts_above([(0, 0, 4), (2, 0, 3), (9, 0, 1)], 4)
        [4, 4, 1, 0]
    """
    per_bin = [0] * size
    for bin_, _, units in rows:
        per_bin[min(max(int(bin_), 0), size - 1)] += int(units)  # type: ignore[call-overload]
    above, out = 0, [0] * size
    for i in range(size - 1, -1, -1):
        out[i] = above
        above += per_bin[i]
    return out


def choose_cap(rows: Sequence[Sequence[object]], *, limit: int, magnitude: int, t: Fraction,
               epsilon: float | Fraction, sampler: Sampler) -> int:
    """C in grid units: the exponential mechanism over `cap_grid(limit)` (ε-DP: each unit is in one bin, so every
    score moves by at most 1; the base measure does not read the data). `magnitude`: M in grid units.

    Example:
        >>> from mechanisms.sampling import FixedSampler
        >>> choose_cap([(0, 0, 90), (10, 0, 9), (12, 0, 1)], limit=4096, magnitude=64, t=Fraction(1),
        ...            epsilon=10.0, sampler=FixedSampler())
        32
    """
    grid = cap_grid(limit)
    above = counts_above(rows, len(grid))
    anchor = max(i for i, c in enumerate(grid) if c <= max(1, magnitude))
    numerators, denominator = exponents(above, t, Fraction(epsilon), anchor)
    return grid[sampler.exponential_index(numerators, denominator)]


def histogram_sql(analysis: Analysis, spec: ColumnSpec, source: exp.Expr, limit: int, stored: bool) -> exp.Select:
    """(bin, 0, units): each unit's T_u under the query's WHERE (every row of the unit, clamped at the declared
    limit: any function of the unit's own rows keeps each unit in one bin), binned as `cap_grid` reads it.
    `stored`: read the bounding store's column clamped at the declared limit (store_layout.clamped: the same values)."""
    unit = exp.column(analysis.table.privacy_unit, quoted=True)
    value = exp.column(store_layout.grid_value(spec.name)) if stored else store_layout.clamped(spec)
    conditions: list[exp.Expr] = [exp.Not(this=exp.Is(this=unit.copy(), expression=exp.Null()))]
    if analysis.where is not None:
        conditions.append(analysis.where.copy())
    # every node below is built for this query alone (shared ones copied in): the builders need not copy it (the
    # ~80-branch CASE below was copied on each builder call, then again to render)
    totals = (exp.select(exp.alias_(exp.Sum(this=exp.Abs(this=value)), "__t", copy=False))
              .from_(source.copy(), copy=False).where(exp.and_(*conditions, copy=False), copy=False)
              .group_by(unit.copy(), copy=False))
    # bin i = the least i with T_u <= C_i: T_u is a whole number of grid units, so T_u <= 2^(i/2) exactly when
    # T_u <= ⌊2^(i/2)⌋ = C_i. Comparisons with integers, not CEIL(2·LOG2(T_u)): Spark's LOG2 is ln(x)/ln(2),
    # which misses some powers of two (2^29 -> 29.000000000000004), and both engines must bin alike.
    grid = cap_grid(limit)
    firsts = [i for i, c in enumerate(grid) if i == 0 or c > grid[i - 1]]
    # a new __t per branch (building one costs half of copying one)
    ifs = [exp.If(this=exp.LTE(this=exp.func("COALESCE", exp.column("__t"), exp.Literal.number(0), copy=False),
                               expression=exp.Literal.number(grid[0])), true=exp.Literal.number(0))]
    ifs += [exp.If(this=exp.LTE(this=exp.column("__t"), expression=exp.Literal.number(grid[i])),
                   true=exp.Literal.number(i)) for i in firsts[1:-1]]
    bin_ = exp.Case(ifs=ifs, default=exp.Literal.number(len(grid) - 1))
    return (exp.select(exp.alias_(bin_, "__a", copy=False), exp.alias_(exp.Literal.number(0), "__b", copy=False),
                       exp.alias_(exp.Count(this=exp.Star()), "__n", copy=False))
            .from_(totals.subquery("__totals", copy=False), copy=False).group_by(exp.column("__a"), copy=False))
