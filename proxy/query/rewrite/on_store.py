"""The SQL that runs on the bounding store (proxy/query/rewrite/store_layout.py): bounding is a filter on precomputed ranks.

    SELECT keys, COUNT(*) FILTER (WHERE <rank> = 1) AS __units (private partitions; else 0), <measures>
    FROM <table in the store>
    WHERE <rank> <= max_rows [AND <group rank> <= max_groups] [AND WHERE]
    GROUP BY keys [HAVING the keys are in their public domains]

One scan and one aggregation: no window, no sort, any bound without rebuilding. A query that only counts rows
or units reads one row per kept cell instead, its rank-1 row, and adds up LEAST(cell rows, max_rows)
(`counts_from_first_rows`: the same numbers). The rule (docs/policy.md,
`bounding`): the filter is used when the query groups by at most one row-level column and its WHERE reads
unit-level columns (or the unit) only. A SUM capping each unit's total (auto/total.py) scales each kept row by
its unit's total over its kept rows (a window per unit), then adds them up as any other sum. Unit-level columns hold each unit's canonical value in the store, so
such a WHERE keeps or drops whole units and commutes with bounding. Unlike rewrite/per_query.py, a value outside a
public domain still takes one of the unit's `max_groups` (the ranks are computed once, for every value):
more bias for units with such values, never more sensitivity. Any other query (a row-level WHERE, two or
more row-level keys) bounds each (unit, group) cell after the WHERE by one aggregation per cell
(rewrite/cells.py): no window over rows. A table declared one row per unit (checked when the store was
built) has nothing to bound: any WHERE and keys read it with no rank filter. A unit-level computed key reads
the store's canonical columns (one group per unit); a join to a one-row-per-unit table on the unit keeps the
base table's rows, so its ranks bound the joined rows (`store_source`, docs/privacy.md §11).

Privacy: every kept row has rank <= max_rows within its (unit, group) and its group has group rank
<= max_groups within its unit, and the ranks depend only on the unit's own rows; a unit's rank-1 row of a
group is kept exactly when the group is, so `__units` counts each kept (unit, group) once. The sensitivities
of rewrite/per_query.py hold unchanged (docs/privacy.md §9).
"""

from __future__ import annotations

from typing import Literal

from sqlglot import exp

from proxy.query import types
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.measures import Measure
from proxy.query.catalog import ColumnSpec
from proxy.query.rewrite import caps, store_layout
from proxy.query.rewrite.cells import rewrite_cells, store_source, stored_grid, unranked_keys
from proxy.query.rewrite.per_query import UNITS, inputs, row_value

RowWhere = Literal["window", "filter"]


def uses_rank_filter(analysis: Analysis, row_where: RowWhere = "window") -> bool:
    """Whether the query bounds by filtering the store's ranks (else: per-query windows over the store).

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("h", "VARCHAR", groupable=True), ColumnSpec("r", "VARCHAR", unit_level=True)))
        >>> [uses_rank_filter(analyse(parse(q), Catalog((t,)))) for q in ("SELECT g, COUNT(*) FROM t GROUP BY g",
        ...     "SELECT COUNT(*) FROM t WHERE r = 'N' AND u > 3", "SELECT COUNT(*) FROM t WHERE g = 'a'",
        ...     "SELECT g, h, COUNT(*) FROM t GROUP BY g, h")]
        [True, True, False, False]
    """
    table = analysis.table
    if table.one_row_per_unit:  # checked when the store was built: nothing to bound, any WHERE and keys
        return True
    if len(_row_level_keys(analysis)) > 1 or unranked_keys(analysis):
        return False
    if analysis.where is None or row_where == "filter":
        return True
    for column in analysis.where.find_all(exp.Column):
        spec = table.column(column.name)
        if spec is None or not (spec.unit_level or spec.name == table.privacy_unit):
            return False
    return True


def rewrite_ranked(analysis: Analysis, salt: int = 0, row_where: RowWhere = "window") -> str:
    """The DuckDB query for `analysis` over the bounding store; result columns as in `rewrite.rewrite`.

    `row_where = "filter"` (measurement only, bench/query_latency.py) filters the ranks after a row-level
    WHERE too: still within every bound (a subset of the bounded rows), but more biased, and `__units` then
    misses units whose rank-1 row the WHERE dropped.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("r", "VARCHAR", unit_level=True, groupable=True)), max_rows=3, max_groups=2)
        >>> print(rewrite_ranked(analyse(parse("SELECT g, r, COUNT(g) FROM t WHERE r = 'N' GROUP BY g, r"),
        ...     Catalog((t,)))))
        SELECT "g" COLLATE "binary" AS __k0, "r" COLLATE "binary" AS __k1, COUNT(*) FILTER(WHERE __row_rank__g = 1) AS __units, COUNT("g") AS __m0 FROM "t" WHERE "r" COLLATE "binary" = 'N' AND __row_rank__g <= 3 AND __group_rank__g <= 2 GROUP BY __k0, __k1
        >>> print(rewrite_ranked(analyse(parse("SELECT g, COUNT(*) FROM t GROUP BY g"), Catalog((t,)))))  # one row a cell
        SELECT "g" COLLATE "binary" AS __k0, COUNT(*) AS __units, COALESCE(SUM(LEAST(__cell_rows__g, 3)), 0) AS __m0 FROM "t" WHERE __row_rank__g = 1 AND __group_rank__g <= 2 GROUP BY __k0
    """
    if not uses_rank_filter(analysis, row_where):
        return rewrite_cells(analysis, salt)  # bound after the WHERE, per cell (rewrite/cells.py)
    table = analysis.table
    row_keys = _row_level_keys(analysis)
    rank = store_layout.row_rank(row_keys[0]) if row_keys else store_layout.ROW_RANK
    counting = counts_from_first_rows(analysis, row_where)
    conditions: list[exp.Expr] = []
    if not table.one_row_per_unit:  # one row per unit (checked when the store was built): nothing to bound
        # counting: one row per kept cell, its rank-1 row, which carries the cell's size (`counts_from_first_rows`)
        conditions.append(exp.EQ(this=exp.column(rank), expression=exp.Literal.number(1)) if counting else
                          exp.LTE(this=exp.column(rank), expression=exp.Literal.number(table.max_rows)))
        if row_keys:
            conditions.append(exp.LTE(this=exp.column(store_layout.group_rank(row_keys[0])),
                                      expression=exp.Literal.number(analysis.max_groups)))
    source = store_source(analysis)
    if analysis.where is not None:
        # One filter with the rank conditions: DuckDB pushes all of it into a parallel scan. (Running the WHERE first
        # in an OFFSET 0 subquery read fewer rank values but made the scan serial: 1.7x the wall time at 10M.)
        conditions.insert(0, analysis.where.copy())
    sources = inputs(analysis.measures)
    corrected = corrects_heavy_units(analysis)
    if any(m.cap for m in analysis.measures):
        source, conditions = _capped_rows(analysis, source, conditions, sources), []
    keys = []
    for i, key in enumerate(analysis.keys):
        spec = table.column(key)
        assert spec is not None
        keys.append(exp.alias_(types.column(spec.name, spec.type), f"__k{i}", copy=False))
    # `__units` feeds private partition selection only (release/publish.py); elsewhere it is never read, so not computed
    measure_of = _first_row_count if counting else _measure
    units = measure_of(Measure("units"), None, analysis) if analysis.partitions == "private" else exp.Literal.number(0)
    # Every node below is built here for this query alone: the builders need not copy them (copy=False), which
    # is a third of the small-query planning time (bench/throughput.py).
    projections = [*keys, exp.alias_(units, UNITS, copy=False)]
    projections += [exp.alias_(_uncapped_sum(j, bool(keys)) if corrected and measure.cap else
                               measure_of(measure, sources.get(j), analysis), f"__m{j}", copy=False)
                    for j, measure in enumerate(analysis.measures)]
    select = exp.Select(expressions=projections).from_(source.copy() if corrected else source, copy=False)
    if conditions:
        select = select.where(exp.and_(*conditions, copy=False), copy=False)
    if keys:
        select = select.group_by(*(exp.column(f"__k{i}") for i in range(len(keys))), copy=False)
    if analysis.partitions == "public":
        # Groups outside the public domain are dropped after aggregation, which here is the same as dropping
        # their rows first: ranks never depend on the domain, and every group is whole. The test reads the
        # group's key through ANY_VALUE (one value per group) so that DuckDB cannot push it back into the scan.
        inside = []
        for key, domain in zip(analysis.keys, analysis.domains, strict=True):
            spec = table.column(key)
            assert spec is not None
            test = types.member(spec.name, spec.type, list(domain))
            ref = types.column(spec.name, spec.type)
            for arg in ("this", "expression"):
                if test.args.get(arg) == ref:
                    test.set(arg, exp.AnyValue(this=test.args[arg]))
            inside.append(test)
        select = select.having(exp.and_(*inside, copy=False), copy=False)
    if complements_rank_filter(analysis, row_where):
        where = analysis.where.copy() if analysis.where is not None else None
        select = _kept_by_complement(analysis, store_source(analysis), where, keys,
                                     select.args.get("having"))
    if corrected:
        select = _with_corrections(analysis, select, source, keys)
    return select.sql(dialect="duckdb", copy=False)


def complements_rank_filter(analysis: Analysis, row_where: RowWhere = "window") -> bool:
    """Whether the rank filter's sums are taken as those of every row less those of the rows above it
    (`_kept_by_complement`): no row-level key (the filter is `__row_rank <= max_rows`), public or no partitions,
    and every measure a COUNT(*), a COUNT of a column, or a SUM of the store's integer grid column (a capped one
    corrected on its heavy units), without FILTER or expression: integers, so the subtraction is exact. Counts
    alone take the first-row form instead (`counts_from_first_rows`); the measurement-only `row_where = "filter"`
    keeps its filter.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("x", "INTEGER", bounds=(0, 9))), max_rows=3)
        >>> [complements_rank_filter(analyse(parse(q), Catalog((t,)))) for q in ("SELECT COUNT(*), SUM(x) FROM t",
        ...     "SELECT COUNT(*) FROM t", "SELECT g, SUM(x) FROM t GROUP BY g", "SELECT AVG(x) FROM t")]
        [True, False, False, False]
    """
    table = analysis.table
    if (row_where == "filter" or table.one_row_per_unit or analysis.partitions == "private" or _row_level_keys(analysis)
            or not analysis.measures or counts_from_first_rows(analysis, row_where)
            or not uses_rank_filter(analysis, row_where)):
        return False
    if any(m.cap for m in analysis.measures) and not corrects_heavy_units(analysis):
        return False
    return all(m.kind == "rows" or (not m.where and not m.expr and m.column and (
        m.kind == "values" or (m.kind == "sum" and stored_grid(analysis, m) is not None))) for m in analysis.measures)


def _kept_by_complement(analysis: Analysis, source: exp.Expr, where: exp.Expr | None, keys: list[exp.Expr],
                        having: exp.Having | None) -> exp.Select:
    """The rank filter's aggregates (`__k<i>`, `__units` 0, `__m<j>`, as `rewrite_ranked` selects them) as those
    of every row that passes the WHERE less those of the rows above the filter, `__row_rank > k`.

    Why the same numbers (docs/privacy.md §10.7): the kept rows are the rows with rank <= k, and the others are the
    rows with rank > k, which lie in units of more than k rows (the rank numbers a unit's n rows 1..n, so
    `__unit_rows > k` holds on them: a filter the scan prunes row groups with). Counts and integer sums of the
    kept rows are those of all rows minus those of the rest, exactly (HUGEINT sums of BIGINT grid values). A SUM is
    NULL where no kept row has a value, so the non-NULL values are counted too. Every group (keys are unit-level:
    one value per unit) holds its units' rank-1 rows, so it has kept rows whenever it has rows; the groups are those
    of every row (the HAVING on them as before), the rest's matched on the keys, NULL to NULL. Without keys one row,
    NULL sums where no row is kept, as before. One scan of two columns and one of the few heavy units' rows replace
    the scan that read the rank of every row."""
    k = exp.Literal.number(analysis.table.max_rows)
    keyed = bool(keys)

    def aggregates(above: bool) -> exp.Select:
        out = [k_.copy() for k_ in keys] + [exp.alias_(exp.Count(this=exp.Star()), "__n", copy=False)]
        for j, m in enumerate(analysis.measures):
            if m.kind == "rows":
                continue
            column = exp.column(m.column, quoted=True) if m.kind == "values" else stored_grid(analysis, m)
            assert column is not None
            if not m.cap:  # a capped sum's NULL reads the rows alone (`_uncapped_sum`)
                out.append(exp.alias_(exp.Count(this=column.copy()), f"__v{j}", copy=False))
            if m.kind == "sum":
                out.append(exp.alias_(exp.Sum(this=column.copy()), f"__s{j}", copy=False))
        select = exp.Select(expressions=out).from_(source.copy(), copy=False)
        conditions = [where.copy()] if where is not None else []
        if above:  # the rows the rank filter drops: rank > k, hence in units of more than k rows
            conditions += [exp.GT(this=exp.column(store_layout.UNIT_ROWS), expression=k.copy()),
                           exp.GT(this=exp.column(store_layout.ROW_RANK), expression=k.copy())]
        if conditions:
            select = select.where(exp.and_(*conditions, copy=False), copy=False)
        if keyed:
            select = select.group_by(*(exp.column(f"__k{i}") for i in range(len(keys))), copy=False)
        if having is not None and not above:
            select = select.having(having.this.copy(), copy=False)
        return select

    def kept(name: str) -> exp.Expr:
        return exp.Sub(this=exp.column(name, table="__all"), expression=exp.Coalesce(
            this=exp.column(name, table="__over"), expressions=[exp.Literal.number(0)]))

    out = [exp.column(f"__k{i}", table="__all") for i in range(len(keys))]
    out.append(exp.alias_(exp.Literal.number(0), UNITS, copy=False))
    for j, m in enumerate(analysis.measures):
        if m.kind == "rows":
            value: exp.Expr = kept("__n")
        elif m.kind == "values":  # COUNT(x) in a group; without keys the flags' SUM, NULL over no rows
            value = kept(f"__v{j}") if keyed else exp.Case(
                ifs=[exp.If(this=exp.GT(this=kept("__n"), expression=exp.Literal.number(0)), true=kept(f"__v{j}"))])
        else:
            total = exp.Sub(this=exp.Coalesce(this=exp.column(f"__s{j}", table="__all"),
                                              expressions=[exp.Literal.number(0)]),
                            expression=exp.Coalesce(this=exp.column(f"__s{j}", table="__over"),
                                                    expressions=[exp.Literal.number(0)]))
            # a capped sum adds up its values uncapped as `_uncapped_sum` does (NULL read as 0: a group has rows;
            # without keys NULL over no rows); any other SUM is NULL where no kept row has a value
            some = kept("__n") if m.cap else kept(f"__v{j}")
            value = total if m.cap and keyed else exp.Case(
                ifs=[exp.If(this=exp.GT(this=some, expression=exp.Literal.number(0)), true=total)])
        out.append(exp.alias_(value, f"__m{j}", copy=False))
    on: exp.Expr = exp.and_(*(exp.NullSafeEQ(this=exp.column(f"__k{i}", table="__all"),
                                             expression=exp.column(f"__k{i}", table="__over"))
                              for i in range(len(keys))), copy=False) if keyed else exp.true()
    joined = exp.Join(this=aggregates(True).subquery("__over", copy=False), on=on, side="LEFT")
    return exp.Select(expressions=out).from_(aggregates(False).subquery("__all", copy=False), copy=False).join(
        joined, copy=False)


def _uncapped_sum(j: int, grouped: bool) -> exp.Expr:
    """Σ __cap_v<j> (NULL read as 0) over the kept rows, summed over the unfilled value `__cap_r<j>`: the COALESCE
    per row cost a third of the scan at 10M. A group has rows, so NULL means all its values were NULL: 0. Without
    keys, no rows at all stays NULL, as Σ __cap_v<j> is.

    Example:
        >>> _uncapped_sum(0, True).sql(), _uncapped_sum(1, False).sql()
        ('COALESCE(SUM(__cap_r0), 0)', 'COALESCE(SUM(__cap_r1), CASE WHEN COUNT(*) > 0 THEN 0 END)')
    """
    zero: exp.Expr = exp.Literal.number(0)
    if not grouped:
        zero = exp.Case(ifs=[exp.If(this=exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0)),
                                    true=zero)])
    return exp.Coalesce(this=exp.Sum(this=exp.column(f"__cap_r{j}")), expressions=[zero])


def corrects_heavy_units(analysis: Analysis) -> bool:
    """Whether the capped sums are added up uncapped and then corrected on the rows of units above their cap
    (`_with_corrections`): each capped sum reads the store's clamped column and unit total (a pushed-down filter
    then finds the few heavy units' rows; a per-query window would run twice)."""
    capped = [m for m in analysis.measures if m.cap]
    return bool(capped) and all(stored_grid(analysis, m) is not None for m in capped)


def _with_corrections(analysis: Analysis, select: exp.Select, capped_rows: exp.Expr, keys: list[exp.Expr]
                      ) -> exp.Select:
    """`select` (which adds up each capped sum j uncapped, as SUM(__cap_v<j>)) with each such sum corrected.

    The capped sum is Σ over the kept rows of v' = v when the unit's total T <= C, else scaled(v)
    (caps.scaled): Σ v' = Σ v + Σ over the rows with T > C of (scaled(v) − v), in integers, exactly. The
    second sum is one more aggregation of the same kept rows under the filter T > C, which the scan applies
    (on the demo a few thousand of 10M rows); the per-row CASE over every row costs more than both scans. Groups
    are matched on their keys, NULL to NULL; a group of `select` with no heavy row adds 0, and a query without
    keys over no rows stays NULL, as before. The sums, and so the release and its sensitivity, are unchanged
    (docs/privacy.md §10.7)."""
    main = "__main"
    out = [exp.column(f"__k{i}", table=main) for i in range(len(keys))] + [exp.column(UNITS, table=main)]
    joins = []
    for j, measure in enumerate(analysis.measures):
        if not measure.cap:
            out.append(exp.column(f"__m{j}", table=main))
            continue
        name = f"__fix{j}"
        value, total = exp.column(f"__cap_v{j}"), exp.column(f"__cap_t{j}")
        delta = exp.Sub(this=caps.scaled(value, total, measure.cap).args["default"], expression=value.copy())
        fix = exp.Select(expressions=[*(k.copy() for k in keys), exp.alias_(exp.Sum(this=delta), "__d", copy=False)])
        fix = fix.from_(capped_rows.copy(), copy=False).where(
            exp.GT(this=total.copy(), expression=exp.Literal.number(measure.cap)), copy=False)
        if keys:
            fix = fix.group_by(*(exp.column(f"__k{i}") for i in range(len(keys))), copy=False)
        on: exp.Expr = exp.and_(*(exp.NullSafeEQ(this=exp.column(f"__k{i}", table=main),
                                                 expression=exp.column(f"__k{i}", table=name))
                                  for i in range(len(keys))), copy=False) if keys else exp.true()
        joins.append((fix.subquery(name, copy=False), on))
        out.append(exp.alias_(exp.Add(this=exp.column(f"__m{j}", table=main), expression=exp.Coalesce(
            this=exp.column("__d", table=name), expressions=[exp.Literal.number(0)])), f"__m{j}", copy=False))
    result = exp.Select(expressions=out).from_(select.subquery(main, copy=False), copy=False)
    for table, on in joins:
        result = result.join(exp.Join(this=table, on=on, side="LEFT"), copy=False)
    return result


def counts_from_first_rows(analysis: Analysis, row_where: RowWhere = "window") -> bool:
    """Whether the rank-filter query counts each kept cell from its rank-1 row alone: every measure counts rows or
    units, and the query has no WHERE. (The identity below holds under a unit-level WHERE too, but a selective
    one leaves few rows to count, and reading each row's cell size then costs more than it saves: 28 -> 34 ms
    CPU for the drill-down at 10M rows, bench/README.md.)

    Why it is the same answer, exactly (docs/privacy.md §10.7): a cell is (unit, value of the row-level key) or,
    without one, the unit. The stored row rank numbers the cell's rows 1..n (ROW_NUMBER, rewrite/store_layout.py), so the
    filter `rank <= k` keeps min(n, k) of them, n = `__cell_rows__<key>` (or `__unit_rows`), which every row
    of the cell holds; the group rank, the unit-level columns (canonical values) and a unit-level WHERE are the
    same on all of a cell's rows, so the cell is kept whole or not at all, and its rank-1 row is in it. Hence
    COUNT(*) over the rows kept = Σ over the kept cells' rank-1 rows of LEAST(n, k), and a count of units (one
    per kept cell) = the number of those rows: the same numbers from one row per cell instead of k, the same
    release and sensitivities. A row-level WHERE (`row_where = "filter"`) could drop a cell's rank-1 row and
    keep others.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True),
        ...     ColumnSpec("r", "VARCHAR", unit_level=True), ColumnSpec("x", "DOUBLE", bounds=(0, 1))), max_rows=3)
        >>> [counts_from_first_rows(analyse(parse(q), Catalog((t,)))) for q in ("SELECT g, COUNT(*) FROM t GROUP BY g",
        ...     "SELECT COUNT(*), COUNT(DISTINCT u) FROM t", "SELECT COUNT(x) FROM t",
        ...     "SELECT COUNT(*) FROM t WHERE r = 'N'")]
        [True, True, False, False]
    """
    return (not analysis.table.one_row_per_unit and bool(analysis.measures) and analysis.where is None
            and all(m.kind in ("rows", "units") for m in analysis.measures) and uses_rank_filter(analysis, row_where))


def _first_row_count(measure: Measure, source: int | None, analysis: Analysis) -> exp.Expr:
    """A count summed over the kept cells' rank-1 rows (`counts_from_first_rows`): rows min(n, k), units 1."""
    if measure.kind == "units":
        return exp.Count(this=exp.Star())
    assert measure.kind == "rows"
    row_keys = _row_level_keys(analysis)
    size = exp.column(store_layout.cell_rows(row_keys[0]) if row_keys else store_layout.UNIT_ROWS)
    kept = exp.func("LEAST", size, exp.Literal.number(analysis.table.max_rows))
    # COALESCE: a SUM over no rows is NULL where COUNT(*) is 0 (a query without keys whose WHERE keeps no unit)
    return exp.Coalesce(this=exp.Sum(this=kept), expressions=[exp.Literal.number(0)])


def _row_level_keys(analysis: Analysis) -> tuple[str, ...]:
    specs = [analysis.table.column(k) for k in analysis.keys]
    return tuple(s.name for s in specs if s is not None and not s.unit_level)


def _measure(measure: Measure, source: int | None, analysis: Analysis) -> exp.Expr:
    """One measure summed over the kept rows: the per-cell sums of rewrite/per_query.py, added up directly."""
    match measure.kind:
        case "rows":
            return exp.Count(this=exp.Star())
        case "units":  # one per kept (unit, group): the unit's rank-1 row of the group
            row_keys = _row_level_keys(analysis)
            rank = store_layout.row_rank(row_keys[0]) if row_keys else store_layout.ROW_RANK
            if analysis.table.one_row_per_unit:
                return exp.Count(this=exp.Star())
            return exp.Filter(this=exp.Count(this=exp.Star()), expression=exp.Where(
                this=exp.EQ(this=exp.column(rank), expression=exp.Literal.number(1))))
    assert source is not None
    if measure.kind == "values" and analysis.keys and measure.column and not (measure.expr or measure.where):
        # a group has rows, so Σ of the non-NULL flags is COUNT(x), which DuckDB runs faster (no key: NULL stays)
        return exp.Count(this=exp.column(measure.column, quoted=True))
    if measure.cap:  # the kept row's value scaled by its unit's total (`_capped_rows`)
        j = analysis.measures.index(measure)
        return exp.Sum(this=caps.scaled(exp.column(f"__cap_v{j}"), exp.column(f"__cap_t{j}"), measure.cap))
    # clamped once when the store was built, else the clamped per-row value (unaliased)
    value = stored_grid(analysis, measure)
    if value is None:
        value = row_value(analysis.measures[source], source).this
    if measure.kind == "centred_sum":
        return exp.Sum(this=exp.Sub(this=value, expression=_number(measure.centre)))
    return exp.Sum(this=value)


def _capped_rows(analysis: Analysis, source: exp.Expr, conditions: list[exp.Expr], sources: dict[int, int]
                 ) -> exp.Expr:
    """The kept rows with, for each capped sum j, the row's clamped value `__cap_v<j>` (0 for NULL) and its unit's
    total `__cap_t<j>` = Σ|value| over the unit's kept rows (docs/privacy.md §10.2). Scaling each row by
    min(1, C/T) toward zero keeps the unit's rows, hence its cells, within C in L1: |Σ_cell v'| <= Σ_cell |v'|."""
    spec = _spec(analysis, analysis.table.privacy_unit)
    unit = types.column(spec.name, spec.type)
    rows = exp.select(exp.Star())
    for j, measure in enumerate(analysis.measures):
        if measure.cap:
            value = stored_grid(analysis, measure)
            total: exp.Expr
            if value is not None:
                # the store's total over all the unit's rows: at least that of the rows kept here, so the scaled
                # rows still add to at most C (docs/privacy.md §10.2), and no window sorts the unit's rows
                total = exp.column(store_layout.unit_total(measure.column or ""))
            else:
                value = row_value(analysis.measures[sources[j]], sources[j]).this
                total = exp.Window(this=exp.Sum(this=exp.Abs(this=exp.func("COALESCE", value.copy(), exp.Literal.number(
                    0)))), partition_by=[unit.copy()])
            raw, value = value, exp.func("COALESCE", value.copy(), exp.Literal.number(0), copy=False)
            rows = rows.select(exp.alias_(raw, f"__cap_r{j}", copy=False), exp.alias_(value, f"__cap_v{j}", copy=False),
                               exp.alias_(total, f"__cap_t{j}", copy=False), append=True, copy=False)
    rows = rows.from_(source, copy=False)  # every node here is built for this query alone (as in rewrite_ranked)
    if conditions:
        rows = rows.where(exp.and_(*conditions, copy=False), copy=False)
    return rows.subquery("__capped", copy=False)


def _spec(analysis: Analysis, name: str) -> ColumnSpec:
    spec = analysis.table.column(name)
    assert spec is not None
    return spec


def _number(value: int | float) -> exp.Literal:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return exp.Literal.number(value)
