"""A multiplexed asyncio Redis connection for the API's hot path.

Why: profiling the API showed redis-py's asyncio client (pool checkout, retry wrapper, per-call
locks) costing more CPU per request than Starlette itself. Redis answers the commands of one
connection in order, so many concurrent requests can share one connection: each call writes its
command (packed by hiredis) and waits on a future that the protocol resolves, in FIFO order, as
replies arrive. No pool, no lock, and commands from concurrent requests are naturally pipelined.

Only what the API needs: plain commands and EVALSHA with a NOSCRIPT fallback. Blocking commands
and pub/sub must never be sent here (they would stall every caller behind them).
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from collections.abc import Awaitable
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlparse

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

FLUSH_EVERY = 4


class RedisProtocol(asyncio.Protocol):
    def __init__(self, timeout: float) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = hiredis.Reader()
        # (when sent, future) in send order; Redis replies in the same order.
        self.waiters: collections.deque[tuple[float, asyncio.Future[Any]]] = collections.deque()
        self.outgoing: list[bytes] = []
        self.lost = False
        self.timeout = timeout
        self.loop = asyncio.get_running_loop()
        self.watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same API.
        self.transport = cast(asyncio.Transport, transport)
        self.watchdog = self.loop.call_later(self.timeout / 4, self._check_stalled)

    def send(self, command: bytes) -> asyncio.Future[Any]:
        # Commands issued in one turn of the event loop leave together, a few per write
        # (syscall). Not all in one write at the end of the turn: a turn that handles 32
        # requests would keep Redis idle until its end, then the API idle while Redis runs
        # the batch. Writing every FLUSH_EVERY commands lets the two overlap. Measured
        # (submit, wrk, 2 cores): with 32 connections 13.1k -> 15.5k req/s and the API
        # process 81% -> 99% busy; with 8 connections 10.2k -> 13.4k. 1 and 2 cost more
        # syscalls than they save; 8 is as good at 32 connections but no help at 8.
        waiter: asyncio.Future[Any] = self.loop.create_future()
        if self.lost:
            # connection_lost has already failed the queue: nothing would ever answer this.
            waiter.set_exception(RedisConnectionError("connection to Redis lost"))
            return waiter
        if not self.outgoing:
            self.loop.call_soon(self._flush)
        self.outgoing.append(command)
        self.waiters.append((time.monotonic(), waiter))
        if len(self.outgoing) >= FLUSH_EVERY:
            self._flush()
        return waiter

    def _flush(self) -> None:
        # Taken before the write, so a write that raised could never send them twice. Also
        # runs, scheduled, after an early flush emptied the buffer: nothing to write then.
        outgoing, self.outgoing = self.outgoing, []
        if outgoing and self.transport is not None and not self.lost:
            self.transport.write(b"".join(outgoing))

    def _check_stalled(self) -> None:
        # A Redis that stops answering must not hang requests forever: drop the connection,
        # which fails every queued call at once; the next call reconnects.
        if self.waiters and time.monotonic() - self.waiters[0][0] > self.timeout:
            assert self.transport is not None
            self.transport.abort()
            return
        self.watchdog = self.loop.call_later(self.timeout / 4, self._check_stalled)

    def data_received(self, data: bytes) -> None:
        self.parser.feed(data)
        while (reply := self.parser.gets()) is not False:
            if not self.deliver(reply):
                return

    def deliver(self, reply: Any) -> bool:
        """Hand a reply to the oldest caller; False when the connection had to be dropped."""
        if not self.waiters:
            # A reply nobody asked for: the stream is out of step, so no later reply can
            # be trusted to match its caller. Drop the connection.
            assert self.transport is not None
            self.transport.abort()
            return False
        _, waiter = self.waiters.popleft()
        if waiter.done():  # its caller was cancelled; the reply is still consumed in order
            return True
        if isinstance(reply, hiredis.ReplyError):
            waiter.set_exception(_reply_error(str(reply)))
        else:
            waiter.set_result(reply)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.watchdog is not None:
            self.watchdog.cancel()
        while self.waiters:
            _, waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RedisConnectionError(f"connection to Redis lost: {exc}"))


def _reply_error(message: str) -> ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return ResponseError(message)


class MuxRedis:
    """One multiplexed connection, reopened on demand after it is lost."""

    def __init__(self, url: str, connect_timeout: float = 5.0, timeout: float = 10.0) -> None:
        parsed = urlparse(url)
        if parsed.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"REDIS_URL: use redis://, rediss:// or unix://, not {url!r}")
        self.unix_path = parsed.path if parsed.scheme == "unix" else ""
        self.ssl = ssl.create_default_context() if parsed.scheme == "rediss" else None
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 6379
        db = parse_qs(parsed.query).get("db", [""])[0] if self.unix_path else parsed.path[1:]
        self.db = int(db or 0)
        self.username = unquote(parsed.username) if parsed.username else None
        self.password = unquote(parsed.password) if parsed.password else None
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._protocol: RedisProtocol | None = None
        self._connecting: asyncio.Lock | None = None

    async def _connected(self) -> RedisProtocol:
        protocol = self._protocol
        if protocol is not None and not protocol.lost:
            return protocol
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            if self._protocol is None or self._protocol.lost:
                self._protocol = await self._open()
            return self._protocol

    def make_protocol(self) -> RedisProtocol:
        return RedisProtocol(self.timeout)

    def _dial(
        self, loop: asyncio.AbstractEventLoop
    ) -> Awaitable[tuple[asyncio.BaseTransport, RedisProtocol]]:
        def protocol() -> RedisProtocol:
            return self.make_protocol()

        if self.unix_path:
            return loop.create_unix_connection(protocol, self.unix_path)
        return loop.create_connection(protocol, self.host, self.port, ssl=self.ssl)

    async def _open(self) -> RedisProtocol:
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(self._dial(loop), self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise RedisConnectionError(
                f"cannot connect to Redis at {self.host}:{self.port}"
            ) from exc
        setup: list[tuple[Any, ...]] = []
        if self.password is not None:
            auth = (self.username, self.password) if self.username else (self.password,)
            setup.append(("AUTH", *auth))
        if self.db:
            setup.append(("SELECT", self.db))
        try:
            for command in setup:
                await protocol.send(hiredis.pack_command(command))
        except BaseException:
            # A refused AUTH or SELECT: do not leave the half-set-up connection open.
            if protocol.transport is not None:
                protocol.transport.close()
            raise
        return protocol

    @property
    def protocol(self) -> RedisProtocol | None:
        """The current connection, if one was opened (it may be lost)."""
        return self._protocol

    async def execute(self, *args: Any) -> Any:
        protocol = await self._connected()
        return await protocol.send(hiredis.pack_command(args))

    async def evalsha(self, sha: str, script: str, keys: list[Any], args: list[Any]) -> Any:
        try:
            return await self.execute("EVALSHA", sha, len(keys), *keys, *args)
        except NoScriptError:
            # A restarted or flushed Redis forgot the script: load it and run it once.
            return await self.execute("EVAL", script, len(keys), *keys, *args)

    async def aclose(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None
