"""Stopping a query's engine work from another thread: a client's cancel frees the query thread at once.

A query's time limit interrupts its engine call from the watchdog (proxy/engines/duckdb_engine.py); a cancel
(the PostgreSQL front-end's CancelRequest, proxy/wire/answers.py) ends the request at once but, without this,
left the engine running until that limit, holding a query thread. `Interrupts` is the bridge: the code that
runs a query's work enters `watching(interrupts)` on the query thread, each engine call made there registers
how to interrupt itself (`running`), and `stop()` from any thread interrupts every call in flight and refuses
every later one. The engine then raises its `ExecutionTimeout`, as its time limit would: nothing is released,
and a charge already committed stays (there are no refunds).

A context variable carries it, so the engine's interface (`run(sql, timeout_s)`) and everything between the
route and the engine (the pipeline, the bounding store) stay as they are; the query pool runs each work in a
copy of its caller's context (proxy/run/query_pool.py), so one query's `Interrupts` never reaches another's.

Example:
    >>> stops = Interrupts()
    >>> with watching(stops):
    ...     with running(lambda: print("interrupted")):
    ...         stops.stop()
    interrupted
    >>> with watching(stops), running(lambda: None):
    ...     pass
    Traceback (most recent call last):
    ...
    proxy.engines.base.ExecutionTimeout: query exceeded the time limit
    >>> with running(lambda: None):  # outside `watching`: nothing to register with, nothing refused
    ...     "ran"
    'ran'
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator

from proxy.engines.base import ExecutionTimeout


class Interrupts:
    """The engine calls in flight for one query, and whether it was stopped. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False
        self._running: dict[int, Callable[[], None]] = {}
        self._next = 0

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        """Interrupt every engine call in flight, and refuse later ones. The actions run outside the lock:
        an interrupt (DuckDB's `cursor.interrupt()`) is quick and must not wait for a call that is ending."""
        with self._lock:
            self._stopped = True
            actions = list(self._running.values())
        for action in actions:
            action()

    def _enter(self, interrupt: Callable[[], None]) -> int:
        with self._lock:
            if self._stopped:  # stopped before this call began: it never starts
                raise ExecutionTimeout()
            self._next += 1
            self._running[self._next] = interrupt
            return self._next

    def _leave(self, token: int) -> None:
        with self._lock:
            self._running.pop(token, None)


_CURRENT: contextvars.ContextVar[Interrupts | None] = contextvars.ContextVar("dpproxy_interrupts", default=None)


@contextlib.contextmanager
def watching(interrupts: Interrupts) -> Iterator[None]:
    """On the query thread: engine calls made inside register with `interrupts`."""
    token = _CURRENT.set(interrupts)
    try:
        yield
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def running(interrupt: Callable[[], None]) -> Iterator[None]:
    """Around one engine call: `interrupt` is how another thread stops it (it must be quick and must not
    raise). Raises ExecutionTimeout at once when the query was stopped already."""
    interrupts = _CURRENT.get()
    if interrupts is None:
        yield
        return
    token = interrupts._enter(interrupt)
    try:
        yield
    finally:
        interrupts._leave(token)
