"""The records of one query's bound selection, fixed before admission (docs/privacy.md §10): which bounds it
chooses (`AutoPart`, each its own exponential mechanism at its share of the selection's ε) and the whole
selection (`AutoBounds`). auto/bounds.py decides them; auto_release.py draws them.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from accountant.events import ExponentialEvent

Bound = Literal["max_rows", "max_groups", "lower", "upper", "total"]


@dataclass(frozen=True, slots=True)
class AutoPart:
    """One bound chosen from the data: its own exponential mechanism, at its share of the selection's ε."""

    bound: Bound
    column: str | None  # the clamped column (lower, upper)
    limit: float  # the declared limit of this bound (for a clamp: the limit's end on this side)
    q: float  # the quantile drawn (the lower bound draws 1 − q)
    sensitivity: int  # the histogram's L1 sensitivity: L0 cells, 1 unit, or m values per unit
    selection: ExponentialEvent  # its pure ε = sensitivity / scale
    relative: bool = False  # max_rows of a quantile-only query: q is a share ρ of the cells (targets.rows_share)

    @property
    def epsilon(self) -> Fraction:
        """The ε it runs with: exactly Δ/b, at most what its event is charged."""
        return Fraction(self.selection.sensitivity) / Fraction(self.selection.scale)


@dataclass(frozen=True, slots=True)
class AutoBounds:
    """The bound selection of one query: everything fixed before admission (the bounds are not)."""

    parts: tuple[AutoPart, ...]
    note: str | None = None  # no parts: why the query runs at the declared limits instead (limits_reason)

    def part(self, bound: Bound, column: str | None = None) -> AutoPart | None:
        return next((p for p in self.parts if p.bound == bound and p.column == column), None)

    @property
    def epsilon(self) -> Fraction:
        return sum((p.epsilon for p in self.parts), Fraction(0))

    @property
    def limit(self) -> int:
        """The max_rows limit (0 when max_rows is not chosen)."""
        rows = self.part("max_rows")
        return int(rows.limit) if rows else 0
