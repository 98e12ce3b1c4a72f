"""Normalisation before analysis: rules over the tree in the style of sqlglot's optimizer, each the same query.

Decision-support texts (TPC-H) write constants as arithmetic and repeat a join's equality inside every arm of
an OR; the analyser takes literals and top-level equalities. Each rule rewrites only the conditions (WHERE,
JOIN … ON, HAVING), never the SELECT list (whose types a fold could change), and gives a query with the same
answer on every database:

- `fold_dates`: `DATE 'd' ± INTERVAL 'n' DAY|WEEK|MONTH|QUARTER|YEAR` becomes `DATE 'd2'`. DuckDB computes a
  TIMESTAMP at midnight of d2 (months clamp to the month's last day, as Python's arithmetic below does too);
  compared with a DATE column it is that day, which the DATE literal is. A DATE compared with a TIMESTAMP
  midnight is compared as that midnight, so `x < DATE 'd2'` and `x < TIMESTAMP 'd2 00:00'` agree for every x.
- `fold_numbers`: `a + b`, `a - b`, `a * b` of two numeric literals becomes their exact decimal value (DuckDB
  computes a literal's arithmetic in DECIMAL, exactly, at these sizes; `/` is left: it is a DOUBLE there).
- `factor_or`: `(A AND B) OR (A AND C)` becomes `A AND (B OR C)`, and `A OR (A AND B)` becomes `A`: both
  identities hold in SQL's three-valued (Kleene) logic, so the rows kept are the same. The common conjunct A
  then stands at the top level, where `comma_joins.explicit_joins` finds a join's equality (TPC-H Q19).

Example:
    >>> from sqlglot import parse_one
    >>> sql = ("SELECT COUNT(*) FROM l, p WHERE (p.k = l.k AND p.b = 'x') OR (p.k = l.k AND p.b = 'y' "
    ...        "AND l.d <= DATE '1998-12-01' - INTERVAL '90' DAY AND l.q BETWEEN 0.06 - 0.01 AND 0.06 + 0.01)")
    >>> print(normalise(parse_one(sql)).sql())
    SELECT COUNT(*) FROM l, p WHERE p.k = l.k AND (p.b = 'x' OR (p.b = 'y' AND l.d <= CAST('1998-09-02' AS DATE) \
AND l.q BETWEEN 0.05 AND 0.07))
"""

from __future__ import annotations

import calendar
import datetime as dt
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from sqlglot import exp

_DAYS = {"DAY": 1, "WEEK": 7}
_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_MAX_DIGITS = 30  # a folded literal longer than this is left as written (DuckDB's DECIMAL holds 38 digits)


def normalise(select: exp.Select) -> exp.Select:
    """`select` with every rule applied to its conditions (a copy; `select` itself when nothing changes, found
    before the whole tree is copied: most texts have nothing to fold, and the copy was a tenth of planning one).

    Example:
        >>> from sqlglot import parse_one
        >>> plain = parse_one("SELECT g, COUNT(*) FROM t WHERE n > 2 GROUP BY g")
        >>> normalise(plain) is plain
        True
        >>> folded = parse_one("SELECT COUNT(*) FROM t WHERE d < DATE '1994-01-01' + INTERVAL '1' YEAR")
        >>> normalise(folded).sql(), folded.sql()[-40:]
        ("SELECT COUNT(*) FROM t WHERE d < CAST('1995-01-01' AS DATE)", "1994-01-01' AS DATE) + INTERVAL '1' YEAR")
    """
    if all(_normal(node).sql() == node.sql() for node in _conditions(select)):
        return select
    out = select.copy()
    for node in list(_conditions(out)):
        new = _normal(node)
        if new.sql() != node.sql():
            node.replace(new)
    return out


def _normal(node: exp.Expr) -> exp.Expr:
    """A condition with every rule applied (on a copy)."""
    return factor_or(fold_numbers(fold_dates(node.copy())))


def _conditions(select: exp.Select) -> list[exp.Expr]:
    found: list[exp.Expr] = []
    for scope in select.find_all(exp.Select):
        for key in ("where", "having"):
            clause = scope.args.get(key)
            if clause is not None:
                found.append(clause.this)
        found += [j.args["on"] for j in scope.args.get("joins") or [] if j.args.get("on") is not None]
    return found


def fold_dates(node: exp.Expr) -> exp.Expr:
    """Constant `DATE ± INTERVAL` folded to a DATE literal.

    Example:
        >>> from sqlglot import parse_one
        >>> [fold_dates(parse_one(t)).sql() for t in ("DATE '1994-01-01' + INTERVAL '1' YEAR",
        ...     "DATE '1995-01-31' + INTERVAL '1' MONTH", "DATE '1998-12-01' - INTERVAL '90' DAY")]
        ["CAST('1995-01-01' AS DATE)", "CAST('1995-02-28' AS DATE)", "CAST('1998-09-02' AS DATE)"]
        >>> fold_dates(parse_one("d + INTERVAL 1 DAY")).sql()
        "d + INTERVAL '1' DAY"
    """
    def rule(n: exp.Expr) -> exp.Expr:
        if isinstance(n, (exp.Add, exp.Sub)):
            day = _date_of(n)
            if day is not None:
                return exp.cast(exp.Literal.string(day.isoformat()), exp.DataType.build("DATE"))
        return n
    return _bottom_up(node, rule)


def _bottom_up(node: exp.Expr, rule: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """`rule` applied to every node, children first (sqlglot's `transform` visits a node before its children)."""
    for key, value in list(node.args.items()):
        if isinstance(value, exp.Expr):
            node.set(key, _bottom_up(value, rule))
        elif isinstance(value, list):
            node.set(key, [_bottom_up(v, rule) if isinstance(v, exp.Expr) else v for v in value])
    return rule(node)


def _date_of(node: exp.Expr) -> dt.date | None:
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, exp.Cast) and node.to.is_type("date") and isinstance(node.this, exp.Literal) \
            and node.this.is_string:
        try:
            return dt.date.fromisoformat(node.this.this.strip())
        except ValueError:
            return None
    if not isinstance(node, (exp.Add, exp.Sub)):
        return None
    sign = 1 if isinstance(node, exp.Add) else -1
    base, step = node.this, node.expression
    if isinstance(base, exp.Interval) and sign == 1:
        base, step = step, base
    start = _date_of(base)
    if start is None or not isinstance(step, exp.Interval):
        return None
    unit = step.args.get("unit")
    amount = step.this
    if unit is None or not isinstance(amount, exp.Literal):
        return None
    try:
        count = sign * int(str(amount.this).strip())
    except ValueError:
        return None
    name = unit.name.upper().rstrip("S")
    try:
        if name in _DAYS:
            return start + dt.timedelta(days=count * _DAYS[name])
        if name in _MONTHS:
            months = start.year * 12 + start.month - 1 + count * _MONTHS[name]
            year, month = divmod(months, 12)
            last = calendar.monthrange(year, month + 1)[1]
            return dt.date(year, month + 1, min(start.day, last))
    except (OverflowError, ValueError):
        return None
    return None


def fold_numbers(node: exp.Expr) -> exp.Expr:
    """`+`, `-` and `*` of two numeric literals folded to their exact value.

    Example:
        >>> from sqlglot import parse_one
        >>> [fold_numbers(parse_one(t)).sql() for t in ("0.06 - 0.01", "24 * 2 + 1", "0.01 - 0.06", "1 / 3", "x + 1")]
        ['0.05', '49', '-0.05', '1 / 3', 'x + 1']
    """
    def rule(n: exp.Expr) -> exp.Expr:
        if isinstance(n, (exp.Add, exp.Sub, exp.Mul)):
            a, b = _number(n.this), _number(n.expression)
            if a is not None and b is not None:
                value = a + b if isinstance(n, exp.Add) else a - b if isinstance(n, exp.Sub) else a * b
                text = format(value, "f")
                if len(text) <= _MAX_DIGITS:
                    literal = exp.Literal.number(text.lstrip("-"))
                    return exp.Neg(this=literal) if value < 0 else literal
        return n
    return _bottom_up(node, rule)


def _number(node: exp.Expr) -> Decimal | None:
    while isinstance(node, exp.Paren):
        node = node.this
    negative = isinstance(node, exp.Neg)
    if negative:
        node = node.this
    if not isinstance(node, exp.Literal) or node.is_string:
        return None
    text = str(node.this)
    if any(c in text.lower() for c in "e_x"):  # 1e3 is a DOUBLE in DuckDB, not a DECIMAL: leave it
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        return None
    return -value if negative else value


def factor_or(node: exp.Expr) -> exp.Expr:
    """The conjuncts every arm of an OR shares, taken out of it.

    Example:
        >>> from sqlglot import parse_one
        >>> factor_or(parse_one("(a = 1 AND b = 2) OR (b = 2 AND c = 3) OR (b = 2 AND a = 1 AND d)")).sql()
        'b = 2 AND (a = 1 OR c = 3 OR (a = 1 AND d))'
        >>> factor_or(parse_one("a = 1 OR (a = 1 AND b = 2)")).sql(), factor_or(parse_one("a OR b")).sql()
        ('a = 1', 'a OR b')
    """
    def rule(n: exp.Expr) -> exp.Expr:
        if not isinstance(n, exp.Or) or isinstance(n.parent, exp.Or):
            return n
        arms = [conjuncts(arm) for arm in _disjuncts(n)]
        first = arms[0]
        common = [c for c in first if all(any(c.sql() == d.sql() for d in arm) for arm in arms[1:])]
        if not common:
            return n
        texts = {c.sql() for c in common}
        rests = [[c for c in arm if c.sql() not in texts] for arm in arms]
        kept = exp.and_(*(c.copy() for c in _unique(common)))
        if any(not rest for rest in rests):  # absorption: A OR (A AND B) is A
            return kept
        ors = exp.or_(*(exp.Paren(this=exp.and_(*(c.copy() for c in rest))) if len(rest) > 1 else rest[0].copy()
                        for rest in rests))
        return exp.and_(kept, exp.Paren(this=ors))
    return node.transform(rule)


def _unique(items: list[exp.Expr]) -> list[exp.Expr]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item.sql() not in seen:
            seen.add(item.sql())
            out.append(item)
    return out


def _disjuncts(node: exp.Expr) -> list[exp.Expr]:
    return _operands(node, exp.Or)


def conjuncts(node: exp.Expr) -> list[exp.Expr]:
    """The top-level AND terms of a condition, every parenthesis dropped: `(a AND (b)) AND c` is [a, b, c].

    Example:
        >>> from sqlglot import parse_one
        >>> [c.sql() for c in conjuncts(parse_one("(a = 1 AND (b < 2)) AND (c OR d)"))]
        ['a = 1', 'b < 2', 'c OR d']
    """
    return _operands(node, exp.And)


def _operands(node: exp.Expr, kind: type[exp.Connector]) -> list[exp.Expr]:
    """The operands of a chain of `kind` (AND or OR), parentheses dropped: `(a AND b) AND c` is [a, b, c]."""
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, kind):
        return [*_operands(node.this, kind), *_operands(node.expression, kind)]
    return [node]
