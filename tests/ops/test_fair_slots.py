"""The query pool's slots (proxy/run/query_pool.py, FairSlots): work-conserving, round robin by owner, and
the slots an owner runs on beyond its share are lent: another owner below its share starts beside them.

Each test lets owners ask for slots in a fixed order, frees slots one at a time, and reads the exact order in
which requests were granted: no clock, no sleeps (every step runs the event loop until it is idle).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from proxy.run.query_pool import FairSlots


async def _settle() -> None:
    for _ in range(3):  # a grant wakes its task on the next loop iteration: a few are enough here
        await asyncio.sleep(0)


async def _grants(size: int, per_owner: int, arrivals: Sequence[str], frees: Sequence[str]) -> list[str]:
    """Requests `arrivals` (owner + index, in order), then one freed slot per owner in `frees`; the grant order,
    with "|" where a slot was freed."""
    slots, order = FairSlots(size, per_owner=per_owner), []

    async def take(request: str) -> None:
        await slots.acquire(request[0])
        order.append(request)

    tasks = [asyncio.create_task(take(request)) for request in arrivals]
    await _settle()
    for owner in frees:
        order.append("|")
        slots.release(owner)
        await _settle()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return order


def grants(size: int, per_owner: int, arrivals: Sequence[str], frees: Sequence[str] = ()) -> list[str]:
    return asyncio.run(_grants(size, per_owner, arrivals, frees))


def test_one_owner_alone_uses_every_slot() -> None:
    # the old rule held "a" to per_owner = size − 1 = 1 of the 2 slots while the other idled
    assert grants(2, 1, ["a0", "a1", "a2"]) == ["a0", "a1"]
    assert grants(4, 3, ["a0", "a1", "a2", "a3", "a4"], ["a"]) == ["a0", "a1", "a2", "a3", "|", "a4"]


def test_an_owner_arriving_under_load_starts_at_once_beside_the_lent_slot() -> None:
    # "a" runs on both slots (one lent); b0 arrives after a2 and, below its share, starts at once (3 running).
    # When a frees one, the pool is back at 2 (a1, b0): a2, beyond a's share, waits for a slot that would idle
    assert grants(2, 1, ["a0", "a1", "a2", "b0"], ["a", "a"]) == ["a0", "a1", "b0", "|", "|", "a2"]


def test_at_most_two_size_minus_share_run_and_a_lent_slot_is_not_lent_again() -> None:
    slots = FairSlots(2, per_owner=1)
    assert slots.threads == 3
    # a0, a1 (lent), b0 beside them: 3 run; c0 waits (the slots within shares, a0 and b0, fill the 2). a frees
    # one: 2 run, nothing starts; b frees: c0 starts within its share
    assert grants(2, 1, ["a0", "a1", "a2", "b0", "c0"], ["a", "b"]) == ["a0", "a1", "b0", "|", "|", "c0"]
    # three slots, share 2: a2 is lent, b0 starts beside it (4 = 2·3 − 2 run), b1 waits: a0, a1, b0 fill the 3
    assert grants(3, 2, ["a0", "a1", "a2", "b0", "b1", "c0"]) == ["a0", "a1", "a2", "b0"]


def test_an_owner_below_its_share_goes_first_even_if_it_asked_later() -> None:
    # a and b hold one slot each (their share); a1 waits, then b1. b frees its slot: b is below its share and
    # a is not, so b1 goes before a1, which asked first; then a frees and a1 runs
    assert grants(2, 1, ["a0", "b0", "a1", "b1"], ["b", "a", "b"]) == ["a0", "b0", "|", "b1", "|", "a1", "|"]


def test_turns_alternate_round_robin_between_waiting_owners() -> None:
    # a0, a1 (lent), b0 beside them; b1, c0 and c1 wait with a2. Each freed slot goes to the next owner in the
    # line who may start, owners below their share first: b, a, c, and then c's second (lent: nobody else waits)
    arrivals = ["a0", "a1", "a2", "b0", "b1", "c0", "c1"]
    assert grants(2, 1, arrivals, ["a", "b", "a", "b", "a"]) == [
        "a0", "a1", "b0", "|", "|", "b1", "|", "a2", "|", "c0", "|", "c1"]


def test_idle_slots_go_to_owners_above_their_share_in_turn() -> None:
    # three slots, share 1: a and b each take one; the third would idle and goes to a1 (lent), then with
    # both a and b at their share the next freed slot follows the waiting line: b1 then a2
    assert grants(3, 1, ["a0", "b0", "a1", "b1", "a2"], ["a", "b"]) == ["a0", "b0", "a1", "|", "b1", "|", "a2"]


def test_a_cancelled_waiter_takes_no_slot() -> None:
    async def run() -> tuple[list[str], int]:
        slots, order = FairSlots(1, per_owner=1), []

        async def take(request: str) -> None:
            await slots.acquire(request[0])
            order.append(request)

        tasks = {r: asyncio.create_task(take(r)) for r in ("a0", "b0", "c0")}
        await _settle()
        tasks["b0"].cancel()
        await _settle()
        slots.release("a")
        await _settle()
        return order, slots.free

    assert asyncio.run(run()) == (["a0", "c0"], 0)  # b0 left the line: the slot is c0's, none is lost


def test_a_waiter_cancelled_as_it_is_granted_gives_the_slot_back() -> None:
    async def run() -> tuple[list[str], int]:
        slots, order = FairSlots(1, per_owner=1), []

        async def take(request: str) -> None:
            await slots.acquire(request[0])
            order.append(request)

        first, second = asyncio.create_task(take("a0")), asyncio.create_task(take("b0"))
        await _settle()
        slots.release("a")  # grants b0 (its future is done) ...
        second.cancel()  # ... and b0 is cancelled before it runs: acquire hands the slot back
        await asyncio.gather(first, second, return_exceptions=True)
        return order, slots.free

    assert asyncio.run(run()) == (["a0"], 1)
