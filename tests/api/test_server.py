"""`scheduler serve`'s HTTP protocol (scheduler/api/server.py): uvicorn's httptools protocol
writing each response's head and body in one write, and answering exactly as before."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.protocols.http.flow_control import FlowControl

from scheduler.api.server import OneWriteCycle, OneWriteProtocol
from tests.servers import exchange, serving


class RecordingTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def cycle(transport: RecordingTransport, method: str = "GET") -> OneWriteCycle:
    """The cycle of a request that is whole (its body, if any, all in)."""
    scope: Any = {"method": method, "http_version": "1.1", "path": "/", "query_string": b""}
    made = OneWriteCycle(
        scope=scope,
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=logging.getLogger("test"),
        access_logger=logging.getLogger("test.access"),
        access_log=False,
        default_headers=[],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=True,
        on_response=lambda: None,
    )
    made.more_body = False
    return made


def start(headers: list[tuple[bytes, bytes]]) -> dict[str, Any]:
    return {"type": "http.response.start", "status": 200, "headers": headers}


def body(data: bytes, more: bool = False) -> dict[str, Any]:
    return {"type": "http.response.body", "body": data, "more_body": more}


def test_a_sized_response_leaves_in_one_write() -> None:
    transport = RecordingTransport()

    async def respond() -> None:
        c = cycle(transport)
        await c.send(start([(b"content-length", b"5")]))
        assert transport.writes == []  # the head waits for the body
        await c.send(body(b"hello"))
        assert c.response_complete

    asyncio.run(respond())
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello"]


def test_a_body_in_parts_sends_the_head_with_the_first_part() -> None:
    transport = RecordingTransport()

    async def respond() -> None:
        c = cycle(transport)
        await c.send(start([(b"content-length", b"4")]))
        await c.send(body(b"ab", more=True))
        await c.send(body(b"cd"))
        assert c.response_complete

    asyncio.run(respond())
    assert transport.writes == [b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nab", b"cd"]


def test_a_body_longer_than_its_content_length_is_still_refused() -> None:
    async def respond() -> None:
        c = cycle(RecordingTransport())
        await c.send(start([(b"content-length", b"2")]))
        await c.send(body(b"abc"))

    with pytest.raises(RuntimeError, match="longer than Content-Length"):
        asyncio.run(respond())


@pytest.mark.parametrize(
    ("method", "headers", "expected"),
    [
        # HEAD: no body on the wire, the head alone.
        ("HEAD", [(b"content-length", b"5")], [b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"]),
        # No Content-Length: chunked, the head first, then the framed chunk.
        (
            "GET",
            [],
            [
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
                b"5\r\nhello\r\n0\r\n\r\n",
            ],
        ),
    ],
)
def test_heads_without_a_sized_body_are_written_as_uvicorn_writes_them(
    method: str, headers: list[tuple[bytes, bytes]], expected: list[bytes]
) -> None:
    transport = RecordingTransport()

    async def respond() -> None:
        c = cycle(transport, method)
        await c.send(start(headers))
        await c.send(body(b"hello"))

    asyncio.run(respond())
    assert transport.writes == expected


# The protocol in a real uvicorn, over a real socket.


async def hello(request: Request) -> Response:
    return PlainTextResponse("hello " + request.query_params.get("n", ""))


async def stream(request: Request) -> Response:
    async def parts() -> Any:
        yield b"a"
        yield b"b"

    return StreamingResponse(parts())


async def boom(request: Request) -> Response:
    raise RuntimeError("a bug")


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    app = Starlette(routes=[Route("/hello", hello), Route("/stream", stream), Route("/boom", boom)])
    with serving(app, OneWriteProtocol) as port:
        yield port


def test_pipelined_requests_on_one_connection_get_their_own_answers_in_order(
    server: int,
) -> None:
    requests = b"".join(f"GET /hello?n={n} HTTP/1.1\r\nHost: t\r\n\r\n".encode() for n in range(3))
    received = exchange(server, requests, b"hello ", count=3)
    assert received.count(b"HTTP/1.1 200 OK") == 3
    assert [part[:7] for part in received.split(b"\r\n\r\n")[1:]] == [
        b"hello 0",
        b"hello 1",
        b"hello 2",
    ]


def test_streaming_head_and_unsized_answers_keep_their_framing(server: int) -> None:
    streamed = exchange(server, b"GET /stream HTTP/1.1\r\nHost: t\r\n\r\n", b"0\r\n\r\n")
    assert b"transfer-encoding: chunked" in streamed
    assert streamed.endswith(b"\r\n\r\n1\r\na\r\n1\r\nb\r\n0\r\n\r\n")
    head = exchange(server, b"HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n", b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")


def test_an_app_error_is_still_a_500_from_uvicorn(server: int) -> None:
    received = exchange(server, b"GET /boom HTTP/1.1\r\nHost: t\r\n\r\n", b"Error")
    assert received.startswith(b"HTTP/1.1 500 Internal Server Error")
    assert received.endswith(b"Internal Server Error")
