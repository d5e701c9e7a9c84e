"""A multiplexed asyncio Redis connection for the API's hot path (MuxRedis).

Why: profiling the API showed redis-py's asyncio client (pool checkout, retry wrapper, per-call
locks) costing more CPU per request than Starlette itself. One connection per process carries
every request's commands, pipelined (protocol.py). Only what the API needs: plain commands and
FCALL with a library load fallback. Blocking commands and pub/sub must never be sent here (they
would stall every caller behind them).

REDIS_URL may name a Sentinel service or a cluster (discovery.py): each (re)connect asks
where the primary is, and a reply saying this node is not it drops the connection, so the
next call connects afresh. With REDIS_MIN_REPLICAS_ACKED, a write is followed by WAIT in the
same write (one round trip); the writes of one batch share one WAIT (`send_acked`).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Sequence
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

import hiredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError

from scheduler.config import parse_redis_url
from scheduler.config.redis_url import ClusterRedis, DirectRedis, SentinelRedis
from scheduler.store.connection import discovery
from scheduler.store.connection.protocol import (
    WRITE_COST,
    RedisProtocol,
    Reply,
    script_command,
)
from scheduler.store.errors import ReplicasNotAcked

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
        self.prefix = prefix
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self._protocol: RedisProtocol | None = None
        self._connecting: asyncio.Lock | None = None
        self._loading: asyncio.Future[Any] | None = None

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
                self._protocol = await self._open(self._redirect())
            return self._protocol

    def _redirect(self) -> tuple[str, int] | None:
        """Where the lost connection's last MOVED said the slot is now, taken once (a cluster
        only): a node that cannot be reached there is not tried again."""
        lost = self._protocol
        if lost is None or lost.moved_to is None or not isinstance(self.target, ClusterRedis):
            return None
        found, lost.moved_to = lost.moved_to, None
        return found

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
        if isinstance(target, SentinelRedis | ClusterRedis):
            return await _locate(target, self.prefix)
        return self.host, self.port

    async def _open(self, redirect: tuple[str, int] | None = None) -> RedisProtocol:
        host, port = redirect or await self._address()
        loop = asyncio.get_running_loop()
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for, cancelled once the connect had
            # ended, returned or raised the connect's outcome in place of the cancel (CPython
            # gh-86296), and a loop stopped by a cancel (keyring.keep_fresh) went on for ever.
            async with asyncio.timeout(self.connect_timeout):
                _, protocol = await self._dial(loop, host, port)
        except (OSError, TimeoutError) as exc:
            where = self.unix_path or f"{host}:{port}"
            raise RedisConnectionError(f"cannot connect to Redis at {where}") from exc
        setup: list[tuple[Any, ...]] = []
        if self.password is not None:
            setup.append(("AUTH", *_auth(self.username, self.password)))
        if self.db:
            setup.append(("SELECT", self.db))
        checks_role = discovery.checks_role(self.target)
        if checks_role:
            setup.append(("ROLE",))
        reply: Any = None
        try:
            for command in setup:
                reply = await protocol.send(hiredis.pack_command(command))
            if checks_role:
                discovery.check_role(reply, host, port)
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

    async def pipelined(self, commands: Sequence[tuple[Any, ...]], library: str) -> list[Any]:
        """`commands` (plain ones, or FCALLs of `library`'s functions) queued at once, a
        future each and no task: their replies in order, an error as its reply. The FCALLs
        whose function Redis lacked are sent again once the library is loaded (once). Weighed
        as writes: they leave WRITE_COST at a time, Redis working while the rest are queued."""
        protocol = await self._connected()
        sent = [protocol.send(hiredis.pack_command(c), WRITE_COST) for c in commands]
        replies = list(await asyncio.gather(*sent, return_exceptions=True))
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:
            await self._load(library)
            protocol = await self._connected()
            again = [protocol.send(hiredis.pack_command(commands[i]), WRITE_COST) for i in missing]
            answers = await asyncio.gather(*again, return_exceptions=True)
            for i, reply in zip(missing, answers, strict=True):
                replies[i] = reply
        return replies

    async def fcall(
        self,
        function: str,
        library: str,
        keys: list[Any],
        args: list[Any],
        replicas: int = 0,
        timeout_ms: int = 0,
        cost: int = WRITE_COST,
    ) -> Any:
        """The function's reply (`library`: the code of its library, loaded when this Redis
        lacks it, then called again); with `replicas`, once that many replicas hold its
        writes (else ReplicasNotAcked after `timeout_ms`). `cost`: READ_COST for a
        function that only reads (FLUSH_COST)."""
        acks = (replicas, timeout_ms)
        command = script_command("FCALL", function, keys, args)
        try:
            return await self._run(command, acks, cost)
        except NoScriptError:
            await self._load(library)
            return await self._run(command, acks, cost)

    async def _load(self, library: str) -> None:
        """The library loaded once for the calls that found it missing together (a bulk
        submit's thousand creates after Redis restarted empty: one FUNCTION LOAD, not a
        thousand); a call whose NoScriptError comes after that load loads it again."""
        if self._loading is None:
            loading = asyncio.ensure_future(self.execute("FUNCTION", "LOAD", "REPLACE", library))
            self._loading = loading
            loading.add_done_callback(self._loaded)
        await asyncio.shield(self._loading)

    def _loaded(self, loading: asyncio.Future[Any]) -> None:
        self._loading = None
        if not loading.cancelled():
            loading.exception()  # retrieved: its waiters may all have been cancelled

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


async def _locate(target: SentinelRedis | ClusterRedis, prefix: str) -> tuple[str, int]:
    """discovery.locate's steps, each asked on a short-lived connection."""
    locating = discovery.Locating(target, prefix)
    while (ask := locating.ask) is not None:
        try:
            reply = await _ask(ask)
        except discovery.ASK_ERRORS as exc:
            locating.fail(exc)
        else:
            locating.answer(reply)
    assert locating.address is not None
    return locating.address


async def _ask(ask: discovery.Ask) -> Any:
    loop = asyncio.get_running_loop()
    timeout = discovery.DISCOVERY_TIMEOUT_SECS
    dial = loop.create_connection(lambda: RedisProtocol(timeout), ask.host, ask.port)
    try:
        async with asyncio.timeout(timeout):  # not wait_for, which could lose a cancel (_open)
            _, protocol = await dial
    except (OSError, TimeoutError) as exc:
        raise RedisConnectionError(f"cannot connect to {ask.host}:{ask.port}") from exc
    try:
        if ask.password is not None:
            login: tuple[Any, ...] = ("AUTH", *_auth(ask.username, ask.password))
            await protocol.send(hiredis.pack_command(login))
        command: tuple[Any, ...] = ask.command
        async with asyncio.timeout(timeout):
            return await protocol.send(hiredis.pack_command(command))
    finally:
        if protocol.transport is not None:
            protocol.transport.close()


def _auth(username: str | None, password: str) -> tuple[str, ...]:
    return (username, password) if username else (password,)
