"""The API's Redis wire protocol: commands pipelined on one connection, replies handed back
in order (RedisProtocol), to a Future or, for a caller that goes on in a callback, to a Reply.

Redis answers the commands of one connection in order, so many concurrent requests can share
one connection: each call writes its command (packed by hiredis) and waits for its reply,
which the protocol hands out in FIFO order as replies arrive. No pool, no lock, and commands
from concurrent requests are naturally pipelined (mux.py opens and reopens the connection).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from typing import Any, TypeAlias, cast

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from scheduler.store.connection.discovery import NotPrimary, is_topology_error, moved_to

log = logging.getLogger("scheduler.store")

# The queued commands are written once they weigh FLUSH_COST: a read (a plain command, a
# read-only script) weighs READ_COST, a write script WRITE_COST (RedisProtocol.queue).
FLUSH_COST = 16
READ_COST, WRITE_COST = 1, 4


def script_command(how: str, script: str, keys: list[Any], args: list[Any]) -> tuple[Any, ...]:
    """EVALSHA (`script` its SHA-1), EVAL (its text) or FCALL (`script` a function's name)
    with these KEYS and ARGV."""
    return (how, script, len(keys), *keys, *args)


class Reply:
    """A reply's future for a caller that goes on in a callback (`on_done`). An asyncio
    Future runs its callbacks in the loop's next turn (call_soon): a Handle and one more
    dispatch per call, ~1.4 µs of the ~45 a poll costs the API. A Reply runs its callback as
    the protocol reads the reply, inside data_received, before the next reply is read."""

    __slots__ = ("_callback", "_done", "_error", "_value")

    def __init__(self) -> None:
        self._callback: Callable[[Reply], None] | None = None
        self._done = False
        self._value: Any = None
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._done

    def result(self) -> Any:
        """The reply, or the error it stands for raised (as Future.result)."""
        if not self._done:
            raise asyncio.InvalidStateError("no reply yet")
        if self._error is not None:
            raise self._error
        return self._value

    def set_result(self, value: Any) -> None:
        self._value = value
        self._settle()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._settle()

    def on_done(self, callback: Callable[[Reply], None]) -> None:
        """Calls `callback(self)` once the reply is in: at once if it is. One callback: the
        one caller that sent the command goes on there."""
        self._callback = callback
        if self._done:
            self._run(callback)

    def _settle(self) -> None:
        self._done = True
        if self._callback is not None:
            self._run(self._callback)

    def _run(self, callback: Callable[[Reply], None]) -> None:
        # Raised here, a callback's bug would stop the protocol between two replies and
        # leave the rest of the batch unanswered.
        try:
            callback(self)
        except Exception:
            log.exception("Exception in a Redis reply's callback")


# What the protocol answers a queued command on, in send order.
Waiter: TypeAlias = asyncio.Future[Any] | Reply


class RedisProtocol(asyncio.Protocol):
    def __init__(self, timeout: float) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = hiredis.Reader()
        # (when sent, future) in send order; Redis replies in the same order.
        self.waiters: collections.deque[tuple[float, Waiter]] = collections.deque()
        self.outgoing: list[bytes] = []
        self.queued_cost = 0  # of `outgoing` (FLUSH_COST)
        # Futures for the replica count of the writes queued since the last flush: a WAIT
        # after them answers for all of them (it waits for every earlier write of the
        # connection), and costs Redis one replica round trip per batch, not per write.
        self.unacked: list[asyncio.Future[int]] = []
        self.wait_command = b""
        self.lost = False
        # Where a MOVED reply said the deployment's slot is served now: the next connection
        # goes there (the seeds' views of a moved slot may lag behind it for seconds).
        self.moved_to: tuple[str, int] | None = None
        self.timeout = timeout
        self.loop = asyncio.get_running_loop()
        self.watchdog: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same API.
        self.transport = cast(asyncio.Transport, transport)
        self.watchdog = self.loop.call_later(self.timeout / 4, self._check_stalled)

    def queue(self, command: bytes, cost: int, waiter: Waiter | None = None) -> Waiter:
        # Commands issued in one turn of the event loop leave together, several per write
        # (syscall). Not all in one write at the end of the turn: a turn that handles 32
        # requests would keep Redis idle until its end, then the API idle while Redis runs
        # the batch. Writing once FLUSH_COST is queued lets the two overlap. How soon depends
        # on what Redis does with them: a write script (~20-50 µs of Redis) gains from the
        # overlap, a read (~1-6 µs) from fewer syscalls. Measured (wrk, 32 connections, 2
        # cores): writing every 4 commands instead of once a turn took submit from 13.1k to
        # 15.5k req/s (the API 81% -> 99% busy); every 16 reads instead of every 4 took
        # GET /jobs/{id} from 29.2k to 34.9k (the API's CPU per GET 33 -> 28 µs) and the poll
        # at capacity from 24.4k to 27.2k, while every 16 submits instead of 4 lost 13%.
        if waiter is None:
            waiter = self.loop.create_future()
        if self.lost:
            # connection_lost has already failed the queue: nothing would ever answer this.
            waiter.set_exception(RedisConnectionError("connection to Redis lost"))
            return waiter
        if not self.outgoing:
            self.loop.call_soon(self._flush)
        self.outgoing.append(command)
        self.queued_cost += cost
        self.waiters.append((time.monotonic(), waiter))
        return waiter

    def send(self, command: bytes, cost: int = READ_COST) -> asyncio.Future[Any]:
        waiter = self.loop.create_future()
        self.send_to(command, waiter, cost)
        return waiter

    def send_to(self, command: bytes, waiter: Waiter, cost: int = READ_COST) -> None:
        """`command`, its reply to be set on `waiter`."""
        self.queue(command, cost, waiter)
        if self.queued_cost >= FLUSH_COST:
            self._flush()

    def send_acked(
        self, command: bytes, wait: bytes
    ) -> tuple[asyncio.Future[Any], asyncio.Future[int]]:
        """`command` (a write), and how many replicas hold it: the reply of the WAIT (packed
        in `wait`) that the flush sends right after it, in the same write."""
        reply = self.loop.create_future()
        self.queue(command, WRITE_COST, reply)
        acked: asyncio.Future[int] = self.loop.create_future()
        if reply.done():  # lost: nothing will be flushed
            acked.set_result(0)
            return reply, acked
        self.unacked.append(acked)
        self.wait_command = wait
        if self.queued_cost >= FLUSH_COST:
            self._flush()
        return reply, acked

    def _queue_wait(self) -> None:
        unacked, self.unacked = self.unacked, []
        self.outgoing.append(self.wait_command)
        reply: asyncio.Future[Any] = self.loop.create_future()
        self.waiters.append((time.monotonic(), reply))

        def share(done: asyncio.Future[Any]) -> None:
            for acked in unacked:
                if acked.done():
                    continue
                if done.cancelled() or done.exception() is not None:
                    acked.set_exception(done.exception() or RedisConnectionError("WAIT lost"))
                else:
                    acked.set_result(int(done.result()))

        reply.add_done_callback(share)

    def _flush(self) -> None:
        if self.unacked:
            self._queue_wait()
        # Taken before the write, so a write that raised could never send them twice. Also
        # runs, scheduled, after an early flush emptied the buffer: nothing to write then.
        outgoing, self.outgoing = self.outgoing, []
        self.queued_cost = 0
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
            message = str(reply)
            if is_topology_error(message):
                # This node is not (or no longer) the primary: whatever else is queued here
                # fails as on a lost connection, and the next call connects afresh.
                # Dropped first: a callback that sends again must not reach this node.
                self.drop()
                self.moved_to = moved_to(message)
                waiter.set_exception(NotPrimary(f"Redis is not the primary here: {message}"))
                return False
            waiter.set_exception(_reply_error(message))
        else:
            waiter.set_result(reply)
        return True

    def drop(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.watchdog is not None:
            self.watchdog.cancel()
        for acked in self.unacked:
            if not acked.done():
                acked.set_exception(RedisConnectionError(f"connection to Redis lost: {exc}"))
        self.unacked.clear()
        while self.waiters:
            _, waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_exception(RedisConnectionError(f"connection to Redis lost: {exc}"))


class NoFunctionError(NoScriptError):
    """FCALL of a function this Redis has not loaded: as NOSCRIPT for a script, the caller
    loads the library (store/scripts/functions.py) and calls again."""


def is_no_function(exc: BaseException) -> bool:
    """Whether `exc` is Redis's answer to FCALL of a function it has not loaded (redis-py
    drops the reply's "ERR " prefix)."""
    return isinstance(exc, ResponseError) and str(exc).removeprefix("ERR ").startswith(NO_FUNCTION)


NO_FUNCTION = "Function not found"


def _reply_error(message: str) -> ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    if message.removeprefix("ERR ").startswith(NO_FUNCTION):
        return NoFunctionError(message)
    return ResponseError(message)
