"""The keyed order that bounding samples by: one hash that DuckDB and Spark compute identically.

Each engine's built-in HASH is its own function (DuckDB's and Spark's murmur3 differ), so a dataset moved
from one engine to the other would keep different rows. This hash is defined in BIGINT arithmetic both
engines do exactly (AND, XOR, >>, and products below 2⁶³), with M = 2³² − 1:

    n(x)   each part as one or two 32-bit numbers, fold(v) = (v AND M) XOR ((v >> 32) AND M):
             integer  fold(x % 2⁶²)                  date     fold(days since 1970-01-01)
             boolean  1 or 0                         DOUBLE   fold(ROUND(x · 1000)) when |x| < 10¹⁵, else 0
             text, DECIMAL  two numbers: hex digits 1–8 and 9–16 of MD5 of its text
             NULL     M
    lanes  a₀ = salt AND M, b₀ = (salt >> 32) AND M; for each number n, in order,
             a ← ((a XOR n) · 625341585) AND M,   b ← ((b XOR n) · 1540483477) AND M
    h      a · 2³¹ + b DIV 2   (a BIGINT in [0, 2⁶³))
    order  h, then the value of each DOUBLE part (ascending, NULLs last): a DOUBLE's number is coarse, so
           its ties are broken by the value itself, the same way on both engines

For a random salt, the lanes are a fresh pseudo-random permutation chain per query (XOR with the salt-derived
state, then an odd multiplier modulo 2³², which carries every bit into the high bits that order), so each
unit keeps a fresh pseudo-random sample per query. No division and no text for numbers keeps it cheap: MD5
is computed only for text and DECIMAL parts, once per row. What a unit keeps depends only on the unit's own
rows, whatever the values: the hash needs determinism, not injectivity, for privacy (docs/privacy.md §11).

Example:
    >>> reference(7, [(5, "integer"), ("abc", "string"), (None, "boolean")])
    6190631043665660911
"""

from __future__ import annotations

import datetime as dt
import hashlib
from decimal import ROUND_HALF_UP, Decimal

from sqlglot import exp

from proxy.query.types import Kind

MASK = 2**32 - 1  # numbers and lanes are 32-bit
MULTIPLIERS = (625341585, 1540483477)  # odd, below 2³¹: a lane times one stays below 2⁶³
HEX_DIGITS = 8  # 32 bits of MD5 per number; text enters as two numbers
WRAP = 2**62  # an integer is first reduced to (−2⁶², 2⁶²) (a DuckDB HUGEINT then fits a BIGINT)
FLOAT_SCALE = 1000  # a DOUBLE enters as ROUND(x · 1000) …
FLOAT_LIMIT = 1e15  # … when |x| is below this (the product then fits a BIGINT exactly)
EPOCH = "1970-01-01"


def _fold(value: exp.Expr) -> exp.Expr:
    """A BIGINT folded to 32 bits: (x AND M) XOR ((x >> 32) AND M), two's complement on both engines."""
    low = exp.BitwiseAnd(this=value, expression=exp.Literal.number(MASK))
    high = exp.BitwiseAnd(this=exp.BitwiseRightShift(this=value.copy(), expression=exp.Literal.number(32)),
                          expression=exp.Literal.number(MASK))
    return exp.Paren(this=exp.BitwiseXor(this=low, expression=high))


def _bigint(value: exp.Expr) -> exp.Expr:
    return exp.cast(value, exp.DataType.Type.BIGINT)


def part_numbers(value: exp.Expr, kind: Kind) -> list[exp.Expr]:
    """n(x): the part as 32-bit integers (NULL stays NULL), identical on DuckDB and Spark.

    Example:
        >>> [n.sql("duckdb") for n in part_numbers(exp.column("b"), "boolean")]
        ['CAST(b AS BIGINT)']
    """
    match kind:
        case "integer":  # truncated % first: a HUGEINT (DuckDB) becomes small enough for BIGINT
            return [_fold(_bigint(exp.Mod(this=value, expression=exp.Literal.number(WRAP))))]
        case "boolean":
            return [_bigint(value)]
        case "date":
            epoch = exp.cast(exp.Literal.string(EPOCH), exp.DataType.Type.DATE)
            return [_fold(_bigint(exp.DateDiff(this=value, expression=epoch, unit=exp.var("DAY"))))]
        case "float":
            scaled = _bigint(exp.func("ROUND", exp.Mul(this=value, expression=exp.Literal.number(FLOAT_SCALE))))
            small = exp.LT(this=exp.Abs(this=value.copy()), expression=exp.Literal.number(f"{FLOAT_LIMIT:.0e}"))
            # NaN and ±inf fail the test on both engines (NaN compares greater than every number on each)
            return [exp.Case(ifs=[exp.If(this=small, true=_fold(scaled))], default=exp.Literal.number(0))]
    digest = exp.MD5(this=exp.cast(value, exp.DataType.Type.VARCHAR))
    # DuckDB reads '0x…' text as a hexadecimal integer; render.py writes CONV(…, 16, 10) for Spark
    return [_bigint(exp.DPipe(this=exp.Literal.string("0x"), expression=exp.Substring(
        this=digest.copy(), start=exp.Literal.number(start), length=exp.Literal.number(HEX_DIGITS))))
        for start in (1, 1 + HEX_DIGITS)]


def numbers(value: exp.Expr, kind: Kind, small: bool = False) -> list[exp.Expr]:
    """n(x) with NULL as M = 2³² − 1: the numbers a part enters the hash as. Compute them once per row (columns) and
    pass the columns to `keyed_hash`, which reads each number several times. `small`: the part is an integer
    known to lie in [0, 2³²) (a clamped grid value), whose fold is itself, so no arithmetic is spent on it.

    Example:
        >>> [n.sql("spark") for n in numbers(exp.column("b"), "boolean")]
        ['COALESCE(CAST(b AS BIGINT), 4294967295)']
        >>> [n.sql("spark") for n in numbers(exp.column("v"), "integer", small=True)]
        ['COALESCE(v, 4294967295)']
    """
    found = [value] if small and kind == "integer" else part_numbers(value, kind)
    return [exp.Coalesce(this=n, expressions=[exp.Literal.number(MASK)]) for n in found]


def part_numbers_of(text: str) -> list[int]:
    """n(x) of a text value computed here, the numbers `part_numbers` has the engine compute (MD5 digits).

    Example:
        >>> part_numbers_of("abc")
        [2416005272, 1020415920]
    """
    return _numbers(text, "string")


def keyed_hash(salt: int, parts: list[exp.Expr]) -> exp.Expr:
    """h: the keyed hash under `salt` of parts given as their numbers (`numbers`), a BIGINT in [0, 2⁶³).

    Example:
        >>> keyed_hash(3, [exp.column("n")]).sql("duckdb")
        '((XOR(CAST(3 AS BIGINT), n)) * 625341585 & 4294967295) * 2147483648 + ((XOR(CAST(0 AS BIGINT), n)) * \
1540483477 & 4294967295) // 2'
    """
    lanes: list[exp.Expr] = []
    for start, multiplier in zip((int(salt) & MASK, int(salt) >> 32 & MASK), MULTIPLIERS, strict=True):
        h: exp.Expr = _bigint(exp.Literal.number(start))
        for n in parts:  # h ← ((h XOR n) · k) mod 2³²: below 2³² · 2³¹ before the mask, no overflow
            mixed = exp.Mul(this=exp.Paren(this=exp.BitwiseXor(this=h, expression=n.copy())),
                            expression=exp.Literal.number(multiplier))
            h = exp.Paren(this=exp.BitwiseAnd(this=mixed, expression=exp.Literal.number(MASK)))
        lanes.append(h)
    high = exp.Mul(this=lanes[0], expression=exp.Literal.number(2**31))
    return exp.Add(this=high, expression=exp.IntDiv(this=lanes[1], expression=exp.Literal.number(2)))


def keyed_order(salt: int, parts: list[exp.Expr], floats: list[exp.Expr]) -> list[exp.Ordered]:
    """ORDER BY keys for a per-unit pseudo-random order: the keyed hash of `parts` (their numbers), then
    the DOUBLE parts' own values (ascending, NULLs last), whose numbers are coarse."""
    ordered = [exp.Ordered(this=keyed_hash(salt, parts), nulls_first=False)]
    return ordered + [exp.Ordered(this=value.copy(), nulls_first=False) for value in floats]


def reference(salt: int, parts: list[tuple[object, Kind]]) -> int:
    """The hash computed in Python from its definition: what both engines must return (tests compare)."""
    flat = [n for value, kind in parts for n in ([MASK] * (2 if kind in ("string", "decimal") else 1)
                                                  if value is None else _numbers(value, kind))]
    lanes = []
    for h, multiplier in zip((int(salt) & MASK, int(salt) >> 32 & MASK), MULTIPLIERS, strict=True):
        for n in flat:
            h = ((h ^ n) * multiplier) & MASK
        lanes.append(h)
    return lanes[0] * 2**31 + lanes[1] // 2


def _numbers(value: object, kind: Kind) -> list[int]:
    if kind in ("string", "decimal"):
        text = str(value) if not isinstance(value, Decimal) else format(value, "f")
        digest = hashlib.md5(text.encode("utf-8")).hexdigest()
        return [int(digest[:HEX_DIGITS], 16), int(digest[HEX_DIGITS:2 * HEX_DIGITS], 16)]
    return [_number(value, kind)]


def _folded(x: int) -> int:
    return (x & MASK) ^ (x >> 32 & MASK)


def _number(value: object, kind: Kind) -> int:
    match kind:
        case "integer":
            x = int(value)  # type: ignore[call-overload]
            return _folded(abs(x) % WRAP * (1 if x >= 0 else -1))  # SQL's % keeps the dividend's sign
        case "boolean":
            return int(bool(value))
        case "date":
            day = value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
            return _folded((day - dt.date(1970, 1, 1)).days)
        case "float":
            x = float(value)  # type: ignore[arg-type]
            if not abs(x) < FLOAT_LIMIT:
                return 0
            product = Decimal(x * FLOAT_SCALE)  # the exact value of the double product, as both engines hold it
            return _folded(int(product.to_integral_value(rounding=ROUND_HALF_UP)))  # ROUND: half away from zero
    raise ValueError(f"no number for kind {kind}")
