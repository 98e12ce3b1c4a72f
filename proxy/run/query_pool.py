"""The query pool: a few threads that run the query pipeline, apart from the pool serving every other route.

Query and preview requests wait here for one of `workers` threads; every other route (budget, ledger,
datasets, the dashboard) keeps Starlette's own thread pool, and /healthz and /readyz answer without either,
so queries can never hold up those. The pool is work-conserving and fair: a free worker never idles while a
query waits, so one analyst alone (a dashboard's eight tiles under one key) uses every worker; but an
analyst's share is `workers - 1` of them (at least one), and workers it runs on beyond that are lent: an
analyst who arrives below its share starts at once, on a spare thread beside them (at most workers − 1 spare
threads, FairSlots), and no lent worker is lent again until the pool is back at `workers`. Waiting requests
get a worker in turn by analyst (round robin, not first come, first served): one analyst's burst of heavy
queries waits for its own earlier queries, never in front of another analyst's.

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
    """`size` slots handed out round robin by owner, work-conserving and lent, not given: an owner may run on
    more than `per_owner` slots while a slot would otherwise idle (no owner below its share waits), and those
    extra slots are lent. An owner below its share starts at once whenever the slots held *within* shares
    (each owner's first `per_owner`) leave one free, so it never waits behind another owner's lent slots: it
    runs beside them on a spare thread, and a lent slot that ends is not lent again while the pool is over
    `size`. So at most `threads` = 2·size − per_owner run at once (a slot is lent only while fewer than `size`
    run, and the lender's own `per_owner` are among them), and the pool is back at `size` once the lent slots
    end. Waiters are served one owner after another, owners below their share first. Event-loop only.

    Example (two slots, a share of one): `demo` lets the owners in `arrivals` ask for a slot in that order,
    then frees one slot of each owner in `frees`, and prints who got a slot when (`|`: a slot freed). Alone, "a"
    runs on both slots and its third request waits for one; "b", arriving while "a" holds both (one lent),
    starts at once; when "a" frees one, its third waits, as "a" and "b" now fill the two slots:
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
        >>> asyncio.run(demo("aaab", "aba"))
        'a a b | | a |'
    """

    def __init__(self, size: int, per_owner: int) -> None:
        if not 1 <= per_owner <= size:
            raise ValueError(f"need 1 <= per_owner <= size, got {per_owner}, {size}")
        self.size = size
        self.per_owner = per_owner
        self.threads = 2 * size - per_owner  # the most that run at once (the class docstring)
        self._held: dict[str, int] = {}
        self._running = 0
        self._lent = 0  # Σ over owners of the slots they hold beyond per_owner
        self._waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    @property
    def free(self) -> int:
        """Slots not running (of `size`; 0 while lent slots make the pool run over it)."""
        return max(0, self.size - self._running)

    async def acquire(self, owner: str) -> None:
        if self._may_start(owner):  # then nobody waits who would go first (`_hand_on` leaves no such waiter)
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
        self._running -= 1
        if held >= self.per_owner:
            self._lent -= 1
        self._hand_on()

    def _may_start(self, owner: str) -> bool:
        if self._held.get(owner, 0) < self.per_owner:  # within its share: lent slots do not count against it
            return self._running - self._lent < self.size
        return self._running < self.size  # beyond it: only a slot that would otherwise idle

    def _grant(self, owner: str) -> None:
        held = self._held.get(owner, 0)
        self._held[owner] = held + 1
        self._running += 1
        if held >= self.per_owner:
            self._lent += 1

    def _hand_on(self) -> None:
        """Start waiters while they may, one owner after another: first owners below their share, and only when
        none of them may start, owners at or above it, in the same turn order."""
        while self._waiting:
            below = (o for o in self._waiting if self._held.get(o, 0) < self.per_owner and self._may_start(o))
            owner = next(below, None) or next((o for o in self._waiting if self._may_start(o)), None)
            if owner is None:
                return
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
        self._slots = FairSlots(workers, per_owner=max(1, workers - 1))
        # `workers` run at once, and up to workers − 1 more while lent slots end (FairSlots)
        self._pool = ThreadPoolExecutor(max_workers=self._slots.threads, thread_name_prefix="dpproxy-query")

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
