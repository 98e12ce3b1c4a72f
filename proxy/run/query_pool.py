"""The query pool: a few threads that run the query pipeline, apart from the pool serving every other route.

Query and preview requests wait here for one of `workers` threads; every other route (budget, ledger,
datasets, the dashboard) keeps Starlette's own thread pool, and /healthz and /readyz answer without either,
so queries can never hold up those. The pool is work-conserving and fair: a free thread never idles while a
query waits, so one analyst alone (a dashboard's eight tiles under one key) uses every thread; waiting
requests get a thread in turn by analyst (round robin, not first come, first served), and an analyst running
on `workers - 1` threads or more (at least one) gets another only when no other analyst waits. So when another
analyst arrives, the next thread to free is theirs: one analyst's burst of heavy queries waits for its own
earlier queries, never in front of another analyst's, which wait at most for one running query to end.

A query's post-admit time limit (proxy/run/deadline.py) is kept here too: when it passes, the request ends as a
`timeout` at once; the thread finishes its query (the engine is interrupted; release cannot be) and only
then takes the next one, so the pool stays bounded.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from proxy.engines.base import ExecutionTimeout
from proxy.run.deadline import Deadline
from proxy.run.padding import PacedDeadline

T = TypeVar("T")


class FairSlots:
    """`size` slots handed out round robin by owner, work-conserving: a free slot goes to a waiter at once. An
    owner holding `per_owner` slots or more gets the next only when no owner below its share waits, so under
    contention each owner is served in turn, and one that arrives takes the next slot to free. Event-loop only
    (no locks).

    Example (two slots, a share of one): `demo` lets the owners in `arrivals` ask for a slot in that order,
    then frees one slot of each owner in `frees`, and prints who got a slot when (`|`: a slot freed). Alone, "a"
    holds both slots and its third request waits for one; "b", arriving while "a" holds both, gets the next slot
    to free, before a's third; then turns alternate:
        >>> async def demo(arrivals, frees):
        ...     slots, order = FairSlots(2, per_owner=1), []
        ...     async def take(owner):
        ...         await slots.acquire(owner); order.append(owner)
        ...     tasks = [asyncio.create_task(take(owner)) for owner in arrivals]
        ...     await asyncio.sleep(0)
        ...     for owner in frees:
        ...         order.append("|"); slots.release(owner); await asyncio.sleep(0)
        ...     return " ".join(order)
        >>> asyncio.run(demo("aaa", "a"))
        'a a | a'
        >>> asyncio.run(demo("aaabb", "aab"))
        'a a | b | a | b'
    """

    def __init__(self, size: int, per_owner: int) -> None:
        self.free = size
        self.per_owner = per_owner
        self._held: dict[str, int] = {}
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    async def acquire(self, owner: str) -> None:
        if self.free > 0:  # a free slot means nobody waits (`_hand_on` leaves none free while anyone does)
            self._grant(owner)
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(owner, deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted just as the waiter was cancelled
                self.release(owner)
            else:
                self._forget(owner, waiter)
            raise

    def release(self, owner: str) -> None:
        held = self._held[owner] - 1
        if held:
            self._held[owner] = held
        else:
            del self._held[owner]
        self.free += 1
        self._hand_on()

    def _grant(self, owner: str) -> None:
        self.free -= 1
        self._held[owner] = self._held.get(owner, 0) + 1

    def _hand_on(self) -> None:
        """Give free slots to waiters, one owner after another: first to owners below their share, and only when
        none waits to those at or above it (work-conserving), in the same turn order."""
        while self.free > 0 and self._waiting:
            owner = next((o for o in self._waiting if self._held.get(o, 0) < self.per_owner), None)
            if owner is None:
                owner = next(iter(self._waiting))
            queue = self._waiting.pop(owner)
            waiter = queue.popleft()
            if queue:
                self._waiting[owner] = queue  # back of the line
            if not waiter.done():
                self._grant(owner)
                waiter.set_result(None)

    def _forget(self, owner: str, waiter: asyncio.Future[None]) -> None:
        queue = self._waiting.get(owner)
        if queue is not None and waiter in queue:
            queue.remove(waiter)
            if not queue:
                del self._waiting[owner]


def _consumed(future: asyncio.Future[object]) -> None:
    if not future.cancelled():
        future.exception()


class QueryRunner:
    """Runs pipeline work for analysts on `workers` dedicated threads (see the module docstring)."""

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dpproxy-query")
        self._slots = FairSlots(workers, per_owner=max(1, workers - 1))

    async def run(self, analyst: str, work: Callable[[Deadline], T], timeout_s: float) -> T:
        """`work(deadline)` on a query thread; raises ExecutionTimeout once the deadline, started by the work
        at admission, passes before the work delivered its answer."""
        loop = asyncio.get_running_loop()
        deadline = PacedDeadline(timeout_s, loop)  # a padded dataset's outcome waits for its release time
        await self._slots.acquire(analyst)
        try:
            submitted = self._pool.submit(contextvars.copy_context().run, work, deadline)
        except BaseException:
            self._slots.release(analyst)
            raise
        # the slot is free once the work ended and, on a padded dataset, its answer left (proxy/run/padding.py)
        result = deadline.released(submitted, lambda: self._slots.release(analyst))
        # Wait `remaining()` at a time, so admission needs no wake-up of this loop: before the clock starts
        # that is the whole limit, and the deadline is at least that far off, so a wait never overshoots it.
        while not result.done():
            await asyncio.wait((result,), timeout=deadline.remaining())
            if result.done() or not deadline.started or deadline.remaining() > 0:
                continue
            if deadline.expire():
                result.add_done_callback(_consumed)  # the worker's own timeout, when it ends, goes nowhere
                raise ExecutionTimeout()
            break  # delivered in time: its answer is being stored; wait for it
        return await result

    def close(self) -> None:
        """Wait for the running work and stop the threads (after the server stopped taking requests)."""
        self._pool.shutdown(wait=True, cancel_futures=True)
