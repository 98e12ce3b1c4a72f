"""Reachable groups: the values of a public-domain key that a row passing the WHERE can have.

Computed from the query and the declarations only, never the data, so releasing only these groups is as
public as releasing the whole domain; the others would be noise alone (issue #28). For each key, the WHERE
(as rebuilt by where.py) is *relaxed* to its key's columns: every atom that reads another column becomes
NULL, "unknown" in SQL's three-valued logic (FALSE AND NULL is FALSE, TRUE OR NULL is TRUE). A value is
dropped only when the relaxed WHERE is FALSE on it, which then holds whatever the other atoms are: Kleene logic
is monotone, so no row with that key value can pass the WHERE. DuckDB evaluates it on the declared values
(computed/domains.py), so nothing is re-implemented to drift from the engine; an atom it cannot evaluate
stays NULL, which keeps the value (the conservative side).

Where the values come from, so that a dropped value is one no passing row can have:
- a plain key: its declared domain; the rewrite drops rows outside it before bounding (rewrite/per_query.py),
  and the WHERE is in the same filter, so dropping an unreachable value changes no answer before noise;
- a computed key over one column: the values a top-level AND conjunct confines that column to (`IN`, `=`, and
  for integers and dates a range: BETWEEN, `<`, `>=` …), which every passing row holds, whatever the
  declarations say; without such a conjunct, the full derived domain is kept.

Example:
    >>> from sqlglot import parse_one
    >>> from proxy.query.catalog import Catalog, ColumnSpec, TableSchema
    >>> from proxy.query.analyse.names import Names
    >>> from proxy.query.analyse.where import predicate
    >>> t = TableSchema("v", "u", (ColumnSpec("u", "BIGINT"), ColumnSpec("age", "INTEGER"),
    ...     ColumnSpec("r", "VARCHAR", groupable=True, public_domain=("n", "s", "e"))))
    >>> w = predicate(parse_one("r IN ('n', 's') AND age > 30 OR r = 'e' AND r <> 'e'"), Names(t, None, Catalog((t,))))
    >>> reachable_plain(w, t.column("r"))
    ('n', 's')
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from decimal import Decimal

from sqlglot import exp

from proxy.query import types
from proxy.query.catalog import ColumnSpec, Literal_
from proxy.query.computed.domains import MAX_INPUTS, domain
from proxy.query.parse.normalise import conjuncts

_RANGES = (exp.GT, exp.GTE, exp.LT, exp.LTE)


def relax(where: exp.Expr, columns: frozenset[str]) -> exp.Expr:
    """`where` with every atom that reads a column outside `columns` (lower-cased names) replaced by NULL.

    Example:
        >>> from sqlglot import parse_one
        >>> relax(parse_one("(a = 1 OR b = 2) AND NOT c = 3"), frozenset({"a"})).sql()
        '(a = 1 OR NULL) AND NOT NULL'
    """
    match where:
        case exp.And() | exp.Or():
            return type(where)(this=relax(where.this, columns), expression=relax(where.expression, columns))
        case exp.Not() | exp.Paren():
            return type(where)(this=relax(where.this, columns))
    read = {c.name.lower() for c in where.find_all(exp.Column)}
    return where.copy() if read <= columns else exp.Null()


def reachable_plain(where: exp.Expr | None, spec: ColumnSpec) -> tuple[Literal_, ...] | None:
    """The values of the key column's declared domain the WHERE can reach, in declared order; None: no domain,
    or too many values to evaluate (the full domain is then kept)."""
    full = spec.domain
    if full is None or where is None:
        return full
    relaxed = relax(where, frozenset({spec.name.lower()}))
    if isinstance(relaxed, exp.Null):
        return full
    found = domain(exp.column(spec.name, quoted=True), spec.type, (spec,), relaxed)
    if found is None:
        return full
    kept = set(found)
    return tuple(v for v in full if v in kept)


def reachable_computed(where: exp.Expr | None, sql: exp.Expr, type_name: str, full: tuple[Literal_, ...],
                       spec: ColumnSpec) -> tuple[Literal_, ...]:
    """The values of a computed key over the one column `spec` that a passing row can have, in `full`'s
    order: `full` unless a top-level conjunct confines the column to finitely many values."""
    if where is None:
        return full
    candidates = confined(where, spec)
    if candidates is None:
        return full
    inputs = dataclasses.replace(spec, public_domain=candidates, date_bounds=None, bounds=None, auto_bounds=False,
                                 cap_bounds=None)
    found = domain(sql, type_name, (inputs,), relax(where, frozenset({spec.name.lower()})))
    if found is None:
        return full
    kept = set(found)
    return tuple(v for v in full if v in kept)


def confined(where: exp.Expr, spec: ColumnSpec) -> tuple[Literal_, ...] | None:
    """The finite set of values every row passing `where` has in column `spec` (NULL aside), read from its
    top-level AND conjuncts; None when they confine it to no finite set we can list.

    Example:
        >>> from sqlglot import parse_one
        >>> day = ColumnSpec("day", "DATE")
        >>> confined(parse_one("day BETWEEN CAST('2024-02-28' AS DATE) AND CAST('2024-03-01' AS DATE) AND x"), day)
        ('2024-02-28', '2024-02-29', '2024-03-01')
        >>> confined(parse_one("n > 2 AND n <= 5 AND n IN (1, 3, 4, 9)"), ColumnSpec("n", "INTEGER"))
        (3, 4)
    """
    values: set[object] | None = None
    lo, hi = -math.inf, math.inf  # on the integers, or the days as ordinals
    ordered = spec.kind in ("integer", "date")
    for conjunct in conjuncts(where):
        if not _is(conjunct.this, spec):
            continue
        if isinstance(conjunct, exp.In) and not conjunct.args.get("query"):
            found = {types.read_literal(v) for v in conjunct.expressions}
        elif isinstance(conjunct, exp.EQ):
            found = {types.read_literal(conjunct.expression)}
        elif isinstance(conjunct, exp.Between) and ordered:
            low, high = _place(conjunct.args["low"]), _place(conjunct.args["high"])
            if low is not None and high is not None:
                lo, hi = max(lo, math.ceil(low)), min(hi, math.floor(high))
            continue
        elif isinstance(conjunct, exp.GT | exp.GTE | exp.LT | exp.LTE) and ordered:
            b = _place(conjunct.expression)
            if b is None:
                continue
            match conjunct:
                case exp.GT():
                    lo = max(lo, math.floor(b) + 1)
                case exp.GTE():
                    lo = max(lo, math.ceil(b))
                case exp.LT():
                    hi = min(hi, math.ceil(b) - 1)
                case exp.LTE():
                    hi = min(hi, math.floor(b))
            continue
        else:
            continue
        if types.UNKNOWN in found:
            continue
        values = found if values is None else values & found
    if values is None:
        if not (math.isfinite(lo) and math.isfinite(hi)) or hi - lo >= MAX_INPUTS:
            return None
        span = range(int(lo), int(hi) + 1)
        values = {dt.date.fromordinal(d).isoformat() for d in span} if spec.kind == "date" else set(span)
    elif ordered:
        values = {v for v in values if (p := _ordinal(v)) is None or lo <= p <= hi}
    try:
        return tuple(sorted({types.canonical(spec.type, v) for v in values}, key=lambda v: (type(v).__name__, v)))  # type: ignore[arg-type]
    except (ValueError, TypeError):
        return None



def _is(node: exp.Expr | None, spec: ColumnSpec) -> bool:
    """Whether `node` is the column as types.column reads it (possibly collated or widened)."""
    while isinstance(node, exp.Collate | exp.Cast):
        node = node.this
    return isinstance(node, exp.Column) and node.name.lower() == spec.name.lower()


def _place(node: exp.Expr) -> float | None:
    return _ordinal(types.read_literal(node))


def _ordinal(value: object) -> float | None:
    """A value's place on the line (a day as its ordinal), or None."""
    if isinstance(value, str):
        try:
            return float(dt.date.fromisoformat(value).toordinal())
        except ValueError:
            return None
    if isinstance(value, int | Decimal | float) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else None
    return None
