"""Contribution bounds chosen per query, privately (issue #12, docs/privacy.md §10): `max_rows = "auto"`,
`max_groups = "auto"` and a column's `bounds = "auto"`, each within a declared limit.

Each query on a table with automatic bounds spends a share s of its ε (`auto_bounds_share`) choosing the bounds
it uses, split evenly over the bounds it needs (its parts), and the rest running at them:

1. **Selection** (ε_sel = s·ε, ε_sel/n per part): one engine call reads one histogram per part under the
   query's WHERE and keys, and an exact exponential mechanism draws each bound on a grid of candidates:
   - max_rows (auto/rows.py): h[c] = #(unit, group) cells with min(rows, L) = c, each unit keeping its L0
     largest cells (L0 = the groups limit when max_groups is auto too): L1 sensitivity L0. Chosen by the error
     it causes (mechanisms/count_target.py): score −|N_i − τ·s|, N_i the cells it truncates.
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
virtual table, auto/histograms.py) choose their bounds too. Shapes the selection does not serve (an expression in an
aggregate, three quantiles of one column) and a given `noise_multiplier` are answered at the declared
limits, which are valid bounds: no selection runs or is charged, and the response's `bounds` says so
(`chosen` false, `note` why).

Example:
    >>> split_epsilon(1.0, 0.25)
    (0.25, 0.75)
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from accountant import loss
from accountant.events import AutoBoundsEvent, ExponentialEvent
from mechanisms import laplace
from mechanisms.gaussian import zcdp
from mechanisms.rounding import down, sqrt_up
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import capped, fixed_point, measures_for
from proxy.query.auto import quantile, total
from proxy.query.auto.clamp import VALUES_PER_UNIT
from proxy.query.auto.gauss import sigma_at
from proxy.query.auto.rows import bound_grid, choose_bound, selection_sql, selection_text, store_selection_sql
from proxy.query.catalog import ColumnSpec, TableSchema
from proxy.query.price.charge import Price, release_l0
from proxy.query.price.quantiles import QuantileSpec

__all__ = ["bound_grid", "choose_bound", "selection_sql", "selection_text", "store_selection_sql"]

DEFAULT_AUTO_SHARE = 0.10
DEFAULT_AUTO_QUANTILE = 0.99
DEFAULT_AUTO_LIMIT = 1000
DEFAULT_GROUPS_LIMIT = 100

Bound = Literal["max_rows", "max_groups", "lower", "upper", "total"]
# the measures that read a column's clamp: a sum's sensitivity, and a quantile's grid (auto/quantile.py: 1001
# points over the declared limit would be too coarse for any value far below it)
CLAMPED = ("sum", "centred_sum", "histogram")


@dataclass(frozen=True, slots=True)
class AutoPart:
    """One bound chosen from the data: its own exponential mechanism, at its share of the selection's ε."""

    bound: Bound
    column: str | None  # the clamped column (lower, upper)
    limit: float  # the declared limit of this bound (for a clamp: the limit's end on this side)
    q: float  # the quantile drawn (the lower bound draws 1 − q)
    sensitivity: int  # the histogram's L1 sensitivity: L0 cells, 1 unit, or m values per unit
    selection: ExponentialEvent  # its pure ε = sensitivity / scale

    @property
    def epsilon(self) -> Fraction:
        """The ε it runs with: exactly Δ/b, at most what its event is charged."""
        return Fraction(self.selection.sensitivity) / Fraction(self.selection.scale)


@dataclass(frozen=True, slots=True)
class AutoBounds:
    """The bound selection of one query: everything fixed before admission (the bounds are not)."""

    parts: tuple[AutoPart, ...]
    note: str | None = None  # no parts: why the query runs at the declared limits instead (limits_reason)

    def part(self, bound: Bound, column: str | None = None) -> AutoPart | None:
        return next((p for p in self.parts if p.bound == bound and p.column == column), None)

    @property
    def epsilon(self) -> Fraction:
        return sum((p.epsilon for p in self.parts), Fraction(0))

    @property
    def limit(self) -> int:
        """The max_rows limit (0 when max_rows is not chosen)."""
        rows = self.part("max_rows")
        return int(rows.limit) if rows else 0


@dataclass(frozen=True, slots=True)
class ChosenBound:
    """One bound a query used, as a response reports it (value None: not chosen yet, in a preview)."""

    bound: Bound
    column: str | None
    value: float | None
    limit: float
    epsilon: float  # its charged ε
    q: float


@dataclass(frozen=True, slots=True)
class ChosenBounds:
    """What a response reports: every bound chosen, and what choosing them cost."""

    parts: tuple[ChosenBound, ...]
    max_rows: int  # the bound used (rows per unit and group): chosen, or the table's fixed one
    max_groups: int  # the groups per unit used
    clamps: tuple[tuple[str, float, float], ...] = ()  # (column, lower, upper) chosen
    caps: tuple[tuple[str, int], ...] = ()  # (column, C in grid units) chosen: each unit's L1 cap (auto/total.py)
    note: str | None = None  # set when nothing was chosen: the query ran at the declared limits, and why
    reused: bool = False  # chosen by an earlier query of the same shape and kept (docs/privacy.md §10.8): free

    def value(self, bound: Bound, column: str | None = None) -> float | None:
        return next((p.value for p in self.parts if p.bound == bound and p.column == column), None)

    def report(self) -> dict[str, object]:
        """The response's `bounds` (proxy/schemas.py BoundsOut)."""
        rows = next((p for p in self.parts if p.bound == "max_rows"), None)
        return {"max_rows": None if rows is not None and rows.value is None else self.max_rows,
                "chosen": self.note is None, "note": self.note,
                "max_rows_limit": int(rows.limit) if rows else self.max_rows,
                "epsilon": 0.0 if self.reused else math.fsum(p.epsilon for p in self.parts),
                "quantile": self.parts[0].q if self.parts else 0.0,
                "parts": [{**dataclasses.asdict(p), "epsilon": 0.0} if self.reused else dataclasses.asdict(p)
                          for p in self.parts],
                "reused": self.reused}


def chosen_json(chosen: ChosenBounds) -> str:
    """The chosen bounds as the ledger keeps them for reuse (accountant/ledger/kept_bounds.py); exact: floats
    travel as JSON's shortest round-trip text, so `chosen_from_json` gives the same record back.

    Example:
        >>> c = ChosenBounds((ChosenBound("max_rows", None, 8.0, 1000, 0.05, 1.5),), 8, 1, caps=(("amount", 7),))
        >>> chosen_from_json(chosen_json(c)) == c
        True
        >>> chosen_from_json(chosen_json(c)).report()["reused"], dataclasses.replace(c, reused=True).report()["epsilon"]
        (False, 0.0)
    """
    return json.dumps(dataclasses.asdict(chosen), separators=(",", ":"), allow_nan=False)


def chosen_from_json(text: str) -> ChosenBounds:
    """The record `chosen_json` wrote."""
    raw = json.loads(text)
    return ChosenBounds(
        tuple(ChosenBound(**p) for p in raw["parts"]), int(raw["max_rows"]), int(raw["max_groups"]),
        tuple((str(n), float(lo), float(hi)) for n, lo, hi in raw["clamps"]),
        tuple((str(n), int(c)) for n, c in raw["caps"]), raw["note"], bool(raw["reused"]))


def split_epsilon(epsilon: float, share: float) -> tuple[float, float]:
    """(ε_sel, ε_q): the selection's share and the query's rest, each rounded down so they add to at most ε.

    Example:
        >>> sel, rest = split_epsilon(0.3, 0.1)
        >>> Fraction(sel) + Fraction(rest) <= Fraction(0.3), round(sel, 12), round(rest, 12)
        (True, 0.03, 0.27)
    """
    selection = down(Fraction(epsilon) * Fraction(share))
    return selection, down(Fraction(epsilon) - Fraction(selection))


def clamped_columns(analysis: Analysis) -> tuple[ColumnSpec, ...]:
    """The auto-bounded columns whose clamp the query's measures read, in first-use order."""
    names = dict.fromkeys(m.column.lower() for m in analysis.measures if m.kind in CLAMPED and m.column)
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
    if table.auto_max_groups and analysis.max_groups > 1 and not only_capped:
        parts.append(("max_groups", None))
    for spec in clamped_columns(analysis):
        assert spec.bounds is not None
        kinds = {m.kind for m in analysis.measures if (m.column or "").lower() == spec.name.lower()}
        if capped(spec, table) and "sum" in kinds:  # a per-unit L1 cap, not a clamp (auto/total.py, §10.2)
            parts.append(("total", spec))
            if not kinds & {"centred_sum", "histogram"}:
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
    query aggregates columns (no expression inside, at most two quantiles of one column), over a table, a join
    or computed keys (quantile.serves), what the selection histograms read.

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
        return (f"bounds are chosen per query for aggregates of columns, not of expressions, and for at most "
                f"two quantiles of one column: this query ran at the declared limits ({limits})")
    return None


def auto_bounds(analysis: Analysis, selection_epsilon: float, q: float) -> AutoBounds:
    """The selection for `analysis` at ε_sel, split evenly (rounded down) over the bounds it needs.

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
    each = down(Fraction(selection_epsilon) / len(wanted))
    parts = []
    for bound, spec in wanted:
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
        drawn = q if spec is None else quantile.clamp_q(analysis, spec.name, bound == "upper", q)
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


def price_at(priced: Price, analysis: Analysis, k: int) -> Price:
    """The noise at bound k: each Laplace part keeps the ε it has at the limit (b_j = Δ_j(k)/ε_j rounded up),
    so no part costs more than the admitted event says. `priced` is the plan's price (event: AutoBoundsEvent).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> from proxy.query.price.charge import price
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"),), max_rows=100, auto_max_rows=True)
        >>> a = analyse(parse("SELECT COUNT(*) FROM t"), Catalog((t,)))
        >>> at_limit = price(a, epsilon=0.5, delta=0.0, mechanism="laplace")
        >>> [(n.sensitivity, n.scale) for n in price_at(at_limit, a, 7).noise]
        [(7, 14.0)]
    """
    noise = []
    for spec in priced.noise:
        if not spec.sensitivity:
            noise.append(spec)
            continue
        measure = analysis.measures[spec.measure]
        if spec.mechanism == "gaussian":  # Δ2 = √(g·s(k)²) <= the limit's; σ by gauss.sigma_at
            delta2 = sqrt_up(release_l0(analysis) * Fraction(measure.sensitivity(k)) ** 2)
            if measure.cap:  # a capped unit's L2 is at most its L1 <= C (privacy.md §10.2)
                delta2 = min(delta2, Fraction(measure.cap))
            sigma = sigma_at(delta2, spec.sensitivity, spec.scale) if delta2 else 1.0
            noise.append(dataclasses.replace(spec, sensitivity=delta2, scale=sigma, grid=measure.grid,
                                             ci95=zcdp.ci_halfwidth(sigma)))
            continue
        part = laplace.epsilon(spec.sensitivity, spec.scale)
        sensitivity = measure.release_l1(release_l0(analysis), k)  # L0 = min(g, d): price/charge.py
        scale = laplace.scale_for(sensitivity, part) if sensitivity else 1.0
        assert math.isfinite(scale) and laplace.epsilon(sensitivity, scale) <= part if sensitivity else True
        noise.append(dataclasses.replace(spec, sensitivity=sensitivity, scale=scale, grid=measure.grid,
                                         ci95=laplace.ci_halfwidth(scale)))
    quantiles = tuple(quantile.at_bound(q, k, analysis.measures[q.measure].points)
                      if isinstance(q, QuantileSpec) else q for q in priced.quantiles)
    assert all(isinstance(q, QuantileSpec) for q in quantiles)  # joint quantiles run at the limits
    return dataclasses.replace(priced, noise=tuple(noise), quantiles=quantiles)


def with_targets(chooser: AutoBounds, analysis: Analysis, priced: Price) -> AutoBounds:
    """The selection with each part's target in its `q` (the bound is then chosen by the error it causes,
    mechanisms/count_target.py): an L1 cap's t = √2·G/ε_sum (total.target_above); max_rows' and max_groups'
    τ = √2·G/ε_count (`cell_target`), the items a bound may leave truncated per cell a unit may keep. G is the
    number of groups released (the public domains' product; 1 without keys, or when the groups are not public: a
    smaller target chooses a larger bound, the unbiased side), ε the ε the plan gives the measure."""
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
        >>> from proxy.query.catalog import Catalog, TableSchema
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


def at_bound(analysis: Analysis, k: int, g: int | None = None,
             clamps: tuple[tuple[str, float, float], ...] = (), caps: tuple[tuple[str, int], ...] = ()) -> Analysis:
    """The analysis at max_rows = k, max_groups = g, the chosen clamps (each within its declared limit) and caps: what
    the release reads. The rewrite reads `for_sql` of it: the store's clamped grid column is at the declared
    limits, so the SQL must see the declared bounds (a sum clamped tighter then reads its measure's per-row clamp).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("x", "INTEGER", bounds=(0, 1000), auto_bounds=True)), max_groups=8, auto_max_groups=True)
        >>> a = at_bound(analyse(parse("SELECT g, SUM(x) FROM t GROUP BY g"), Catalog((t,))), 1, 3, caps=(("x", 90),))
        >>> [(m.kind, m.lo, m.hi, m.cap) for m in a.measures], a.max_groups
        ([('sum', 0, 1000, 90)], 3)
        >>> one = TableSchema("t", "u", t.columns, one_row_per_unit=True)  # clamped, not capped: one row per unit
        >>> a = at_bound(analyse(parse("SELECT SUM(x) FROM t"), Catalog((one,))), 1, None, (("x", 0, 90),))
        >>> [(m.kind, m.lo, m.hi) for m in a.measures], a.table.columns[2].bounds
        ([('sum', 0, 90)], (0, 90))
        >>> for_sql(a, one).table.columns[2].bounds
        (0, 1000)
    """
    table = analysis.table
    g = analysis.max_groups if g is None else g
    assert 1 <= k <= table.max_rows and 1 <= g <= analysis.max_groups
    chosen = {name.lower(): (lo, hi) for name, lo, hi in clamps}
    cap_of = {name.lower(): cap for name, cap in caps}
    measures = analysis.measures
    if chosen or cap_of:
        columns = []
        for c in table.columns:
            bounds = chosen.get(c.name.lower())
            if c.name.lower() in cap_of:
                assert c.auto_bounds and cap_of[c.name.lower()] >= 1
                c = dataclasses.replace(c, total_cap=cap_of[c.name.lower()])
            if bounds is not None:
                assert c.auto_bounds and c.bounds is not None and bounds[0] <= bounds[1]
                # kept inside the declared clamp (candidates are: auto/clamp.py), a data-independent step after
                # the draw (post-processing); the declared clamp when nothing is left
                inside = (max(c.bounds[0], bounds[0]), min(c.bounds[1], bounds[1]))
                bounds = inside if inside[0] <= inside[1] else c.bounds
                # a capped sum keeps the declared clamp (cap_bounds) when the column's quantiles or spreads chose
                # a tighter one: the cap, not the clamp, bounds it (the rewrite clamps each measure at its own).
                # The grids start at the declared clamp's (grid_bounds; refined below by `_finest_grids`)
                c = dataclasses.replace(c, bounds=bounds, cap_bounds=c.bounds if capped(c, table) else None,
                                        grid_bounds=c.grid_bounds or c.bounds)
            columns.append(c)
        table = _finest_grids(analysis, dataclasses.replace(table, columns=tuple(columns)), k, set(chosen))
        measures = measures_for(analysis.aggregates, table)
        assert [m.kind for m in measures] == [m.kind for m in analysis.measures]
    bounded = dataclasses.replace(table, max_rows=k, max_groups=g if analysis.max_groups > 1 else table.max_groups)
    return dataclasses.replace(analysis, table=bounded, max_groups=g, measures=measures)


def _finest_grids(analysis: Analysis, table: TableSchema, k: int, names: set[str]) -> TableSchema:
    """`table` with each chosen clamp (columns `names`) on the finest fixed-point grid, 2^j times the declared
    clamp's (its `grid_bounds` scaled by 2^-j), at which no measure's integer sensitivity at k exceeds the charged
    one at the limit. The noise is an integer mechanism on the grid: its privacy is that of its integer (Δ, σ),
    so a tighter clamp's own finer grid, whose Δ in grid units can exceed the charged Δ, would fail the noise's
    calibration after the charge; j = 0 (the declared grid, where the clamp inside the declared one and k <= the
    limit give Δ_k <= Δ_L) always fits. A data-independent function of the chosen bounds: post-processing."""
    limit_k = analysis.table.max_rows

    def fits(candidate: TableSchema) -> bool:
        return all(m.sensitivity(k) <= old.sensitivity(limit_k) for m, old in
                   zip(measures_for(analysis.aggregates, candidate), analysis.measures, strict=True))

    assert fits(table)
    for name in sorted(names):
        spec = table.column(name)
        assert spec is not None and spec.bounds is not None and spec.grid_bounds is not None
        lo, hi = spec.grid_bounds
        if spec.kind == "integer" and float(lo).is_integer() and float(hi).is_integer():
            continue  # grid 1, as declared: whole numbers are exact
        magnitude = max(abs(b) for b in spec.bounds) or 2.0**-20
        top = min(50, max(0, math.ceil(math.log2(max(abs(lo), abs(hi)) / magnitude)) + 1))
        for j in range(top, 0, -1):
            scaled = dataclasses.replace(spec, grid_bounds=(math.ldexp(lo, -j), math.ldexp(hi, -j)))
            candidate = dataclasses.replace(table, columns=tuple(scaled if c is spec else c for c in table.columns))
            if fits(candidate):
                table = candidate
                break
    return table


def for_sql(analysis: Analysis, declared: TableSchema) -> Analysis:
    """`analysis` (at chosen bounds) with the `declared` table's columns, as the rewrite must read it: the
    store's clamped grid column holds values clamped to the declared bounds, and the rewrite reads it only for
    a measure clamped exactly there (rewrite/on_store.py); any tighter clamp is computed per row from the measure."""
    return dataclasses.replace(analysis, table=dataclasses.replace(analysis.table, columns=declared.columns))
