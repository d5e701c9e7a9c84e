"""Server-Sent Events for the followers of a job's output (GET /jobs/{id}/logs?follow=1) and of
the job events (GET /events): the framing, and the loop that reads from Redis and waits.

Why SSE and not chunked text: each event carries its position (`id:`), so a client that lost
its connection resumes where it was (`Last-Event-ID`, which browsers' EventSource send by
themselves when they reconnect), the end of a job is an event of its own beside the output,
and proxies know the type and do not buffer it. `curl -N` shows it readably too.

A follower holds no Redis connection: it watches channels in memory (connection/notify.py)
and, when woken, reads after its position with one script or command. It reads only once
what it read before was written to the client (the ASGI send waits while the client's
socket is full), so a slow client holds at most one read's bytes in the API, whatever it
misses: output trimmed from the log meanwhile is reported as a `dropped` event.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from scheduler.store.connection.notify import Notifier, Watch

# A comment this often keeps idle connections open through proxies, and finds clients gone.
KEEPALIVE_SECS = 15.0
# What a client that lost the connection waits before it reconnects (EventSource's `retry`).
RETRY_MS = 2000
START = f"retry: {RETRY_MS}\n\n".encode()
KEEPALIVE = b": keepalive\n\n"
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


def sse(event: str, data: bytes, position: str = "") -> bytes:
    """One event; `data` is one line of JSON (msgspec escapes every newline)."""
    head = f"id: {position}\nevent: {event}\n" if position else f"event: {event}\n"
    return head.encode() + b"data: " + data + b"\n\n"


@dataclass(frozen=True, slots=True)
class Read:
    """What one read found: its events (SSE bytes), whether the stream is over (the job
    ended) and whether more is there already (a read's budget left some)."""

    events: list[bytes]
    over: bool = False
    more: bool = False


async def _idle(watch: Watch, deadline: float) -> AsyncIterator[bytes]:
    """Until `watch` wakes or `deadline` (loop time) comes: a keepalive every KEEPALIVE_SECS,
    and no read (an idle follower costs Redis nothing)."""
    loop = asyncio.get_running_loop()
    while not watch.event.is_set() and (left := deadline - loop.time()) > 0:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watch.event.wait(), min(KEEPALIVE_SECS, left))
        if not watch.event.is_set() and deadline > loop.time():
            yield KEEPALIVE


@contextlib.asynccontextmanager
async def watching(subscriptions: Sequence[tuple[Notifier, str]]) -> AsyncIterator[Watch]:
    """One watch woken by any of these channels (each on its notifier), subscribed when this
    returns: a read after it misses no change published before its wait."""
    watch = Watch()
    async with contextlib.AsyncExitStack() as stack:
        for notifier, channel in subscriptions:
            await stack.enter_async_context(notifier.watch(channel, watch))
        yield watch


async def follow(
    subscriptions: Sequence[tuple[Notifier, str]],
    read: Callable[[], Awaitable[Read]],
    closing: Callable[[], bool],
    most_secs: float,
) -> AsyncIterator[bytes]:
    """SSE bytes: `read()`'s events each time there may be more, until it says the stream
    is over, the process stops or `most_secs` have passed (FOLLOW_MAX_SECS: the client
    reconnects from its last event, maybe to another replica); a keepalive while idle."""
    yield START
    loop = asyncio.get_running_loop()
    deadline = loop.time() + most_secs
    while not closing():
        async with watching(subscriptions) as watch:
            while True:
                watch.event.clear()
                got = await read()
                for event in got.events:
                    yield event
                if got.over:
                    return
                if got.more:
                    continue  # more than one read's worth was there
                left = deadline - loop.time()
                if left <= 0:
                    return
                if watch.lost or closing():
                    break  # the subscriptions died: watch again (or stop)
                async for keepalive in _idle(watch, deadline):
                    yield keepalive
