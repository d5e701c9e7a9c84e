"""The lingering close of `scheduler serve`'s HTTP protocols (deadline.py's, and server.py's on
them): an answer given before the request's body was all in (a 413 for a declared size over
the limit, a 401 before a report's body) reaches the client.

Why: a server that closes a connection with bytes of the request unread makes its kernel
answer with a reset (RST), and the reset makes the client's kernel drop what it received
and had not read yet: the answer. urllib writes the whole body before it reads a byte of the
answer; it met a connection reset instead of the 413 in 23 of 30 tries.

How: as Go's net/http, by the size of what is left. A keep-alive request that declared a
body of at most LINGER_BYTES keeps its connection: the parser reads and drops the rest (as
uvicorn always did) and the client's next request is served there (Go does so up to 256 KB).
Any other (its client asked to close, a chunked body, a larger one) ends the connection as
nginx ends it (its lingering_close, bounded by lingering_time): the answer says `connection:
close`; once it is written, the server shuts its sending side (the client reads the answer,
then end of file), parses no more (nothing of the rest reaches the app), and reads and drops
what the client still sends until the client closes, or LINGER_BYTES came, or LINGER_SECS
passed; then it closes, and a client that would send without end is cut there. Apache lingers
the same way (30 s at most, 2 s when it suspects an attack); Go closes its sending side and
waits 500 ms, which does not save a body of a few MiB.

The bounds: 4 MiB lets a client that built a job request of up to four times MAX_BODY_BYTES
(1 MiB) read why it was refused, and costs only bandwidth: each read is dropped as it comes,
nothing is kept (a report over its 64 MiB limit is cut; the reference agent bounds what it
reports far below). 5 s (nginx's lingering_timeout) is far more than 4 MiB takes on a network
a deployment runs on (3.4 s at 10 Mbit/s), and less than the head deadline lets any client
hold a connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.h11_impl import RequestResponseCycle as H11Cycle
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from scheduler.api.http import length_of

MiB = 1024 * 1024
LINGER_BYTES = 4 * MiB
LINGER_SECS = 5.0
CLOSE = (b"connection", b"close")


def reads_the_rest(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request answered before its body was all in keeps its connection, its rest
    read by the parser (module doc): it declared a body of at most LINGER_BYTES. Whether the
    client asked to close is uvicorn's to say (keep_alive)."""
    for name, value in headers:
        if name == b"transfer-encoding":
            return False
        if name == b"content-length":
            size = length_of(value.decode("latin-1"))
            return size is not None and size <= LINGER_BYTES
    return True


class Linger:
    """The lingering close's state, mixed into both protocols (deadline.HeadDeadline and
    H11HeadDeadline). A protocol that lingers hands every byte it receives to `discard`."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    flow: FlowControl
    lingering = False
    linger_left = 0  # bytes the client may still send before it is cut
    linger_timer: asyncio.TimerHandle | None = None

    if TYPE_CHECKING:

        def _unset_keepalive_if_required(self) -> None: ...

        def stop_head_clock(self) -> None: ...

    def linger(self) -> None:
        """The answer is written and the request's body is still coming: close once the
        client stops sending, within the bounds (module doc)."""
        transport = self.transport
        if self.lingering or transport.is_closing():
            return
        self.lingering = True
        self.linger_left = LINGER_BYTES
        self._unset_keepalive_if_required()  # the keep-alive timer the answer armed
        self.stop_head_clock()  # this clock is shorter than the body's deadline
        self.flow.resume_reading()  # paused while the app was not reading the body
        if transport.can_write_eof():  # not over TLS: there a close_notify ends it
            transport.write_eof()
        self.linger_timer = self.loop.call_later(LINGER_SECS, transport.close)

    def discard(self, data: bytes) -> None:
        self.linger_left -= len(data)
        if self.linger_left < 0:
            self.transport.close()

    def stop_linger(self) -> None:
        if self.linger_timer is not None:
            self.linger_timer.cancel()
            self.linger_timer = None


class _CloseNoted:
    """Stands in for the transport while uvicorn ends an answer: writes go through, and its
    close is noted for the protocol to linger instead."""

    __slots__ = ("closed", "transport")

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.closed = False

    def write(self, data: bytes) -> None:
        self.transport.write(data)

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.closed = True


class _EndsLingering:
    """What both cycles below add to uvicorn's: an answer given before the request's body
    was all in says `connection: close` (each says it its own way), and uvicorn's close of the
    connection after it is the protocol's lingering close instead."""

    transport: asyncio.Transport
    scope: Any
    more_body: bool  # the request's body is still coming (uvicorn's)
    # The protocol's Linger.linger (its protocol sets it); without one, uvicorn's close.
    linger: Callable[[], None] | None = None

    def answers_early(self) -> bool:
        """The answer starts while the request's body is still coming, and the connection
        is to end after it (reads_the_rest)."""
        return self.more_body and not reads_the_rest(self.scope["headers"])

    async def end_lingering(self, send: Callable[[Any], Awaitable[None]], message: Any) -> None:
        """`send(message)`, uvicorn's, with its close turned into a linger while the
        request's body is still coming."""
        done = message["type"] == "http.response.body" and not message.get("more_body")
        if not done or not self.more_body:
            await send(message)
            return
        transport, noted = self.transport, _CloseNoted(self.transport)
        self.transport = noted  # type: ignore[assignment]
        try:
            await send(message)
        finally:
            self.transport = transport
        if not noted.closed:
            return
        if self.linger is None:
            transport.close()
        else:
            self.linger()


class LingerCycle(_EndsLingering, RequestResponseCycle):
    """uvicorn's httptools cycle, lingering (HeadDeadline._start_asgi_task makes it)."""

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and self.answers_early():
            self.keep_alive = False  # uvicorn then says `connection: close`, and closes
        await self.end_lingering(super().send, message)


class H11LingerCycle(_EndsLingering, H11Cycle):
    """uvicorn's h11 cycle, lingering (H11HeadDeadline.handle_events makes it): h11 closes
    after an answer that says `connection: close`."""

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and self.answers_early():
            headers = list(message.get("headers", ()))
            if CLOSE not in headers:
                message = {**message, "headers": [*headers, CLOSE]}
        await self.end_lingering(super().send, message)
