"""Contribution bounds chosen per query, privately (issue #12, docs/privacy.md §10): `max_rows = "auto"`,
`max_groups = "auto"` and a column's `bounds = "auto"`, each within a declared limit.

Each query on a table with automatic bounds spends a share s of its ε (`auto_bounds_share`) choosing the bounds
it uses, split evenly over the bounds it needs (its parts), and the rest running at them:

1. **Selection** (ε_sel = s·ε, ε_sel/n per part): one engine call reads one histogram per part under the
   query's WHERE and keys, and an exact exponential mechanism draws each bound on a grid of candidates:
   - max_rows (auto/rows.py): h[c] = #(unit, group) cells with min(rows, L) = c, each unit keeping its L0
     largest cells (L0 = the groups limit when max_groups is auto too): L1 sensitivity L0. Chosen by the error
     it causes (mechanisms/count_target.py): score −|N_i − τ·s|, N_i the cells it truncates (a query of quantiles
     alone: −|N_i − C/2|, C the cells read, at sensitivity s/2; of AVGs alone −|N_i − C/10| at 9s/10,
     targets.rows_share; one cell per unit: the truncated rows too, rows.choose_bound).
   - max_groups (auto/groups.py): h[c] = #units with min(groups, G) = c: L1 sensitivity 1; the same score,
     N_i the units beyond g_i, target τ.
   - a per-unit total cap (auto/total.py): the same form, N_i the units above C_i, target √2·G/ε_sum.
   - a clamp (auto/clamp.py): the column's values, at most m rows per unit: L1 sensitivity m; the upper
     bound is the DP q-quantile (mechanisms/dp_quantile.py), the lower (when the limit's lower end is not 0)
     the (1 − q)-quantile.
2. **Query** (ε_q = ε − ε_sel): the plan priced at the limits fixes each measure's ε_j (the split depends on
   the query's shape, never on the bounds); at the chosen bounds each Laplace scale is b_j = Δ_j/ε_j rounded
   up, and every Δ_j is monotone in every bound (g·k·max(|L|, |U|) <= G·K·max(|lo|, |hi|)), so the query
   costs at most ε_q whatever is chosen. The charge, admitted before any data is read, is one event
   `AutoBoundsEvent(first selection, query at the limits, more selections)`: exact for every choice.

Which bound (issue #29). Amin et al. (ICML 2019, "Bounding User Contributions") show the error of a bounded
Laplace count, bias(k) + noise(k), is minimised where the number of cells above k equals the noise's slope
√2·G·g/ε_j over the G released groups: τ·g with τ = √2·G/ε_j (`cell_target`), a function of the plan. The
selection scores each candidate by how far its truncated count is from that balance (a count: sensitivity s,
where the error itself has s·(L − k)), with a base measure e^(−1/2) per √2 step for the noise the count cannot
see above the data: when the data are thin, small bounds win (the former 0.99-quantile spread its draws up to
the limit there). Where this improves on Amin et al. and Google's/Tumult's bounds: the counts are of the
quantities each bound truncates under the query's own WHERE and keys (cells, groups, the query's values), read
from the bounding store in one engine call with no second pass over the source, and every bound's cost is in
one charge.

Laplace noise: a pure ε is a function of Δ/b alone, which is what makes the event exact for any bound.
Discrete Gaussian noise (auto/gauss.py): the charged GaussianEvent at the limits bounds, under every rule,
the σ chosen at the bounds (ρ is a function of Δ/σ; the proven μ is searched upward).
Quantiles (auto/quantile.py), spreads, FILTER, joins and computed keys (the selection reads the query's own
virtual table, auto/histograms.py) choose their bounds too (three or more quantiles of one column jointly), and so
do expressions inside SUM/AVG: each auto column they read gets its clamp, the expression's range by interval
arithmetic over them (docs/privacy.md §10.10). A given `noise_multiplier`, and any shape the selection would not
serve (none the analysis admits today: quantiles and spreads take plain columns), are answered at the declared
limits, which are valid bounds: no selection runs or is charged, and the response's `bounds` says so (`chosen`
false, `note` why).

This module decides which bounds a query chooses and what the selection is charged (`needed`, `auto_bounds`,
`auto_price`); the records are in auto/parts.py (before the draw) and auto/chosen.py (after it), the targets in
auto/targets.py, and the query at the drawn bounds in auto/at_bounds.py. Their names are re-exported here, the
callers' one door.

Example:
    >>> split_epsilon(1.0, 0.25)
    (0.25, 0.75)
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from accountant import loss
from accountant.events import AutoBoundsEvent, ExponentialEvent
from mechanisms import laplace
from mechanisms.rounding import down
from proxy.query.analyse import row_expr
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import capped, fixed_point
from proxy.query.auto import quantile, share, total
from proxy.query.auto.at_bounds import at_bound, for_sql, price_at
from proxy.query.auto.chosen import ChosenBound, ChosenBounds, chosen_from_json, chosen_json
from proxy.query.auto.clamp import VALUES_PER_UNIT
from proxy.query.auto.parts import AutoBounds, AutoPart, Bound
from proxy.query.auto.rows import bound_grid, choose_bound, selection_sql, selection_text, store_selection_sql
from proxy.query.auto.targets import COUNTED, cell_target, released_groups, with_targets
from proxy.query.catalog import ColumnSpec
from proxy.query.price.charge import Price

# the callers' one door (auto_release, planner, pipeline, the benches): the records and steps of the other modules
__all__ = ["COUNTED", "AutoBounds", "AutoPart", "Bound", "ChosenBound", "ChosenBounds", "at_bound", "bound_grid",
           "cell_target", "choose_bound", "chosen_from_json", "chosen_json", "for_sql", "price_at", "released_groups",
           "selection_sql", "selection_text", "store_selection_sql", "with_targets"]

DEFAULT_AUTO_SHARE = 0.10
DEFAULT_AUTO_QUANTILE = 0.99
DEFAULT_AUTO_LIMIT = 1000
DEFAULT_GROUPS_LIMIT = 100

# the measures that read a column's clamp: a sum's sensitivity, and a quantile's grid (auto/quantile.py: 1001
# points over the declared limit would be too coarse for any value far below it)
CLAMPED = ("sum", "centred_sum", "histogram")


def split_epsilon(epsilon: float, share: float) -> tuple[float, float]:
    """(ε_sel, ε_q): the selection's share and the query's rest, each rounded down so they add to at most ε.

    Example:
        >>> sel, rest = split_epsilon(0.3, 0.1)
        >>> Fraction(sel) + Fraction(rest) <= Fraction(0.3), round(sel, 12), round(rest, 12)
        (True, 0.03, 0.27)
    """
    selection = down(Fraction(epsilon) * Fraction(share))
    return selection, down(Fraction(epsilon) - Fraction(selection))


def selection_share(analysis: Analysis, epsilon: float,
                    limits: float | tuple[float, float]) -> tuple[float, tuple[Fraction, ...]]:
    """The share of ε the selection spends and each bound's fraction of it: `limits` fixed (one number, split
    evenly), or chosen within [low, high] by the expected error (auto/share.py) from ε, the limits and the bounds
    the query needs: never from the data.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("x", "DOUBLE", bounds=(0, 50),
        ...     auto_bounds=True)), max_rows=50, auto_max_rows=True)
        >>> a = analyse(parse("SELECT COUNT(*), SUM(x) FROM t"), Catalog((t,)))
        >>> selection_share(a, 0.1, (0.1, 0.5)), selection_share(a, 0.1, 0.1)
        ((0.343, (Fraction(50, 343), Fraction(293, 343))), (0.1, (Fraction(1, 2), Fraction(1, 2))))
    """
    kinds = [b for b, _ in needed(analysis)]
    chosen = share.choose(limits, epsilon=epsilon, bounds=len(kinds), caps=kinds.count("total"))
    return chosen, share.weights(limits, chosen, kinds)


def expression_columns(analysis: Analysis) -> tuple[str, ...]:
    """The columns SUM/AVG expressions read (lower case, first-use order): each through its clamp, chosen where
    the column has `bounds = "auto"` (docs/privacy.md §10.10)."""
    return tuple(dict.fromkeys(c.lower() for a in analysis.aggregates if a.expr and a.kind in ("sum", "avg")
                               for c in row_expr.clamped_columns(a.expr)))


def without_expressions(analysis: Analysis) -> Analysis:
    """`analysis` without the measures of SUM/AVG expressions, for the checks of what else the selection serves
    (quantile.serves): an expression reads its columns through clamps the selection chooses (§10.10)."""
    kept = tuple(m for m in analysis.measures if not (m.expr and m.kind in ("sum", "centred_sum", "values")))
    return dataclasses.replace(analysis, measures=kept)


def clamped_columns(analysis: Analysis) -> tuple[ColumnSpec, ...]:
    """The auto-bounded columns whose clamp the query's measures read, in first-use order."""
    names = dict.fromkeys([*(m.column.lower() for m in analysis.measures if m.kind in CLAMPED and m.column),
                           *expression_columns(analysis)])
    specs = (analysis.table.column(name) for name in names)
    return tuple(s for s in specs if s is not None and s.auto_bounds and s.bounds is not None
                 and s.bounds[0] < s.bounds[1])


def needed(analysis: Analysis) -> tuple[tuple[Bound, ColumnSpec | None], ...]:
    """The bounds this query chooses: none when its table's automatic bounds do not bind it (a unit-level
    GROUP BY needs no max_groups; a COUNT no clamp).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("x", "DOUBLE", bounds=(-5, 50), auto_bounds=True)), max_groups=8, auto_max_groups=True)
        >>> [(b, c and c.name) for b, c in needed(analyse(parse("SELECT g, AVG(x) FROM t GROUP BY g"), Catalog((t,))))]
        [('max_groups', None), ('total', 'x')]
        >>> needed(analyse(parse("SELECT COUNT(*) FROM t"), Catalog((t,))))
        ()
        >>> r = TableSchema("r", "u", t.columns, max_rows=50, auto_max_rows=True, max_groups=8, auto_max_groups=True)
        >>> [b for b, _ in needed(analyse(parse("SELECT g, COUNT(DISTINCT u) FROM r GROUP BY g"), Catalog((r,))))]
        ['max_groups']
        >>> [b for b, _ in needed(analyse(parse("SELECT g, COUNT(*) FROM r GROUP BY g"), Catalog((r,))))]
        ['max_rows', 'max_groups']
        >>> [b for b, _ in needed(analyse(parse("SELECT g, MEDIAN(x) FROM r GROUP BY g"), Catalog((r,))))]
        ['max_rows', 'lower', 'upper']
        >>> [(b, c and c.name) for b, c in needed(analyse(parse("SELECT g, SUM(x) FROM t GROUP BY g"), Catalog((t,))))]
        [('total', 'x')]
    """
    table = analysis.table
    parts: list[tuple[Bound, ColumnSpec | None]] = []
    # Only capped sums: their sensitivity min(C, g·k·M) is C for any useful k and g, which then only add bias;
    # the query runs at the limits and the cap gets the whole selection share (docs/privacy.md §10.2).
    only_capped = bool(analysis.measures) and all(
        m.kind == "sum" and (spec := table.column(m.column or "")) is not None and capped(spec, table)
        for m in analysis.measures)
    # A count of units (COUNT(DISTINCT unit)) moves by 1 per group whatever k is: max_rows cannot matter to it, and
    # a query of such counts only spends nothing choosing it (issue #29 item 3)
    rows_matter = any(m.kind != "units" for m in analysis.measures)
    if table.auto_max_rows and not table.one_row_per_unit and not only_capped and rows_matter:
        parts.append(("max_rows", None))
    # Only quantiles: each group's mechanism keeps its ε at the limits whatever g is (auto/quantile.py), so a smaller g
    # could only drop groups; they run at the limit G (privacy.md §10.4)
    only_quantiles = bool(analysis.measures) and all(m.kind == "histogram" for m in analysis.measures)
    if table.auto_max_groups and analysis.max_groups > 1 and not only_capped and not only_quantiles:
        parts.append(("max_groups", None))
    in_expressions = expression_columns(analysis)
    for spec in clamped_columns(analysis):
        assert spec.bounds is not None
        kinds = {m.kind for m in analysis.measures if (m.column or "").lower() == spec.name.lower()}
        if capped(spec, table) and "sum" in kinds:  # a per-unit L1 cap, not a clamp (auto/total.py, §10.2)
            parts.append(("total", spec))
            if not kinds & {"centred_sum", "histogram"} and spec.name.lower() not in in_expressions:
                continue  # quantiles and spreads of the same column still choose its clamp (at_bound)
        if spec.bounds[0] != 0:
            parts.append(("lower", spec))
        parts.append(("upper", spec))
    return tuple(parts)


def uses_auto(analysis: Analysis) -> bool:
    """Whether the query chooses any bound per query."""
    return bool(needed(analysis))


def limits_reason(analysis: Analysis, noise_multiplier: float | None, plain: bool) -> str | None:
    """Why the query cannot choose its bounds and runs at the declared limits instead (None: it chooses them).
    Private either way: the limits are valid bounds, and no selection runs or is charged. `plain`: whether the
    query aggregates columns (no expression inside), over a table, a join or computed keys (quantile.serves),
    what the selection histograms read.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"),), max_rows=50, auto_max_rows=True)
        >>> a = analyse(parse("SELECT COUNT(*) FROM t"), Catalog((t,)))
        >>> limits_reason(a, None, True) is None, limits_reason(a, 2.0, True)[:38]
        (True, 'a given noise_multiplier is calibrated')
    """
    limits = ", ".join(f"{b} {int(analysis.table.max_rows) if b == 'max_rows' else analysis.max_groups}"
                       if c is None else f"{c.name} in [{c.bounds[0]:g}, {c.bounds[1]:g}]"  # type: ignore[index]
                       for b, c in needed(analysis))
    if noise_multiplier is not None:
        return (f"a given noise_multiplier is calibrated to the declared limits ({limits}); send epsilon to have "
                "the bounds chosen per query")
    if not plain:
        return (f"bounds are chosen per query for aggregates of columns and SUM/AVG of expressions over them, not "
                f"for a quantile, VAR or STDDEV of an expression: this query ran at the declared limits ({limits})")
    return None


def auto_bounds(analysis: Analysis, selection_epsilon: float, q: float,
                weights: tuple[Fraction, ...] | None = None) -> AutoBounds:
    """The selection for `analysis` at ε_sel, split over the bounds it needs: evenly, or by `weights` (exact
    fractions adding up to 1, share.weights), each part's ε rounded down.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True)),
        ...     max_rows=500, max_groups=4, auto_max_rows=True, auto_max_groups=True)
        >>> a = auto_bounds(analyse(parse("SELECT g, COUNT(*) FROM t GROUP BY g"), Catalog((t,))), 0.1, 0.99)
        >>> [(p.bound, p.limit, p.sensitivity, p.selection.scale) for p in a.parts], float(a.epsilon)
        ([('max_rows', 500, 4, 80.0), ('max_groups', 4, 1, 20.0)], 0.1)
    """
    wanted = needed(analysis)
    split = weights or tuple(Fraction(1, len(wanted)) for _ in wanted)
    assert len(split) == len(wanted) and sum(split) == 1
    parts = []
    for (bound, spec), weight in zip(wanted, split, strict=True):
        each = down(Fraction(selection_epsilon) * weight)
        if bound == "max_rows":
            limit: float = analysis.table.max_rows
            sensitivity = analysis.max_groups
        elif bound == "max_groups":
            limit, sensitivity = analysis.max_groups, 1
        elif bound == "total":  # each unit's total in one bin of the histogram (auto/total.py)
            assert spec is not None
            limit, sensitivity = total.total_limit(analysis, spec) / fixed_point(spec)[0], 1
        else:
            assert spec is not None and spec.bounds is not None
            limit, sensitivity = spec.bounds[0 if bound == "lower" else 1], VALUES_PER_UNIT
        scale = laplace.scale_for(sensitivity, each)
        # a column an expression reads is summed: its clamp at q, as a summed column's (quantile.clamp_q)
        summed = spec is None or spec.name.lower() in expression_columns(analysis)
        drawn = q if summed else quantile.clamp_q(analysis, spec.name, bound == "upper", q)
        parts.append(AutoPart(bound, None if spec is None else spec.name, limit, drawn, sensitivity,
                              ExponentialEvent(float(sensitivity), scale)))
    return AutoBounds(tuple(parts))


def auto_price(query: Price, auto: AutoBounds, conversion: loss.Conversion = "zcdp") -> Price:
    """The charge of the whole two-step release: `query` (priced at the limits) with every selection composed in.

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> q = Price("laplace", (), None, LaplaceEvent(300, 400.0), 0.75, 0.0, 0.0, "parallel")
        >>> p = auto_price(q, AutoBounds((AutoPart("max_rows", None, 300, 0.99, 1, ExponentialEvent(1.0, 8.0)),
        ...     AutoPart("max_groups", None, 8, 0.99, 1, ExponentialEvent(1.0, 8.0)))))
        >>> p.epsilon, p.event.selection, p.event.more
        (1.0, ExponentialEvent(sensitivity=1.0, scale=8.0), (ExponentialEvent(sensitivity=1.0, scale=8.0),))
    """
    if not auto.parts:  # at the declared limits (limits_reason): nothing is selected, nothing more is charged
        return query
    first, *more = (p.selection for p in auto.parts)
    event = AutoBoundsEvent(first, query.event, tuple(more))
    epsilon, delta = loss.epsilon_delta(event, query.gaussian_delta, conversion)
    return dataclasses.replace(query, event=event, epsilon=epsilon, delta=delta)
