"""Padded answer times (policy `answer_time = "padded"`): a dataset's answers leave at a fixed time.

The engine's and the exponential-mechanism sampler's running times depend on the data, and the analyst sees
the response time (Haeberlen, Pierce and Narayan, "Differential Privacy Under Fire", USENIX Security 2011).
On a padded dataset every answer after admission is released exactly `window` seconds after its admission
(a repeat: after finding its stored answer, where admission would be): the engine, the auto-bound selection,
the release and the rendering run within the window, and the response waits for its end. Work not delivered
by then is the charged `timeout` (504), released at the window's end too; the engine query is interrupted
at that time (proxy/run/deadline.py gives it what remains) and a release still running is abandoned: its thread
finishes, its answer is refused by the deadline and goes nowhere. Refusals before admission (parse, policy,
budget) read no data and stay immediate.

Two threads share one `PacedDeadline`: the query thread pads it (`pace`, after planning, before admission)
and starts its clock at admission, which fixes the release time; the request handler awaits `released()`,
which holds the work's outcome until that time on the event loop, so a padded answer holds no query thread
while it waits. It does hold the analyst's query slot (proxy/run/query_pool.py) until it leaves: freed when the work
ended, the slot would start the analyst's next query at that moment, and time the work.

Example:
    >>> import asyncio, concurrent.futures
    >>> async def demo():
    ...     pool = concurrent.futures.ThreadPoolExecutor(1)
    ...     deadline = PacedDeadline(30.0, asyncio.get_running_loop())
    ...     def work(d):
    ...         d.pad(0.05)  # a padded dataset: 50 ms from admission
    ...         d.start()  # admission
    ...         d.deliver()  # the answer, ready at once
    ...         return "answer"
    ...     answer = await deadline.released(pool.submit(work, deadline), free=lambda: None)
    ...     pool.shutdown()
    ...     return answer, deadline.released_at >= deadline.release_at
    >>> asyncio.run(demo())
    ('answer', True)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from typing import TypeVar

from proxy.engines.base import ExecutionTimeout
from proxy.policy.dataset import AnswerTime
from proxy.run.deadline import Deadline

T = TypeVar("T")


def window_s(answer_time: AnswerTime, padded_ms: int | None, limit_s: float) -> float | None:
    """Seconds from admission to release on a dataset, or None when its answers leave when ready.

    Example:
        >>> window_s("padded", 250, 30.0), window_s("padded", None, 30.0), window_s("immediate", None, 30.0)
        (0.25, 30.0, None)
    """
    if answer_time != "padded":
        return None
    return limit_s if padded_ms is None else padded_ms / 1000


def pace(answer_time: AnswerTime, padded_ms: int | None, deadline: Deadline, repeat: bool) -> None:
    """After planning, before admission: on a padded dataset the window becomes the post-admit time limit,
    and a repeat, which is never admitted, starts the clock now."""
    window = window_s(answer_time, padded_ms, deadline.seconds)
    if window is None:
        return
    if isinstance(deadline, PacedDeadline):
        deadline.pad(window)
    else:  # called outside the query pool (benchmarks): the limit still applies; nothing waits
        deadline.seconds = window
    if repeat:
        deadline.start()


class PacedDeadline(Deadline):
    """A Deadline whose outcome the handler receives through `released()`: at once, unless the work padded
    it, then at `release_at` (the end of the started clock). Created on the event loop, per request."""

    def __init__(self, seconds: float, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(seconds)
        self._loop = loop
        self._padded = False
        self.release_at: float | None = None  # time.monotonic() of the release, once the clock started
        self.released_at: float | None = None  # when the outcome was handed to the handler (tests read it)
        self._work: concurrent.futures.Future[object] | None = None
        self._out: asyncio.Future[object] | None = None
        self._free: Callable[[], None] | None = None

    def pad(self, window: float) -> None:
        """Hold every outcome after the clock starts until its end, `window` seconds after the start."""
        self.seconds = window
        self._padded = True

    def start(self) -> None:
        super().start()
        if self._padded:
            assert self._at is not None
            self.release_at = self._at  # the deadline's own end: a delivered answer is always on time
            self._loop.call_soon_threadsafe(self._wait_for_window)

    def released(self, work: concurrent.futures.Future[T], free: Callable[[], None]) -> asyncio.Future[T]:
        """The outcome of `work` (submitted with this deadline), at its release time; `free()` runs once the
        work ended and its outcome left, so that when the work's slot frees says no more than the answer's
        time does. Call on the loop, right after submitting: the callbacks it schedules run after it."""
        out: asyncio.Future[T] = self._loop.create_future()
        self._work, self._out, self._free = work, out, free  # type: ignore[assignment]
        work.add_done_callback(lambda _: self._loop.call_soon_threadsafe(self._settle))
        return out

    def _wait_for_window(self) -> None:
        """On the loop: wake at the release time (again, should the loop's clock run ahead of monotonic)."""
        assert self.release_at is not None
        left = self.release_at - time.monotonic()
        if left > 0:
            self._loop.call_later(left, self._wait_for_window)
            return
        work, out = self._work, self._out
        if work is None or out is None:
            return
        if work.done():
            self._finish()
        elif self.expire() and not out.done():  # not delivered in time: a charged timeout, now
            self.released_at = time.monotonic()
            out.set_exception(ExecutionTimeout())
        # else delivered in time and still storing its answer; either way `_settle` finishes when the work ends

    def _settle(self) -> None:
        """On the loop, once the work ended: finish, unless the window still runs (`_wait_for_window` will)."""
        if self.release_at is None or time.monotonic() >= self.release_at:
            self._finish()

    def _finish(self) -> None:
        """The work ended and the window is over: hand its outcome over (unless a timeout or a cancelled
        request came first) and free its slot. Idempotent."""
        work, out, free = self._work, self._out, self._free
        assert work is not None and out is not None
        if not out.done():
            self.released_at = time.monotonic()
            error = work.exception()
            if error is not None:
                out.set_exception(error)
            else:
                out.set_result(work.result())
        if free is not None:
            self._free = None
            free()
