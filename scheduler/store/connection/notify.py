"""Long-poll wake-ups: one pub/sub connection per API process, fanned out in memory.

The scripts that make a node's work available or change a job PUBLISH on the node's or the
job's channel (keys.py `node_channel`, `job_channel`; wake.lua). A request
that waits (`wait_until`) holds no Redis connection: it registers an in-memory watch, and the
process's one subscriber connection SUBSCRIBEs the channel while at least one request of the
process watches it. Nothing blocking is ever sent on the multiplexed connection (mux.py): the
checks a waiting request makes are the same one-script reads as an answer at once.

Order makes it exact: a request subscribes (and waits for Redis' confirmation) before it
checks, so a change that its check missed was published after the subscription and wakes it.
If the subscriber connection is lost, every waiting request checks once more and answers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import hiredis

from scheduler.store.connection.mux import MuxRedis
from scheduler.store.connection.protocol import RedisProtocol

T = TypeVar("T")

MAX_WAIT_SECS = 60.0


class Watch:
    """One waiting request's view of a channel."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.lost = False

    async def wait(self, timeout: float) -> None:
        # asyncio.timeout: 3.11's wait_for could lose a cancel (mux.MuxRedis._open).
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.event.wait()


class _SubscriberProtocol(RedisProtocol):
    """Pub/sub messages go to `on_message`; (un)subscribe confirmations to their callers."""

    def __init__(self, timeout: float, notifier: Notifier) -> None:
        super().__init__(timeout)
        self.notifier = notifier

    def data_received(self, data: bytes) -> None:
        self.parser.feed(data)
        while (reply := self.parser.gets()) is not False:
            if isinstance(reply, list) and reply and reply[0] == b"message":
                self.notifier.on_message(reply[1])
            elif not self.deliver(reply):
                return

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.notifier.on_lost()


class _Subscriber(MuxRedis):
    def __init__(self, url: str, prefix: str, notifier: Notifier) -> None:
        super().__init__(url, prefix=prefix)
        self.notifier = notifier

    def make_protocol(self) -> RedisProtocol:
        return _SubscriberProtocol(self.timeout, self.notifier)


class Notifier:
    """The process's subscriber connection (opened on the first watch) and its watches."""

    def __init__(self, url: str, prefix: str = "") -> None:
        # On a cluster, PUBLISH reaches every node: the slot's primary is as good as any.
        # Under Sentinel, a failover loses this connection, which wakes every watch
        # (on_lost); the next watch subscribes on the new primary.
        self.redis = _Subscriber(url, prefix, self)
        self._watches: dict[bytes, set[Watch]] = {}
        self._subscribed: dict[bytes, asyncio.Future[Any]] = {}
        self.closing = False

    @contextlib.asynccontextmanager
    async def watch(self, channel: str, watch: Watch | None = None) -> AsyncIterator[Watch]:
        """A watch on `channel`, subscribed in Redis when this returns; `watch`: one that
        already watches other channels (woken by any of them)."""
        name = channel.encode()
        watch = watch or Watch()
        watches = self._watches.setdefault(name, set())
        watches.add(watch)
        try:
            subscribed = self._subscribed.get(name)
            if subscribed is None:
                subscribed = asyncio.ensure_future(self.redis.execute("SUBSCRIBE", name))
                self._subscribed[name] = subscribed
            await asyncio.shield(subscribed)
            yield watch
        finally:
            watches.discard(watch)
            if not watches and self._watches.get(name) is watches:
                del self._watches[name]
                self._subscribed.pop(name, None)
                self._unsubscribe(name)

    def _unsubscribe(self, name: bytes) -> None:
        protocol = self.redis.protocol
        if protocol is None or protocol.lost:
            return  # the subscription died with its connection
        command: tuple[Any, ...] = ("UNSUBSCRIBE", name)
        sent = protocol.send(hiredis.pack_command(command))
        sent.add_done_callback(lambda done: done.cancelled() or done.exception())

    def on_message(self, channel: bytes) -> None:
        for watch in self._watches.get(channel, ()):
            watch.event.set()

    def close_waits(self) -> None:
        """The process is stopping: answer every waiting request now, and wait no more."""
        self.closing = True
        self.on_lost()

    def on_lost(self) -> None:
        """Every subscription died: wake every watch, marked lost, and start afresh."""
        for watches in self._watches.values():
            for watch in watches:
                watch.lost = True
                watch.event.set()
        self._watches.clear()
        self._subscribed.clear()

    async def aclose(self) -> None:
        await self.redis.aclose()


async def wait_until(
    notifier: Notifier,
    channels: str | Sequence[str],
    check: Callable[[], Awaitable[T]],
    done: Callable[[T], bool],
    timeout: float,
) -> T:
    """`check()` once `done` says so, or when `timeout` seconds have passed; `channels` (one
    or several) are where a change that can make it done is published."""
    result = await check()
    if done(result) or timeout <= 0 or notifier.closing:
        return result
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with contextlib.AsyncExitStack() as stack:
        watch = Watch()
        for channel in [channels] if isinstance(channels, str) else channels:
            await stack.enter_async_context(notifier.watch(channel, watch))
        while True:
            watch.event.clear()
            result = await check()
            remaining = deadline - loop.time()
            if done(result) or watch.lost or remaining <= 0:
                return result
            await watch.wait(remaining)
