"""The lingering close of `scheduler serve`'s protocols (scheduler/api/linger.py), step by step
over a raw socket, on each protocol `serve --http` offers. An answer given before the
request's body was all in: to a keep-alive request whose declared body is within
linger.LINGER_BYTES, the rest is read and the connection goes on; to any other, it says
`connection: close`, the server reads and drops the rest (the client's writes meet no reset)
and closes once the client is done; a client that goes on sending is cut past LINGER_BYTES,
one that trickles after linger.LINGER_SECS; and nothing of what was dropped is kept.
test_server_oversize.py has the clients' view."""

from __future__ import annotations

import socket
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from scheduler.api.app import create_app
from scheduler.api.deadline import H11HeadDeadline, HeadDeadline
from scheduler.api.lane import MAX_BODY
from scheduler.api.linger import LINGER_BYTES, MiB
from scheduler.api.server import LaneProtocol, OneWriteProtocol
from tests.conftest import SettingsFactory
from tests.servers import serving

LIMIT = 4096  # MAX_BODY_BYTES here
PROTOCOLS = {
    "lane": LaneProtocol,
    "one-write": OneWriteProtocol,
    "httptools": HeadDeadline,
    "h11": H11HeadDeadline,
}
CHUNK = b" " * (64 * 1024)
# What may still go into the socket buffers (the client's and the server's) once the server
# stops reading: loopback's grow to a few MiB each.
BUFFERS = 32 * MiB


@dataclass(frozen=True)
class Served:
    port: int
    app: Any
    protocol: str


@pytest.fixture(params=sorted(PROTOCOLS))
def served(request: pytest.FixtureRequest, make_settings: SettingsFactory) -> Iterator[Served]:
    """An API whose job bodies are limited to LIMIT bytes, on one of the protocols."""
    app = create_app(make_settings(max_body_bytes=LIMIT))
    with serving(app, http=PROTOCOLS[request.param]) as port:
        yield Served(port, app, request.param)


def head(framing: str, close: bool = False) -> bytes:
    lines = ["POST /jobs HTTP/1.1", "Host: t", "Content-Type: application/json", framing]
    return ("\r\n".join([*lines, *(["Connection: close"] if close else [])]) + "\r\n\r\n").encode()


def read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """(head, body) of one answer with a Content-Length."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole answer: {received!r}"
        received += chunk
    answer_head, _, body = received.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in answer_head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return answer_head, body


def early_answer(port: int, framing: str, close: bool = False) -> tuple[socket.socket, bytes]:
    """A connection that sent a head and the first KiB of a body over LIMIT, and the head of
    the answer it read: the 413, given before the rest of the body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head(framing, close) + b" " * 1024)
    answer_head, _ = read_answer(sock)
    assert answer_head.startswith(b"HTTP/1.1 413 "), answer_head
    return sock, answer_head


def chunk_framed(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.mark.parametrize("declared", [60_000, 2 * MiB], ids=["lane-sized", "asgi-sized"])
def test_an_early_answer_to_a_client_that_asked_to_close_reaches_it_then_the_server_closes(
    served: Served, declared: int
) -> None:
    """The 413 comes before the body; the rest is read and dropped, with no reset (it would
    have made the client's kernel drop the 413), and the server closes when the client is
    done. A declared size the lane takes (at most 64 KiB) is refused by the lane on the
    lane's protocol."""
    before = served.app.state.lane.served
    sock, answer_head = early_answer(served.port, f"Content-Length: {declared}", close=True)
    with sock:
        assert b"\r\nconnection: close" in answer_head.lower()
        sock.sendall(b" " * (declared - 1024))  # no reset: the server still reads
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""  # then an orderly close, not a reset
    lane_took = served.protocol == "lane" and declared <= MAX_BODY
    assert served.app.state.lane.served - before == (1 if lane_took else 0)


@pytest.mark.parametrize("declared", [60_000, LINGER_BYTES], ids=["lane-sized", "at-the-bound"])
def test_a_keep_alive_client_whose_body_is_within_the_bound_keeps_its_connection(
    served: Served, declared: int
) -> None:
    """As uvicorn always did, and Go's net/http does up to 256 KB: the rest is read and
    dropped, and the connection serves the next request."""
    sock, answer_head = early_answer(served.port, f"Content-Length: {declared}")
    with sock:
        assert b"connection: close" not in answer_head.lower()
        sock.sendall(b" " * (declared - 1024) + b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        answer_head, _ = read_answer(sock)
        assert answer_head.startswith(b"HTTP/1.1 200 "), answer_head


def test_a_chunked_body_over_the_limit_ends_the_connection_once_the_client_is_done(
    served: Served,
) -> None:
    """Its size is not known: the connection ends, lingering."""
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=30)
    with sock:
        sock.sendall(head("Transfer-Encoding: chunked") + chunk_framed(b" " * (2 * LIMIT)))
        answer_head, _ = read_answer(sock)
        assert answer_head.startswith(b"HTTP/1.1 413 ")
        assert b"\r\nconnection: close" in answer_head.lower()
        for _ in range(16):
            sock.sendall(chunk_framed(CHUNK))
        sock.sendall(b"0\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(1) == b""


@pytest.mark.parametrize("framing", ["Content-Length: 1000000000000", "Transfer-Encoding: chunked"])
def test_a_client_that_keeps_sending_is_cut_past_the_bound_and_nothing_is_kept(
    served: Served, framing: str
) -> None:
    sock = socket.create_connection(("127.0.0.1", served.port), timeout=30)
    first = chunk_framed(b" " * (2 * LIMIT)) if "chunked" in framing else b" " * (2 * LIMIT)
    with sock:
        sock.sendall(head(framing) + first)
        answer_head, _ = read_answer(sock)
        assert answer_head.startswith(b"HTTP/1.1 413 ")
        tracemalloc.start()
        sent, cut = 0, None
        try:
            while sent < LINGER_BYTES + 2 * BUFFERS:
                sock.sendall(chunk_framed(CHUNK) if "chunked" in framing else CHUNK)
                sent += len(CHUNK)
        except OSError as exc:  # the server closed: a reset, then a broken pipe
            cut = exc
        finally:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
    assert cut is not None, f"{sent} bytes sent after the answer, and the server still reads"
    assert sent <= LINGER_BYTES + BUFFERS
    # The server and this client share the process: what was traced is both.
    assert peak < LINGER_BYTES / 4, f"{peak} bytes held while {sent} were dropped"


def test_a_client_that_trickles_is_cut_after_the_time_bound(make_settings: SettingsFactory) -> None:
    app = create_app(make_settings(max_body_bytes=LIMIT))
    with serving(app) as port:
        sock, _ = early_answer(port, "Content-Length: 1000000000000")
        with sock:
            deadline = time.monotonic() + 60
            with pytest.raises(OSError):  # once cut: a reset, then a broken pipe
                while time.monotonic() < deadline:
                    sock.sendall(b" ")
                    time.sleep(0.2)
