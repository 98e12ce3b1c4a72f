"""The bounds a query used, as its response reports them and the ledger keeps them for reuse (docs/privacy.md
§10, §10.8): `ChosenBound` per bound, `ChosenBounds` for the query, and their exact JSON form.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass

from proxy.query.auto.parts import Bound


@dataclass(frozen=True, slots=True)
class ChosenBound:
    """One bound a query used, as a response reports it (value None: not chosen yet, in a preview)."""

    bound: Bound
    column: str | None
    value: float | None
    limit: float
    epsilon: float  # its charged ε
    q: float


@dataclass(frozen=True, slots=True)
class ChosenBounds:
    """What a response reports: every bound chosen, and what choosing them cost."""

    parts: tuple[ChosenBound, ...]
    max_rows: int  # the bound used (rows per unit and group): chosen, or the table's fixed one
    max_groups: int  # the groups per unit used
    clamps: tuple[tuple[str, float, float], ...] = ()  # (column, lower, upper) chosen
    caps: tuple[tuple[str, int], ...] = ()  # (column, C in grid units) chosen: each unit's L1 cap (auto/total.py)
    note: str | None = None  # set when nothing was chosen: the query ran at the declared limits, and why
    reused: bool = False  # chosen by an earlier query of the same shape and kept (docs/privacy.md §10.8): free

    def value(self, bound: Bound, column: str | None = None) -> float | None:
        return next((p.value for p in self.parts if p.bound == bound and p.column == column), None)

    def report(self) -> dict[str, object]:
        """The response's `bounds` (proxy/schemas.py BoundsOut)."""
        rows = next((p for p in self.parts if p.bound == "max_rows"), None)
        return {"max_rows": None if rows is not None and rows.value is None else self.max_rows,
                "chosen": self.note is None, "note": self.note,
                "max_rows_limit": int(rows.limit) if rows else self.max_rows,
                "epsilon": 0.0 if self.reused else math.fsum(p.epsilon for p in self.parts),
                "quantile": self.parts[0].q if self.parts else 0.0,
                "parts": [{**dataclasses.asdict(p), "epsilon": 0.0} if self.reused else dataclasses.asdict(p)
                          for p in self.parts],
                "reused": self.reused}


def chosen_json(chosen: ChosenBounds) -> str:
    """The chosen bounds as the ledger keeps them for reuse (accountant/ledger/kept_bounds.py); exact: floats
    travel as JSON's shortest round-trip text, so `chosen_from_json` gives the same record back.

    Example:
        >>> c = ChosenBounds((ChosenBound("max_rows", None, 8.0, 1000, 0.05, 1.5),), 8, 1, caps=(("amount", 7),))
        >>> chosen_from_json(chosen_json(c)) == c
        True
        >>> chosen_from_json(chosen_json(c)).report()["reused"], dataclasses.replace(c, reused=True).report()["epsilon"]
        (False, 0.0)
    """
    return json.dumps(dataclasses.asdict(chosen), separators=(",", ":"), allow_nan=False)


def chosen_from_json(text: str) -> ChosenBounds:
    """The record `chosen_json` wrote."""
    raw = json.loads(text)
    return ChosenBounds(
        tuple(ChosenBound(**p) for p in raw["parts"]), int(raw["max_rows"]), int(raw["max_groups"]),
        tuple((str(n), float(lo), float(hi)) for n, lo, hi in raw["clamps"]),
        tuple((str(n), int(c)) for n, c in raw["caps"]), raw["note"], bool(raw["reused"]))
