"""The SQL layer: plan(sql) = parse → analyse → price → rewrite, all pure. Rejections cost nothing."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
from dataclasses import dataclass
from typing import Literal

from sqlglot import exp

from accountant.cell_scope import CellScope
from accountant.loss import Conversion
from proxy.query.analyse.analysis import Analysis, analyse
from proxy.query.auto import bounds as auto
from proxy.query.auto.quantile import serves as quantiles_serve
from proxy.query.catalog import Catalog, Mechanism
from proxy.query.errors import EmptyScope, PolicyError, UnsupportedQuery
from proxy.query.parse.comma_joins import explicit_joins
from proxy.query.parse.flatten import flatten
from proxy.query.parse.inline_ctes import inline_ctes
from proxy.query.parse.normalise import normalise
from proxy.query.parse.qualify import qualify
from proxy.query.parse.statement import normalised, parse
from proxy.query.per_unit.outer import two_level_analysis
from proxy.query.per_unit.recognise import two_level
from proxy.query.plan_cache import MAX_TEXT, Memo, Shape, exact, labels, relabelled, relabels
from proxy.query.price.charge import Price, price, price_for_noise
from proxy.query.public import PublicQuery, public_query, reads_public
from proxy.query.public.scalars import fold, public_value, scalar_subqueries
from proxy.query.rewrite.on_store import rewrite_ranked, uses_rank_filter
from proxy.query.rewrite.per_query import rewrite_tree, store_canonical
from proxy.query.rewrite.store_layout import ranked_columns

Bounding = Literal["per_query", "store"]
MAX_TREE_DEPTH = 100  # every later step recurses over the tree: bound it once, here


def _depth(root: exp.Expr) -> int:
    """The depth of the syntax tree, computed without recursion (1 + 1 + … nests without parentheses)."""
    deepest, stack = 0, [(root, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in node.iter_expressions())
    return deepest


@dataclass(frozen=True, slots=True)
class QueryPlan:
    source_sql: str
    normalized_sql: str  # the analyst's query as sqlglot prints it in its dialect (parse.normalised): audited
    analysis: Analysis
    sql: str  # what DuckDB runs
    price: Price
    scope: CellScope | None = None  # the cells the charge is for (None: every privacy unit)
    tree: exp.Select | None = None  # `sql` as one syntax tree, rendered per engine (render.py); None: store SQL
    auto: auto.AutoBounds | None = None  # max_rows chosen per query (auto/bounds.py); `sql` is then at the limit
    salt: int = 0
    bounding: Bounding = "per_query"
    # with automatic bounds: the query's price at the limits on the whole ε, no selection composed in: what a
    # query at bounds an earlier query chose and kept pays (auto_release.plan_reused, docs/privacy.md §10.8)
    unselected: Price | None = None

    @property
    def sql_sha256(self) -> str:
        return hashlib.sha256(self.normalized_sql.encode()).hexdigest()


def repeat_identity(planned: QueryPlan, catalog: Catalog) -> str:
    """The sha256 of what a plan's answer is a function of, apart from the data and the randomness drawn for it:
    two plans with the same identity release answers of one distribution, so the second may be answered with the
    first's stored release (proxy/pipeline.py), and two plans whose answers can differ never share one.

    The answer is `release(rows, analysis, price)` of the rows of the generated SQL, and that SQL is
    `bounded_sql(analysis, salt, bounding, catalog)`; with `max_rows = "auto"`, the bound is chosen by `auto` first.
    So the identity is the dataset's declarations, the analysis (the query as resolved against them: the WHERE,
    computed keys and join rebuilt from declared columns, e.g. PostgreSQL's `age / 10` as `age // 10`; keys,
    aggregates and their measures; the released columns, HAVING, ORDER BY and LIMIT), the price (the noise and
    the charge), the automatic bounds and the bounding, all frozen records of tuples, numbers, text and sqlglot
    trees, whose repr is their whole content. The salt is left out: it is drawn fresh for every answer, like the
    noise. The text as sent and its dialect are left out too: they reach the answer only through the analysis,
    so texts that resolve to the same analysis are one repeat whatever their dialect or spelling (a wrapping
    subquery, `//` or PostgreSQL's integer `/`), and the same text meaning other things in two dialects is two.
    The generated SQL alone would not do: `COUNT(*) AS a` and `COUNT(*) AS b` generate the same SQL and release
    differently named columns.

    Example:
        >>> from proxy.query.catalog import ColumnSpec, TableSchema
        >>> c = Catalog((TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("a", "INTEGER", bounds=(0, 99),
        ...     unit_level=True))),))
        >>> def key(sql, dialect="duckdb"):
        ...     p = plan(sql, c, epsilon=1.0, delta=0.0, mechanism="laplace", salt=7, dialect=dialect)
        ...     return repeat_identity(p, c)[:12]
        >>> key("SELECT COUNT(*) FROM t WHERE a / 10 = 3") == key("SELECT COUNT(*) FROM t WHERE a / 10 = 3", "tsql")
        False
        >>> key("SELECT COUNT(*) FROM t WHERE a // 10 = 3") == key("select count(*) from t where a / 10 = 3", "tsql")
        True
    """
    # memoised by the identity of the records (a plan from the plan memo shares them): the repr of a large
    # analysis costs more than the rest of a repeat's lookup; the records are held, so no id is reused meanwhile
    key = (id(catalog), id(planned.analysis), id(planned.price), id(planned.auto), planned.bounding)
    held = _IDENTITIES.get(key)
    if held is not None and held[0] is catalog and held[1] is planned.analysis and held[2] is planned.price \
            and held[3] is planned.auto:
        return held[4]
    parts = (_declarations(catalog), planned.analysis, planned.price, planned.auto, planned.bounding)
    identity = hashlib.sha256(repr(parts).encode()).hexdigest()
    _IDENTITIES.put(key, (catalog, planned.analysis, planned.price, planned.auto, identity))
    return identity


_IDENTITIES: Memo[tuple[Catalog, Analysis, Price, auto.AutoBounds | None, str]] = Memo(512)


@functools.lru_cache(maxsize=16)
def _declarations(catalog: Catalog) -> str:
    """A dataset's declarations as text, once per catalog (it is the same object for every request)."""
    return hashlib.sha256(repr(catalog).encode()).hexdigest()


def ranks_serve(analysis: Analysis, catalog: Catalog | None = None) -> bool:
    """Whether the store's rank-filter SQL (rewrite/on_store.py) can answer `analysis`: counts, sums and averages of
    plain columns, over one protected table or a join whose rows are its base table's rows (`catalog` needed),
    keyed by columns or by computed keys (docs/privacy.md §8, *Computed keys and joins*).

    Example:
        >>> from proxy.query.catalog import ColumnSpec, TableSchema
        >>> t = TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("x", "DOUBLE", bounds=(0, 9))))
        >>> [ranks_serve(analyse(parse(q), Catalog((t,)))) for q in ("SELECT SUM(x) FROM t", "SELECT MEDIAN(x) FROM t")]
        [True, False]
    """
    plain = all(m.kind not in ("histogram", "centred_squares") and not m.where and not m.expr
                for m in analysis.measures)
    return plain and (analysis.source is None or _base_rows(analysis, catalog))


def _base_rows(analysis: Analysis, catalog: Catalog | None) -> bool:
    """A join serves from the base table's ranks when each base row meets at most one row of the other table:
    the other is protected, declared one row per unit (checked when the store is built) and joined on the unit
    (joins.py allows nothing else between protected tables). Its keys must then be unit-level or base columns
    with stored ranks: the other table's row-level columns have none.

    Example:
        >>> from proxy.query.catalog import ColumnSpec, TableSchema
        >>> v = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("g", "VARCHAR", groupable=True)))
        >>> w = TableSchema("w", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("p", "VARCHAR", unit_level=True,
        ...     groupable=True)), one_row_per_unit=True)
        >>> c = Catalog((v, w))
        >>> queries = ("SELECT p, COUNT(*) FROM v JOIN w USING (u) GROUP BY p",
        ...     "SELECT g, COUNT(*) FROM v LEFT JOIN w USING (u) GROUP BY g", "SELECT COUNT(*) FROM w JOIN v USING (u)")
        >>> [ranks_serve(analyse(parse(q), c), c) for q in queries]
        [True, True, False]
    """
    if catalog is None or analysis.source is None or analysis.join is None or analysis.join.public or len(
            analysis.join.parts) != 1:
        return False  # a public table may repeat a key, and a third table fan out: a base row may meet several rows
    join = analysis.source.find(exp.Join)
    base, other = catalog.table(analysis.table.name), catalog.table(join.this.name) if join is not None else None
    if base is None or other is None or not other.one_row_per_unit:
        return False
    ranked_names = {c.name for c in ranked_columns(base)}
    row_keys = [k for k in analysis.keys if not (spec := analysis.table.column(k)) or not spec.unit_level]
    return all(k in ranked_names for k in row_keys) and (analysis.table.max_rows, analysis.table.max_groups) == (
        base.max_rows, base.max_groups)


@dataclass(frozen=True, slots=True)
class PublicPlan:
    """A query over public tables alone (proxy/query/public/): answered exactly, free; `tree` is what runs."""

    source_sql: str
    normalized_sql: str  # audited, as for a QueryPlan
    query: PublicQuery

    @property
    def tree(self) -> exp.Select:
        return self.query.tree


def _select(sql: str, dialect: str, catalog: Catalog) -> tuple[exp.Select, exp.Select]:
    """The parsed statement and the SELECT the rules analyse: flattened, normalised, comma joins made explicit and
    qualified by the catalog's declarations, depth bounded. Memoised by (text, dialect, catalog): the same text is
    parsed once, for `plan_public` and `plan` alike, and for every request that sends it again (the trees are
    shared: no step mutates them, proxy/query/plan_cache.py)."""
    key = (sql, dialect, id(catalog))
    held = _STATEMENTS.get(key)
    if held is not None and held[0] is catalog:
        return held[1]
    found = _parsed(sql, dialect, catalog)
    if len(sql) <= MAX_TEXT:
        _STATEMENTS.put(key, (catalog, found))  # the catalog is held: its id is not reused meanwhile
    return found


_STATEMENTS: Memo[tuple[Catalog, tuple[exp.Select, exp.Select]]] = Memo(512)
_NORMALISED: Memo[str] = Memo(512)


def _normalised(sql: str, parsed: exp.Select, dialect: str) -> str:
    """`normalised(parsed, dialect)` of the memoised statement of `sql` (printing copies the whole tree first)."""
    key = (sql, dialect)
    found = _NORMALISED.get(key)
    if found is None:
        found = normalised(parsed, dialect)
        if len(sql) <= MAX_TEXT:
            _NORMALISED.put(key, found)
    return found


def _parsed(sql: str, dialect: str, catalog: Catalog) -> tuple[exp.Select, exp.Select]:
    """The statement and its SELECT, parsed afresh (what `_select` memoises)."""
    parsed = parse(sql, dialect)
    if two_level(parsed) is not None and not reads_public(parsed, catalog):
        _shallow(parsed)  # an aggregate over per-unit aggregates: read by per_unit/, never flattened
        return parsed, parsed
    select = parsed
    if not reads_public(parsed, catalog):  # row-level CTEs read several times: inlined (public/ reads CTEs whole)
        _shallow(parsed)
        select = inline_ctes(parsed, _declared_columns(catalog))
    try:
        select = flatten(select)  # a BI tool's wrapper is flattened
    except UnsupportedQuery:
        if not reads_public(parsed, catalog):
            raise
        select = parsed  # over public tables alone: their rules read a FROM subquery or CTE whole (public/joined.py)
    _shallow(select)  # before the rules below, which recurse over the tree
    # constants folded, an OR's shared conjuncts factored (parse/normalise.py); unqualified columns qualified by the
    # declarations (parse/qualify.py); `FROM a, b WHERE a.k = b.k` joins
    select = explicit_joins(qualify(normalise(select), catalog), {t.name.lower() for t in catalog.tables})
    _shallow(select)
    return parsed, select


@functools.lru_cache(maxsize=16)
def _declared_columns(catalog: Catalog) -> dict[str, frozenset[str]]:
    tables = (*catalog.tables, *catalog.public)
    return {t.name.lower(): frozenset(c.name.lower() for c in t.columns) for t in tables}


def _shallow(select: exp.Select) -> None:
    if _depth(select) > MAX_TREE_DEPTH:
        raise UnsupportedQuery(
            f"the query's expressions nest deeper than {MAX_TREE_DEPTH} levels", construct="nesting",
            limit=MAX_TREE_DEPTH,
        )


def plan_public(sql: str, catalog: Catalog, *, max_rows: int, dialect: str = "duckdb") -> PublicPlan | None:
    """The plan of a query over public tables alone, or None for any query that reads a protected table (it is a
    DP query: `plan`). Pure and free, like `plan`; at most `max_rows` rows may be released.

    Example:
        >>> from proxy.query.catalog import ColumnSpec, PublicTable, TableSchema
        >>> c = Catalog((TableSchema("t", "u", (ColumnSpec("u", "BIGINT"),)),),
        ...     public=(PublicTable("cal", (ColumnSpec("day", "DATE"),), ("day",)),))
        >>> plan_public("select count(*) as n from cal", c, max_rows=10).tree.sql()
        'SELECT COUNT(*) AS "n" FROM "cal" LIMIT 11'
        >>> plan_public("select count(*) from t", c, max_rows=10) is None
        True
    """
    shape = _shape(sql, dialect, catalog)
    shaped = None if shape is None else (shape.key, dialect, id(catalog))
    if shaped is not None and _NOT_PUBLIC.get(shaped) is catalog:
        return None  # a relabelled text reads the same tables (docs/architecture.md, "A plan per shape")
    parsed, select = _select(sql, dialect, catalog)
    query = public_query(select, catalog, max_rows=max_rows)
    if query is None and shaped is not None:
        _NOT_PUBLIC.put(shaped, catalog)
    return None if query is None else PublicPlan(sql, _normalised(sql, parsed, dialect), query)


def public_scalars(sql: str, catalog: Catalog, *, dialect: str = "duckdb") -> tuple[PublicQuery, ...]:
    """The scalar subqueries over public tables alone of a query over protected tables, each checked and rebuilt as
    a public query (public/scalars.py), in the order `plan` folds their values (its `scalars`); () for most queries.
    Pure: the edge runs them (pipeline.public_values), before planning and before any charge.

    Example:
        >>> from proxy.query.catalog import ColumnSpec, PublicTable, TableSchema
        >>> c = Catalog((TableSchema("t", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("x", "DOUBLE"))),),
        ...     public=(PublicTable("p", (ColumnSpec("k", "INTEGER"),), ("k",)),))
        >>> [q.tree.sql() for q in public_scalars("SELECT COUNT(*) FROM t WHERE x > (SELECT MAX(k) FROM p)", c)]
        ['SELECT MAX("t1"."k") AS "MAX(k)" FROM "p" AS "t1" LIMIT 2']
    """
    shape = _shape(sql, dialect, catalog)
    shaped = None if shape is None else (shape.key, dialect, id(catalog))
    if shaped is not None and _NO_SCALARS.get(shaped) is catalog:
        return ()  # a relabelled text has the same subqueries (docs/architecture.md, "A plan per shape")
    _, select = _select(sql, dialect, catalog)
    found = () if reads_public(select, catalog) else tuple(
        public_value(s, catalog) for s in scalar_subqueries(select, catalog))
    if not found and shaped is not None:
        _NO_SCALARS.put(shaped, catalog)
    return found


def plan(
    sql: str,
    catalog: Catalog,
    *,
    epsilon: float,
    delta: float,
    mechanism: Mechanism,
    salt: int = 0,
    noise_multiplier: float | None = None,
    cells: bool = True,
    dialect: str = "duckdb",
    conversion: Conversion = "zcdp",
    bounding: Bounding = "per_query",
    auto_share: float | tuple[float, float] = auto.DEFAULT_AUTO_SHARE,
    auto_quantile: float = auto.DEFAULT_AUTO_QUANTILE,
    today: dt.date | None = None,
    scalars: tuple[exp.Expr, ...] = (),
) -> QueryPlan:
    """Check, price and rewrite one query without touching data or budget.

    `salt` keys the per-unit choice of rows and groups; the pipeline draws a fresh one per query. With
    `noise_multiplier`, the noise is given (scale = multiplier · sensitivity) and `epsilon` is ignored: the
    plan reports what that noise costs. With `cells` (per-cell accounting, accountant/cells.py), a query
    whose WHERE provably leaves out some cells of its table is charged only for the cells it keeps, and
    reads the cell-space columns as each unit's canonical value, so that every unit is in one cell. `dialect`
    is the SQL dialect of `sql` (parse.DIALECTS); the normalised SQL is printed in it (parse.normalised).
    `conversion` is how Gaussian noise is calibrated and converted to (ε, δ): "gdp" on a dataset under the
    gdp rule (the proven μ-GDP bound of the discrete Gaussian), "zcdp" otherwise (`price.price`).
    With `bounding = "store"` the SQL reads the dataset's bounding store (proxy/query/rewrite/on_store.py).
    On a table with `max_rows = "auto"`, `auto_share` of ε chooses the bound (the `auto_quantile` of rows per
    unit and group) and the rest runs the query at it (auto/bounds.py); the plan's SQL is then at the limit.
    `today` is the date CURRENT_DATE stands for (default: today in UTC, read once here): it is public, and
    folded into the WHERE as a date literal, so the repeat identity (the analysis) holds it, and the same text
    sent on another day is another query. `scalars` are the values of the query's scalar subqueries over public
    tables (`public_scalars`, run by the edge), as typed literals (public/scalars.py `folded`): they are folded
    in, so the analysis (and the repeat identity) holds them; a query with such a subquery and no values is refused.

    Example:
        >>> from proxy.query.catalog import ColumnSpec, TableSchema
        >>> t = TableSchema("orders", "cid", (ColumnSpec("cid", "BIGINT"),))
        >>> p = plan("select count(*) from orders", Catalog((t,)), epsilon=0.5, delta=0.0, mechanism="laplace")
        >>> p.normalized_sql, p.price.epsilon
        ('SELECT COUNT(*) FROM orders', 0.5)
    """
    if today is None:
        today = dt.datetime.now(dt.UTC).date()
    # Everything but the bounded SQL is a function of these arguments, not of the salt: memoised (issue #32), so a
    # text sent again (a repeat, a dashboard's refresh) is not parsed, analysed and priced again. `exact` keys:
    # arguments equal in Python but planned differently (1 and 1.0) never share an entry.
    key = (sql, id(catalog), exact(epsilon), exact(delta), mechanism, exact(noise_multiplier), exact(cells), dialect,
           conversion, bounding, exact(auto_share), exact(auto_quantile), today, tuple(v.sql() for v in scalars))
    held = _PLANS.get(key)
    if held is not None and held[0] is catalog:
        unsalted, fixed = held[1], held[2]
    else:
        # a text of a shape planned before (the same text but for its output labels): that plan, relabelled
        shape = _shape(sql, dialect, catalog)
        shaped = None if shape is None else (shape.key, *key[1:])
        found = None if shaped is None else _SHAPES.get(shaped)
        if found is not None and (found[0] is not catalog or found[4] is False):
            found = None
        elif found is not None and found[4] is None:  # checked at its first reuse: a miss costs no check
            found = (*found[:4], relabels(found[1], found[2], found[3]))
            _SHAPES.put(shaped, found)
            found = found if found[4] else None
        if shape is not None and found is not None:
            unsalted, fixed = relabelled(found[1], found[2], shape.names, sql), found[3]
        else:
            unsalted = _unsalted(sql, catalog, epsilon=epsilon, delta=delta, mechanism=mechanism,
                                 noise_multiplier=noise_multiplier, cells=cells, dialect=dialect,
                                 conversion=conversion, auto_share=auto_share, auto_quantile=auto_quantile,
                                 today=today, bounding=bounding, scalars=scalars)
            fixed = _salt_free_sql(unsalted.analysis, bounding, catalog)
            if shape is not None and _SHAPES.get(shaped) is None:
                _SHAPES.put(shaped, (catalog, unsalted, shape.names, fixed, None))  # relabels: not yet checked
        if len(sql) <= MAX_TEXT:
            _PLANS.put(key, (catalog, unsalted, fixed))  # the catalog is held: its id is not reused meanwhile
    tree, sql_text = (None, fixed) if fixed is not None else bounded_sql(unsalted.analysis, salt, bounding, catalog)
    return dataclasses.replace(unsalted, sql=sql_text, tree=tree, salt=salt)


_PLANS: Memo[tuple[Catalog, QueryPlan, str | None]] = Memo(256)
# per shape: the plan of its first text, that text's labels, its salt-free SQL, and whether `relabels` held
_SHAPES: Memo[tuple[Catalog, QueryPlan, tuple[str, ...], str | None, bool | None]] = Memo(256)
_LABELS: Memo[tuple[Catalog, Shape | None]] = Memo(64)  # a text's shape: plan_public, public_scalars and plan read it
_NOT_PUBLIC: Memo[Catalog] = Memo(256)  # shapes plan_public found to read a protected table
_NO_SCALARS: Memo[Catalog] = Memo(256)  # shapes public_scalars found without a public scalar subquery


def _shape(sql: str, dialect: str, catalog: Catalog) -> Shape | None:
    """plan_cache.labels of `sql` against the catalog's names, memoised per text for the request's three readers."""
    key = (sql, dialect, id(catalog))
    held = _LABELS.get(key)
    if held is None or held[0] is not catalog:
        held = (catalog, labels(sql, _declared_names(catalog), dialect))
        _LABELS.put(key, held)  # the catalog is held: its id is not reused meanwhile
    return held[1]


@functools.lru_cache(maxsize=16)
def _declared_names(catalog: Catalog) -> frozenset[str]:
    """Every table and column name the catalog declares, lower case: never an output label (plan_cache.labels)."""
    return frozenset(name for table, columns in _declared_columns(catalog).items() for name in (table, *columns))


def _salt_free_sql(analysis: Analysis, bounding: Bounding, catalog: Catalog) -> str | None:
    """The bounded SQL when no salt enters it, else None: the store's rank filters (`rewrite_ranked` reads the
    salt only on its per-cell path, `rewrite_cells`, taken exactly when `uses_rank_filter` is false) bound by
    ranks stored under the deployment's key, so their text is the same at every salt and a repeat renders none.
    tests/query/test_plan_cache.py plans the corpus at two salts against fresh plans."""
    if bounding == "store" and ranks_serve(analysis, catalog) and uses_rank_filter(analysis):
        return rewrite_ranked(analysis, 0)
    return None


def clear_memos() -> None:
    """Forget every memoised statement, plan and identity (tests compare the memoised path with the plain one)."""
    for memo in (_STATEMENTS, _NORMALISED, _PLANS, _IDENTITIES, _SHAPES, _LABELS, _NOT_PUBLIC, _NO_SCALARS):
        memo.clear()


def _unsalted(
    sql: str, catalog: Catalog, *, epsilon: float, delta: float, mechanism: Mechanism,
    noise_multiplier: float | None, cells: bool, dialect: str, conversion: Conversion,
    auto_share: float | tuple[float, float],
    auto_quantile: float, today: dt.date, bounding: Bounding, scalars: tuple[exp.Expr, ...] = (),
) -> QueryPlan:
    """`plan` without its bounded SQL (`sql` empty, `tree` None, salt 0): what `plan` memoises."""
    parsed, select = _select(sql, dialect, catalog)
    values = ""
    if not reads_public(select, catalog) and (scalars or scalar_subqueries(select, catalog)):
        select = fold(select, catalog, scalars)  # docs/privacy.md §3.2: public values, computed before planning
        shown = ", ".join(v.sql(dialect=dialect).replace("*/", "* /") for v in scalars)
        values = f" /* public values: {shown} */"
    if reads_public(select, catalog):  # answered exactly by plan_public, never planned as a DP release
        public_query(select, catalog, max_rows=1)  # or refused by its rules (a protected table in a subquery)
        name = next(t.name for t in select.find_all(exp.Table))  # FROM may be a subquery or a CTE
        raise PolicyError(
            f"{name!r} is a public table: a query over public tables alone is answered exactly and free by POST "
            "/v1/query, with no DP plan or charge to preview; join it to a protected table to aggregate "
            "protected rows", construct="TABLE", table=name,
        )
    analysis = two_level_analysis(select, catalog, today=today)  # docs/privacy.md §14
    if analysis is None:
        analysis = analyse(select, catalog, canonical_units=cells, today=today)
    if analysis.scope.cells is not None and not analysis.scope.cells:
        # no unit can pass this WHERE: nothing to answer, and a charge on no cell must never be made (issue #10)
        raise EmptyScope(
            "the WHERE clause holds for no privacy unit under the policy (its conditions on unit-level columns "
            "contradict each other); remove the contradiction", construct="WHERE",
        )
    scope = analysis.scope.charged() if cells else None
    chooser, requested = None, epsilon
    if auto.uses_auto(analysis):
        # the selection reads the query's own table, join or computed keys (auto/histograms.py), and chooses the clamps
        # an expression inside an aggregate reads (§10.10); joint quantiles or a given noise run at the declared
        # limits (valid bounds), with no selection
        limits = auto.limits_reason(analysis, noise_multiplier, quantiles_serve(auto.without_expressions(analysis)))
        if limits is None:
            # the share: fixed, or chosen in [low, high] by the expected error from public inputs (auto/share.py)
            share, weights = auto.selection_share(analysis, epsilon, auto_share)
            selection_epsilon, epsilon = auto.split_epsilon(epsilon, share)
            chooser = auto.auto_bounds(analysis, selection_epsilon, auto_quantile, weights)
        else:
            chooser = auto.AutoBounds((), limits)
    unselected = None
    if noise_multiplier is None:
        if chooser is not None and chooser.parts:  # the price at kept bounds: the whole requested ε on the query
            unselected = price(analysis, epsilon=requested, delta=delta, mechanism=mechanism, conversion=conversion)
        priced = price(analysis, epsilon=epsilon, delta=delta, mechanism=mechanism, conversion=conversion)
        if chooser is not None:
            chooser = auto.with_targets(chooser, analysis, priced)  # an L1 cap's target reads its sum's ε
            priced = auto.auto_price(priced, chooser, conversion)
    else:
        priced = price_for_noise(analysis, noise_multiplier=noise_multiplier, delta=delta, mechanism=mechanism,
                                 conversion=conversion)
    return QueryPlan(sql, _normalised(sql, parsed, dialect) + values, analysis, "", priced, scope, None, chooser, 0,
                     bounding, unselected)


def bounded_sql(analysis: Analysis, salt: int, bounding: Bounding, catalog: Catalog | None = None
                ) -> tuple[exp.Select | None, str]:
    """The bounded query's tree (None for the store's rank-filter SQL) and its DuckDB text."""
    if bounding == "store" and not ranks_serve(analysis, catalog):
        # The store's rank filters serve plain measures (ranks_serve). Joins that fan out, quantiles, spreads,
        # FILTER and expressions inside aggregates run the per-query windows over the store's tables instead:
        # the store is a per-unit transformation of the source (each unit's rows depend only on its own rows),
        # so bounding it per query is as private as bounding the source, and its unit-level columns already hold
        # each unit's canonical value (a joined public table's columns excepted: rewrite.store_canonical).
        tree = rewrite_tree(dataclasses.replace(analysis, canonical=store_canonical(analysis)), salt)
    else:
        tree = None if bounding == "store" else rewrite_tree(analysis, salt)
    return tree, rewrite_ranked(analysis, salt) if tree is None else tree.sql(dialect="duckdb")
