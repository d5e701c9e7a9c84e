"""A multiplexed asyncio Redis connection for the API's hot path.

Why: profiling the API showed redis-py's asyncio client (pool checkout, retry wrapper, per-call
locks) costing more CPU per request than Starlette itself. Redis answers the commands of one
connection in order, so many concurrent requests can share one connection: each call writes its
command (packed by hiredis) and waits on a future that the protocol resolves, in FIFO order, as
replies arrive. No pool, no lock, and commands from concurrent requests are naturally pipelined.

Only what the API needs: plain commands and EVALSHA with a NOSCRIPT fallback. Blocking commands
and pub/sub must never be sent here (they would stall every caller behind them).

REDIS_URL may name a Sentinel service or a cluster (store/topology.py): each (re)connect asks
where the primary is, and a reply saying this node is not it drops the connection, so the
next call connects afresh. With REDIS_MIN_REPLICAS_ACKED, a write is followed by WAIT in the
same write (one round trip); the writes of one batch share one WAIT (`send_acked`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import ssl
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias, cast
from urllib.parse import parse_qs, unquote, urlparse

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError

from scheduler.config import ClusterRedis, DirectRedis, SentinelRedis, parse_redis_url
from scheduler.store.topology import (
    DISCOVERY_TIMEOUT_SECS,
    NotPrimary,
    ReplicasNotAcked,
    is_topology_error,
    slot_owner,
    tag_slot,
)

log = logging.getLogger("scheduler.store")

# The queued commands are written once they weigh FLUSH_COST: a read (a plain command, a
# read-only script) weighs READ_COST, a write script WRITE_COST (RedisProtocol.queue).
FLUSH_COST = 16
READ_COST, WRITE_COST = 1, 4


def script_command(how: str, script: str, keys: list[Any], args: list[Any]) -> tuple[Any, ...]:
    """EVALSHA (`script` its SHA-1) or EVAL (its text) with these KEYS and ARGV."""
    return (how, script, len(keys), *keys, *args)


CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def tls_context(query: str) -> ssl.SSLContext:
    """The TLS of a rediss:// URL, built from its query as redis-py builds it for the workers'
    and the restore's connections (SSLConnection), so every process verifies Redis alike:
    the system's CAs plus ssl_ca_certs (a file) or ssl_ca_path (a directory), a client
    certificate from ssl_certfile, ssl_keyfile and ssl_password (Redis asks for one unless
    tls-auth-clients is no), ssl_cert_reqs (required, the default; optional; none) and
    ssl_check_hostname (true, the default; never checked with none). config.py refuses at
    start any other ssl_ option, a value out of range and an option given twice."""
    options = {name: values[0] for name, values in parse_qs(query).items()}
    context = ssl.create_default_context()
    reqs = CERT_REQS[options.get("ssl_cert_reqs", "required")]
    context.check_hostname = reqs != ssl.CERT_NONE and _truthy(
        options.get("ssl_check_hostname", "true")
    )
    context.verify_mode = reqs
    if options.get("ssl_certfile"):
        certificate = (options.get("ssl_keyfile"), options.get("ssl_password"))
        context.load_cert_chain(options["ssl_certfile"], *certificate)
    if options.get("ssl_ca_certs") or options.get("ssl_ca_path"):
        context.load_verify_locations(options.get("ssl_ca_certs"), options.get("ssl_ca_path"))
    return context


def _truthy(value: str) -> bool:
    """As redis-py's to_bool reads a URL's flag."""
    return value.upper() not in ("0", "F", "FALSE", "N", "NO")


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


def _reply_error(message: str) -> ResponseError:
    if message.startswith("NOSCRIPT"):
        return NoScriptError(message)
    return ResponseError(message)


class MuxRedis:
    """One multiplexed connection, reopened on demand after it is lost. `prefix` is the
    deployment's REDIS_PREFIX: on a cluster, the connection goes to its slot's primary."""

    def __init__(
        self, url: str, connect_timeout: float = 5.0, timeout: float = 10.0, prefix: str = ""
    ) -> None:
        self.target = parse_redis_url(url)
        self.unix_path = ""
        self.ssl: ssl.SSLContext | None = None
        self.db = 0
        self.username: str | None = None
        self.password: str | None = None
        self.host, self.port = "127.0.0.1", 6379
        if isinstance(self.target, DirectRedis):
            self._direct(url)
        else:
            self.username, self.password = self.target.username, self.target.password
        if isinstance(self.target, SentinelRedis):
            self.db = self.target.db
        self.slot = tag_slot(prefix) if isinstance(self.target, ClusterRedis) else 0
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._protocol: RedisProtocol | None = None
        self._connecting: asyncio.Lock | None = None

    def _direct(self, url: str) -> None:
        parsed = urlparse(url)
        self.unix_path = parsed.path if parsed.scheme == "unix" else ""
        self.ssl = tls_context(parsed.query) if parsed.scheme == "rediss" else None
        self.host = parsed.hostname or "127.0.0.1"
        self.port = parsed.port or 6379
        db = parse_qs(parsed.query).get("db", [""])[0] if self.unix_path else parsed.path[1:]
        self.db = int(db or 0)
        self.username = unquote(parsed.username) if parsed.username else None
        self.password = unquote(parsed.password) if parsed.password else None

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
        self, loop: asyncio.AbstractEventLoop, host: str, port: int
    ) -> Awaitable[tuple[asyncio.BaseTransport, RedisProtocol]]:
        def protocol() -> RedisProtocol:
            return self.make_protocol()

        if self.unix_path:
            return loop.create_unix_connection(protocol, self.unix_path)
        return loop.create_connection(protocol, host, port, ssl=self.ssl)

    async def _address(self) -> tuple[str, int]:
        """Where to connect now: the fixed address, Sentinel's primary, or the owner of the
        deployment's cluster slot."""
        target = self.target
        if isinstance(target, SentinelRedis):
            return await _sentinel_primary(target)
        if isinstance(target, ClusterRedis):
            return await _cluster_owner(target, self.slot)
        return self.host, self.port

    async def _open(self) -> RedisProtocol:
        host, port = await self._address()
        loop = asyncio.get_running_loop()
        try:
            _, protocol = await asyncio.wait_for(self._dial(loop, host, port), self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise RedisConnectionError(f"cannot connect to Redis at {host}:{port}") from exc
        setup: list[tuple[Any, ...]] = []
        if self.password is not None:
            setup.append(("AUTH", *_auth(self.username, self.password)))
        if self.db:
            setup.append(("SELECT", self.db))
        if isinstance(self.target, SentinelRedis):
            # The sentinels may not have noticed a demotion yet: only a primary will do.
            setup.append(("ROLE",))
        reply: Any = None
        try:
            for command in setup:
                reply = await protocol.send(hiredis.pack_command(command))
            if isinstance(self.target, SentinelRedis) and reply[0] != b"master":
                raise NotPrimary(f"{host}:{port} is a {reply[0].decode()}, not the primary")
        except BaseException:
            # A refused AUTH or SELECT, or not the primary: do not leave the connection open.
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

    def send_now(self, *args: Any) -> Reply | None:
        """The command sent on the open connection, for a caller that goes on in a callback
        (Reply.on_done) instead of a coroutine; None when no connection is open (await
        `execute`). A read: it weighs READ_COST."""
        return self.send_packed(hiredis.pack_command(args))

    def send_packed(self, command: bytes) -> Reply | None:
        """`send_now` for a command packed already."""
        protocol = self._protocol
        if protocol is None or protocol.lost:
            return None
        reply = Reply()
        protocol.send_to(command, reply)
        return reply

    async def evalsha(
        self,
        sha: str,
        script: str,
        keys: list[Any],
        args: list[Any],
        replicas: int = 0,
        timeout_ms: int = 0,
        cost: int = WRITE_COST,
    ) -> Any:
        """The script's reply; with `replicas`, once that many replicas hold its writes
        (else ReplicasNotAcked after `timeout_ms`). `cost`: READ_COST for a script that
        only reads (FLUSH_COST)."""
        acks = (replicas, timeout_ms)
        try:
            return await self._run(script_command("EVALSHA", sha, keys, args), acks, cost)
        except NoScriptError:
            # A restarted or flushed Redis forgot the script: load it and run it once.
            return await self._run(script_command("EVAL", script, keys, args), acks, cost)

    async def _run(self, command: tuple[Any, ...], acks: tuple[int, int], cost: int) -> Any:
        replicas, timeout_ms = acks
        protocol = await self._connected()
        if not replicas:
            return await protocol.send(hiredis.pack_command(command), cost)
        wait: tuple[Any, ...] = ("WAIT", replicas, timeout_ms)
        reply, acked = protocol.send_acked(
            hiredis.pack_command(command), hiredis.pack_command(wait)
        )
        try:
            result = await reply
        finally:
            # Read in any case, so an unread failure is never logged as never retrieved.
            count = await asyncio.gather(acked, return_exceptions=True)
        if isinstance(count[0], BaseException):
            raise count[0]
        if count[0] < replicas:
            raise ReplicasNotAcked(count[0], replicas)
        return result

    async def aclose(self) -> None:
        if self._protocol is not None and self._protocol.transport is not None:
            self._protocol.transport.close()
        self._protocol = None


async def _ask(host: str, port: int, auth: tuple[str, ...], *command: Any) -> Any:
    """One command on a short-lived connection (a sentinel or a cluster seed)."""
    loop = asyncio.get_running_loop()
    dial = loop.create_connection(lambda: RedisProtocol(DISCOVERY_TIMEOUT_SECS), host, port)
    try:
        _, protocol = await asyncio.wait_for(dial, DISCOVERY_TIMEOUT_SECS)
    except (OSError, TimeoutError) as exc:
        raise RedisConnectionError(f"cannot connect to {host}:{port}") from exc
    try:
        if auth:
            login: tuple[Any, ...] = ("AUTH", *auth)
            await protocol.send(hiredis.pack_command(login))
        return await asyncio.wait_for(
            protocol.send(hiredis.pack_command(command)), DISCOVERY_TIMEOUT_SECS
        )
    finally:
        if protocol.transport is not None:
            protocol.transport.close()


def _auth(username: str | None, password: str | None) -> tuple[str, ...]:
    if password is None:
        return ()
    return (username, password) if username else (password,)


async def _sentinel_primary(target: SentinelRedis) -> tuple[str, int]:
    errors = []
    for host, port in target.sentinels:
        try:
            reply = await _ask(
                host,
                port,
                _auth(None, target.sentinel_password),
                "SENTINEL",
                "get-master-addr-by-name",
                target.service,
            )
        except (RedisConnectionError, ResponseError, TimeoutError) as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        if reply:
            return reply[0].decode(), int(reply[1])
        errors.append(f"{host}:{port}: no primary named {target.service!r}")
    raise RedisConnectionError(f"no sentinel names a primary: {'; '.join(errors)}")


async def _cluster_owner(target: ClusterRedis, slot: int) -> tuple[str, int]:
    errors = []
    for host, port in target.seeds:
        try:
            auth = _auth(target.username, target.password)
            slots = await _ask(host, port, auth, "CLUSTER", "SLOTS")
        except (RedisConnectionError, ResponseError, TimeoutError) as exc:
            errors.append(f"{host}:{port}: {exc}")
            continue
        owner = slot_owner(slots, slot, host)
        if owner is not None:
            return owner
        errors.append(f"{host}:{port}: slot {slot} is not served")
    raise RedisConnectionError(f"no cluster node serves slot {slot}: {'; '.join(errors)}")
