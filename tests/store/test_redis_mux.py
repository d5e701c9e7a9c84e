"""The API's multiplexed Redis connection, against a real redis-server and small fake ones."""

from __future__ import annotations

import asyncio
import functools
import ssl
import uuid
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from scheduler.config import parse_redis_url
from scheduler.store.connection.mux import MuxRedis, tls_context
from scheduler.store.connection.protocol import (
    FLUSH_COST,
    READ_COST,
    WRITE_COST,
    RedisProtocol,
    Reply,
)


def run(coro: Awaitable[None]) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


async def until(check: Callable[[], object], timeout: float = 10) -> None:
    """Let the loop run until `check()` is true; a failure instead of a hang after `timeout`."""

    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), timeout)


def test_concurrent_commands_each_get_their_own_reply(redis_url: str, prefix: str) -> None:
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        await asyncio.gather(*(mux.execute("SET", f"{prefix}:k{i}", i) for i in range(500)))
        values = await asyncio.gather(*(mux.execute("GET", f"{prefix}:k{i}") for i in range(500)))
        assert values == [str(i).encode() for i in range(500)]
        await mux.aclose()

    run(scenario())


@pytest.mark.parametrize(
    "count",
    [1, FLUSH_COST - 1, FLUSH_COST, FLUSH_COST + 1, 2 * FLUSH_COST, 3 * FLUSH_COST + 3],
)
def test_commands_around_the_early_flush_boundary_all_leave(
    redis_url: str, prefix: str, count: int
) -> None:
    # A turn's commands leave in writes of FLUSH_COST plus the scheduled flush of the rest;
    # none may be held back or sent twice (a duplicate INCR would show).
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        key = f"{prefix}:flush-boundary-{count}"
        replies = await asyncio.gather(*(mux.execute("INCR", key) for _ in range(count)))
        assert replies == list(range(1, count + 1))
        assert await mux.execute("GET", key) == str(count).encode()
        await mux.aclose()

    run(scenario())


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)


READ, WRITE = b"r", b"w"


@pytest.mark.parametrize(
    ("commands", "early", "total"),
    [
        ([READ] * (FLUSH_COST - 1), 0, 1),
        ([READ] * FLUSH_COST, 1, 1),
        ([READ] * (2 * FLUSH_COST + 1), 2, 3),
        ([WRITE] * (FLUSH_COST // WRITE_COST - 1), 0, 1),
        ([WRITE] * (FLUSH_COST // WRITE_COST), 1, 1),
        ([WRITE] * (2 * FLUSH_COST // WRITE_COST), 2, 2),
        ([READ] * (FLUSH_COST - WRITE_COST) + [WRITE], 1, 1),
    ],
)
def test_a_batch_is_written_once_it_weighs_flush_cost(
    commands: list[bytes], early: int, total: int
) -> None:
    """Reads leave FLUSH_COST at a time, writes (each WRITE_COST) fewer at a time, at once
    (`early` writes); what is left leaves at the end of the turn, each command once, in
    order (`total` writes)."""

    async def scenario() -> None:
        protocol = RedisProtocol(timeout=10)
        transport = RecordingTransport()
        protocol.transport = transport  # type: ignore[assignment]
        for command in commands:
            protocol.send(command, WRITE_COST if command == WRITE else READ_COST)
        assert len(transport.writes) == early
        await asyncio.sleep(0)
        assert len(transport.writes) == total
        assert b"".join(transport.writes) == b"".join(commands)

    run(scenario())


def test_errors_reach_their_caller_only(redis_url: str, prefix: str) -> None:
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        await mux.execute("SET", f"{prefix}:s", "text")
        replies: list[object] = await asyncio.gather(
            mux.execute("INCR", f"{prefix}:s"),
            mux.execute("GET", f"{prefix}:s"),
            return_exceptions=True,
        )
        bad, good = replies
        assert isinstance(bad, ResponseError) and good == b"text"
        await mux.aclose()

    run(scenario())


def test_fcall_of_a_function_redis_lacks_loads_its_library(redis_url: str) -> None:
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        name = f"probe_{uuid.uuid4().hex}"
        library = (
            f"#!lua name={name}\nredis.register_function('{name}_f', "
            "function(keys, args) return args[1] .. keys[1] end)"
        )
        assert await mux.fcall(f"{name}_f", library, ["k"], ["v"]) == b"vk"
        assert await mux.fcall(f"{name}_f", "not loaded again", ["k"], ["w"]) == b"wk"
        await mux.execute("FUNCTION", "DELETE", name)
        await mux.aclose()

    run(scenario())


def test_a_dropped_connection_fails_calls_then_reconnects(redis_url: str) -> None:
    import redis

    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        assert await mux.execute("PING") == b"PONG"
        # Redis drops every client connection (as on a restart or a network cut).
        redis.Redis.from_url(redis_url).client_kill_filter(skipme=True, _type="normal")
        with pytest.raises(RedisConnectionError):
            for _ in range(50):  # the calls after the drop see the dead socket
                await mux.execute("PING")
                await asyncio.sleep(0.05)
        assert await mux.execute("PING") == b"PONG"
        await mux.aclose()

    run(scenario())


async def _fake_server(
    handler: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_a_silent_redis_fails_calls_after_the_timeout_instead_of_hanging() -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(30)

    async def scenario() -> None:
        server, port = await _fake_server(silent)
        mux = MuxRedis(f"redis://127.0.0.1:{port}/0", timeout=0.4)
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(mux.execute("PING"), 5)
        await mux.aclose()
        server.close()

    run(scenario())


def test_an_unsolicited_reply_drops_the_connection() -> None:
    async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        writer.write(b"+PONG\r\n+SURPRISE\r\n")  # one reply too many
        await writer.drain()
        await asyncio.sleep(30)

    async def scenario() -> None:
        server, port = await _fake_server(chatty)
        mux = MuxRedis(f"redis://127.0.0.1:{port}/0", timeout=5)
        assert await mux.execute("PING") == b"PONG"
        protocol = mux._protocol
        assert protocol is not None
        for _ in range(100):
            if protocol.lost:
                break
            await asyncio.sleep(0.01)
        assert protocol.lost  # a later reply could no longer be matched to its caller
        await mux.aclose()
        server.close()

    run(scenario())


@pytest.mark.parametrize(
    "query, verify, check_hostname",
    [
        ("", ssl.CERT_REQUIRED, True),
        ("ssl_cert_reqs=required", ssl.CERT_REQUIRED, True),
        ("ssl_cert_reqs=optional", ssl.CERT_OPTIONAL, True),  # as redis-py: still the name
        ("ssl_cert_reqs=none", ssl.CERT_NONE, False),
        ("ssl_cert_reqs=none&ssl_check_hostname=true", ssl.CERT_NONE, False),
        ("ssl_check_hostname=false", ssl.CERT_REQUIRED, False),
        ("ssl_check_hostname=No", ssl.CERT_REQUIRED, False),
        ("ssl_check_hostname=True", ssl.CERT_REQUIRED, True),
    ],
)
def test_rediss_options_make_the_api_connections_tls(
    query: str, verify: ssl.VerifyMode, check_hostname: bool
) -> None:
    # The same URLs against a real TLS Redis, the API's connection and redis-py's side by
    # side: tests/test_redis_transports.py.
    url = f"rediss://cache:6380/0?{query}"
    parse_redis_url(url)  # accepted at start (config.py checks the options)
    context = tls_context(query)
    assert (context.verify_mode, context.check_hostname) == (verify, check_hostname)


def test_unsupported_url_schemes_are_refused() -> None:
    with pytest.raises(ValueError, match="REDIS_URL"):
        MuxRedis("http://127.0.0.1:6379")


PING = b"*1\r\n$4\r\nPING\r\n"


async def _aborted(redis_url: str) -> tuple[MuxRedis, RedisProtocol]:
    """A connected mux whose connection was just aborted (connection_lost not yet run)."""
    mux = MuxRedis(redis_url)
    assert await mux.execute("PING") == b"PONG"
    protocol = mux._protocol
    assert protocol is not None and protocol.transport is not None
    protocol.transport.abort()
    return mux, protocol


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_commands_on_a_closing_connection_fail_as_connection_errors(
    redis_url: str, loop: str
) -> None:
    # Between an abort and connection_lost the transport is closing, and the early flush
    # writes from inside the caller: the calls must still fail as connection errors (a 503),
    # never raise something else into the request (a 500), on either event loop.
    async def scenario() -> None:
        mux, protocol = await _aborted(redis_url)
        waiters = [protocol.send(PING) for _ in range(2 * FLUSH_COST)]
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, RedisConnectionError) for r in results), results
        assert await mux.execute("PING") == b"PONG"  # and the next call reconnects
        await mux.aclose()

    if loop == "uvloop":
        import uvloop

        uvloop.run(scenario())
    else:
        run(scenario())


def test_a_call_on_a_lost_connection_fails_at_once(redis_url: str) -> None:
    # The watchdog stops with the connection, so a waiter queued after connection_lost would
    # wait forever (say between the AUTH and SELECT of a reconnect).
    async def scenario() -> None:
        mux, protocol = await _aborted(redis_url)
        await until(lambda: protocol.lost)
        waiter = protocol.send(PING)
        assert waiter.done() and isinstance(waiter.exception(), RedisConnectionError)
        await mux.aclose()

    run(scenario())


# Replies answered in a callback (Reply, MuxRedis.send_now): the hot lane's GET and poll.


def test_reply_callbacks_run_as_each_reply_is_read_in_send_order(
    redis_url: str, prefix: str
) -> None:
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        await asyncio.gather(*(mux.execute("SET", f"{prefix}:k{i}", i) for i in range(40)))
        seen: list[tuple[bytes, bool]] = []
        sent = [mux.send_now("GET", f"{prefix}:k{i}") for i in range(40)]
        replies = [reply for reply in sent if reply is not None]
        assert len(replies) == 40 and not any(reply.done() for reply in replies)

        def record(i: int, reply: Reply) -> None:
            # The next reply is not read yet: the callback runs inside data_received, not in
            # a later turn of the loop as a Future's callbacks do.
            seen.append((reply.result(), i + 1 < 40 and replies[i + 1].done()))

        for i, reply in enumerate(replies):
            reply.on_done(functools.partial(record, i))
        await until(lambda: len(seen) == 40)
        assert seen == [(str(i).encode(), False) for i in range(40)]
        await mux.aclose()

    run(scenario())


def test_a_failing_callback_is_logged_and_the_next_replies_still_arrive(
    redis_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        assert await mux.execute("SET", f"{prefix}:k", "v") == b"OK"
        first, second = mux.send_now("GET", f"{prefix}:k"), mux.send_now("GET", f"{prefix}:k")
        assert first is not None and second is not None

        def broken(reply: Reply) -> None:
            raise RuntimeError("a bug in the caller")

        first.on_done(broken)
        assert await mux.execute("PING") == b"PONG"  # read after both GETs
        assert second.done() and second.result() == b"v"
        assert mux.protocol is not None and not mux.protocol.lost
        await mux.aclose()

    run(scenario())
    assert "a bug in the caller" in caplog.text


def test_a_reply_carries_the_error_and_a_late_callback_runs_at_once(redis_url: str) -> None:
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        assert await mux.execute("PING") == b"PONG"
        reply = mux.send_now("NOSUCHCOMMAND")
        assert reply is not None
        with pytest.raises(asyncio.InvalidStateError):
            reply.result()  # not in yet
        assert await mux.execute("PING") == b"PONG"
        got: list[Reply] = []
        reply.on_done(got.append)
        assert got == [reply]
        with pytest.raises(ResponseError, match="unknown command"):
            reply.result()
        await mux.aclose()

    run(scenario())


def test_replies_waiting_on_a_lost_connection_get_a_connection_error(
    redis_url: str, prefix: str
) -> None:
    async def scenario() -> None:
        mux = MuxRedis(redis_url)
        assert await mux.execute("PING") == b"PONG"
        reply = mux.send_now("BLPOP", f"{prefix}:never-pushed", 0)  # never answered: only lost
        assert reply is not None and mux.protocol is not None
        got: list[Reply] = []
        reply.on_done(got.append)
        assert mux.protocol.transport is not None
        mux.protocol.transport.abort()
        await until(lambda: got)
        with pytest.raises(RedisConnectionError):
            reply.result()
        assert mux.send_now("PING") is None  # no open connection: the caller awaits instead
        await mux.aclose()

    run(scenario())
