"""Answers a bounding store keeps for the queries that are functions of the store alone: the automatic bounds'
selection histograms (proxy/query/auto_release.py), read once per store and WHERE, not once per query, and the
exact (un-noised) rows of a query's SQL at its bounds (proxy/pipeline.py `answer`), read once per store and
SQL text. Nothing released is kept: each query still draws its own bounds and its own noise with its own
charged ε; a rebuilt store has another file name, so nothing outlives the data it was read from.

Example:
    >>> memory = Remembered(size=2)
    >>> calls = []
    >>> [memory.get(("store-1", q), lambda: calls.append(q) or len(q)) for q in ("a", "bb", "a", "ccc", "bb")]
    [1, 2, 1, 3, 2]
    >>> calls  # "bb" was the least recently used when "ccc" came
    ['a', 'bb', 'ccc', 'bb']
    >>> big = lambda: calls.append("big") or 99  # a value `keep` refuses is computed each time, never kept
    >>> memory.get(("store-1", "big"), big, keep=lambda v: v < 10), memory.get(("store-1", "big"), big), calls[-2:]
    (99, 99, ['big', 'big'])
    >>> never = Remembered(size=0)  # DPPROXY_ANSWER_MEMORY=0: every value is computed, none kept
    >>> [never.get("a", lambda: calls.append("a") or 1) for _ in range(2)], calls[-2:]
    ([1, 1], ['a', 'a'])
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

DEFAULT_SIZE = 256  # histograms of at most a few hundred rows each: well under a megabyte
ANSWERS = 64  # the exact rows of the last 64 SQL texts at their bounds (DPPROXY_ANSWER_MEMORY; 0: none) ...
ANSWER_ROWS = 1024  # ... each of at most 1024 rows (a larger result is not kept): at most 65 536 rows in all


class Remembered(Generic[V]):
    """A thread-safe least-recently-used map from a key to the value `compute` returned for it."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self._size = size
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V], keep: Callable[[V], bool] | None = None) -> V:
        """The value remembered for `key`, else `compute()` (run outside the lock: two queries may both compute a
        missing value; both results are the same function of the store), remembered unless `keep` says not."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                return self._values[key]
        value = compute()
        if self._size == 0 or (keep is not None and not keep(value)):
            return value
        with self._lock:
            self._values[key] = value
            self._values.move_to_end(key)
            while len(self._values) > self._size:
                self._values.popitem(last=False)
        return value
