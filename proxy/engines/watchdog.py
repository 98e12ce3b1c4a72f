"""One daemon thread that fires query time limits, instead of starting (and cancelling) a thread per query.

A `threading.Timer` per query cost about a fifth of a small query's engine time (thread start and join),
measured with py-spy on the throughput benchmark. Alarms are kept in a heap; cancelling one only marks it,
and the thread drops it when it comes up. Actions run on the watchdog thread, so they must be quick and
must not raise (DuckDB's `cursor.interrupt()` is both).

Example:
    >>> import threading
    >>> fired = threading.Event()
    >>> alarm = WATCHDOG.after(0.01, fired.set)
    >>> fired.wait(5)
    True
    >>> cancelled, later = WATCHDOG.after(0.01, fired.clear), threading.Event()
    >>> cancelled.cancel()
    >>> _ = WATCHDOG.after(0.05, later.set)
    >>> later.wait(5), fired.is_set()  # the cancelled alarm was due first and never ran
    (True, True)
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Alarm:
    """A pending action; `cancel()` before it fires and it never runs."""

    __slots__ = ("action",)

    def __init__(self, action: Callable[[], None]) -> None:
        self.action: Callable[[], None] | None = action

    @property
    def cancelled(self) -> bool:
        return self.action is None

    def cancel(self) -> None:
        # One attribute store (atomic under the GIL). Dropping the action at once frees what it holds (a
        # query's cursor) now, not when a cancelled alarm's time comes up in the heap.
        self.action = None


class Watchdog:
    """Runs each alarm's action once its time has come, on one lazily started daemon thread."""

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._heap: list[tuple[float, int, Alarm]] = []
        self._order = itertools.count()  # ties in time never compare two Alarms
        self._thread: threading.Thread | None = None

    def after(self, seconds: float, action: Callable[[], None]) -> Alarm:
        alarm = Alarm(action)
        with self._wake:
            heapq.heappush(self._heap, (time.monotonic() + seconds, next(self._order), alarm))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="query-watchdog", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is alarm:  # the new alarm is the earliest: the thread sleeps too long
                self._wake.notify()
        return alarm

    def _loop(self) -> None:
        while True:
            action = self._next()
            try:
                action()
            except Exception:  # never let one action stop every later time limit
                log.exception("time-limit action failed")
            del action  # hold nothing of a finished query while waiting (a cursor kept alive leaks at exit)

    def _next(self) -> Callable[[], None]:
        """Wait for the earliest alarm that is still armed, take it off the heap, and return its action."""
        with self._wake:
            while True:
                while self._heap and self._heap[0][2].cancelled:
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._wake.wait()
                    continue
                delay = self._heap[0][0] - time.monotonic()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
                action = heapq.heappop(self._heap)[2].action
                if action is not None:  # cancelled between the check above and now: look again
                    return action


WATCHDOG = Watchdog()
