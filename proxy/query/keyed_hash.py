"""The keyed order that bounding samples by: one 64-bit hash that DuckDB and Spark compute identically.

Each engine's built-in HASH is its own function (DuckDB's and Spark's murmur3 differ), so a dataset moved
from one engine to the other would keep different rows. The order here is defined by text both engines
produce byte for byte:

    text  = salt | part₁ | part₂ | …          (CONCAT_WS with '|'; a NULL part is the empty string)
    hash  = the first 16 hex digits of MD5(text)   (64 bits; as lowercase hex its text order is its number order)
    order = hash, then each part's own value (ascending, NULLs last), so ties are broken the same way too

Each part's text is its CAST to VARCHAR, which both engines print alike for integers, DECIMAL(p, s), text,
dates and booleans. A DOUBLE (or REAL) prints differently (`1e+20` against `1.0E20`), so it enters as
`ROUND(x · 1000)` printed as an integer when |x| < 10¹⁵, else as the empty string: values equal to 10⁻³
share a hash and are then ordered by value. What a unit keeps still depends only on the unit's own rows,
whatever the text: the hash needs no injectivity for privacy, only determinism (DESIGN.md §7).

Example:
    >>> from sqlglot import exp
    >>> [o.sql("duckdb") for o in keyed_order(7, [(exp.column("__unit"), "integer")])]
    ["SUBSTRING(MD5(CONCAT_WS('|', '7', COALESCE(CAST(__unit AS TEXT), ''))), 1, 16)", '__unit']
"""

from __future__ import annotations

from sqlglot import exp

from proxy.query.types import Kind

SEPARATOR = "|"
HEX_DIGITS = 16  # 64 bits
FLOAT_SCALE = 1000  # a DOUBLE enters the text as ROUND(x · 1000) …
FLOAT_LIMIT = "1e15"  # … when |x| is below this (the product then fits a BIGINT exactly)


def part_text(value: exp.Expr, kind: Kind) -> exp.Expr:
    """The text of one part, identical on DuckDB and Spark for every value of its kind (NULL stays NULL).

    Example:
        >>> part_text(exp.column("x"), "float").sql("duckdb")
        "CASE WHEN ABS(x) < 1e15 THEN CAST(CAST(ROUND(x * 1000) AS BIGINT) AS TEXT) ELSE '' END"
    """
    if kind != "float":
        return exp.cast(value, "VARCHAR")
    scaled = exp.cast(exp.func("ROUND", exp.Mul(this=value, expression=exp.Literal.number(FLOAT_SCALE))), "BIGINT")
    small = exp.LT(this=exp.Abs(this=value.copy()), expression=exp.Literal.number(FLOAT_LIMIT))
    # NaN and ±inf fail the test on both engines (NaN compares greater than every number on each)
    return exp.Case(ifs=[exp.If(this=small, true=exp.cast(scaled, "VARCHAR"))], default=exp.Literal.string(""))


def keyed_hash(salt: int, parts: list[tuple[exp.Expr, Kind]]) -> exp.Expr:
    """The 64-bit keyed hash of `parts` under `salt`, as 16 lowercase hex digits (module docstring).

    Example:
        >>> keyed_hash(3, [(exp.column("b"), "boolean")]).sql("spark")
        "SUBSTRING(MD5(CONCAT_WS('|', '3', COALESCE(CAST(b AS STRING), ''))), 1, 16)"
    """
    texts: list[exp.Expr] = [exp.Literal.string(str(int(salt)))]
    texts += [exp.Coalesce(this=part_text(value, kind), expressions=[exp.Literal.string("")])
              for value, kind in parts]
    joined = exp.ConcatWs(expressions=[exp.Literal.string(SEPARATOR), *texts], safe=True, coalesce=True)
    digest = exp.MD5(this=joined)
    return exp.Substring(this=digest, start=exp.Literal.number(1), length=exp.Literal.number(HEX_DIGITS))


def keyed_order(salt: int, parts: list[tuple[exp.Expr, Kind]]) -> list[exp.Ordered]:
    """ORDER BY keys for a per-unit pseudo-random order: the keyed hash, then the parts themselves."""
    ordered = [exp.Ordered(this=keyed_hash(salt, parts), nulls_first=False)]
    return ordered + [exp.Ordered(this=value.copy(), nulls_first=False) for value, _ in parts]
