"""The engine a bounding store answers from, swapped atomically when the store is rebuilt (proxy/store/duckdb_store.py,
proxy/store/spark_store.py): each query leases the current engine for its whole run, so it reads one store
from start to end; an engine retired by a swap is discarded once its last lease ends.

Example:
    >>> gone = []
    >>> swap = Swap(gone.append)
    >>> swap.swap("a")
    ()
    >>> with swap.lease() as engine:
    ...     kept = swap.swap("b")  # "a" is still read by this query
    ...     engine, kept, gone
    ('a', ('a',), [])
    >>> gone, swap.current
    (['a'], 'b')
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

E = TypeVar("E")


class Closed(Exception):
    """No engine to lease: the store is closed (or not built yet)."""


class Swap(Generic[E]):
    """The current engine, the retired ones still leased, and how many queries lease each."""

    def __init__(self, discard: Callable[[E], None]) -> None:
        self._discard = discard  # called outside the lock, once per retired engine, after its last lease
        self._state = threading.Lock()  # guards _current, _retired and _leases
        self._leases: dict[int, int] = {}  # id(engine) -> queries running on it
        self._retired: list[E] = []
        self._current: E | None = None

    @property
    def current(self) -> E | None:
        return self._current

    def swap(self, engine: E) -> tuple[E, ...]:
        """Make `engine` current; discard the retired engines no query leases. Returns those still leased (their
        files must stay until their queries end)."""
        with self._state:
            old, self._current = self._current, engine
            if old is not None:
                self._retired.append(old)
            idle = [e for e in self._retired if not self._leases.get(id(e))]
            self._retired = [e for e in self._retired if self._leases.get(id(e))]
            leased = tuple(self._retired)
        for e in idle:
            self._discard(e)
        return leased

    @contextlib.contextmanager
    def lease(self) -> Iterator[E]:
        """The current engine, for one query: a swap meanwhile does not discard it until the query ends.

        Raises:
            Closed: no current engine.
        """
        with self._state:
            engine = self._current
            if engine is None:
                raise Closed()
            self._leases[id(engine)] = self._leases.get(id(engine), 0) + 1
        try:
            yield engine
        finally:
            with self._state:
                self._leases[id(engine)] -= 1
                done = engine in self._retired and not self._leases[id(engine)]
                if not self._leases[id(engine)]:
                    del self._leases[id(engine)]
                if done:
                    self._retired.remove(engine)
            if done:
                self._discard(engine)

    def close(self) -> tuple[E, ...]:
        """Forget every engine (current first, then the retired ones) and return them for the caller to close."""
        with self._state:
            engines = (*([self._current] if self._current is not None else []), *self._retired)
            self._retired, self._current = [], None
        return engines
