"""Per-cell accounting: parallel composition across queries (docs/privacy.md §7).

A charge may carry a `CellScope`: the cells of one table's cell space (the product of its unit-level
columns with finite domains, proxy/query/scope.py) that the query could touch. Every privacy unit lies in
exactly one cell of each table's space, so a unit pays only for the charges whose scope holds its cell.

For one (table, space) the usage of a cell is the sum, under the rule's additive currency, of every charge
that covers it: the charges scoped to that cell, plus every charge that is not scoped to this space
(unscoped, on another table, or on a space the policy has since changed) — those cover every cell. The
loss of any unit is at most the usage of its cell in *every* space, so

    worst unit's usage <= min over spaces of (max over cells of the space's usage)

and a charge scoped to cells S of one space fits if, for every cell in S, that cell's usage plus the
charge stays within the capacity (and the same for the other spaces' maxima, which also bound the units
in S). `bound` computes those maxima exactly: the sums are integers over a common power-of-two
denominator (every cost is a float or a float's square, so a dyadic rational), added per cell by a float64
matrix product whose every partial sum is an integer below 2**53, hence exact in any order.
"""

from __future__ import annotations

import base64
import binascii
import math
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np

from accountant.filter import Entry, Rule, Usage, cost

MAX_SIZE = 1_000_000  # cells in one space: far above what proxy/query/scope.py builds (100k)
_LIMB = 20  # bits per limb: a 0/1 matrix times 20-bit limbs sums exactly in float64 for < 2**33 scopes
_GRID = 256  # costs finer than 2**-256 are rounded up to it (conservative; keeps the limbs few)
_CHUNK_ELEMENTS = 1 << 22  # bounds the dense 0/1 block of one matrix product to 32 MB


@dataclass(frozen=True, slots=True)
class CellScope:
    """The cells of `table`'s cell space (fingerprint `space`, `size` cells) a charge may touch.

    `cells` is a bitmap of `size` bits (numpy packbits order, zero padding); cell i is bit i.

    Example:
        >>> s = CellScope.of("visits", "f00d", 10, [0, 3, 9])
        >>> s.indices().tolist(), s.count
        ([0, 3, 9], 3)
        >>> CellScope.from_json(s.to_json()) == s
        True
    """

    table: str
    space: str
    size: int
    cells: bytes

    def __post_init__(self) -> None:
        if not isinstance(self.size, int) or isinstance(self.size, bool) or not 0 < self.size <= MAX_SIZE:
            raise ValueError(f"a cell space has 1..{MAX_SIZE} cells, got {self.size!r}")
        if not self.table or not self.space:
            raise ValueError("a cell scope names its table and space")
        if len(self.cells) != (self.size + 7) // 8:
            raise ValueError(f"a bitmap of {self.size} cells has {(self.size + 7) // 8} bytes, got {len(self.cells)}")
        if self.size % 8 and self.cells[-1] & (0xFF >> (self.size % 8)):
            raise ValueError("the bitmap's padding bits must be zero")

    @classmethod
    def of(cls, table: str, space: str, size: int, indices: Iterable[int]) -> CellScope:
        mask = np.zeros(size, dtype=bool)
        picked = np.fromiter(indices, dtype=np.int64)
        if picked.size and (picked.min() < 0 or picked.max() >= size):
            raise ValueError(f"cell indices must be in 0..{size - 1}")
        mask[picked] = True
        return cls(table, space, size, np.packbits(mask).tobytes())

    def __hash__(self) -> int:
        # the bitmap's hash is cached by bytes itself: scopes key the per-cell sums of every admit
        return hash(self.cells)

    @property
    def key(self) -> tuple[str, str]:
        return self.table, self.space

    @property
    def count(self) -> int:
        return int(np.unpackbits(np.frombuffer(self.cells, dtype=np.uint8)).sum())

    def mask(self) -> np.ndarray:
        return _mask(self.cells, self.size)

    def indices(self) -> np.ndarray:
        return np.flatnonzero(self.mask())

    def to_json(self) -> dict[str, Any]:
        packed = base64.b64encode(zlib.compress(self.cells, 9)).decode("ascii")
        return {"table": self.table, "space": self.space, "size": self.size, "cells": packed}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CellScope:
        try:
            cells = zlib.decompress(base64.b64decode(data["cells"], validate=True))
        except (binascii.Error, zlib.error, TypeError) as err:
            raise ValueError(f"a cell scope's bitmap does not decode: {err}") from err
        return cls(str(data["table"]), str(data["space"]), int(data["size"]), cells)


@lru_cache(maxsize=1024)
def _mask(cells: bytes, size: int) -> np.ndarray:
    mask = np.unpackbits(np.frombuffer(cells, dtype=np.uint8), count=size).astype(bool)
    mask.setflags(write=False)
    return mask


# --- exact per-cell sums ------------------------------------------------------------------------------


def _numerators(scaled: Sequence[int]) -> tuple[list[int], int]:
    """For sums given times 2**_SCALE: integers n_i and a shift g with sum_i <= n_i / 2**g, the smallest g
    that keeps them exact (or _GRID, rounding up what is finer than 2**-_GRID)."""
    nonzero = [v for v in scaled if v]
    zeros = min(((v & -v).bit_length() - 1 for v in nonzero), default=_SCALE)  # common factors of two
    shift = max(0, _SCALE - zeros)
    if shift <= _GRID:
        return [v >> (_SCALE - shift) for v in scaled], shift
    drop = _SCALE - _GRID
    return [-((-v) >> drop) for v in scaled], _GRID


def _cell_sums(scopes: Sequence[CellScope], totals: Sequence[int], size: int) -> np.ndarray:
    """Per cell, Σ totals[j] over the scopes j holding it: a (size, limbs) int64 array of 20-bit limbs,
    carried (every limb but the last below 2**20), so rows compare lexicographically from the last limb."""
    limbs = max(1, math.ceil(max(t.bit_length() for t in totals) / _LIMB))
    if not any(totals):  # e.g. δ of pure-ε charges: nothing to add
        return np.zeros((size, 1), dtype=np.int64)
    parts = np.array([[(t >> (_LIMB * k)) & ((1 << _LIMB) - 1) for k in range(limbs)] for t in totals],
                     dtype=np.float64)
    acc = np.zeros((size, limbs), dtype=np.float64)
    step = max(1, _CHUNK_ELEMENTS // size)
    for start in range(0, len(scopes), step):
        packed = np.frombuffer(b"".join(s.cells for s in scopes[start : start + step]), dtype=np.uint8)
        block = np.unpackbits(packed.reshape(-1, (size + 7) // 8), axis=1, count=size).astype(np.float64)
        acc += block.T @ parts[start : start + step]  # integers < 2**53 at every step: exact
    out = acc.astype(np.int64)
    for k in range(limbs - 1):
        out[:, k + 1] += out[:, k] >> _LIMB
        out[:, k] &= (1 << _LIMB) - 1
    return out


def _value(row: np.ndarray) -> int:
    return sum(int(limb) << (_LIMB * k) for k, limb in enumerate(row))


def _largest(sums: np.ndarray, rows: np.ndarray) -> int:
    """The largest of the given rows' values, exactly (lexicographic over carried limbs)."""
    candidates = rows
    for k in range(sums.shape[1] - 1, -1, -1):
        column = sums[candidates, k]
        candidates = candidates[column == column.max()]
    return _value(sums[candidates[0]])


@dataclass(frozen=True, slots=True)
class SpaceUsage:
    """The usage of every cell of one space: `base` (charges covering every cell) plus, per cell, the
    charges scoped to it. Amounts are the rule's additive currency (ε, ρ or μ²) and δ (or δ_sel)."""

    key: tuple[str, str]
    size: int
    base: tuple[Fraction, Fraction]
    amount: np.ndarray  # (size, limbs) carried limbs of the scoped sums, over 2**amount_shift
    amount_shift: int
    delta: np.ndarray
    delta_shift: int

    def peak(self, within: np.ndarray | None = None) -> tuple[Fraction, Fraction]:
        """The largest usage of a cell (of the cells where `within` is True), per component."""
        rows = np.arange(self.size) if within is None else np.flatnonzero(within)
        if rows.size == 0:
            return Fraction(0), Fraction(0)
        amount = Fraction(_largest(self.amount, rows), 1 << self.amount_shift)
        delta = Fraction(_largest(self.delta, rows), 1 << self.delta_shift)
        return self.base[0] + amount, self.base[1] + delta

    def cell(self, index: int) -> tuple[Fraction, Fraction]:
        """The exact usage of one cell."""
        amount = Fraction(_value(self.amount[index]), 1 << self.amount_shift)
        delta = Fraction(_value(self.delta[index]), 1 << self.delta_shift)
        return self.base[0] + amount, self.base[1] + delta

    def heaviest(self, limit: int) -> list[int]:
        """Up to `limit` cells, the most used first (by amount, then δ; ties by index)."""
        # lexsort's last key is the primary one: amount's top limb first, δ's lowest limb last
        keys = [*(self.delta[:, k] for k in range(self.delta.shape[1])),
                *(self.amount[:, k] for k in range(self.amount.shape[1]))]
        order = np.lexsort(keys)
        return [int(i) for i in order[::-1][:limit]]


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


def tally(counted: Iterable[tuple[Entry, int]], rule: Rule) -> Ledgered:
    """`ledgered` of a history given as (entry, how many times it was charged): what the ledger reads."""
    # Identical (scope, cost) pairs are summed once: a history repeats a few scopes and costs many times,
    # and exact sums then cost one big-integer step per distinct pair rather than per charge.
    counts: Counter[tuple[CellScope | None, float, float]] = Counter()
    for entry, count in counted:
        value, extra = cost(entry, rule)
        counts[entry.scope, value, extra] += count
    squared = rule == "gdp"  # GDP adds μ²
    groups: dict[CellScope | None, list[int]] = {}
    for (scope, value, extra), count in counts.items():
        sums = groups.setdefault(scope, [0, 0])
        sums[0] += count * _scaled(value, squared)
        sums[1] += count * _scaled(extra, False)
    total = (sum(g[0] for g in groups.values()), sum(g[1] for g in groups.values()))
    spaces = []
    for key in dict.fromkeys(s.key for s in groups if s is not None):
        scoped = {s: g for s, g in groups.items() if s is not None and s.key == key}
        sizes = {s.size for s in scoped}
        if len(sizes) != 1:
            raise ValueError(f"charges on the cell space {key} disagree on its size")
        size = sizes.pop()
        amounts, amount_shift = _numerators([g[0] for g in scoped.values()])
        deltas, delta_shift = _numerators([g[1] for g in scoped.values()])
        inside = (sum(g[0] for g in scoped.values()), sum(g[1] for g in scoped.values()))
        spaces.append(SpaceUsage(
            key=key, size=size, base=(_exact(total[0] - inside[0]), _exact(total[1] - inside[1])),
            amount=_cell_sums(list(scoped), amounts, size), amount_shift=amount_shift,
            delta=_cell_sums(list(scoped), deltas, size), delta_shift=delta_shift,
        ))
    return Ledgered(rule, (_exact(total[0]), _exact(total[1])), tuple(spaces))


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


def bound(entries: Iterable[Entry], rule: Rule, within: CellScope | None = None) -> Usage:
    """`ledgered(entries, rule).bound(within)`: what the admit rule checks a charge scoped `within` against.

    With no scoped charge this is `filter.usage(entries, rule)`, the sequential sum."""
    return ledgered(entries, rule).bound(within)
