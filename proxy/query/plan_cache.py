"""Memos of the planner's pure steps (issue #32): a bounded, thread-safe least-recently-used map, and keys that
tell apart every input a step's result depends on.

The planner (proxy/query/planner.py) is a pure function of its arguments, so the same arguments may get the same
result back instead of a new one: the parsed statement of a text, and the salt-free part of a plan. What comes
back is shared between requests, so it must never be changed by whoever uses it: the plan's records are frozen,
and no later step mutates a sqlglot tree it is given (every rule copies before it rewrites;
tests/query/test_plan_cache.py checks the whole corpus). Nothing here is random or reads data.

Example:
    >>> memo = Memo(2)
    >>> memo.put("a", 1); memo.put("b", 2); memo.get("a"); memo.put("c", 3)
    1
    >>> memo.get("b") is None, memo.get("a"), memo.get("c")
    (True, 1, 3)
    >>> exact(1) == exact(1.0), exact(0.0) == exact(-0.0), exact(None)
    (False, False, 'None')
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

MAX_TEXT = 16_384  # longer texts are planned every time: a memo of a few hundred of them stays a few MB


class Memo(Generic[V]):
    """At most `size` entries; the least recently used goes first. A lock guards each call (threads share it)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def exact(value: object) -> str:
    """A parameter as a key: its repr, so that values Python calls equal but a plan prints differently (1 and 1.0,
    0.0 and -0.0, True and 1) are different keys. A plan's repeat identity is the repr of its records, so a hit must
    return exactly what planning these very arguments returns."""
    return repr(value)
