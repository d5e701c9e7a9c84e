"""An ASGI app served by a real uvicorn in a thread of the test process, over a real socket:
for what only a real server shows (scheduler serve's protocols: the hot lane, one write per
response)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from scheduler.api.lane import MAX_BODY
from scheduler.api.routes import TABLE
from scheduler.api.server import LaneProtocol
from tests.redis_server import free_port


@contextmanager
def serving(
    app: Any,
    http: type = LaneProtocol,
    access_log: bool = False,
    timeout_keep_alive: int = 5,
    proxy_headers: bool = False,
    **options: Any,
) -> Iterator[int]:
    """`app` under uvicorn with the `http` protocol class (and uvicorn.Config `options`);
    yields its port. No access log and no proxy headers by default, as `scheduler serve`:
    with an access log the lane leaves every request to ASGI; the client's address is the
    app's (api/client_address.py), not uvicorn's."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=http,
        log_level="critical",
        access_log=access_log,
        timeout_keep_alive=timeout_keep_alive,
        proxy_headers=proxy_headers,
        **options,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield port
    finally:
        # Not joined: uvicorn notices should_exit at its next tick (0.1 s) and then shuts
        # down, ~0.15 s a server, ~1 min of the suite's time if waited for each time. The
        # server's port, prefix and app are its own, so the next test does not meet it.
        server.should_exit = True
        STOPPING.append(thread)


# Servers told to stop and still shutting down: conftest waits for them at the session's end.
STOPPING: list[threading.Thread] = []


def exchange(port: int, raw: bytes, until: bytes, count: int = 1) -> bytes:
    """Send `raw` on a new connection; what came back once `until` was seen `count` times
    (or the server closed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(raw)
        received = b""
        while received.count(until) < count:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
        return received


def lane_takes(request: httpx.Request) -> bool:
    """Whether the hot lane must serve `request` (one at a time on a connection, as httpx
    sends them): the route table says the lane serves its method and path with its query,
    its path is not percent-encoded, and a body it reads has one Content-Length of at most
    lane.MAX_BODY and no `Expect: 100-continue`."""
    path, _, query = request.url.raw_path.partition(b"?")
    resolved = TABLE.resolve(request.method, path.decode("ascii"))
    spec = resolved[0].methods.get(request.method) if resolved else None
    if b"%" in path or spec is None or spec.hot is None or spec.hot.takes(query) is None:
        return False
    if request.headers.get("expect", "").lower() == "100-continue":
        return False
    if request.method in ("GET", "HEAD"):
        return True
    sizes = request.headers.get_list("content-length")
    chunked = "transfer-encoding" in request.headers
    return len(sizes) == 1 and sizes[0].isdigit() and int(sizes[0]) <= MAX_BODY and not chunked


def lane_checked_client(app: Any, url: str, **options: Any) -> httpx.Client:
    """An httpx client of `app` served through the lane (`serving`) that checks, on every
    answer, that the lane served the request if and only if lane_takes says it must: a test
    through the lane cannot pass by falling back to ASGI, nor the lane take what it must
    not. Requests sent from several threads at once are not told apart (one counter).
    `options` go to httpx.Client (a transport bound to another local address, say)."""
    lane = app.state.lane
    lock = threading.Lock()
    flight = {"in": 0, "started": 0}

    def on_request(request: httpx.Request) -> None:
        with lock:
            flight["in"] += 1
            flight["started"] += 1
            request.extensions["lane_check"] = (lane.served, flight["started"], flight["in"])

    def on_response(response: httpx.Response) -> None:
        request = response.request
        served_before, started, in_flight = request.extensions["lane_check"]
        with lock:
            alone = in_flight == 1 and flight["started"] == started
            flight["in"] -= 1
        if alone:
            expected = 1 if lane_takes(request) else 0
            served = lane.served - served_before
            assert served == expected, f"{request.method} {request.url}: lane served {served}"

    hooks = {"request": [on_request], "response": [on_response]}
    return httpx.Client(base_url=url, event_hooks=hooks, **options)
