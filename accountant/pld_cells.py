"""The PLD report of a cell-scoped history: the worst-off unit's charges, not all of them (docs/privacy.md §7).

A unit lies in one cell of every cell space, and only the charges that may touch that cell can move its
output: the charges scoped to the cell plus every charge not scoped to that space (cells.py). So a unit's
history is, in each space, the history of its cell, and its privacy loss is at most that history's PLD
(ε, δ): dropping charges is post-processing, so a larger history's loss bounds a smaller one's. The report
is therefore min over spaces of max over that space's cells of the cell's PLD figure (`report.pld_report`),
and never more than the whole history's. Cells with the same set of covering charges share one history,
so only distinct sets are composed, and a set inside another is skipped (the larger one bounds it).
Like `report.pld_report`, a report of the fixed history, never an admit rule (docs/privacy.md §5).

Example:
    >>> from accountant.cell_scope import CellScope
    >>> from accountant.events import GaussianEvent
    >>> north = CellScope.of("visits", "f00d", 4, [0])
    >>> south = CellScope.of("visits", "f00d", 4, [1])
    >>> one = Entry(GaussianEvent(1, 20.0), 0.25, 1e-8)
    >>> drill = [Entry(one.event, 0.25, 1e-8, north)] * 10 + [Entry(one.event, 0.25, 1e-8, south)] * 10
    >>> cells = pld_report_cells(drill, 1e-6)
    >>> whole = pld_report(drill, 1e-6)
    >>> cells.epsilon < whole.epsilon, cells.epsilon == pld_report(drill[:10], 1e-6).epsilon
    (True, True)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from accountant.filter import Entry
from accountant.report import HistoryReport, pld_report

MAX_MATRIX = 1 << 26  # scoped charges × cells of one space beyond which the space is not refined
MAX_HISTORIES = 64  # distinct maximal cell histories per space beyond which the space is not refined


def _space(entry: Entry) -> tuple[str, str] | None:
    """The space a charge is scoped to; None for every unit, as for an empty scope (cells.Running does so)."""
    return entry.scope.key if entry.scope is not None and entry.scope.count else None


def _maximal(signatures: np.ndarray) -> list[np.ndarray]:
    """The rows of a 0/1 matrix (one per distinct cell history) that lie in no other row."""
    rows = [row for row in signatures]
    rows.sort(key=lambda row: -int(row.sum()))
    kept: list[np.ndarray] = []
    for row in rows:
        if not any(np.all(row <= other) for other in kept):
            kept.append(row)
    return kept


def _cell_histories(history: Sequence[Entry], key: tuple[str, str]) -> list[list[Entry]] | None:
    """The maximal cell histories of one space, or None when it is too large to refine."""
    scoped = [entry for entry in history if _space(entry) == key]
    others = [entry for entry in history if _space(entry) != key]
    sizes = {entry.scope.size for entry in scoped if entry.scope is not None}
    if len(sizes) != 1 or len(scoped) * max(sizes) > MAX_MATRIX:
        return None  # charges that disagree on the space's size (the ledger refuses them) or too many
    covers = np.stack([entry.scope.mask() for entry in scoped if entry.scope is not None])  # charges × cells
    signatures = np.unique(covers.T, axis=0)  # one row per distinct set of covering charges
    maximal = _maximal(signatures)
    if len(maximal) > MAX_HISTORIES:
        return None
    return [others + [scoped[i] for i in np.flatnonzero(row)] for row in maximal]


def pld_report_cells(history: Sequence[Entry], delta: float) -> HistoryReport | None:
    """`report.pld_report` of the worst-off unit's history: min over cell spaces of the max over its cells,
    and at most the whole history's figure. None as `pld_report` (empty history, an event without a
    dominating pair, or selection δ using up `delta`) when no history gives a figure."""
    whole = pld_report(history, delta)
    best = whole
    for key in sorted({key for entry in history if (key := _space(entry)) is not None}):
        histories = _cell_histories(history, key)
        if histories is None:
            continue
        reports = [pld_report(cell, delta) if cell else None for cell in histories]
        if any(found is None and cell for found, cell in zip(reports, histories, strict=True)):
            continue  # a cell without a figure: this space bounds nothing here
        found = [r for r in reports if r is not None]
        if not found:
            continue
        worst = max(found, key=lambda r: r.epsilon)
        if best is None or worst.epsilon < best.epsilon:
            best = worst
    return best
