"""Per-cell accounting: parallel composition across queries (docs/privacy.md §7).

A charge may carry a `CellScope`: the cells of one table's cell space (the product of its unit-level
columns with finite domains, proxy/query/analyse/cell_space.py) that the query could touch. Every privacy unit lies in
exactly one cell of each table's space, so a unit pays only for the charges whose scope holds its cell.

For one (table, space) the usage of a cell is the sum, under the rule's additive currency, of every charge
that covers it: the charges scoped to that cell, plus every charge that is not scoped to this space
(unscoped, on another table, or on a space the policy has since changed) — those cover every cell. The
loss of any unit is at most the usage of its cell in *every* space, so

    worst unit's usage <= min over spaces of (max over cells of the space's usage)

and a charge scoped to cells S of one space fits if, for every cell in S, that cell's usage plus the
charge stays within the capacity (and the same for the other spaces' maxima, which also bound the units
in S). `Ledgered.bound` computes those maxima exactly. Every cost is a float or a float's square, so a
dyadic rational, and every sum is an integer over a power of two. Per cell, sums are Python integers in
units of 2**-256 (exact unless a cost is finer than that, and then rounded up). Many scopes at once are
added by one float64 matrix product of 20-bit limbs, whose every partial sum is an integer below 2**53,
so it is exact in any order. `Running` keeps the sums of a history that grows, so that the ledger adds
only what is new at each admit.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from accountant.cell_scope import CellScope
from accountant.filter import Entry, Rule, Usage, cost

_LIMB = 20  # bits per limb: a 0/1 matrix times 20-bit limbs sums exactly in float64 for < 2**33 scopes
_GRID = 256  # costs finer than 2**-256 are rounded up to it (conservative; keeps the limbs few)
_CHUNK_ELEMENTS = 1 << 22  # bounds the dense 0/1 block of one matrix product to 32 MB


_SCALE = 2200  # 2**-2200 divides every float (2**-1074) and every float's square: sums stay integers


def _scaled(value: float, squared: bool) -> int:
    """value (or value²) times 2**_SCALE, exactly."""
    numerator, denominator = value.as_integer_ratio()
    exponent = denominator.bit_length() - 1  # a float's denominator is a power of two
    if squared:
        numerator, exponent = numerator * numerator, 2 * exponent
    return numerator << (_SCALE - exponent)


def _exact(scaled: int) -> Fraction:
    return Fraction(scaled, 1 << _SCALE)


def _unscaled(exact: Fraction) -> int:
    """The inverse of `_exact`."""
    scaled = exact * (1 << _SCALE)
    assert scaled.denominator == 1, "a per-cell sum is always a multiple of 2**-_SCALE"
    return scaled.numerator


def _units(scaled: int) -> int:
    """A sum in grid units of 2**-_GRID, rounded up (exact for anything coarser than the grid)."""
    return -((-scaled) >> (_SCALE - _GRID))


def _cell_sums(scopes: Sequence[CellScope], totals: Sequence[int], size: int) -> np.ndarray:
    """Per cell, Σ totals[j] over the scopes j holding it, as an object array of Python ints.

    The sum runs as 20-bit limbs through a float64 product of the 0/1 scope matrix: every partial sum is
    an integer below 2**53, so it is exact in any order, and BLAS does the work."""
    if not any(totals):  # e.g. δ of pure-ε charges: nothing to add
        return np.zeros(size, dtype=object)
    limbs = max(1, math.ceil(max(t.bit_length() for t in totals) / _LIMB))
    parts = np.array([[(t >> (_LIMB * k)) & ((1 << _LIMB) - 1) for k in range(limbs)] for t in totals],
                     dtype=np.float64)
    acc = np.zeros((size, limbs), dtype=np.float64)
    step = max(1, _CHUNK_ELEMENTS // size)
    for start in range(0, len(scopes), step):
        packed = np.frombuffer(b"".join(s.cells for s in scopes[start : start + step]), dtype=np.uint8)
        block = np.unpackbits(packed.reshape(-1, (size + 7) // 8), axis=1, count=size).astype(np.float64)
        acc += block.T @ parts[start : start + step]
    out = acc.astype(np.int64).astype(object)
    return sum((out[:, k] << (_LIMB * k) for k in range(1, limbs)), out[:, 0])  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class SpaceUsage:
    """The usage of every cell of one space: `base` (charges covering every cell) plus, per cell, the
    charges scoped to it. Amounts are the rule's additive currency (ε, ρ or μ²) and δ (or δ_sel); the
    per-cell arrays hold Python ints in units of 2**-_GRID and are never written after construction."""

    key: tuple[str, str]
    size: int
    base: tuple[Fraction, Fraction]
    amount: np.ndarray
    delta: np.ndarray

    def peak(self, within: np.ndarray | None = None) -> tuple[Fraction, Fraction]:
        """The largest usage of a cell (of the cells where `within` is True), per component.

        An empty `within` is read as every cell: a charge is never priced at less than the space's peak
        because its scope was (wrongly) empty.
        """
        if within is not None and not within.any():
            within = None
        amount, delta = (self.amount, self.delta) if within is None else (self.amount[within], self.delta[within])
        return self.base[0] + Fraction(amount.max(), 1 << _GRID), self.base[1] + Fraction(delta.max(), 1 << _GRID)

    def cell(self, index: int) -> tuple[Fraction, Fraction]:
        """The exact usage of one cell."""
        return (self.base[0] + Fraction(self.amount[index], 1 << _GRID),
                self.base[1] + Fraction(self.delta[index], 1 << _GRID))

    def heaviest(self, limit: int) -> list[int]:
        """Up to `limit` cells, the most used first (by amount, then δ; ties by index).

        Only the cells some charge touched are sorted (usages are never negative, so every untouched cell
        comes after them, in index order): the work is the touched cells', not the whole space's.

        Example:
            >>> u = SpaceUsage(("t", "f"), 5, (Fraction(0), Fraction(0)), np.array([0, 3, 0, 3, 1], dtype=object),
            ...                np.array([0, 0, 2, 1, 0], dtype=object))
            >>> u.heaviest(4), u.heaviest(10)
            ([3, 1, 4, 2], [3, 1, 4, 2, 0])
        """
        touched = np.flatnonzero((self.amount != 0) | (self.delta != 0)).tolist()
        heaviest = sorted(touched, key=lambda i: (-self.amount[i], -self.delta[i], i))[:limit]
        if len(heaviest) < limit:
            chosen = set(heaviest)
            heaviest += [i for i in range(min(self.size, limit + len(heaviest))) if i not in chosen][
                : limit - len(heaviest)]
        return heaviest


@dataclass(frozen=True, slots=True)
class Ledgered:
    """A history split for per-cell accounting: the sequential total and the usage of every space some
    charge is scoped to."""

    rule: Rule
    total: tuple[Fraction, Fraction]
    spaces: tuple[SpaceUsage, ...]

    def space(self, key: tuple[str, str]) -> SpaceUsage | None:
        return next((s for s in self.spaces if s.key == key), None)

    def bound(self, within: CellScope | None = None) -> Usage:
        """The usage of the worst unit a charge scoped `within` (None: every unit) can touch, bounded
        above: min over spaces of the space's peak, the peak of `within`'s space taken over its cells."""
        amount, delta = self.total
        for space in self.spaces:
            mask = within.mask() if within is not None and within.key == space.key else None
            if mask is not None and mask.size != space.size:
                raise ValueError(f"the cell space {space.key} has {space.size} cells, a charge says {mask.size}")
            peak = space.peak(mask)
            amount, delta = min(amount, peak[0]), min(delta, peak[1])
        return Usage(self.rule, amount, delta)


class Running:
    """The per-cell sums of a history that only grows: `add` the charges that are new, read `ledgered()`.

    Sums are additive, so adding a history in parts gives what adding it at once gives (the ledger's
    memo relies on it). Not thread-safe: its owner serialises access.
    """

    def __init__(self, rule: Rule) -> None:
        self.rule = rule
        self._total = [0, 0]  # times 2**_SCALE
        self._spaces: dict[tuple[str, str], _Space] = {}

    @classmethod
    def resume(cls, history: Ledgered) -> Running:
        """A Running that holds `history`'s sums, to add more to (its arrays are shared: `add` never writes
        them in place). Exact: every sum is a multiple of 2**-_SCALE.

        Example:
            >>> from accountant.events import LaplaceEvent
            >>> q = Entry(LaplaceEvent(1, 2.0), 0.5, 0.0, CellScope.of("t", "s1", 3, [0]))
            >>> resumed = Running.resume(ledgered([q], "basic"))
            >>> resumed.add([(q, 1)])
            >>> once, twice = resumed.ledgered(), ledgered([q, q], "basic")
            >>> once.total == twice.total and once.bound(q.scope) == twice.bound(q.scope)
            True
        """
        running = cls(history.rule)
        running._total = [_unscaled(part) for part in history.total]
        for usage in history.spaces:
            space = _Space(usage.size)
            space.inside = [_unscaled(history.total[i] - usage.base[i]) for i in range(2)]
            space.amount, space.delta = usage.amount, usage.delta
            running._spaces[usage.key] = space
        return running

    @property
    def cells(self) -> int:
        """How many per-cell sums this holds (what its memory grows with)."""
        return sum(space.size for space in self._spaces.values())

    def add(self, counted: Iterable[tuple[Entry, int]]) -> None:
        """Add charges given as (entry, how many identical ones).

        Raises:
            UnsupportedEvent: as `filter.cost`, for an event the rule cannot account for (nothing added).
            ValueError: charges on one cell space disagree on its size (nothing added).
        """
        # Identical (scope, cost) pairs are summed once: a history repeats a few scopes and costs many times,
        # and exact sums then cost one big-integer step per distinct pair rather than per charge.
        counts: Counter[tuple[CellScope | None, float, float]] = Counter()
        for entry, count in counted:
            value, extra = cost(entry, self.rule)
            counts[entry.scope, value, extra] += count
        squared = self.rule == "gdp"  # GDP adds μ²
        groups: dict[CellScope | None, list[int]] = {}
        for (scope, value, extra), count in counts.items():
            # a charge with an empty scope (never planned now; a ledger may hold one) covers every cell
            sums = groups.setdefault(scope if scope is None or scope.count else None, [0, 0])
            sums[0] += count * _scaled(value, squared)
            sums[1] += count * _scaled(extra, False)
        by_space: dict[tuple[str, str], dict[CellScope, list[int]]] = {}
        sizes = {key: space.size for key, space in self._spaces.items()}
        for scope, sums in groups.items():
            if scope is not None:
                if sizes.setdefault(scope.key, scope.size) != scope.size:
                    raise ValueError(f"charges on the cell space {scope.key} disagree on its size")
                by_space.setdefault(scope.key, {})[scope] = sums
        for i in range(2):
            self._total[i] += sum(g[i] for g in groups.values())
        for key, scoped in by_space.items():
            size = next(iter(scoped)).size
            space = self._spaces.setdefault(key, _Space(size))
            space.add(scoped)

    def ledgered(self) -> Ledgered:
        total = self._total
        return Ledgered(self.rule, (_exact(total[0]), _exact(total[1])), tuple(
            SpaceUsage(key=key, size=space.size,
                       base=(_exact(total[0] - space.inside[0]), _exact(total[1] - space.inside[1])),
                       amount=space.amount, delta=space.delta)
            for key, space in self._spaces.items()
        ))


class _Space:
    """Per-cell sums of one space (grid units), and the total of the charges scoped to it (2**-_SCALE)."""

    _FEW = 8  # up to this many new scopes, add them one by one; more go through one matrix product

    def __init__(self, size: int) -> None:
        self.size = size
        self.inside = [0, 0]
        self.amount = np.zeros(size, dtype=object)
        self.delta = np.zeros(size, dtype=object)

    def add(self, scoped: dict[CellScope, list[int]]) -> None:
        self.inside = [self.inside[i] + sum(g[i] for g in scoped.values()) for i in range(2)]
        # new arrays, never in place: a SpaceUsage handed out earlier keeps the values it was built with
        if len(scoped) <= self._FEW:
            amount, delta = self.amount.copy(), self.delta.copy()
            for scope, (a, d) in scoped.items():
                mask = scope.mask()
                amount[mask] += _units(a)
                if d:
                    delta[mask] += _units(d)
            self.amount, self.delta = amount, delta
            return
        scopes = list(scoped)
        self.amount = self.amount + _cell_sums(scopes, [_units(g[0]) for g in scoped.values()], self.size)
        self.delta = self.delta + _cell_sums(scopes, [_units(g[1]) for g in scoped.values()], self.size)


def ledgered(entries: Iterable[Entry], rule: Rule) -> Ledgered:
    """Split a history by scope and sum it exactly, per cell of every space a charge is scoped to.

    Raises:
        UnsupportedEvent: as `filter.cost`, for an event the rule cannot account for.

    Example:
        >>> from accountant.events import LaplaceEvent
        >>> north, south = (CellScope.of("t", "s1", 3, [i]) for i in (0, 1))
        >>> q = lambda scope: Entry(LaplaceEvent(1, 2.0), 0.5, 0.0, scope)
        >>> history = ledgered([q(north), q(south), q(None)], "basic")
        >>> float(history.total[0]), float(history.bound().amount), float(history.bound(north).amount)
        (1.5, 1.0, 1.0)
    """
    return tally(Counter(entries).items(), rule)


def plus(history: Ledgered, entry: Entry) -> Ledgered:
    """`history` with one more charge, from its sums alone (a preview's "after": no history read again).

    Raises:
        UnsupportedEvent: as `filter.cost`, for an event the rule cannot account for.
    """
    running = Running.resume(history)
    running.add([(entry, 1)])
    return running.ledgered()


def tally(counted: Iterable[tuple[Entry, int]], rule: Rule) -> Ledgered:
    """`ledgered` of a history given as (entry, how many times it was charged)."""
    running = Running(rule)
    running.add(counted)
    return running.ledgered()


def bound(entries: Iterable[Entry], rule: Rule, within: CellScope | None = None) -> Usage:
    """`ledgered(entries, rule).bound(within)`: what the admit rule checks a charge scoped `within` against.

    With no scoped charge this is `filter.usage(entries, rule)`, the sequential sum."""
    return ledgered(entries, rule).bound(within)
