"""The query pool's slots (proxy/run/query_pool.py, FairSlots): work-conserving, round robin by owner.

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


def test_an_owner_arriving_under_load_gets_the_next_freed_slot() -> None:
    # "a" holds both slots; b0 arrives after a2 but is below its share, so the freed slot is b's
    assert grants(2, 1, ["a0", "a1", "a2", "b0"], ["a", "a"]) == ["a0", "a1", "|", "b0", "|", "a2"]


def test_an_owner_below_its_share_goes_first_even_if_it_asked_later() -> None:
    # a and b hold one slot each (their share); a1 waits, then b1. b frees its slot: b is below its share and
    # a is not, so b1 goes before a1, which asked first; then a frees and a1 runs
    assert grants(2, 1, ["a0", "b0", "a1", "b1"], ["b", "a", "b"]) == ["a0", "b0", "|", "b1", "|", "a1", "|"]


def test_turns_alternate_round_robin_between_waiting_owners() -> None:
    arrivals = ["a0", "a1", "a2", "a3", "b0", "b1", "c0"]
    assert grants(2, 1, arrivals, ["a", "a", "b", "c", "a", "b"]) == [
        "a0", "a1", "|", "b0", "|", "a2", "|", "c0", "|", "b1", "|", "a3", "|"]  # b, a, c, b, a: in turn


def test_idle_slots_go_to_owners_above_their_share_in_turn() -> None:
    # three slots, share 1: a and b each take one; the third is free and goes to a1 (work-conserving), then
    # with both a and b above their share the next freed slot follows the waiting line: b1 then a2
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
