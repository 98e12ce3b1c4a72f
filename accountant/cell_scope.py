"""The cells a charge may touch: a `CellScope` is a bitmap over one table's cell space (the product of its
unit-level columns with finite domains, proxy/query/analyse/cell_space.py), stored with the charge as JSON.
accountant/cells.py accounts per cell with it; accountant/filter.py carries it on each `Entry`.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

MAX_SIZE = 1_000_000  # cells in one space: far above what proxy/query/analyse/cell_space.py builds (100k)


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
