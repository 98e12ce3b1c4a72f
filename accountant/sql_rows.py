"""How charges are stored as SQL rows, shared by the SQLite and PostgreSQL ledgers: scopes as JSON text, and
the one statement that reads a history against a watermark (`since_sql`, `since_of`).

Example:
    >>> from accountant.cells import CellScope
    >>> scope = CellScope.of("visits", "f00d", 10, [1, 2])
    >>> scope_of(scope_to_text(scope)) == scope, scope_of(None)
    (True, None)
"""

from __future__ import annotations

import json
from functools import lru_cache

from accountant.admitting import Since, event_of
from accountant.cells import CellScope
from accountant.filter import Entry


def scope_to_text(scope: CellScope | None) -> str | None:
    return None if scope is None else json.dumps(scope.to_json(), separators=(",", ":"))


@lru_cache(maxsize=16384)  # at most 16384 × 12.5 kB (a bitmap of 100k cells); far less for usual spaces
def scope_of(text: str | None) -> CellScope | None:
    """A cell scope from its stored JSON text (cached: stored charges never change)."""
    return None if text is None else CellScope.from_json(json.loads(text))


def since_sql(clause: str, mark: str) -> str:
    """One statement, so one snapshot even under READ COMMITTED: the count of the charges matching `clause`
    up to a sequence number, and those after it, identical ones read once with their count (a history
    repeats a few query shapes many times). `mark` is the driver's placeholder; parameters: the clause's,
    the number, the clause's, the number."""
    return (
        f"WITH old AS (SELECT COUNT(*) AS n FROM charges WHERE {clause} AND seq <= {mark}),"
        f" new AS (SELECT MAX(seq) AS last, event, epsilon, delta, scope, COUNT(*) AS k FROM charges"
        f" WHERE {clause} AND seq > {mark} GROUP BY event, epsilon, delta, scope)"
        " SELECT old.n, new.last, new.event, new.epsilon, new.delta, new.scope, new.k"
        " FROM old LEFT JOIN new ON TRUE ORDER BY new.last"
    )


def since_of(rows: list[tuple[int, int | None, str, float, float, str | None, int | None]], seq: int) -> Since:
    after = [(Entry(event_of(text), epsilon, delta, scope_of(scope)), k)
             for _, _, text, epsilon, delta, scope, k in rows if k is not None]
    return Since(rows[0][0], after, max((last for _, last, *_ in rows if last is not None), default=seq))
