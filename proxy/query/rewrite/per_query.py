"""Generate the SQL that runs: contribution bounding, clamping and per-group measures, from the Analysis.

The SQL is built from declared names and rebuilt literals only; the analyst's text never reaches DuckDB.
Bounding is per unit (docs/privacy.md §1, §11): each unit keeps `max_rows` rows per group and `max_groups` groups,
chosen by a keyed hash of the unit's own rows under a fresh random `salt` per query. What a unit keeps
depends only on its own rows, so removing a unit removes only its kept rows and every planned sensitivity
holds for any data; the salt makes the choice a fresh pseudo-random sample each time.

    __src      the rows of the protected table with a privacy unit that pass WHERE (and the public domain),
               values clamped
    __rows     at most max_rows random rows per (unit, group)                     L∞ bound
               (left out when no measure reads a per-row value: the cell's count is capped at max_rows)
    __cells    one row per (unit, group), at most max_groups random groups per unit   L0 bound
    __capped   (a SUM with a per-unit L1 cap only) each unit's cells scaled together to total <= C (auto/total.py)
    result     per group: distinct units, then one integer column per measure
"""

from __future__ import annotations

from sqlglot import exp, parse_one

from proxy.query import types
from proxy.query.analyse.analysis import Analysis
from proxy.query.analyse.joins import canonical_source
from proxy.query.analyse.measures import Measure
from proxy.query.catalog import TableSchema
from proxy.query.rewrite.caps import capped_cells
from proxy.query.rewrite.keyed_hash import keyed_order, numbers, part_numbers_of
from proxy.query.types import Kind

UNITS = "__units"


def rewrite(analysis: Analysis, salt: int = 0) -> str:
    """The bounded, clamped query for `analysis` (`rewrite_tree`), as DuckDB SQL text.

    Result columns: the group keys, then `__units` (distinct units per group), then `__m0`, `__m1`, …
    (one integer per measure, in `analysis.measures` order).

    Example (the generated SQL is one long line):
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
        >>> t = TableSchema("orders", "cid", (ColumnSpec("cid", "BIGINT"),
        ...     ColumnSpec("qty", "INTEGER", bounds=(0, 10))), max_rows=2)
        >>> print(rewrite(analyse(parse("SELECT SUM(qty) FROM orders WHERE qty > 1"), Catalog((t,))), 7))
        WITH __src AS (SELECT "cid" AS __unit, CASE WHEN "qty" IS NULL THEN NULL ELSE LEAST(GREATEST(CAST(ROUND(LEAST(GREATEST(CAST("qty" AS DOUBLE), 0), 10) * 1) AS BIGINT), 0), 10) END AS __v0 FROM "orders" WHERE NOT "cid" IS NULL AND "qty" > 1), __rows AS (SELECT * FROM (SELECT *, COALESCE((XOR(CAST(__unit % 4611686018427387904 AS BIGINT) & 4294967295, (CAST(__unit % 4611686018427387904 AS BIGINT) >> 32) & 4294967295)), 4294967295) AS __n__unit_0, COALESCE(__v0, 4294967295) AS __n__v0_0 FROM __src) AS __numbered QUALIFY ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY ((XOR(((XOR(CAST(7 AS BIGINT), __n__unit_0)) * 625341585 & 4294967295), __n__v0_0)) * 625341585 & 4294967295) * 2147483648 + ((XOR(((XOR(CAST(0 AS BIGINT), __n__unit_0)) * 1540483477 & 4294967295), __n__v0_0)) * 1540483477 & 4294967295) // 2) <= 2), __cells AS (SELECT __unit, SUM(__v0) AS __c0 FROM __rows GROUP BY __unit) SELECT COUNT(*) AS __units, SUM(__c0) AS __m0 FROM __cells
    """
    return rewrite_tree(analysis, salt).sql(dialect="duckdb", copy=False)  # a tree of its own: no copy


def rewrite_tree(analysis: Analysis, salt: int = 0) -> exp.Select:
    """The bounded, clamped query for `analysis` as one syntax tree, which each engine renders through its
    sqlglot dialect (proxy/query/rewrite/render.py). Bounding orders rows and groups by the keyed hash of
    proxy/query/rewrite/keyed_hash.py, so both engines keep exactly the same rows."""
    # Every node below is built here for this query alone (a shared one, such as the WHERE, is copied in): the
    # builders need not copy the growing tree (copy=False). The tree is the plan's; render.py copies it to render.
    keys = [f"__k{i}" for i in range(len(analysis.keys))]
    source = _source(analysis)
    inputs = _inputs(analysis.measures)
    values = [f"__v{j}" for j in sorted(set(inputs.values()))]
    kinds = [_kind(analysis.table, key) for key in analysis.keys]
    unit = ("__unit", _kind(analysis.table, analysis.table.privacy_unit))
    ctes: list[tuple[str, exp.Expr]] = [("__src", source)]
    if values:
        # Rows are ranked within (unit, group) by the hash of (unit, values): the keys are one value per
        # partition, so they are left out (no MD5 per row for a text key). The numbers are computed once per row.
        row_parts = [unit, *((v, "integer") for v in values)]
        small = {f"__v{j}" for j in set(inputs.values()) if _small(analysis.measures[j])}
        numbered = exp.select(exp.Star(), *(exp.alias_(n, f"__n{name}_{i}", copy=False) for name, kind in row_parts
                                            for i, n in enumerate(numbers(exp.column(name), kind, name in small))))
        order = keyed_order(salt, _numbers_of(row_parts), [])
        row_rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column(p) for p in ["__unit", *keys]],
                              order=exp.Order(expressions=order))
        numbered = numbered.from_(exp.table_("__src"), copy=False).subquery("__numbered", copy=False)
        ctes.append(("__rows", exp.select(exp.Star()).from_(numbered, copy=False).qualify(
            exp.LTE(this=row_rank, expression=exp.Literal.number(analysis.table.max_rows)), copy=False)))
    # Without a per-row value no measure can tell which rows a unit keeps, only how many: min(rows, max_rows)
    # per (unit, group), the same count as the ranked rows, without ranking the rows.
    capped = None if values else analysis.table.max_rows
    cells = exp.select(*map(exp.column, ["__unit", *keys]), *(_cell_measure(m, j, inputs.get(j), capped)
                                                            for j, m in enumerate(analysis.measures)))
    cells = cells.from_(exp.table_("__rows" if values else "__src"), copy=False).group_by(
        *map(exp.column, ["__unit", *keys]), copy=False)
    if keys:  # without GROUP BY each unit has exactly one cell: nothing to bound
        domains = analysis.domains if analysis.partitions == "public" else ()
        cells = ranked_cells(cells, unit, list(zip(keys, kinds, strict=True)), domains, salt, analysis.max_groups)
    ctes.append(("__cells", cells))
    result = exp.select(*map(exp.column, keys), exp.alias_(exp.Count(this=exp.Star()), UNITS, copy=False))
    capping = any(m.cap for m in analysis.measures)
    if capping:  # each unit's kept cells scaled together to its L1 cap (auto/total.py, docs/privacy.md §10.2)

        names = [f"__c{j}" for j in range(len(analysis.measures))]
        ctes.append(("__capped", capped_cells(analysis.measures, names, "__unit", "__cells", not keys)))
    for j, measure in enumerate(analysis.measures):
        if measure.cap:
            summed = exp.Sum(this=exp.column(f"__c{j}__capped"))
            result = result.select(exp.alias_(summed, f"__m{j}", copy=False), append=True, copy=False)
        else:
            result = result.select(exp.alias_(_group_measure(measure, j), f"__m{j}", copy=False), append=True,
                                   copy=False)
    result = result.from_(exp.table_("__capped" if capping else "__cells"), copy=False)
    if keys:
        result = result.group_by(*map(exp.column, keys), copy=False)
    for name, cte in ctes:
        result = result.with_(exp.TableAlias(this=exp.to_identifier(name)), as_=cte, copy=False)
    return result


def _source(analysis: Analysis) -> exp.Select:
    table = analysis.table
    # Units and keys are read under binary collation (types.column): a COLLATE NOCASE column would merge
    # distinct units in the bounding, or make 'N' and 'n' one group of two scopes.
    projections: list[exp.Expr] = [exp.alias_(_typed(table, table.privacy_unit), "__unit", copy=False)]
    projections += [exp.alias_(_typed(table, key), f"__k{i}", copy=False) for i, key in enumerate(analysis.keys)]
    projections += [_row_value(analysis.measures[j], j) for j in sorted(set(_inputs(analysis.measures).values()))]
    source = exp.select(*projections).from_(with_computed(analysis, _table(analysis)), copy=False)
    # Rows of no privacy unit belong to nobody we can bound: they are dropped, never pooled into one unit.
    conditions = [exp.Not(this=exp.Is(this=_quoted(table.privacy_unit), expression=exp.Null()))]
    if analysis.where is not None:
        conditions.append(analysis.where.copy())  # the analysis's own: the tree gets a copy
    if analysis.partitions == "public":
        # Rows outside the public domain are dropped before bounding: no unit spends its L0 on them.
        for key, domain in zip(analysis.keys, analysis.domains, strict=True):
            spec = table.column(key)
            assert spec is not None
            conditions.append(types.member(spec.name, spec.type, list(domain)))
    return source.where(exp.and_(*conditions, copy=False), copy=False)


def with_computed(analysis: Analysis, table: exp.Expr) -> exp.Expr:
    """`table` with the computed keys as columns (analyse/analysis.py, computed/keys.py): each is evaluated per row from
    declared columns (after the canonical values, when there are), before bounding, like any key column."""
    if not analysis.computed:
        return table
    extended = exp.select(exp.Star(), *(exp.alias_(sql.copy(), name, quoted=True, copy=False) for name, sql in analysis.computed))
    return exp.Subquery(this=extended.from_(table, copy=False), alias=exp.TableAlias(this=exp.to_identifier("__computed")))


def _typed(table: TableSchema, name: str) -> exp.Expr:
    spec = table.column(name)
    assert spec is not None
    return types.column(spec.name, spec.type)


def source_table(analysis: Analysis) -> exp.Expr:
    """The table the per-query rewrite reads (see `_table`): the bound selection reads it too."""
    return _table(analysis)


def _table(analysis: Analysis) -> exp.Expr:
    """The protected table; with unit-level columns of the cell space replaced by each unit's canonical
    value (the smallest over the unit's rows), so every unit lies in exactly one cell whatever the data
    holds, and queries with disjoint scopes touch disjoint sets of units (docs/privacy.md §7). A join's
    canonical values are each taken over the unit's rows of its own table, before the join (joins.py)."""
    if analysis.join is not None:
        return canonical_source(analysis.join, analysis.canonical)
    table = analysis.source.copy() if analysis.source is not None else exp.table_(analysis.table.name, quoted=True)
    if not analysis.canonical:
        return table
    # binary collation: the canonical value must be one function of the unit's rows in every query. Every
    # declared column is listed (no `* REPLACE`, which Spark lacks): nothing else is readable anyway.
    unit = _typed(analysis.table, analysis.table.privacy_unit)
    projections: list[exp.Expr] = []
    virtual = {name for name, _ in analysis.computed}  # computed keys are added after, by with_computed
    for column in analysis.table.columns:
        if column.name in virtual:
            continue
        ref: exp.Expr = exp.column(column.name, quoted=True)
        if column.name in analysis.canonical:
            ref = exp.Window(this=exp.Min(this=_typed(analysis.table, column.name)), partition_by=[unit.copy()])
        projections.append(exp.alias_(ref, exp.to_identifier(column.name, quoted=True), copy=False))
    canonical = exp.select(*projections).from_(table, copy=False)
    return exp.Subquery(this=canonical, alias=exp.TableAlias(this=exp.to_identifier("__canon")))


def store_canonical(analysis: Analysis) -> tuple[str, ...]:
    """The canonical columns a query on the bounding store still computes: the store holds each unit's canonical
    value of every unit-level column of its tables (rewrite/store_layout.py), but not of a public table joined to them.

    Example:
        >>> from proxy.query.parse.statement import parse
        >>> from proxy.query.analyse.analysis import analyse
        >>> from proxy.query.catalog import Catalog, ColumnSpec, PublicTable, TableSchema
        >>> v = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("r", "VARCHAR", unit_level=True)))
        >>> z = PublicTable("z", (ColumnSpec("r", "VARCHAR"), ColumnSpec("zone", "VARCHAR", public_domain=("a", "b"))),
        ...     ("r",), unique=True)
        >>> a = analyse(parse("SELECT COUNT(*) FROM v JOIN z ON v.r = z.r WHERE zone = 'a'"), Catalog((v,), public=(z,)),
        ...     canonical_units=True)
        >>> a.canonical, store_canonical(a)
        (('zone', 'r'), ('zone',))
    """
    join = analysis.join
    if join is None:
        return ()
    return tuple(c for c in analysis.canonical if c in join.public_columns)


def inputs(measures: tuple[Measure, ...]) -> dict[int, int]:
    """For each measure that reads a per-row value, the index of the projection it reads (see `_inputs`)."""
    return _inputs(measures)


def row_value(measure: Measure, j: int) -> exp.Expr:
    """The per-row input of measure `j`, aliased `__v<j>` (see `_row_value`)."""
    return _row_value(measure, j)


def _inputs(measures: tuple[Measure, ...]) -> dict[int, int]:
    """For each measure that reads a per-row value, the index of the projection it reads: SUM(x) and AVG(x)
    share one clamped value of x, so it is computed once.

    Example:
        >>> _inputs((Measure("rows"), Measure("sum", "x", 1, 0, 9), Measure("centred_sum", "x", 1, 0, 9)))
        {1: 1, 2: 1}
    """
    first: dict[tuple[object, ...], int] = {}
    out = {}
    for j, measure in enumerate(measures):
        if measure.kind in ("values", "sum", "centred_sum", "histogram", "centred_squares"):
            # one projection per (shape, column, grid): VAR's coarse grid is not SUM's fine one
            grid = () if measure.kind == "values" else (measure.grid, measure.lo, measure.hi)
            shape = (measure.kind == "values", measure.kind == "histogram", measure.column, measure.expr,
                     measure.where, *grid)
            out[j] = first.setdefault(shape, j)
    return out


def _row_value(measure: Measure, j: int) -> exp.Expr:
    """The per-row input of a measure: a 0/1 flag for counts of a column, a clamped grid integer for sums;
    NULL for a row that does not meet the measure's FILTER condition (no SUM, COUNT or histogram reads it)."""
    value = _unfiltered(measure)
    if measure.where:
        value = exp.Case(ifs=[exp.If(this=parse_one(measure.where, read="duckdb"), true=value)])
    return exp.alias_(value, f"__v{j}", copy=False)


def _read(measure: Measure) -> exp.Expr:
    """What a measure reads per row: its column, or its rebuilt per-row expression (row_expr.py)."""
    if measure.expr:
        return exp.Paren(this=parse_one(measure.expr, read="duckdb"))
    return _quoted(measure.column)


def _unfiltered(measure: Measure) -> exp.Expr:
    if measure.kind == "values":
        if measure.column is None and not measure.expr:
            return exp.Literal.number(1)  # COUNT(*) FILTER (WHERE …): every row meeting the condition
        return exp.cast(exp.Not(this=exp.Is(this=_read(measure), expression=exp.Null())), exp.DataType.Type.INT, copy=False)
    if measure.kind == "histogram":
        return histogram_point(measure)
    assert measure.kind in ("sum", "centred_sum", "centred_squares")
    column = _read(measure)
    grid, lo, hi = measure.grid, measure.lo, measure.hi
    # Clamp in DOUBLE first (NaN and ±inf land on a bound), scale to the grid, round, then clamp again in
    # integers: the result lies in [lo, hi] for every input, so no cast can fail on the data.
    # every node is built here (`column` is placed once, then copied): the builders need not copy it
    as_double = exp.cast(column, exp.DataType.Type.DOUBLE, copy=False)
    clamped = exp.func("LEAST", exp.func("GREATEST", as_double, _number(lo / grid), copy=False), _number(hi / grid),
                       copy=False)
    scaled = exp.cast(exp.func("ROUND", exp.Mul(this=clamped, expression=_number(grid)), copy=False), exp.DataType.Type.BIGINT,
                      copy=False)
    bounded = exp.func("LEAST", exp.func("GREATEST", scaled, _number(lo), copy=False), _number(hi), copy=False)
    # DuckDB's GREATEST/LEAST skip NULLs, so NULL is kept explicitly: a missing value contributes nothing.
    return exp.Case(
        ifs=[exp.If(this=exp.Is(this=column.copy(), expression=exp.Null()), true=exp.Null())], default=bounded
    )


def _small(measure: Measure) -> bool:
    """Whether a measure's per-row value (`_row_value`) always lies in [0, 2³²) or is NULL: a 0/1 flag, a
    histogram index, or a grid value clamped to such [lo, hi] (its hash number is then the value itself)."""
    return measure.kind in ("values", "histogram") or 0 <= measure.lo <= measure.hi < 2**32


def histogram_point(measure: Measure) -> exp.Expr:
    """The index of the grid point nearest the row's clamped value, 0 … points − 1; NULL for NULL.

    Any function of the row alone keeps the histogram's sensitivity at max_rows: the index need not be exact
    (rounding in DOUBLE only moves a row to a neighbouring point), only total, hence the integer clamp.
    """
    column = _read(measure)  # a DATE column's histogram reads its days after the first declared day
    lo, hi = measure.lo / measure.grid, measure.hi / measure.grid
    last = max(measure.points - 1, 0)
    clamped = exp.func("LEAST", exp.func("GREATEST", exp.cast(column, exp.DataType.Type.DOUBLE, copy=False), _number(lo), copy=False),
                       _number(hi), copy=False)
    if last == 0:
        index: exp.Expr = exp.Literal.number(0)
    else:
        scaled = exp.Div(this=exp.Mul(this=exp.Paren(this=exp.Sub(this=clamped, expression=_number(lo))),
                                         expression=_number(last)),
                         expression=_number(hi - lo))
        rounded = exp.cast(exp.func("ROUND", scaled, copy=False), exp.DataType.Type.BIGINT, copy=False)
        index = exp.func("LEAST", exp.func("GREATEST", rounded, exp.Literal.number(0), copy=False),
                         exp.Literal.number(last), copy=False)
    return exp.Case(ifs=[exp.If(this=exp.Is(this=column.copy(), expression=exp.Null()), true=exp.Null())],
                    default=index)


def _group_measure(measure: Measure, j: int) -> exp.Expr:
    """A group's measure from its cells: a sum, or for a histogram the MAP point → rows of the cells' points."""
    cell = exp.column(f"__c{j}")
    if measure.kind == "histogram":
        return exp.func("LIST_AGGREGATE", exp.func("FLATTEN", exp.func("LIST", cell, copy=False), copy=False),
                        exp.Literal.string("histogram"), copy=False)
    return exp.Sum(this=cell)


def _cell_measure(measure: Measure, j: int, source: int | None, capped: int | None = None) -> exp.Expr:
    """A unit's measure in one cell; `capped`: the rows were not ranked, so a count is capped at it."""
    match measure.kind:
        case "histogram":  # the unit's (at most max_rows) points in this group
            kept = exp.Where(this=exp.Not(this=exp.Is(this=exp.column(f"__v{source}"), expression=exp.Null())))
            value: exp.Expr = exp.Filter(this=exp.func("LIST", exp.column(f"__v{source}"), copy=False), expression=kept)
        case "rows":
            value = exp.Count(this=exp.Star())
            if capped is not None:
                value = exp.func("LEAST", value, exp.Literal.number(capped), copy=False)
        case "units":
            value = exp.Literal.number(1)  # summed over cells: one per unit in the group
        case "values" | "sum":
            value = exp.Sum(this=exp.column(f"__v{source}"))
        case "centred_sum":
            value = exp.Sum(this=exp.Sub(this=exp.column(f"__v{source}"), expression=_number(measure.centre)))
        case "centred_squares":  # |v − c| < 2^21 on the spread grid: the square is exact in BIGINT
            deviation = exp.Paren(this=exp.Sub(this=exp.column(f"__v{source}"), expression=_number(measure.centre)))
            value = exp.Sum(this=exp.Mul(this=deviation, expression=deviation.copy()))
    return exp.alias_(value, f"__c{j}", copy=False)


def ranked_cells(grouped: exp.Select, unit: tuple[str, Kind], keys: list[tuple[str, Kind]],
                  domains: tuple[tuple[object, ...], ...], salt: int, max_groups: int) -> exp.Select:
    """At most `max_groups` cells per unit, ranked within the unit by the keyed hash of (salt, unit, keys): a
    per-unit pseudo-random order, the same on every engine (proxy/query/rewrite/keyed_hash.py); DOUBLE keys break its
    ties. Each part's numbers are computed once per cell, in a projection under the window (not once per lane);
    a text key with a public domain (`domains`) maps its few values to their numbers computed here, so MD5 runs
    only for other text and DECIMAL keys. `grouped` is built by the caller for this call alone: it is wrapped
    in place, not copied."""
    columns: list[exp.Expr] = [exp.Star()]
    parts: list[exp.Expr] = []
    for index, (name, kind) in enumerate([unit, *keys]):
        domain = domains[index - 1] if index and domains else ()
        if kind == "string" and domain and all(isinstance(v, str) for v in domain):
            found = _domain_numbers(exp.column(name), [str(v) for v in domain])
        else:
            found = numbers(exp.column(name), kind)
        for i, n in enumerate(found):
            columns.append(exp.alias_(n, f"__n{name}_{i}", copy=False))
            parts.append(exp.column(f"__n{name}_{i}"))
    floats = [exp.column(name) for name, kind in keys if kind == "float"]
    rank = exp.Window(this=exp.RowNumber(), partition_by=[exp.column("__unit")],
                      order=exp.Order(expressions=keyed_order(salt, parts, floats)))
    numbered = exp.select(*columns).from_(grouped.subquery("__grouped", copy=False), copy=False)
    return exp.select(exp.Star()).from_(numbered.subquery("__numbered", copy=False), copy=False).qualify(
        exp.LTE(this=rank, expression=exp.Literal.number(max_groups)), copy=False)


def _domain_numbers(value: exp.Column, domain: list[str]) -> list[exp.Expr]:
    """A text part's two numbers as CASE over its public domain, computed by `keyed_hash.reference`'s own
    definition; any other value (none passes the domain filter) falls back to MD5, so the value is `numbers`."""
    fallback = numbers(value, "string")
    cases = []
    for i, other in enumerate(fallback):
        ifs = [exp.If(this=exp.EQ(this=value.copy(), expression=exp.Literal.string(v)),
                      true=exp.Literal.number(part_numbers_of(v)[i])) for v in sorted(set(domain))]
        cases.append(exp.Case(ifs=ifs, default=other))
    return cases


def _numbers_of(parts: list[tuple[str, Kind]]) -> list[exp.Column]:
    """The columns holding each part's hash numbers (`__n<part>_<i>`, computed in `__numbered`)."""
    return [exp.column(f"__n{name}_{i}") for name, kind in parts for i in range(2 if kind in ("string", "decimal") else 1)]


def _kind(table: TableSchema, name: str) -> Kind:
    spec = table.column(name)
    assert spec is not None
    return types.kind(spec.type)


def _quoted(name: str | None) -> exp.Column:
    assert name is not None
    return exp.column(name, quoted=True)


def _number(value: int | float) -> exp.Literal:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return exp.Literal.number(value)
