"""The request head deadline of `scheduler serve`'s HTTP protocols (HEAD_TIMEOUT_SECS).

Why: uvicorn bounds a connection's idle time only after a response (its keep-alive timeout,
cancelled by any byte that arrives); a connection that sends nothing, or half a head and
then a byte now and then, is held forever, and a few thousand of them use up the process's
file descriptors (then even /health fails). Here a head must be whole within the deadline,
counted from the connection's opening for its first request and from the first byte of each
later one. The body has its own deadline where the app reads it (http.BODY_READ_SECS).

When it passes, the connection is closed: with a 408 when part of a head has come and no
earlier request is still being answered (the client is in the middle of a request, and the
408 tells it why), else without a word: when nothing came, as uvicorn's keep-alive timeout
closes (a client that just sent a request on that connection would take an unasked-for 408
for its answer), and behind a pipelined request still running (it would read the 408 as that
request's answer).

Once the head is whole, the same clock bounds the body: a request must be whole within
BODY_SECS of its head, or the connection is closed (without a word: an answer may have gone
already). Where the app reads the body, its own deadline (http.BODY_READ_SECS, shorter)
answers 408 first; this one holds where no app reads: a request answered without its body
(a 404, /health with a Content-Length), whose body a client then trickles a byte at a time,
each byte cancelling uvicorn's keep-alive timer.

Cheap: one timer per connection, armed only when none is; a request notes the time its head
(then its body) is due, and the timer, when it fires, looks at that and arms itself again
for what is left.

Both protocols also end an answer given before its request's body was all in with a lingering
close (linger.py), so the client reads it rather than a reset.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle as Cycle
from uvicorn.server import ServerState

from scheduler.api.http import BODY_READ_SECS
from scheduler.api.lane import TEXT
from scheduler.api.linger import H11LingerCycle, Linger, LingerCycle
from scheduler.config import Settings

# For an app that does not say (create_app's does): Settings' default.
HEAD_TIMEOUT_SECS = Settings().head_timeout_secs
NO_HEAD = 0.0  # no head is being waited for: the next byte starts one
# A request's body must be whole this long after its head: after the app's own deadline.
BODY_SECS = BODY_READ_SECS + 10.0


def find_state(app: Any) -> Any:
    """The `state` of the Starlette app inside uvicorn's wrappers (proxy headers, ...)."""
    for _ in range(8):
        state = getattr(app, "state", None)
        if state is not None:
            return state
        app = getattr(app, "app", None)
    return None


def head_timeout_of(app: Any) -> float:
    timeout: float = getattr(find_state(app), "head_timeout_secs", HEAD_TIMEOUT_SECS)
    return timeout


def late_head_answer(default_headers: list[tuple[bytes, bytes]], timeout: float) -> bytes:
    body = b"request head not received within %g s" % timeout
    head = [STATUS_LINE[408]]
    for name, value in default_headers:
        head += (name, b": ", value, b"\r\n")
    head += (b"content-type: ", TEXT, b"\r\n")
    head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
    return b"".join((*head, body))


class HeadClock:
    """The deadline's state and timer, shared by the httptools and h11 protocols below."""

    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    server_state: ServerState
    cycle: Any  # uvicorn's cycle of the last request whose head came (None before the first)
    head_timeout = HEAD_TIMEOUT_SECS
    head_due = NO_HEAD  # > 0: when the head being read must be whole
    head_timer: asyncio.TimerHandle | None = None
    heard = True  # a byte has come since the connection opened
    in_body = False  # head_due is the body's deadline (the head is whole)

    def open_head_clock(self, app: Any) -> None:
        self.head_timeout = head_timeout_of(app)
        self.heard = False
        self.head_begins()

    def head_begins(self) -> None:
        self.head_due = self.loop.time() + self.head_timeout
        if self.head_timer is None:
            self.arm_head_timer()

    def body_begins(self) -> None:
        """The head is whole: the rest of the request, its body, is due within BODY_SECS."""
        self.in_body = True
        self.head_due = self.loop.time() + BODY_SECS

    def request_whole(self) -> None:
        self.in_body = False
        self.head_due = NO_HEAD

    def arm_head_timer(self) -> None:
        self.head_timer = self.loop.call_later(self.head_timeout, self.head_check)

    def head_check(self) -> None:
        self.head_timer = None
        if self.head_due <= NO_HEAD:
            return  # no head is being read: the next one arms the timer again
        left = self.head_due - self.loop.time()
        if left > 0:
            self.head_timer = self.loop.call_later(left, self.head_check)
        elif not self.transport.is_closing():
            answered = self.cycle is None or self.cycle.response_complete
            if not self.in_body and self.heard and answered:
                answer = late_head_answer(self.server_state.default_headers, self.head_timeout)
                self.transport.write(answer)
            self.transport.close()

    def stop_head_clock(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None


class HeadDeadline(HeadClock, Linger, HttpToolsProtocol):
    """uvicorn's httptools protocol with the head deadline and the lingering close (`serve
    --http httptools`, and under OneWriteProtocol and LaneProtocol)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.open_head_clock(self.app)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            self.discard(data)
            return
        # Any byte between two requests starts a head, a lone CRLF too (httptools calls no
        # on_message_begin for those): a trickle of them is bounded as well.
        self.heard = True
        if self.head_due == NO_HEAD:  # head_begins, inline: this runs for every request
            self.head_due = self.loop.time() + self.head_timeout
            if self.head_timer is None:
                self.arm_head_timer()
        super().data_received(data)

    def on_message_begin(self) -> None:
        # A request that begins in the packet that ended the one before (pipelined): no
        # byte comes after it, yet its head must be whole in time too.
        if self.head_due == NO_HEAD:
            self.head_begins()
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self.body_begins()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self.request_whole()
        super().on_message_complete()

    def _start_asgi_task(self, cycle: Cycle, app: Any) -> None:
        # uvicorn builds the cycle itself (no hook for its class); the subclass only overrides
        # `send`, so the instance can take it on before its task starts. OneWriteProtocol's
        # is a LingerCycle already.
        if not isinstance(cycle, LingerCycle):
            cycle.__class__ = LingerCycle
        cast(LingerCycle, cycle).linger = self.linger
        super()._start_asgi_task(cycle, app)

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_head_clock()
        self.stop_linger()
        super().connection_lost(exc)


class H11HeadDeadline(HeadClock, Linger, H11Protocol):
    """uvicorn's h11 protocol with the head deadline and the lingering close (`serve --http
    h11`). h11 says where a request is (Connection.their_state): IDLE until its head is
    whole."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.open_head_clock(self.app)

    def data_received(self, data: bytes) -> None:
        if self.lingering:
            self.discard(data)
            return
        self.heard = True
        if self.head_due == NO_HEAD and self.conn.their_state is h11.IDLE:
            self.head_begins()
        super().data_received(data)
        state = self.conn.their_state
        if state is h11.IDLE:
            return  # a head is still coming (or none has begun)
        if state is h11.SEND_BODY:
            if not self.in_body:
                self.body_begins()
            return
        if self.in_body:
            self.request_whole()
        pipelined, _ = self.conn.trailing_data  # kept unparsed until this request is answered
        if self.conn.their_state is h11.DONE and pipelined and b"\r\n\r\n" not in pipelined:
            if self.head_due <= NO_HEAD:
                self.head_begins()  # the next request's head has begun and is not whole
        else:
            self.head_due = NO_HEAD

    def handle_events(self) -> None:
        super().handle_events()
        # A cycle it made (uvicorn builds it; no hook for its class) lingers: as above.
        cycle = self.cycle
        if cycle is not None and not isinstance(cycle, H11LingerCycle):
            cycle.__class__ = H11LingerCycle
            cast(H11LingerCycle, cycle).linger = self.linger

    def connection_lost(self, exc: Exception | None) -> None:
        self.stop_head_clock()
        self.stop_linger()
        super().connection_lost(exc)
