"""The per-process notifier (store/connection/notify.py): one subscription per channel however many
requests wait on it, released with the last; a message wakes every watch of its channel and
no other; `wait_until` answers on the wake-up or when its time runs out."""

from __future__ import annotations

import asyncio
from typing import Any

import redis

from scheduler.store.connection.notify import Notifier, wait_until
from scheduler.store.keys import Keys


def numsub(rclient: redis.Redis, channel: str) -> int:
    reply: Any = rclient.pubsub_numsub(channel)
    return int(reply[0][1])


def test_watches_share_one_subscription_and_messages_fan_out(
    redis_url: str, rclient: redis.Redis, prefix: str
) -> None:
    a, b = Keys(prefix).node_channel("a"), Keys(prefix).node_channel("b")

    async def go() -> None:
        notifier = Notifier(redis_url)
        async with notifier.watch(a) as first, notifier.watch(a) as second:
            async with notifier.watch(b) as other:
                assert (numsub(rclient, a), numsub(rclient, b)) == (1, 1)
                assert len(rclient.execute_command("CLIENT", "LIST", "TYPE", "pubsub")) >= 1
                rclient.publish(a, "")
                await asyncio.wait_for(first.event.wait(), 5)
                await asyncio.wait_for(second.event.wait(), 5)
                assert not other.event.is_set()
            await asyncio.sleep(0.05)  # the UNSUBSCRIBE is sent without waiting
            assert numsub(rclient, b) == 0
            assert numsub(rclient, a) == 1
        await asyncio.sleep(0.05)
        assert numsub(rclient, a) == 0
        await notifier.aclose()

    asyncio.run(go())


def test_wait_until_answers_on_the_wake_up_or_when_time_runs_out(
    redis_url: str, rclient: redis.Redis, prefix: str
) -> None:
    channel = Keys(prefix).node_channel("n")
    state = {"value": 0}

    async def check() -> int:
        return state["value"]

    async def go() -> None:
        notifier = Notifier(redis_url)
        assert await wait_until(notifier, channel, check, bool, 0.2) == 0  # ran out
        waiting = asyncio.ensure_future(wait_until(notifier, channel, check, bool, 30))
        while numsub(rclient, channel) == 0:
            await asyncio.sleep(0.01)
        state["value"] = 7
        rclient.publish(channel, "")
        assert await asyncio.wait_for(waiting, 10) == 7
        await notifier.aclose()

    asyncio.run(go())


def test_close_waits_answers_everyone_and_later_waits_do_not_block(redis_url: str) -> None:
    async def check() -> int:
        return 0

    async def go() -> None:
        notifier = Notifier(redis_url)
        waiting = asyncio.ensure_future(wait_until(notifier, "close:x", check, bool, 30))
        await asyncio.sleep(0.1)
        notifier.close_waits()
        assert await asyncio.wait_for(waiting, 5) == 0
        assert await asyncio.wait_for(wait_until(notifier, "close:y", check, bool, 30), 5) == 0
        await notifier.aclose()

    asyncio.run(go())
