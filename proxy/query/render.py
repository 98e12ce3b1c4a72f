"""Render a generated query for the engine that runs it: the same syntax tree through sqlglot's dialect.

DuckDB gets the tree as DuckDB SQL, exactly `QueryPlan.sql`. Spark gets it after a check and three
meaning-preserving rewrites, so both engines compute the same rows before noise:
- the check (defence in depth: the tree is ours, built from declared names and rebuilt literals): every
  node is one the rewrite emits, every table is a declared one or one of the query's own CTEs, and none is
  qualified; so no path literal (`parquet.`/x``), file-reading or unknown function, or UDF can be rendered;
- text compares under binary collation on both engines, which is Spark's default: COLLATE is dropped
  (Spark 4 names the binary collation UTF8_BINARY, not `binary`);
- a LIKE pattern's backslashes are doubled: Spark reads `\\` as its escape character, DuckDB as a letter;
- hexadecimal text read as an integer (the keyed hash's MD5 digits, keyed_hash.py) is `CAST('0x' || h AS
  BIGINT)` on DuckDB and `CAST(CONV(h, 16, 10) AS BIGINT)` on Spark;
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

from sqlglot import exp

from proxy.query.errors import UnsupportedQuery

EngineDialect = Literal["duckdb", "spark"]


@dataclass(frozen=True, slots=True)
class Target:
    """How an engine reads generated SQL: its sqlglot dialect, and its name for each declared table
    (lower-case declared name -> the engine's name; a table not listed keeps its name)."""

    dialect: EngineDialect
    tables: tuple[tuple[str, str], ...] = ()


DUCKDB = Target("duckdb")

# Every node class the rewrite (proxy/query/rewrite.py, where.py, types.py, keyed_hash.py) emits; anything
# else in a tree bound for Spark is a defect, refused before the engine sees it.
ALLOWED: frozenset[type[exp.Expr]] = frozenset({
    exp.Select, exp.With, exp.CTE, exp.From, exp.Table, exp.TableAlias, exp.Subquery, exp.Identifier,
    exp.Column, exp.Star, exp.Alias, exp.Where, exp.Group, exp.Qualify, exp.Window, exp.Order, exp.Ordered,
    exp.RowNumber, exp.Count, exp.Sum, exp.Min, exp.Cast, exp.DataType, exp.DataTypeParam, exp.Literal,
    exp.Boolean, exp.Null, exp.Not, exp.Is, exp.And, exp.Or, exp.Paren, exp.EQ, exp.NEQ, exp.GT, exp.GTE,
    exp.LT, exp.LTE, exp.In, exp.Between, exp.Like, exp.ILike, exp.Case, exp.If, exp.Least, exp.Greatest,
    exp.Round, exp.Mul, exp.Sub, exp.Add, exp.Mod, exp.IntDiv, exp.Neg, exp.Abs, exp.BitwiseAnd,
    exp.BitwiseXor, exp.BitwiseRightShift, exp.MD5, exp.Substring, exp.DPipe, exp.DateDiff, exp.Coalesce,
    exp.Collate, exp.Var,
})


def render(tree: exp.Expr, target: Target) -> str:
    """The SQL text `target`'s engine runs for the generated query `tree` (module docstring).

    Raises:
        UnsupportedQuery: (Spark) the tree holds a construct the rewrite never emits, or an undeclared table.
    """
    if target.dialect == "duckdb":
        return tree.sql(dialect="duckdb")
    _check(tree, dict(target.tables))
    return tree.copy().transform(_for_spark, dict(target.tables)).sql(dialect="spark")


def _check(tree: exp.Expr, tables: dict[str, str]) -> None:
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    for node in tree.walk():
        if type(node) not in ALLOWED:
            _refuse(f"{type(node).__name__} is not one of the constructs the rewrite emits")
        if isinstance(node, exp.Table):
            qualified = any(node.args.get(part) for part in ("db", "catalog"))
            name = node.name.lower()
            if qualified or not isinstance(node.this, exp.Identifier) or (name not in tables and name not in ctes):
                _refuse(f"table {node.sql(dialect='spark')} is not a declared table of this dataset")


def _refuse(why: str) -> None:
    raise UnsupportedQuery(f"Spark runs only generated SQL over declared tables: {why}", construct="FROM")


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
    if isinstance(node, exp.Table) and node.name.lower() in tables:
        return exp.Table(this=exp.to_identifier(tables[node.name.lower()], quoted=True), alias=node.args.get("alias"))
    return node


def _is_hex(node: exp.Expr) -> bool:
    return isinstance(node, exp.DPipe) and node.this == exp.Literal.string("0x")
