"""uvicorn's HTTP protocol (httptools), writing each response's head and body in one write.

Why: uvicorn writes the status line and headers when the app sends `http.response.start`,
then the body when it sends `http.response.body`: two writes, so two send() syscalls, for
every response. The API's responses are whole bodies with a Content-Length, so holding the
head until the body comes makes it one write. `scheduler serve` uses this protocol when
httptools is installed (docs/PERFORMANCE.md has the figures).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from typing import Any

import httptools
from redis.exceptions import NoScriptError
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle

from scheduler.api import http
from scheduler.api.deadline import HeadDeadline, find_state
from scheduler.api.hot import Charge
from scheduler.api.http import body_late, length_of, too_large
from scheduler.api.lane import MAX_BODY, TEXT, Answer, HotRequest, Lane, Route
from scheduler.api.linger import LingerCycle
from scheduler.store.connection.protocol import Reply
from scheduler.store.errors import PartsApart, Unauthorized

log = logging.getLogger("scheduler.api")


class _HeadBuffer:
    """Stands in for the transport while uvicorn writes a response head."""

    __slots__ = ("head",)

    def __init__(self) -> None:
        self.head = b""

    def write(self, data: bytes) -> None:
        self.head += data


class OneWriteCycle(LingerCycle):
    held_head = b""

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start" and not self.response_started:
            transport, buffer = self.transport, _HeadBuffer()
            self.transport = buffer  # type: ignore[assignment]
            try:
                await super().send(message)
            finally:
                self.transport = transport
            self.held_head = buffer.head
            return
        head, self.held_head = self.held_head, b""
        if head and message["type"] == "http.response.body":
            if self.chunked_encoding is False and self.scope["method"] != "HEAD":
                # uvicorn counts what it writes against the Content-Length: count the head in.
                self.expected_content_length += len(head)
                message = {**message, "body": head + message.get("body", b"")}
            elif not self.disconnected:
                self.transport.write(head)
        await super().send(message)


class OneWriteProtocol(HeadDeadline):
    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        # uvicorn builds the cycle itself (no hook for its class); the subclass only
        # overrides `send`, so the instance can take it on before its task starts.
        cycle.__class__ = OneWriteCycle
        super()._start_asgi_task(cycle, app)


class _NoEvent:
    """uvicorn's protocol sets its cycle's message event on body, end and disconnect: a lane
    request without a body waits for none of them."""

    def set(self) -> None:
        return None


_NO_EVENT = _NoEvent()


class LaneCycle:
    """A request the hot lane serves, as uvicorn's protocol sees a cycle: the attributes it
    reads and sets (response_complete, disconnected, keep_alive, body, more_body,
    message_event) keep their meaning, so keep-alive, pipelining, shutdown, disconnects and
    the body's arrival work as they do for ASGI requests."""

    # No reference back to the request: the request holds `read_body`, and a cycle per
    # request left every answer to the cyclic GC, whose collections then took up to 38 ms
    # (a submit's p99 went from ~9 to ~25 ms).
    __slots__ = (
        "body",
        "disconnected",
        "keep_alive",
        "message_event",
        "more_body",
        "protocol",
        "response_complete",
    )

    def __init__(self, protocol: LaneProtocol, keep_alive: bool) -> None:
        self.protocol = protocol
        self.keep_alive = keep_alive
        self.body = bytearray()
        self.more_body = True
        self.response_complete = self.disconnected = False
        self.message_event: asyncio.Event | _NoEvent = _NO_EVENT

    def start(self, route: Route, request: HotRequest) -> None:
        """Answer from the reply's callback when the call is one Redis command it could send
        (Route.send), else in a task of its own, from the head on: the call reads the body if
        and when it needs it (a stranger's report is refused before its body arrives)."""
        lane = self.protocol.lane
        lane.served += 1
        try:
            sent = lane.send(route, request)
        except Exception:
            self.write(self.failed())
            return
        if sent is not None:
            reply, finish = sent
            reply.on_done(partial(self.settle, route, request, finish))
            return
        self.run_task(route, request)

    def run_task(self, route: Route, request: HotRequest) -> None:
        if route.has_body:
            self.message_event = asyncio.Event()
            request.read_body = self.read_body
        tasks = self.protocol.tasks  # uvicorn's: a graceful shutdown waits for them
        task = self.protocol.loop.create_task(self.run(route, request))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def settle(
        self,
        route: Route,
        request: HotRequest,
        finish: Callable[[Any], Answer],
        reply: Reply,
    ) -> None:
        try:
            answer = self.protocol.lane.settled(request, reply, finish)
        except (NoScriptError, PartsApart, Unauthorized):
            # Redis forgot the script (restarted, flushed): the handler loads it. A job that
            # keeps parts apart: the handler reads them (models/record.py). A wrong
            # credential: the handler's refusal counts it (guesses.py), which takes a task.
            self.run_task(route, request)
            return
        except Exception:
            answer = self.failed()
        self.write(answer)

    async def read_body(self, limit: int, charge: Charge) -> bytes:
        """As http.read_body reads an ASGI body: each part charged as it arrives (the report
        budget counts a trickled body's bytes, not its declared size), 413 past `limit`, 408
        when not whole within BODY_READ_SECS. The deadline is armed only if the body is not
        all in yet: it mostly is (head and body in one packet), and arming an asyncio
        timeout per request was ~9% of a submit's API time."""
        event = self.message_event
        assert isinstance(event, asyncio.Event)
        seen, deadline = 0, 0.0
        while True:
            if self.disconnected:
                raise ClientDisconnect()
            if len(self.body) > limit:
                raise too_large(limit)
            charge(len(self.body) - seen)
            seen = len(self.body)
            if not self.more_body:
                return bytes(self.body)
            deadline = deadline or self.protocol.loop.time() + http.BODY_READ_SECS
            try:
                async with asyncio.timeout_at(deadline):
                    await event.wait()
            except TimeoutError:
                raise body_late() from None
            event.clear()

    async def run(self, route: Route, request: HotRequest) -> None:
        try:
            answer = await self.protocol.lane.answer(route, request)
        except Exception:
            answer = self.failed()
        self.write(answer)

    def failed(self) -> Answer:
        """A bug's answer, after logging it (with the exception being handled)."""
        log.exception("Exception in the hot lane")
        self.keep_alive = False
        return 500, b"Internal Server Error", TEXT, []

    def write(self, answer: Answer) -> None:
        status, body, content_type, headers = answer
        transport = self.protocol.transport
        self.response_complete = True
        if self.disconnected or transport.is_closing():
            return
        head = [STATUS_LINE[status]]
        for name, value in (*self.protocol.server_state.default_headers, *headers):
            head += (name, b": ", value, b"\r\n")
        head += (b"content-length: %d\r\ncontent-type: " % len(body), content_type, b"\r\n")
        if not self.keep_alive:
            head.append(b"connection: close\r\n")
        transport.write(b"".join((*head, b"\r\n", body)))
        if not self.keep_alive:
            if self.more_body:  # answered before its body was all in (a refusal)
                self.protocol.linger()  # so that the client reads it (linger.py)
            else:
                transport.close()
        self.protocol.on_lane_response_complete()


def lane_off_because(access_log: bool, root_path: str, limit_concurrency: int | None) -> str:
    """Why the server's settings keep every request off the hot lane ("" when they do not):
    the lane writes no access lines, and leaves a root path and a concurrency limit (whose
    503s uvicorn answers) to uvicorn. `scheduler serve` logs it at start."""
    if access_log:
        return "--access-log (the lane writes no access lines)"
    if root_path:
        return "--root-path"
    if limit_concurrency is not None:
        return "--limit-concurrency"
    return ""


def find_lane(app: Any) -> Lane | None:
    """The Lane of the Starlette app inside uvicorn's wrappers (proxy headers, ...), if any."""
    lane: Lane | None = getattr(find_state(app), "lane", None)
    return lane


class LaneProtocol(OneWriteProtocol):
    """OneWriteProtocol that serves the hot lane's requests itself (lane.py)."""

    lane: Lane
    # The keep-alive timeout after a lane response, kept lazily: uvicorn arms a timer when a
    # response completes and cancels it when the next request arrives, ~2.3 µs of the ~27 µs
    # of Python a poll costs. Here a response notes when the connection went idle, and one
    # timer per connection, armed only when none is, checks that when it fires.
    idle_since = 0.0  # 0: a request is in progress (or none answered yet by the lane)
    idle_timer: asyncio.TimerHandle | None = None

    def _unset_keepalive_if_required(self) -> None:
        self.idle_since = 0.0
        super()._unset_keepalive_if_required()

    def on_lane_response_complete(self) -> None:
        """uvicorn's on_response_complete, with the lazy keep-alive timeout."""
        self.server_state.total_requests += 1
        if self.transport.is_closing() or self.lingering:
            return
        self._unset_keepalive_if_required()
        self.flow.resume_reading()
        if self.pipeline:
            cycle, app = self.pipeline.pop()
            self._start_asgi_task(cycle, app)
            return
        self.idle_since = self.loop.time()
        if self.idle_timer is None:
            self.idle_timer = self.loop.call_later(self.timeout_keep_alive, self._idle_check)

    def _idle_check(self) -> None:
        self.idle_timer = None
        if not self.idle_since:
            return  # busy: the response that ends this request arms the check again
        left = self.idle_since + self.timeout_keep_alive - self.loop.time()
        if left > 0:
            self.idle_timer = self.loop.call_later(left, self._idle_check)
        else:
            self.timeout_keep_alive_handler()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        found = self._lane_request()
        if found is None:
            super().on_headers_complete()
            return
        self.body_begins()  # the head is whole (HeadDeadline's, which the lane skips)
        route, request = found
        self.scope["method"] = request.method
        keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
        cycle = LaneCycle(self, keep_alive)
        self.cycle = cycle
        cycle.start(route, request)

    def _lane_request(self) -> tuple[Route, HotRequest] | None:
        lane = self._lane()
        if lane is None or not self._lane_may_serve():
            return None
        url = httptools.parse_url(self.url)
        if b"%" in url.path:
            return None
        found = lane.route(self.parser.get_method(), url.path.decode("ascii"), url.query or b"")
        if found is None:
            return None
        route, request = found
        request.headers = self.headers
        client = self.client  # uvicorn's: the transport's peer, None on a Unix socket
        request.peer = client[0] if client else None
        if route.has_body and not self._small_sized_body():
            return None
        return route, request

    def _lane(self) -> Lane | None:
        """The app's Lane, found once per connection; None when the server's settings keep
        every request off the lane (lane_off_because)."""
        try:
            return self.lane
        except AttributeError:
            off = lane_off_because(
                self.config.access_log, self.config.root_path, self.config.limit_concurrency
            )
            self.lane = None if off else find_lane(self.app)  # type: ignore[assignment]
            return self.lane

    def _lane_may_serve(self) -> bool:
        """Only a request uvicorn would start at once, on a plain connection: the rest
        (pipelined behind a running request, a full write buffer, an upgrade) is uvicorn's,
        and so is what follows, in the same packet, an answer that closed the connection."""
        previous = self.cycle
        return (
            (previous is None or previous.response_complete)
            and not self.transport.is_closing()
            and not self.pipeline
            and not self.flow.write_paused
            and not self.expect_100_continue
            and not self.parser.should_upgrade()
        )

    def _small_sized_body(self) -> bool:
        declared = ""
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return False
            if name == b"content-length":
                if declared:
                    return False
                declared = value.decode("latin-1")
        size = length_of(declared)
        return size is not None and size <= MAX_BODY
