"""Slow and silent connections against `scheduler serve` (docs/SECURITY.md; issue 22, attack
8): a stranger who opens sockets and sends half a request head, or nothing, must not hold
them for ever, or a few hundred of them use up the server's file descriptors and even /health
goes unanswered. Each attack runs against a real `scheduler serve` process on each of its
HTTP protocols (the hot lane, the plain httptools paths, h11) with a short HEAD_TIMEOUT_SECS,
and checks the server closed every such socket, kept answering /health throughout, and
changed nothing in Redis. No timing is asserted tightly: each wait is for a condition, with a
deadline many times the setting."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from scheduler.api import deadline
from scheduler.api.deadline import H11HeadDeadline, HeadDeadline
from scheduler.api.server import LaneProtocol, OneWriteProtocol
from scheduler.store.keys import Keys
from tests.processes import PortTaken, scheduler_env, stop, wait_http
from tests.redis_server import free_port
from tests.servers import serving

HEAD_TIMEOUT = 2  # HEAD_TIMEOUT_SECS of the servers here
PATIENCE = 30.0  # how long a test waits for what the deadline should bring about
FDS = 256  # the server's file descriptor limit: two waves of WAVE sockets exceed it
WAVE = 150
HALF_HEADS = [
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
    b"POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Le",
    b"GET /jobs?node_id=n1&status=pending HTTP/1.1\r\n",
    b"\r\n",
    b"",  # nothing at all
]


@pytest.fixture(scope="module", params=["lane", "one-write", "httptools", "h11"])
def api(request: pytest.FixtureRequest, redis_url: str) -> Iterator[tuple[str, str]]:
    """`scheduler serve --http <protocol>` with HEAD_TIMEOUT_SECS=2 and at most FDS file
    descriptors; yields its URL and its Redis prefix."""
    prefix = f"slow{request.param.replace('-', '')}{free_port()}"
    env = scheduler_env(redis_url, prefix, HEAD_TIMEOUT_SECS=str(HEAD_TIMEOUT))
    for _ in range(3):  # a port another test's server took first: another one
        port = free_port()
        cmd = [sys.executable, "-m", "scheduler", "serve", "--host", "127.0.0.1", "--port"]
        cmd += [str(port), "--workers", "1", "--http", request.param, "--log-level", "warning"]
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.DEVNULL,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (FDS, FDS)),
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_http(f"{url}/health", proc=proc)
        except PortTaken:
            stop(proc)
            continue
        try:
            yield url, prefix
        finally:
            stop(proc)
        return
    raise RuntimeError("no free port for the server in three tries")


def state(redis_url: str, prefix: str) -> dict[bytes, bytes]:
    """Every key of the deployment with its type: a refused attack changes none (the
    request metrics and the libraries' marks aside: the test's own GET /health calls add to
    them, and their flush marks the library in use)."""
    client = redis.Redis.from_url(redis_url)
    counts = {Keys(prefix).request_stats.encode(), Keys(prefix).libraries.encode()}
    try:
        found = client.scan_iter(match=f"{{{prefix}}}:*")
        return {key: client.type(key) for key in found if key not in counts}
    finally:
        client.close()


def connect(port: int, sent: bytes) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if sent:
        sock.sendall(sent)
    sock.setblocking(False)
    return sock


def closed_by_server(sock: socket.socket, received: dict[socket.socket, bytes]) -> bool:
    """Read what is there; True once the server has closed (EOF or reset)."""
    while select.select([sock], [], [], 0)[0]:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return True
        if not chunk:
            return True
        received[sock] = received.get(sock, b"") + chunk
    return False


def wait_all_closed(url: str, socks: list[socket.socket]) -> dict[socket.socket, bytes]:
    """Wait (up to PATIENCE) until the server has closed every socket, asking /health all the
    while; what each socket received."""
    received: dict[socket.socket, bytes] = {}
    open_ = list(socks)
    deadline = time.monotonic() + PATIENCE
    while open_:
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        open_ = [sock for sock in open_ if not closed_by_server(sock, received)]
        assert time.monotonic() < deadline, f"{len(open_)} of {len(socks)} sockets still open"
        time.sleep(0.2)
    return received


@contextlib.contextmanager
def sockets(port: int, heads: list[bytes]) -> Iterator[list[socket.socket]]:
    opened = [connect(port, head) for head in heads]
    try:
        yield opened
    finally:
        for sock in opened:
            sock.close()


def test_sockets_with_half_a_head_or_nothing_are_closed_and_health_answers(
    api: tuple[str, str], redis_url: str
) -> None:
    """Two waves of WAVE sockets, more than the server's FDS file descriptors together: the
    first wave is closed by the deadline before the second needs the descriptors."""
    url, prefix = api
    port = int(url.rsplit(":", 1)[1])
    before = state(redis_url, prefix)
    for _ in range(2):
        heads = [HALF_HEADS[i % len(HALF_HEADS)] for i in range(WAVE)]
        with sockets(port, heads) as opened:
            received = wait_all_closed(url, opened)
        for sock, head in zip(opened, heads, strict=True):
            answer = received.get(sock, b"")
            if head == b"\r\n" and answer.startswith(b"HTTP/1.1 400 "):
                continue  # h11 takes a lone CRLF for an empty request line: refused at once
            if head:  # part of a head came: 408, and why
                assert answer.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), answer
                assert answer.endswith(b"request head not received within 2 s"), answer
            else:  # nothing came: closed without a word, as an idle keep-alive is
                assert answer == b""
    assert state(redis_url, prefix) == before
    assert httpx.get(f"{url}/jobs", timeout=10).json() == []


def test_a_head_trickled_a_byte_at_a_time_is_closed(api: tuple[str, str], redis_url: str) -> None:
    url, prefix = api
    before = state(redis_url, prefix)
    with sockets(int(url.rsplit(":", 1)[1]), [b"POST /jobs HTTP/1.1\r\nX-Slow: "]) as (sock,):
        received: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + PATIENCE
        while not closed_by_server(sock, received):
            assert time.monotonic() < deadline, "a trickled head is held"
            with contextlib.suppress(OSError):  # the server may close between two checks
                sock.send(b"a")
            time.sleep(0.2)
    assert received.get(sock, b"").startswith(b"HTTP/1.1 408 ")
    assert state(redis_url, prefix) == before


def test_a_keep_alive_connections_second_head_that_stalls_is_closed(
    api: tuple[str, str], redis_url: str
) -> None:
    url, prefix = api
    before = state(redis_url, prefix)
    first = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with sockets(int(url.rsplit(":", 1)[1]), [first]) as (sock,):
        received: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + PATIENCE
        while b"\r\n\r\n" not in received.get(sock, b""):
            assert not closed_by_server(sock, received) or b"\r\n\r\n" in received[sock]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert received[sock].startswith(b"HTTP/1.1 200 OK\r\n")
        received.clear()
        sock.sendall(b"GET /jobs?node_id=n1&status=pending HTTP/1.1\r\nHost: 1")
        wait_all_closed(url, [sock])
    assert state(redis_url, prefix) == before


def test_a_slow_head_that_comes_whole_within_the_deadline_is_served(
    api: tuple[str, str],
) -> None:
    url, _ = api
    parts = [b"GET /hea", b"lth HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n", b"\r\n"]
    with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10) as sock:
        for part in parts:  # ~0.3 s in all, against a 2 s deadline
            sock.sendall(part)
            time.sleep(0.1)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            assert chunk, answer
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")


async def held(request: Request) -> Response:
    await asyncio.sleep(PATIENCE)  # answered after the test is over
    return PlainTextResponse("late")


@pytest.mark.parametrize(
    "protocol", [LaneProtocol, OneWriteProtocol, HeadDeadline, H11HeadDeadline]
)
def test_no_408_is_written_while_a_pipelined_request_is_being_answered(protocol: type) -> None:
    """A half head behind a request still running: the connection is closed all the same,
    but without the 408, which the client would read as the running request's answer."""
    app = Starlette(routes=[Route("/held", held)])
    app.state.head_timeout_secs = 0.5
    with serving(app, protocol) as port, sockets(port, [b""]) as (sock,):
        sock.sendall(b"GET /held HTTP/1.1\r\nHost: t\r\n\r\nGET /held HTTP/1.1\r\nHo")
        received: dict[socket.socket, bytes] = {}
        deadline = time.monotonic() + PATIENCE
        while not closed_by_server(sock, received):
            assert time.monotonic() < deadline, "a half head behind a running request is held"
            time.sleep(0.1)
    assert received.get(sock, b"") == b""


async def answered(request: Request) -> Response:
    return PlainTextResponse("answered without reading the body")


@pytest.mark.parametrize(
    "protocol", [LaneProtocol, OneWriteProtocol, HeadDeadline, H11HeadDeadline]
)
def test_a_body_trickled_after_the_answer_is_cut(
    protocol: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request answered without its body (a 404, /health with a Content-Length), whose
    body then comes a byte at a time: each byte cancels uvicorn's keep-alive timer, and the
    head is whole, so only the body's deadline (deadline.BODY_SECS, short here) ends it
    (found by the review: it was held for as long as the trickle went on)."""
    monkeypatch.setattr(deadline, "BODY_SECS", 1.0)
    app = Starlette(routes=[Route("/answered", answered, methods=["POST"])])
    app.state.head_timeout_secs = 0.5
    head = b"POST /answered HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\nx"
    with serving(app, protocol) as port, sockets(port, [head]) as (sock,):
        received: dict[socket.socket, bytes] = {}
        deadline_at = time.monotonic() + PATIENCE
        while not closed_by_server(sock, received):
            assert time.monotonic() < deadline_at, "a trickled body held the connection"
            with contextlib.suppress(OSError):
                sock.sendall(b"x")
            time.sleep(0.1)
    assert received.get(sock, b"").startswith(b"HTTP/1.1 200 OK\r\n")
