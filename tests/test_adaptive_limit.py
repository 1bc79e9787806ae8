"""The cold tier's in-flight limit hands freed slots to its waiters in arrival order."""

from __future__ import annotations

import asyncio

from tierload.stores.cold.retry import AdaptiveLimit, Failure


def test_a_freed_slot_goes_to_the_longest_waiter_not_to_a_newcomer():
    async def scenario() -> list[str]:
        limit, order = AdaptiveLimit(1), []
        token = await limit.acquire()

        async def take(name: str) -> None:
            got = await limit.acquire()
            order.append(name)
            await asyncio.sleep(0)
            limit.release(got, None)

        waiter = asyncio.ensure_future(take("waiter"))
        await asyncio.sleep(0)  # the waiter queues
        newcomer = asyncio.ensure_future(take("newcomer"))  # its first step runs before the waiter's wake-up
        limit.release(token, None)
        await asyncio.gather(waiter, newcomer)
        assert limit.in_flight == 0
        return order

    assert asyncio.run(scenario()) == ["waiter", "newcomer"]


def test_a_waiter_cancelled_after_its_slot_was_handed_over_passes_it_on():
    async def scenario() -> None:
        limit = AdaptiveLimit(1)
        token = await limit.acquire()
        first = asyncio.ensure_future(limit.acquire())
        second = asyncio.ensure_future(limit.acquire())
        await asyncio.sleep(0)
        limit.release(token, None)  # hands the slot to `first`...
        first.cancel()              # ...which is cancelled before it runs
        assert await asyncio.wait_for(second, 5) == 0
        assert first.cancelled() and limit.in_flight == 1

    asyncio.run(scenario())


def test_many_waiters_never_exceed_the_limit_and_are_served_in_arrival_order():
    async def scenario() -> None:
        limit, busy, most, served = AdaptiveLimit(16), [0], [0], []

        async def one(index: int) -> None:
            token = await limit.acquire()
            served.append(index)
            busy[0] += 1
            most[0] = max(most[0], busy[0])
            await asyncio.sleep(0)
            busy[0] -= 1
            limit.release(token, Failure.THROTTLED if index == 100 else None)

        await asyncio.gather(*(one(index) for index in range(5000)))
        assert served == sorted(served)
        assert most[0] == 16 and limit.in_flight == 0

    asyncio.run(scenario())


def test_a_retry_waits_at_the_front_of_the_queue():
    """A request sent again goes before the first requests queued ahead of it (its pack is not held back)."""
    async def scenario() -> list[str]:
        limit, order = AdaptiveLimit(1), []
        token = await limit.acquire()

        async def take(name: str, retry: bool) -> None:
            got = await limit.acquire(retry)
            order.append(name)
            await asyncio.sleep(0)
            limit.release(got, None)

        first = [asyncio.ensure_future(take(f"first-{index}", False)) for index in range(3)]
        await asyncio.sleep(0)
        again = asyncio.ensure_future(take("retry", True))
        await asyncio.sleep(0)
        limit.release(token, None)
        await asyncio.gather(*first, again)
        return order

    assert asyncio.run(scenario()) == ["retry", "first-0", "first-1", "first-2"]
