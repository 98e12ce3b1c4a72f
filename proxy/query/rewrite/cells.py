"""Bounding after a row-level WHERE on the bounding store, without a window over rows: one aggregate per cell.

A query whose WHERE reads a row-level column must bound *after* the WHERE (a unit's stored `max_rows` rows
mostly fail a selective filter: bench/README.md). Instead of ranking the surviving rows per (unit, group), the
store path aggregates them per cell (unit, group) and bounds each cell's totals directly:

    __cells   per (unit, keys) over the rows that pass WHERE:  n = rows, and per measure its row total
    result    per group: the cells' totals, each scaled to at most `max_rows` rows and clamped

A cell of n rows contributes what keeping `k = max_rows` of its rows contributes on average: LEAST(n, k)
rows, and its other totals times min(1, k / n) (rounded in DOUBLE, brought within ±2^66 before it is cast to
HUGEINT, as k rows' worth reaches 10^19, past BIGINT; then clamped to k rows' worth in integers). COUNT(*) is exactly
what sampling k rows gives; sums and AVG weigh every row of a heavy unit equally instead of a random k of
them (the same bias, less variance). Every cell total is a function of the unit's own rows, and lies within
the per-group sensitivity of measures.py: `rows`, `values` ≤ k; `sum` ≤ k·max(|lo|, |hi|); `centred_sum`
≤ k·max(hi − c, c − lo).

Groups per unit (L0): with one row-level key, the stored group rank `__group_rank__<key>` (the rank of the
value among all the unit's values, stable): without a WHERE a filter `<= max_groups`, no window; under a WHERE
the unit's cells that pass are re-ranked in that stored order by a window over cells (not rows), and the first
`max_groups` are kept, so bounding happens after the WHERE (issue #28); with two or more row-level keys, a
window over the cells (not the rows) keeps `max_groups` cells per unit, keyed by the per-query salt. Unit-level
keys hold each unit's canonical value in the store: one cell per unit, nothing to bound.

A SUM with a per-unit L1 cap (auto/total.py, docs/privacy.md §10.2) scales each unit's bounded cell totals
together, by a window over the unit's cells, before they are added up per group.

Light cells: a cell with at most k rows in the store (`__cell_rows__<key>`, `__unit_rows`, counted before any
WHERE) is within every bound whatever the WHERE keeps, so its rows are added up directly (in the same scan
and aggregation, under the unit NULL, which no stored row has), and only the rows of larger cells are
aggregated per unit and cell (on the demo 15 % of the rows by category at k = 20). Whether a cell is light is a function of the unit's own rows, and it gives the same answer as
aggregating it per cell (n <= k: exact totals). Under a WHERE with one row-level key, only in a unit that needs
no re-rank: one with no row passing the WHERE at a stored group rank above max_groups (`_uncertain`, a join to
those units), whose passing cells are all kept; the window then ranks only the other units' cells (the re-rank
must see all of a unit's cells) and the heavy cells, and a cell whose stored rank is <= max_groups skips it
(issue #32: 187 -> 34 ms CPU for COUNT by category under `day BETWEEN` on the 1M demo, bench/README.md). Not
used with a window over the salted hash (two row-level keys), for counts of distinct units (one per cell) or
private partitions (`__units` counts cells).

Example:
    >>> from proxy.query.parse.statement import parse
    >>> from proxy.query.analyse.analysis import analyse
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
    ...     ColumnSpec("n", "INTEGER", bounds=(0, 10))), max_rows=3, max_groups=2)
    >>> print(rewrite_cells(analyse(parse("SELECT g, COUNT(*), SUM(n) FROM t WHERE n > 1 GROUP BY g"),
    ...     Catalog((t,)))))
    WITH __cells AS (SELECT * FROM (SELECT "u" AS __unit, "g" COLLATE "binary" AS __k0, COUNT(*) AS __n, COUNT(*) AS __c0, SUM(__grid__n) AS __c1, MIN(__group_rank__g) AS __group_rank FROM "t" WHERE "n" > 1 GROUP BY __unit, __k0) AS __grouped QUALIFY __group_rank <= 2 OR ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY __group_rank) <= 2) SELECT __k0, COUNT(*) AS __units, SUM(LEAST(__c0, 3)) AS __m0, SUM(LEAST(GREATEST(CASE WHEN __n <= 3 THEN COALESCE(__c1, 0) ELSE CAST(LEAST(GREATEST(ROUND(CAST(COALESCE(__c1, 0) AS DOUBLE) * 3 / __n), -73786976294838206464), 73786976294838206464) AS INT128) END, 0), 30)) AS __m1 FROM __cells GROUP BY __k0
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.joins import canonical_source
from proxy.query.analyse.measures import Measure, fixed_point
from proxy.query.catalog import ColumnSpec
from proxy.query.rewrite import caps, store_layout
from proxy.query.rewrite.per_query import UNITS, ranked_cells, row_value, store_canonical, with_computed

UNCERTAIN = "__uncertain"  # the unit, for a unit with a passing row above max_groups (`_uncertain`)
CAST_LIMIT = 2**66  # a scaled cell total is brought within this in DOUBLE before its cast: HUGEINT holds it


def rewrite_cells(analysis: Analysis, salt: int = 0) -> str:
    """The DuckDB query for `analysis` over the bounding store, bounded per cell; columns as `rewrite.rewrite`."""
    table = analysis.table
    k = table.max_rows
    keys = [f"__k{i}" for i in range(len(analysis.keys))]
    row_keys = [key for key in analysis.keys if not _spec(analysis, key).unit_level]
    # no stored rank for a combination of row-level keys, nor for a computed row-level key (date_trunc of a day)
    windowed = len(row_keys) > 1 or bool(unranked_keys(analysis))
    # One row-level key: the stored rank of its value within the unit bounds L0. The rank is over all the unit's
    # values, so under a WHERE it is re-ranked after the WHERE: the unit's cells that pass, in the stored order,
    # keep their first max_groups (issue #28: filtering the stored rank first spent a unit's groups on values
    # the WHERE drops, −71 % on `WHERE category = 'travel'`). The order is still the unit's own and the key's.
    reranked = bool(row_keys) and not windowed and analysis.where is not None
    # Where the key's public domain holds at most max_groups values, the re-rank keeps every cell that passes:
    # nothing to rank, nothing to join (`groups_cannot_bind`, docs/privacy.md §10.7)
    unranked = reranked and groups_cannot_bind(analysis, row_keys[0])
    reranked = reranked and not unranked
    conditions: list[exp.Expr] = []
    if row_keys and not windowed and not reranked and not unranked:
        conditions.append(exp.LTE(this=exp.column(store_layout.group_rank(row_keys[0])),
                                  expression=exp.Literal.number(analysis.max_groups)))
    if analysis.where is not None:
        conditions.append(analysis.where.copy())
    if (reranked or windowed) and analysis.partitions == "public":
        # a window ranks the unit's cells: rows outside a public domain are dropped first, as per query
        # (rewrite/per_query.py), so no unit spends one of its max_groups on a group that is never released
        for key, domain in zip(analysis.keys, analysis.domains, strict=True):
            conditions.append(types.member(*_typed(analysis, key), list(domain)))
    # A cell of at most k rows in the store (before the WHERE) is within every bound whatever the WHERE keeps:
    # its rows are added up directly (grouped with __unit NULL, which no stored row has), and only the rows of
    # larger cells are aggregated per cell first: one scan. Not with a window over cells (it must see every
    # cell) or a count of distinct units (one per cell).
    capping = any(m.cap for m in analysis.measures)  # a unit's cells are scaled together: no light-cell split
    split = not windowed and not capping and analysis.partitions != "private" and all(
        m.kind != "units" for m in analysis.measures)
    unit: exp.Expr = types.column(*_typed(analysis, table.privacy_unit))
    uncertain: exp.Join | None = None
    if split:
        size = exp.column(store_layout.cell_rows(row_keys[0]) if row_keys else store_layout.UNIT_ROWS)
        aggregated: exp.Expr = exp.GT(this=size, expression=exp.Literal.number(k))
        if reranked:  # a light cell is added up directly only when its unit needs no re-rank (`_uncertain`)
            aggregated = exp.or_(aggregated, exp.Not(this=exp.Is(this=exp.column(UNCERTAIN), expression=exp.Null())),
                                 copy=False)
            uncertain = _uncertain(analysis, unit, row_keys[0], conditions)
        unit = exp.Case(ifs=[exp.If(this=aggregated, true=unit.copy())])
    # Every node below is built here for this query alone (the WHERE is copied in): the builders need not copy the
    # growing tree (copy=False), as in rewrite/on_store.py (about half the planning time of a per-cell query,
    # bench/request_cost.py).
    cells = _keyed(analysis, keys, [exp.alias_(unit, "__unit", copy=False)])
    cells = cells.select(exp.alias_(exp.Count(this=exp.Star()), "__n", copy=False), append=True, copy=False)
    for j, measure in enumerate(analysis.measures):
        cells = cells.select(exp.alias_(_row_total(measure, j, analysis), f"__c{j}", copy=False), append=True,
                             copy=False)
    if reranked:  # the value's stored rank, one per cell (the cell is one value of the key)
        rank = exp.Min(this=exp.column(store_layout.group_rank(row_keys[0])))
        cells = cells.select(exp.alias_(rank, "__group_rank", copy=False), append=True, copy=False)
    cells = cells.from_(store_source(analysis), copy=False)
    if uncertain is not None:
        cells = cells.join(uncertain, copy=False)
    if conditions:
        cells = cells.where(exp.and_(*conditions, copy=False), copy=False)
    cells = cells.group_by(*map(exp.column, ["__unit", *keys]), copy=False)
    if reranked:  # the unit's first max_groups cells after the WHERE, in the stored order (unique per value)
        # A stored rank <= max_groups stays <= max_groups after the WHERE (it only drops cells), so such a cell is
        # kept whatever the window says: only the others need it. (The light cells added up directly under the
        # NULL unit all have such a rank: their unit has no passing row of a larger one, `_uncertain`.)
        order = exp.Order(expressions=[exp.Ordered(this=exp.column("__group_rank"))])
        rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("__unit")], order=order)
        limit = exp.Literal.number(analysis.max_groups)
        cells = exp.select(exp.Star()).from_(cells.subquery("__grouped", copy=False), copy=False).qualify(
            exp.or_(exp.LTE(this=exp.column("__group_rank"), expression=limit),
                    exp.LTE(this=rank, expression=limit.copy()), copy=False), copy=False)
    if windowed:  # no stored rank for these keys: keep max_groups cells per unit, ranked by the keyed hash under
        # the query's salt, as the per-query rewrite ranks them: the same cells on DuckDB and Spark (keyed_hash.py)
        domains = analysis.domains if analysis.partitions == "public" else ()
        kinds = [types.kind(_spec(analysis, key).type) for key in analysis.keys]
        unit_kind = types.kind(_spec(analysis, table.privacy_unit).type)
        cells = ranked_cells(cells, ("__unit", unit_kind), list(zip(keys, kinds, strict=True)), domains, salt,
                              analysis.max_groups)
    units = exp.Count(this=exp.Star()) if analysis.partitions == "private" else exp.Literal.number(0)
    result = exp.select(*map(exp.column, keys), exp.alias_(units, UNITS, copy=False))
    contributions = []
    for j, measure in enumerate(analysis.measures):
        contribution = _bounded(measure, j, k)
        if split:  # the light cells' rows, added up as they are
            light = exp.Is(this=exp.column("__unit"), expression=exp.Null())
            contribution = exp.Case(ifs=[exp.If(this=light, true=exp.column(f"__c{j}"))], default=contribution)
        contributions.append(contribution)
    source: exp.Expr = exp.to_identifier("__cells")
    if capping:  # each cell's bounded contributions, then scaled by its unit's total (auto/total.py)
        named = [f"__b{j}" for j in range(len(contributions))]
        bounded = exp.select(*map(exp.column, ["__unit", *keys]), *(exp.alias_(c, n, copy=False)
                                                for c, n in zip(contributions, named, strict=True)))
        capped = caps.capped_cells(analysis.measures, named, "__unit", "__bounded",
                                         not keys)
        source = capped.with_(exp.TableAlias(this=exp.to_identifier("__bounded")), as_=bounded.from_(exp.table_("__cells"), copy=False),
                              copy=False).subquery(
            "__capped", copy=False)
        contributions = [exp.column(f"{n}__capped" if m.cap else n) for n, m in zip(named, analysis.measures,
                                                                                       strict=True)]
    for j, contribution in enumerate(contributions):
        result = result.select(exp.alias_(exp.Sum(this=contribution), f"__m{j}", copy=False), append=True, copy=False)
    result = result.from_(source, copy=False)
    if keys:
        result = result.group_by(*map(exp.column, keys), copy=False)
    if analysis.partitions == "public":  # whole groups outside the domain dropped after aggregation
        # The test reads the group's key through ANY_VALUE (one value per group, the same test), as rewrite/on_store.py
        # does: on the key itself DuckDB pushes it down into the scan as a join against the domain's list, which
        # costs more than the whole aggregation it spares (a tenth of a per-cell query, bench/README.md).
        inside = []
        for alias, key, domain in zip(keys, analysis.keys, analysis.domains, strict=True):
            name, type_name = _typed(analysis, key)
            test, ref = types.member(name, type_name, list(domain)), types.column(name, type_name)
            inside.append(test.transform(lambda node, ref=ref, alias=alias: exp.AnyValue(this=exp.column(alias))
                                         if node == ref else node, copy=False))
        result = result.having(exp.and_(*inside, copy=False), copy=False)
    return result.with_(exp.TableAlias(this=exp.to_identifier("__cells")), as_=cells, copy=False).sql(dialect="duckdb", copy=False)


def groups_cannot_bind(analysis: Analysis, key: str) -> bool:
    """Whether a unit's cells under the WHERE, re-ranked after it, are all kept whatever their stored ranks: the
    partitions are public and the row-level `key`'s domain has at most max_groups values. The re-rank drops the
    rows outside the domains first, so a unit then has at most that many cells (one per value of `key`; a
    unit-level key has one value per unit), each of rank <= max_groups. So the rewrite reads no group rank,
    joins no uncertain units and tests the domain only in HAVING: every cell that passes is kept, as the re-rank
    keeps it, and a group outside the domain is dropped whole after aggregation, as its rows were before it.
    The same cells, the same totals (light cells added up directly are exact, as in the split), the same
    numbers; the sensitivity is min(g, d) as before (docs/privacy.md §10.7).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> def t(g):
        ...     return TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("n", "INTEGER"),
        ...         ColumnSpec("g", "VARCHAR", groupable=True, public_domain=("a", "b", "c"))), max_groups=g)
        >>> q = "SELECT g, COUNT(*) FROM t WHERE n > 1 GROUP BY g"
        >>> [groups_cannot_bind(analyse(parse(q), Catalog((t(g),))), "g") for g in (2, 3, 4)]
        [False, True, True]
    """
    if analysis.partitions != "public":
        return False
    domain = dict(zip(analysis.keys, analysis.domains, strict=True)).get(key)
    return domain is not None and len(domain) <= analysis.max_groups


def _uncertain(analysis: Analysis, unit: exp.Expr, key: str, conditions: list[exp.Expr]) -> exp.Join:
    """LEFT JOIN the units that have a row passing `conditions` (the WHERE) with a stored group rank of `key`
    above max_groups, as `UNCERTAIN` (NULL for every other unit).

    Only such a unit's cells need the re-rank after the WHERE: in any other unit every cell that passes has a
    stored rank <= max_groups, so it is kept (re-ranking only lowers a rank), and its light cells can be added up
    directly like those of a query without a WHERE (one aggregation; the window then sees only the uncertain
    units' cells and the heavy ones). Whether a unit is uncertain is a function of its own rows, and the answer is
    the same as re-ranking every unit. The right side holds each unit once, so the join keeps every row once. A
    LEFT JOIN, not `IN (SELECT …)`: Spark takes no subquery in a projection.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("n", "INTEGER", bounds=(0, 10))), max_rows=3, max_groups=2)
        >>> a = analyse(parse("SELECT g, COUNT(*) FROM t WHERE n > 1 GROUP BY g"), Catalog((t,)))
        >>> print(_uncertain(a, exp.column("u", quoted=True), "g", [a.where]).sql("duckdb"))
        LEFT JOIN (SELECT "u" AS __uncertain FROM "t" WHERE "n" > 1 AND __group_rank__g > 2 GROUP BY "u") AS __uncertain_units ON "u" = __uncertain
    """
    above = exp.GT(this=exp.column(store_layout.group_rank(key)), expression=exp.Literal.number(analysis.max_groups))
    units = exp.select(exp.alias_(unit.copy(), UNCERTAIN, copy=False)).from_(store_source(analysis), copy=False).where(
        exp.and_(*(c.copy() for c in conditions), above, copy=False), copy=False).group_by(unit.copy(), copy=False)
    on = exp.EQ(this=unit.copy(), expression=exp.column(UNCERTAIN))
    return exp.Join(this=units.subquery("__uncertain_units", copy=False), on=on, side="LEFT")


def unranked_keys(analysis: Analysis) -> tuple[str, ...]:
    """The row-level keys the store holds no ranks for: computed keys that read a row-level column.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("d", "DATE", groupable=True),
        ...     ColumnSpec("a", "INTEGER", unit_level=True, groupable=True)))
        >>> [unranked_keys(analyse(parse(q), Catalog((t,)))) for q in ("SELECT d, COUNT(*) FROM t GROUP BY d",
        ...     "SELECT a // 10 AS b, COUNT(*) FROM t GROUP BY b", "SELECT date_trunc('month', d) AS m, COUNT(*) FROM t GROUP BY m")]
        [(), (), ('__key0',)]
    """
    virtual = {name for name, _ in analysis.computed}
    return tuple(k for k in analysis.keys if k in virtual and not _spec(analysis, k).unit_level)


def stored_grid(analysis: Analysis, measure: Measure) -> exp.Expr | None:
    """The store's clamped fixed-point column for `measure`'s value, when it holds one (a column of the table
    itself with fixed bounds, at the column's own grid); None: clamp per query. An auto-bounds column whose
    clamp is chosen never reads the stored grid: the store clamped it at the declared limit, and a spec carrying
    a chosen, tighter clamp would otherwise pass the comparison below while the noise is sized for the tighter
    clamp. A capped sum (auto/total.py) is always clamped at the declared limit (bounds.at_bound keeps it
    there even when the query chose a clamp for the column's quantiles), so it reads the stored grid."""
    spec = analysis.table.column(measure.column or "")
    chosen_clamp = spec is not None and spec.auto_bounds and not measure.cap
    if measure.kind == "values" or measure.expr or spec is None or spec.bounds is None or chosen_clamp or (
            measure.grid, measure.lo, measure.hi) != fixed_point(spec):
        return None
    if analysis.source is not None:
        return None  # a join's virtual table: the other table's columns have no grid here; clamp per query
    return exp.column(store_layout.grid_value(spec.name))  # clamped once, when the store was built


def store_source(analysis: Analysis) -> exp.Expr:
    """What the store path reads: the table in the store, or the join's virtual table over the store's tables
    (only joins whose rows are the base table's rows: proxy/query/planner.py, `ranks_serve`), with the computed
    keys as columns. A computed key reads the store's columns, so a unit-level one reads canonical values.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"),
        ...     ColumnSpec("a", "INTEGER", unit_level=True, groupable=True)))
        >>> store_source(analyse(parse("SELECT a // 10 AS b, COUNT(*) FROM t GROUP BY b"), Catalog((t,)))).sql("duckdb")
        '(SELECT *, TRY(CAST(CAST("a" AS BIGINT) // 10 AS BIGINT)) AS "__key0" FROM "t") AS __computed'
    """
    if analysis.join is not None:  # a joined public table's unit-level columns are no canonical values in the store
        return with_computed(analysis, canonical_source(analysis.join, store_canonical(analysis)))
    table = analysis.source.copy() if analysis.source is not None else exp.table_(analysis.table.name, quoted=True)
    return with_computed(analysis, table)


def _keyed(analysis: Analysis, keys: list[str], first: list[exp.Expr]) -> exp.Select:
    """SELECT <first>, the group keys (binary collation) AS __k0, __k1, …"""
    projections = [*first, *(exp.alias_(types.column(*_typed(analysis, key)), alias, copy=False)
                             for alias, key in zip(keys, analysis.keys, strict=True))]
    return exp.select(*projections)


def _typed(analysis: Analysis, name: str) -> tuple[str, str]:
    spec = _spec(analysis, name)
    return spec.name, spec.type


def _spec(analysis: Analysis, name: str) -> ColumnSpec:
    spec = analysis.table.column(name)
    assert spec is not None
    return spec


def _row_total(measure: Measure, j: int, analysis: Analysis) -> exp.Expr:
    """The cell's total of one measure over its rows (before bounding)."""
    match measure.kind:
        case "rows":
            return exp.Count(this=exp.Star())
        case "units":
            return exp.Literal.number(1)  # one per cell
        case "values":
            return exp.Count(this=exp.column(measure.column, quoted=True))
    value = stored_grid(analysis, measure)
    if value is None:
        value = row_value(measure, j).this
    if measure.kind == "centred_sum":
        value = exp.Sub(this=value, expression=exp.Literal.number(measure.centre))
    return exp.Sum(this=value)


def _bounded(measure: Measure, j: int, k: int) -> exp.Expr:
    """The cell's contribution: its total as if it kept k of its `__n` rows, within the measure's sensitivity."""
    total: exp.Expr = exp.column(f"__c{j}")
    match measure.kind:
        case "units":
            return total
        case "rows":
            return exp.func("LEAST", total, exp.Literal.number(k), copy=False)
        case "values":
            lo, hi = 0, k
        case "sum":  # 0 is in range: a cell whose values are all NULL (or fewer than k) adds nothing
            lo, hi = min(0, k * measure.lo), max(0, k * measure.hi)
            total = exp.Coalesce(this=total, expressions=[exp.Literal.number(0)])  # SUM of no values is NULL
        case "centred_sum":
            lo, hi = k * (measure.lo - measure.centre), k * (measure.hi - measure.centre)
            total = exp.Coalesce(this=total, expressions=[exp.Literal.number(0)])
    # n <= k: the cell's exact total (integers, no rounding); else scaled by k / n in DOUBLE and rounded, brought
    # within ±2^66 while still a DOUBLE, and only then cast, to HUGEINT (Spark: DECIMAL(38, 0), render.py): |lo|,
    # |hi| reach k·1e15 = 10^19, past BIGINT, so a BIGINT cast failed on one heavy unit (issue #26). ±2^66 holds
    # [lo, hi] and fits the cast, so the integer clamp after it gives exactly what it gave before wherever the
    # BIGINT cast did not fail, and keeps rounding from carrying a contribution past the sensitivity
    # (docs/privacy.md §11.1)
    assert -CAST_LIMIT <= lo <= hi <= CAST_LIMIT  # max_rows <= 10^4 and grid values <= 2^51: below 2^65
    ratio = exp.Round(this=exp.Div(
        this=exp.Mul(this=exp.cast(total.copy(), exp.DataType.Type.DOUBLE, copy=False), expression=exp.Literal.number(k)),
        expression=exp.column("__n")))
    scaled = exp.cast(_clamp(ratio, -CAST_LIMIT, CAST_LIMIT), exp.DataType.Type.INT128, copy=False)
    few = exp.LTE(this=exp.column("__n"), expression=exp.Literal.number(k))
    return _clamp(exp.Case(ifs=[exp.If(this=few, true=total)], default=scaled), lo, hi)


def _clamp(value: exp.Expr, lo: int, hi: int) -> exp.Expr:
    """LEAST(GREATEST(value, lo), hi)."""
    return exp.func("LEAST", exp.func("GREATEST", value, exp.Literal.number(lo), copy=False), exp.Literal.number(hi),
                    copy=False)
