"""The time limit of one query's post-admit work (execute, release, render), shared by two threads.

The clock starts at admission. The worker that runs the pipeline checks it between stages and claims the
answer with `deliver()` before it is stored or sent; the request handler, which stops waiting when the time
is up, calls `expire()`. Exactly one of them wins, under a lock: an answer that was not delivered by the
deadline is never released (not sent, not stored for repeats), and its charge stays (a `timeout`, 504).
"""

from __future__ import annotations

import threading
import time
from typing import Literal

from proxy.engines.base import ExecutionTimeout


class Deadline:
    """`seconds` of post-admit time, from `start()`.

    Example:
        >>> d = Deadline(60.0)
        >>> d.start(); d.check(); d.deliver(); d.expire()  # delivered in time: expire() loses
        False
        >>> late = Deadline(60.0)
        >>> late.start(); late.expire()
        True
        >>> late.deliver()
        Traceback (most recent call last):
        ...
        proxy.engines.base.ExecutionTimeout: query exceeded the time limit
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._at: float | None = None
        self._state: Literal["running", "delivered", "expired"] = "running"

    def start(self) -> None:
        """Start the clock (at admission)."""
        with self._lock:
            self._at = time.monotonic() + self.seconds

    @property
    def started(self) -> bool:
        return self._at is not None

    def remaining(self) -> float:
        """Seconds left (the whole limit before the start, 0 once past)."""
        at = self._at
        return self.seconds if at is None else max(0.0, at - time.monotonic())

    def check(self) -> None:
        """Raise ExecutionTimeout when the time is up or the handler gave up waiting."""
        with self._lock:
            self._refuse_if_late()

    def deliver(self) -> None:
        """Claim the answer for release, or raise ExecutionTimeout if it is too late."""
        with self._lock:
            self._refuse_if_late()
            self._state = "delivered"

    def expire(self) -> bool:
        """End the query as timed out; False when its answer was already delivered."""
        with self._lock:
            if self._state == "delivered":
                return False
            self._state = "expired"
            return True

    def _refuse_if_late(self) -> None:
        if self._state == "expired" or (self._at is not None and time.monotonic() >= self._at):
            self._state = "expired"
            raise ExecutionTimeout()
