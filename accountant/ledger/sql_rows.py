"""How charges are stored as SQL rows, shared by the SQLite and PostgreSQL ledgers: a charge as a row and back
(`charge_row`, `charge_of`: events and scopes as JSON text; only the time's encoding differs per store), the
filters of a listing (`where`), and the one statement that reads a history against a watermark (`since_sql`,
`since_of`; a history's count is its tally, accountant/ledger/tallies.py). `entry_of` is a charge as the filter sees
it, for every ledger.

Example:
    >>> from datetime import UTC, datetime
    >>> from accountant.cell_scope import CellScope
    >>> from accountant.events import LaplaceEvent
    >>> scope = CellScope.of("visits", "f00d", 10, [1, 2])
    >>> scope_of(scope_to_text(scope)) == scope, scope_of(None)
    (True, None)
    >>> at = datetime(2026, 1, 2, tzinfo=UTC)
    >>> charge = Charge("c1", "ana", "demo", at, "ab" * 32, LaplaceEvent(1, 10.0), 0.1, 0.0, "basic", scope)
    >>> charge_of(charge_row(charge, at), at) == charge
    True
    >>> where("ana", None, at, None, mark="?", at_column="at_us", moment=lambda m: 7)
    ('analyst = ? AND at_us >= ?', ('ana', 7))
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from functools import lru_cache
from typing import Any

from accountant.cell_scope import CellScope
from accountant.events import to_json
from accountant.filter import Entry
from accountant.ledger.admit import Since, event_of
from accountant.ledger.charges import Charge
from accountant.ledger.tallies import tally_sql

COLUMNS = "id, analyst, dataset, {at}, sql_sha256, event, epsilon, delta, composition, scope"  # {at}: the store's


def charge_row(charge: Charge, at: object) -> tuple[object, ...]:
    """The values of `COLUMNS` for `charge`, its time given as the store keeps it."""
    event = json.dumps(to_json(charge.event), allow_nan=False, separators=(",", ":"))
    return (charge.id, charge.analyst, charge.dataset, at, charge.sql_sha256, event, charge.epsilon, charge.delta,
            charge.composition, scope_to_text(charge.scope))


def charge_of(row: tuple[Any, ...], at: datetime) -> Charge:
    """The charge of a row of `COLUMNS`, its time already decoded by the store (`at`)."""
    id_, analyst, dataset, _, sql_sha256, event, epsilon, delta, composition, scope = row
    return Charge(id=id_, analyst=analyst, dataset=dataset, at=at, sql_sha256=sql_sha256, event=event_of(event),
                  epsilon=epsilon, delta=delta, composition=composition, scope=scope_of(scope))


def entry_of(charge: Charge) -> Entry:
    """A charge as the filter and the reports see it."""
    return Entry(charge.event, charge.epsilon, charge.delta, charge.scope)


def where(
    analyst: str | None, dataset: str | None, since: datetime | None, until: datetime | None, *,
    mark: str, at_column: str, moment: Callable[[datetime], object],
) -> tuple[str, tuple[object, ...]]:
    """The WHERE clause (and its parameters) of the given filters; `mark` is the driver's placeholder and
    `moment` encodes a time as the store keeps it in `at_column`."""
    conditions = (
        (f"analyst = {mark}", analyst),
        (f"dataset = {mark}", dataset),
        (f"{at_column} >= {mark}", None if since is None else moment(since)),
        (f"{at_column} < {mark}", None if until is None else moment(until)),
    )
    used = [(sql, value) for sql, value in conditions if value is not None]
    return " AND ".join(sql for sql, _ in used) or "1 = 1", tuple(value for _, value in used)


def scope_to_text(scope: CellScope | None) -> str | None:
    return None if scope is None else json.dumps(scope.to_json(), separators=(",", ":"))


@lru_cache(maxsize=16384)  # at most 16384 × 12.5 kB (a bitmap of 100k cells); far less for usual spaces
def scope_of(text: str | None) -> CellScope | None:
    """A cell scope from its stored JSON text (cached: stored charges never change)."""
    return None if text is None else CellScope.from_json(json.loads(text))


def since_sql(clause: str, mark: str) -> str:
    """One statement, so one snapshot even under READ COMMITTED: how many charges the history `clause`
    selects holds (its tally, accountant/ledger/tallies.py: no count of the history), and those after a sequence
    number, identical ones read once with their count (a history repeats a few query shapes many times).
    `mark` is the driver's placeholder; parameters: the clause's, the clause's, the number."""
    return (
        f"WITH old AS ({tally_sql(clause)} AS n),"
        f" new AS (SELECT MAX(seq) AS last, event, epsilon, delta, scope, COUNT(*) AS k FROM charges"
        f" WHERE {clause} AND seq > {mark} GROUP BY event, epsilon, delta, scope)"
        " SELECT old.n, new.last, new.event, new.epsilon, new.delta, new.scope, new.k"
        " FROM old LEFT JOIN new ON TRUE ORDER BY new.last"
    )


def since_of(rows: list[tuple[int, int | None, str, float, float, str | None, int | None]], seq: int) -> Since:
    """The `Since` of `since_sql`'s rows: the charges at or below the number are the tally less those after."""
    after = [(Entry(event_of(text), epsilon, delta, scope_of(scope)), k)
             for _, _, text, epsilon, delta, scope, k in rows if k is not None]
    before = rows[0][0] - sum(k for _, k in after)
    return Since(before, after, max((last for _, last, *_ in rows if last is not None), default=seq))
