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
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass

from starlette.requests import Request

from scheduler.api.http import HTTPError, caller
from scheduler.api.params import param
from scheduler.api.state import credentials
from scheduler.models.access_key import ADMIN, ANYONE
from scheduler.store.connection.notify import Notifier, Watch

log = logging.getLogger("scheduler.api")

# A comment this often keeps idle connections open through proxies, and finds clients gone.
KEEPALIVE_SECS = 15.0
# What a client that lost the connection waits before it reconnects (EventSource's `retry`).
RETRY_MS = 2000
START = f"retry: {RETRY_MS}\n\n".encode()
KEEPALIVE = b": keepalive\n\n"
SSE_HEADERS = {"cache-control": "no-store", "x-accel-buffering": "no"}


_POSITION = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
_STREAM_ID_MAX = 2**64 - 1  # each part of a Redis stream id


def follows(request: Request, default: bool) -> bool:
    """The `follow` parameter: 1/true or 0/false, else a 400."""
    raw = param(request, "follow")
    if raw not in ("", "0", "1", "true", "false"):
        raise HTTPError(400, "invalid follow: use 1 or 0")
    return raw in ("1", "true") if raw else default


def positions(request: Request) -> list[str] | None:
    """Where a follower resumes (Last-Event-ID, else `after`): the stream ids it names, one
    per part of a comma-joined position, each as Redis writes it; None when none is given. A
    part that is not an id Redis can hold is a 400 (never an error of Redis)."""
    raw = request.headers.get("last-event-id", "") or param(request, "after")
    if not raw:
        return None
    parts = [_POSITION.fullmatch(part) for part in raw.split(",")]
    numbers = [(int(p[1]), int(p[2])) for p in parts if p]
    if len(numbers) < len(parts) or any(max(n) > _STREAM_ID_MAX for n in numbers):
        raise HTTPError(400, "invalid after: use the id of an event this stream sent")
    return [f"{ms}-{seq}" for ms, seq in numbers]


def sse(event: str, data: bytes, position: str = "") -> bytes:
    """One event; `data` is one line of JSON (msgspec escapes every newline)."""
    head = f"id: {position}\nevent: {event}\n" if position else f"event: {event}\n"
    return head.encode() + b"data: " + data + b"\n\n"


async def while_key_held(
    request: Request, chunks: AsyncGenerator[bytes, None]
) -> AsyncIterator[bytes]:
    """`chunks` until the named key that opened the stream is revoked (or made again with
    another role): checked in memory before each event or keepalive, so the stream ends
    within KEEPALIVE_SECS and KEYRING_REFRESH_SECS of the revocation rather than at
    FOLLOW_MAX_SECS; its client reconnects, and the door refuses the key. The admin key's
    and no key's streams are `chunks` as they are (compared by value: an admin's UI session
    holds an equal principal, not ADMIN itself)."""
    who, keyring = caller(request), credentials(request).keyring
    async with contextlib.aclosing(chunks):
        async for chunk in chunks:
            if who != ADMIN and who != ANYONE and not keyring.holds(who):
                return
            yield chunk


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
        with contextlib.suppress(TimeoutError):  # not wait_for (mux.MuxRedis._open)
            async with asyncio.timeout(min(KEEPALIVE_SECS, left)):
                await watch.event.wait()
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
    try:
        async for chunk in _follow(subscriptions, read, closing, most_secs):
            yield chunk
    except Exception as exc:  # the headers are sent: end the stream, its client resumes
        log.warning("a follower's stream ended early: %s: %s", type(exc).__name__, exc)


async def _follow(
    subscriptions: Sequence[tuple[Notifier, str]],
    read: Callable[[], Awaitable[Read]],
    closing: Callable[[], bool],
    most_secs: float,
) -> AsyncIterator[bytes]:
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
