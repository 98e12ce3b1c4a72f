"""Answers a bounding store keeps for the queries that are functions of the store alone (the automatic bounds'
selection histograms, proxy/query/auto_release.py): the same histogram under the same WHERE is read once per store, not
once per query. Nothing released is kept: each query still draws its own bounds from the histogram with its
own charged ε; a rebuilt store has another file name, so nothing outlives the data it was read from.

Example:
    >>> memory = Remembered(size=2)
    >>> calls = []
    >>> [memory.get(("store-1", q), lambda: calls.append(q) or len(q)) for q in ("a", "bb", "a", "ccc", "bb")]
    [1, 2, 1, 3, 2]
    >>> calls  # "bb" was the least recently used when "ccc" came
    ['a', 'bb', 'ccc', 'bb']
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

DEFAULT_SIZE = 256  # histograms of at most a few hundred rows each: well under a megabyte


class Remembered(Generic[V]):
    """A thread-safe least-recently-used map from a key to the value `compute` returned for it."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value remembered for `key`, else `compute()` (run outside the lock: two queries may both compute a
        missing value; both results are the same function of the store)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = compute()
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self._size:
                self._values.popitem(last=False)
        return value
