"""Render a generated query for the engine that runs it: the same syntax tree through sqlglot's dialect.

DuckDB gets the tree as DuckDB SQL, exactly `QueryPlan.sql`. Spark gets it after a check and three
meaning-preserving rewrites, so both engines compute the same rows before noise:
- the check (defence in depth: the tree is ours, built from declared names and rebuilt literals): every
  node is one the rewrite emits, every table is a declared one or one of the query's own CTEs, and none is
  qualified; so no path literal (`parquet.`/x``), file-reading or unknown function, or UDF can be rendered;
- text compares under binary collation on both engines, which is Spark's default: COLLATE is dropped
  (Spark 4 names the binary collation UTF8_BINARY, not `binary`);
- a LIKE pattern's backslashes are doubled: Spark reads `\\` as its escape character, DuckDB as a letter;
- a group key read through ANY_VALUE in a HAVING (the store's public domain test) is read as the key itself:
  the same value, and Spark then aggregates by hashing, not sorting;
- DuckDB's 64-bit HASH (which of a unit's values the automatic clamp's selection samples off the store,
  auto/clamp.py) is Spark's 64-bit XXHASH64: another function of the same values, so the selection's histogram
  may read other values of a unit on Spark, each a function of the unit's own rows (the bounding itself uses
  the keyed hash on both engines);
- hexadecimal text read as an integer (the keyed hash's MD5 digits, keyed_hash.py) is `CAST('0x' || h AS
  BIGINT)` on DuckDB and `CAST(CONV(h, 16, 10) AS BIGINT)` on Spark;
- every SUM adds DECIMAL(38, 0) on Spark, `SUM(CAST(x AS DECIMAL(38, 0)))`: Spark's SUM of a BIGINT is a BIGINT
  that fails under ANSI mode past 2^63 (9224 units at 1e15), where DuckDB's is a HUGEINT. Every SUM the rewrite
  emits adds integers (grid values, counts, bounded cell totals), so the cast is exact, and no sum of them can
  reach 10^38 (docs/privacy.md §11.1, Totality); DuckDB's HUGEINT (a per-cell total scaled by k / n) is Spark's
  DECIMAL(38, 0);
- each declared table is read through the engine's own name for it (a temporary view per dataset).
sqlglot's Spark generator writes QUALIFY as a filtered subquery and NULLS LAST where Spark's default differs.

Example:
    >>> from sqlglot import parse_one
    >>> tree = parse_one("SELECT COUNT(*) FROM \\"t\\" WHERE \\"s\\" COLLATE \\"binary\\" LIKE 'a\\\\%'")
    >>> render(tree, Target("spark", (("t", "dp_1_t"),)))
    "SELECT COUNT(*) FROM `dp_1_t` WHERE `s` LIKE 'a\\\\\\\\\\\\\\\\%'"
    >>> render(parse_one("SELECT java_method('java.lang.System', 'exit', 1) FROM t"), Target("spark", (("t", "v"),)))
    Traceback (most recent call last):
    ...
    proxy.query.errors.UnsupportedQuery: Spark runs only generated SQL over declared tables: Anonymous is not \
one of the constructs the rewrite emits
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sqlglot import exp, parse_one

from proxy.query.errors import UnsupportedQuery

EngineDialect = Literal["duckdb", "spark"]


@dataclass(frozen=True, slots=True)
class Target:
    """How an engine reads generated SQL: its sqlglot dialect, and its name for each declared table
    (lower-case declared name -> the engine's name; a table not listed keeps its name)."""

    dialect: EngineDialect
    tables: tuple[tuple[str, str], ...] = ()


DUCKDB = Target("duckdb")

# Every node class the rewrite (proxy/query/rewrite/per_query.py, where.py, types.py, keyed_hash.py) emits; anything
# else in a tree bound for Spark is a defect, refused before the engine sees it.
ALLOWED: frozenset[type[exp.Expr]] = frozenset({
    exp.Select, exp.With, exp.CTE, exp.From, exp.Table, exp.TableAlias, exp.Subquery, exp.Identifier,
    exp.Column, exp.Star, exp.Alias, exp.Where, exp.Group, exp.Qualify, exp.Window, exp.Order, exp.Ordered,
    exp.RowNumber, exp.Count, exp.Sum, exp.Min, exp.Cast, exp.DataType, exp.DataTypeParam, exp.Literal,
    exp.Boolean, exp.Null, exp.Not, exp.Is, exp.And, exp.Or, exp.Paren, exp.EQ, exp.NEQ, exp.GT, exp.GTE,
    exp.LT, exp.LTE, exp.In, exp.Between, exp.Like, exp.ILike, exp.Case, exp.If, exp.Least, exp.Greatest,
    exp.Round, exp.Mul, exp.Sub, exp.Add, exp.Mod, exp.IntDiv, exp.Neg, exp.Abs, exp.BitwiseAnd,
    exp.BitwiseXor, exp.BitwiseRightShift, exp.MD5, exp.Substring, exp.DPipe, exp.DateDiff, exp.Coalesce,
    exp.Collate, exp.Var, exp.Join, exp.TryCast, exp.Floor, exp.Ceil,
    # the bounding store's SQL (rewrite/on_store.py, rewrite/cells.py): a cell total scaled by k / n (n >= 1 rows)
    exp.Having, exp.Filter, exp.AnyValue, exp.IgnoreNulls, exp.Div, exp.Offset,
    # a capped SUM's correction joined back to its group, NULL key to NULL key (on_store._with_corrections)
    exp.NullSafeEQ,
})
# What a computed value (DuckDB's TRY(...), computed/values.py) may hold to be rendered for Spark, where each operation
# that can fail under ANSI mode becomes its try_ form (NULL instead of an error), so it cannot fail either.
# FLOOR and CEIL of a DOUBLE cannot fail on Spark (they saturate at the BIGINT range).
_TOTAL_ON_SPARK: frozenset[type[exp.Expr]] = frozenset({
    exp.Column, exp.Identifier, exp.Literal, exp.Null, exp.Boolean, exp.Paren, exp.DataType, exp.DataTypeParam,
    exp.Cast, exp.TryCast, exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Neg, exp.Floor, exp.Ceil, exp.Case, exp.If,
    exp.Coalesce, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.And, exp.Or, exp.Not, exp.Is, exp.In,
    exp.Between, exp.Collate, exp.Anonymous,
})
_TRY_FORMS: dict[type[exp.Expr], str] = {exp.Add: "try_add", exp.Sub: "try_subtract", exp.Mul: "try_multiply",
                                         exp.Div: "try_divide"}
_SAFE_FUNCTIONS = frozenset({*_TRY_FORMS.values(), "CONV", "HASH"})  # the only functions by name Spark is given
DOUBLE_MAX = "1.7976931348623157E308"
WHOLE = 2**52  # every DOUBLE at least this large in magnitude is a whole number
WIDE = exp.DataType.build("DECIMAL(38, 0)")  # Spark's widest integer: what every SUM adds there


def render(tree: exp.Expr, target: Target, *, fresh: bool = False) -> str:
    """The SQL text `target`'s engine runs for the generated query `tree` (module docstring).

    `fresh`: the tree was built for this call alone and is not read again (a selection histogram, a parsed
    text): it is rendered, and for Spark rewritten, in place, without copying it. Otherwise (a plan's tree,
    which may be rendered again) the tree is left as it was: one copy is rewritten and rendered.

    Raises:
        UnsupportedQuery: (Spark) the tree holds a construct the rewrite never emits, or an undeclared table.
    """
    if target.dialect == "duckdb":
        return tree.sql(dialect="duckdb", copy=not fresh)
    totals = tree.transform(_total_for_spark, copy=not fresh)  # a copy unless fresh: the rest rewrites it in place
    _check(totals, dict(target.tables))
    return totals.transform(_for_spark, dict(target.tables), copy=False).sql(dialect="spark", copy=False)


def render_text(sql: str, target: Target) -> str:
    """A generated query given as DuckDB text (the bounding store's SQL, which has no tree: rewrite/on_store.py) as
    `target`'s engine runs it, through the same check as `render`.

    Example:
        >>> render_text('SELECT COUNT(*) FILTER(WHERE __row_rank = 1) FROM "t"', Target("spark", (("t", "v"),)))
        'SELECT COUNT(*) FILTER(WHERE __row_rank = 1) FROM `v`'
    """
    return render(parse_one(sql, read="duckdb"), target, fresh=True)


def render_built(sql: str, target: Target) -> str:
    """DuckDB SQL that the proxy builds from the policy alone, never from a query (the bounding store's build,
    rewrite/store_layout.py, which windows and ranks as no query does), as `target`'s engine runs it: the same
    rewrites as `render`, without its check of a query's constructs.

    Example:
        >>> render_built('SELECT * EXCLUDE (__unit), DENSE_RANK() OVER (ORDER BY "g" COLLATE "binary") FROM "src"."t"',
        ...              Target("spark", (("t", "v"),)))
        'SELECT * EXCEPT (__unit), DENSE_RANK() OVER (ORDER BY `g` NULLS LAST) FROM `v`'
    """
    tree = parse_one(sql, read="duckdb")  # parsed here: rewritten and rendered in place
    return tree.sql(dialect="duckdb", copy=False) if target.dialect == "duckdb" else tree.transform(
        _for_spark, dict(target.tables), copy=False).sql(dialect="spark", copy=False)


def _check(tree: exp.Expr, tables: dict[str, str]) -> None:
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for node in tree.walk():
        if isinstance(node, exp.Anonymous) and node.name in _SAFE_FUNCTIONS:
            continue
        if type(node) not in ALLOWED:
            _refuse(f"{type(node).__name__} is not one of the constructs the rewrite emits")
        if isinstance(node, exp.Table):
            qualified = any(node.args.get(part) for part in ("db", "catalog"))
            name = node.name.lower()
            if qualified or not isinstance(node.this, exp.Identifier) or (name not in tables and name not in ctes):
                _refuse(f"table {node.sql(dialect='spark')} is not a declared table of this dataset")


def _refuse(why: str) -> None:
    raise UnsupportedQuery(f"Spark runs only generated SQL over declared tables: {why}", construct="FROM")


def _total_for_spark(node: exp.Expr) -> exp.Expr:
    """DuckDB's TRY(v) as Spark SQL that cannot fail: each CAST a TRY_CAST, each + - * / its try_ function, a
    negation a try_subtract from 0, ISFINITE(x) as ABS(x) <= the largest DOUBLE (NaN compares greater on both
    engines). On a row where an operation fails, DuckDB's whole value is NULL and Spark's failed operation is
    NULL: the same unless a COALESCE or CASE turns that NULL into a value (a function of the row either way)."""
    if isinstance(node, exp.Try):  # TRY as sqlglot parses it
        inner = node.this
    elif isinstance(node, exp.Anonymous) and node.name.upper() == "TRY":  # as computed/values.py builds it
        (inner,) = node.expressions
    else:
        return node
    for part in inner.walk():
        if type(part) not in _TOTAL_ON_SPARK or (isinstance(part, exp.Anonymous) and part.name.upper() != "ISFINITE"):
            name = part.name.upper() if isinstance(part, exp.Anonymous) else type(part).__name__
            _refuse(f"{name} in a computed value is not rendered for Spark yet (arithmetic, CAST, FLOOR, CEIL, "
                    "CASE, IF and COALESCE are)")
    inner = inner.copy()
    for part in reversed(list(inner.walk())):  # children first: a replaced node keeps its converted children
        converted = _try_form(part)
        if converted is not part:
            inner = converted if part is inner else inner
            if part.parent is not None:
                part.replace(converted)
    return inner


def _try_form(node: exp.Expr) -> exp.Expr:
    if isinstance(node, exp.Cast):  # `safe`: sqlglot's Spark generator writes TRY_CAST, not CAST
        return exp.TryCast(this=node.this, to=node.to, safe=True)
    if type(node) in _TRY_FORMS:
        return exp.Anonymous(this=_TRY_FORMS[type(node)], expressions=[node.this, node.expression])
    if isinstance(node, exp.Floor | exp.Ceil):  # DuckDB's is a DOUBLE; Spark's saturates at BIGINT, and is 0 for
        # NaN. Beyond ±2⁵² every DOUBLE is whole, so only values inside are rounded: NaN, ±inf and 1e300 keep theirs.
        value = node.this
        inside = exp.and_(exp.GT(this=value.copy(), expression=exp.Literal.number(-WHOLE)),
                          exp.LT(this=value.copy(), expression=exp.Literal.number(WHOLE)))
        return exp.Case(ifs=[exp.If(this=inside, true=node.copy())], default=value.copy())
    if isinstance(node, exp.Neg):
        return exp.Anonymous(this="try_subtract", expressions=[exp.Literal.number(0), node.this])
    if isinstance(node, exp.Anonymous):  # ISFINITE, the only function _TOTAL_ON_SPARK lets through
        (value,) = node.expressions
        return exp.Paren(this=exp.LTE(this=exp.Abs(this=value), expression=exp.Literal.number(DOUBLE_MAX)))
    return node


def _for_spark(node: exp.Expr, tables: dict[str, str]) -> exp.Expr:
    if isinstance(node, exp.Collate):
        return node.this
    if isinstance(node, exp.Like | exp.ILike) and isinstance(node.expression, exp.Literal):
        node.set("expression", exp.Literal.string(node.expression.this.replace("\\", "\\\\")))
        return node
    if isinstance(node, exp.Cast) and _is_hex(node.this):
        digits = node.this.expression
        conv = exp.Anonymous(this="CONV", expressions=[digits, exp.Literal.number(16), exp.Literal.number(10)])
        return exp.cast(conv, node.to)
    if isinstance(node, exp.IgnoreNulls | exp.AnyValue) and node.find_ancestor(exp.Having) is not None:
        # the store's HAVING reads a group key through ANY_VALUE (rewrite/on_store.py: it keeps DuckDB from pushing
        # the test into the scan); Spark aggregates ANY_VALUE of text by sorting, and reads the key as it is
        inner = node.this.this if isinstance(node.this, exp.AnyValue) else node.this
        return inner.transform(_for_spark, tables)
    if isinstance(node, exp.Anonymous) and node.name.upper() == "HASH":  # auto_clamp's sample of a unit's values
        return exp.Anonymous(this="XXHASH64", expressions=node.expressions)
    if isinstance(node, exp.Sum) and not _is_wide(node.this):  # an integer sum that cannot fail (module docstring)
        node.set("this", exp.cast(node.this, WIDE.copy(), copy=False))
        return node
    if isinstance(node, exp.DataType) and node.is_type(exp.DataType.Type.INT128):
        return WIDE.copy()
    if isinstance(node, exp.Table) and node.name.lower() in tables:
        return exp.Table(this=exp.to_identifier(tables[node.name.lower()], quoted=True), alias=node.args.get("alias"))
    return node


def _is_wide(node: exp.Expr) -> bool:
    """Whether `node` is already a DECIMAL(38, 0) (the store's unit totals are built so: rewrite/store_layout.py)."""
    return isinstance(node, exp.Cast) and node.to == WIDE


def _is_hex(node: exp.Expr) -> bool:
    return isinstance(node, exp.DPipe) and node.this == exp.Literal.string("0x")
