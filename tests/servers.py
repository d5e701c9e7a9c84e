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

import uvicorn

from scheduler.api.server import LaneProtocol
from tests.redis_server import free_port


@contextmanager
def serving(
    app: Any, http: type = LaneProtocol, access_log: bool = False, timeout_keep_alive: int = 5
) -> Iterator[int]:
    """`app` under uvicorn with the `http` protocol class; yields its port. No access log by
    default, as `scheduler serve`: with one the lane leaves every request to ASGI."""
    port = free_port()
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=http,
        log_level="critical",
        access_log=access_log,
        timeout_keep_alive=timeout_keep_alive,
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
        server.should_exit = True
        thread.join(timeout=10)


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
