"""What burned a budget: charges grouped by the shape of their query (the normalised SQL of their audit entry
with its literals blanked), largest spend first, for the operators' dashboard (admins only).

The audit entry's SQL is sqlglot's normalised text, so one query asked with other constants (another region,
another day, another ε) prints the same but for its literals: blanking quoted strings and numbers gives one
shape for a whole drill-down.

Example:
    >>> shape("SELECT region, COUNT(*) FROM visits WHERE day >= '2026-01-01' AND age > 30 GROUP BY region")
    'SELECT region, COUNT(*) FROM visits WHERE day >= ? AND age > ? GROUP BY region'
    >>> shape("SELECT c1 FROM t2 WHERE x = 'it''s' OR y = -1.5e3")
    'SELECT c1 FROM t2 WHERE x = ? OR y = -?'
    >>> rows = spenders([("ana", 0.25, "SELECT a FROM t WHERE x = 1"), ("bo", 0.5, "SELECT a FROM t WHERE x = 2"),
    ...                  ("ana", 0.5, "SELECT b FROM t"), ("ana", 0.1, None)], top=2)
    >>> [(r.shape, r.epsilon, r.charges, r.analysts) for r in rows]
    [('SELECT a FROM t WHERE x = ?', 0.75, 2, ('ana', 'bo')), ('SELECT b FROM t', 0.5, 1, ('ana',))]
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from mechanisms.rounding import up

_LITERALS = re.compile(r"'(?:[^']|'')*'|\b\d+(?:\.\d*)?(?:[eE][+-]?\d+)?\b")
UNAUDITED = "(no audit entry)"  # a charge whose admitted entry is outside the window read


def shape(sql: str) -> str:
    """The query with every string and number literal replaced by `?`."""
    return _LITERALS.sub("?", sql)


@dataclass(frozen=True, slots=True)
class Spender:
    """One query shape: the ε its charges add up to (exact sum, rounded up), how many, and by whom."""

    shape: str
    epsilon: float
    charges: int
    analysts: tuple[str, ...]


def spenders(charges: Iterable[tuple[str, float, str | None]], *, top: int = 10) -> list[Spender]:
    """The `top` shapes by ε spent, from (analyst, ε, the charge's SQL or None) per charge."""
    totals: dict[str, tuple[Fraction, int, set[str]]] = {}
    for analyst, epsilon, sql in charges:
        key = UNAUDITED if sql is None else shape(sql)
        spent, count, who = totals.get(key, (Fraction(0), 0, set()))
        totals[key] = (spent + Fraction(epsilon), count + 1, who | {analyst})
    ranked = sorted(totals.items(), key=lambda item: (-item[1][0], item[0]))[:top]
    return [Spender(key, up(spent), count, tuple(sorted(who))) for key, (spent, count, who) in ranked]
