"""A one-arm CASE inside an aggregate read as the aggregate's FILTER: the same query, of a column, so that its
bounds can be chosen per query (issue #29 item 4) and its noise sized for the column, not for the CASE.

`SUM(CASE WHEN c THEN x [ELSE 0 | ELSE NULL] END)` is `SUM(x) FILTER (WHERE c)`: the rows failing c (c false or
NULL) add 0, or nothing, and the release of a sum over no rows is 0 either way (a noisy sum is never NULL, §12).
`SUM(CASE WHEN c THEN 1 ELSE 0 END)` counts the rows meeting c: `COUNT(*) FILTER (WHERE c)`.
`COUNT(CASE WHEN c THEN x END)` is `COUNT(x) FILTER (WHERE c)` (a non-NULL literal for x: `COUNT(*)`), and
`AVG(CASE WHEN c THEN x END)` is `AVG(x) FILTER (WHERE c)`: NULLs are skipped by both. `ELSE 0` is kept out of
COUNT and AVG, where a 0 is a value (it would be counted, and averaged). Anything else — several WHEN arms, an
ELSE of another value, an expression for x — stays an expression (analyse/row_expr.py), at its own range.

Example:
    >>> from sqlglot import parse_one
    >>> as_filter(parse_one("SUM(CASE WHEN age > 50 THEN amount ELSE 0 END)")).sql()
    'SUM(amount) FILTER(WHERE age > 50)'
    >>> as_filter(parse_one("SUM(CASE WHEN age > 50 THEN 1 ELSE 0 END)")).sql()
    'COUNT(*) FILTER(WHERE age > 50)'
    >>> as_filter(parse_one("AVG(CASE WHEN age > 50 THEN amount ELSE 0 END)")) is None  # a 0 is averaged
    True
"""

from __future__ import annotations

from sqlglot import exp


def as_filter(node: exp.Expr) -> exp.Filter | None:
    """`node` (COUNT, SUM or AVG of a one-arm CASE) as the same aggregate of a column with a FILTER; else None."""
    if not isinstance(node, exp.Count | exp.Sum | exp.Avg) or not isinstance(node.this, exp.Case):
        return None
    if any(value for name, value in node.args.items() if name not in ("this", "big_int")):
        return None
    case = node.this
    ifs = case.args.get("ifs") or []
    if case.this is not None or len(ifs) != 1:
        return None
    condition, value, default = ifs[0].this, ifs[0].args.get("true"), case.args.get("default")
    otherwise_nothing = default is None or isinstance(default, exp.Null)
    if isinstance(node, exp.Sum):
        if not (otherwise_nothing or _is_zero(default)):
            return None
        if _is_number(value, 1) and default is not None and _is_zero(default):
            inner: exp.Expr = exp.Count(this=exp.Star())  # rows meeting c: a count, sensitivity max_rows
        elif isinstance(value, exp.Column):
            inner = exp.Sum(this=value.copy())
        else:
            return None
    elif not otherwise_nothing:
        return None
    elif isinstance(node, exp.Count):
        if isinstance(value, exp.Column):
            inner = exp.Count(this=value.copy())
        elif isinstance(value, exp.Literal | exp.Boolean) or _is_number(value, None):
            inner = exp.Count(this=exp.Star())  # a non-NULL constant: every row meeting c
        else:
            return None
    elif isinstance(value, exp.Column):
        inner = exp.Avg(this=value.copy())
    else:
        return None
    return exp.Filter(this=inner, expression=exp.Where(this=condition.copy()))


def _is_zero(node: exp.Expr | None) -> bool:
    return _is_number(node, 0)


def _is_number(node: exp.Expr | None, value: int | None) -> bool:
    """A numeric literal (negated or not) equal to `value` (None: any number)."""
    negative = isinstance(node, exp.Neg)
    inner = node.this if negative else node
    if not (isinstance(inner, exp.Literal) and inner.is_number):
        return False
    if value is None:
        return True
    try:
        return float(inner.this) * (-1 if negative else 1) == value
    except ValueError:
        return False
