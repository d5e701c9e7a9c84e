"""The API's own CPU per hot-lane request, in one process, without sockets or Redis:
`scheduler serve`'s HTTP protocol (server.LaneProtocol, uvicorn's httptools parser under it)
is fed whole requests, and the store's Redis connection is replaced by one that answers each
command at once with what Redis would reply, through the same `Reply` the real one sets.

    .venv/bin/python -m benchmarks.lane_cost [--requests 5000] [--repeats 25]

Prints µs per request for GET /jobs/{id}, the poll at capacity (the answer `[]`) and the
poll finding a job, with the default settings (request metrics on); `--agent-networks
127.0.0.0/8` measures them with AGENT_NETWORKS checking the poll (the peer is 127.0.0.1);
`--key K` with TINYAWS_API_KEY=K, each request carrying it (the right key: GET's door).
Each figure is the fastest of --repeats runs of --requests requests: on a shared machine
noise only adds time.
To measure another checkout instead, put it first on the path and leave the working
directory off it (-P): `PYTHONPATH=DIR:. python -P -m benchmarks.lane_cost`.

What it cannot isolate: everything outside Python. The socket reads and writes, the event
loop's polling and the Redis connection's I/O are not here (over wrk they are about as much
again: benchmarks.api_bench gives the whole), nor the Redis side of the call
(benchmarks.script_cost).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import uvloop
from uvicorn.config import Config
from uvicorn.server import ServerState

from benchmarks.report import Column, Table
from benchmarks.timing import best_of
from scheduler.api.app import create_app
from scheduler.api.server import LaneProtocol
from scheduler.config import Settings
from scheduler.store.connection.protocol import Reply
from scheduler.store.jobs import JobStore

JOB = (
    b'{"job_id":"job-7","node_id":"n3","command":"echo hello","env_vars":{"GREETING":"hi"},'
    b'"status":"pending","retry_count":0,"created_at":"2026-01-01T00:00:00.000000Z"}'
)
try:  # GET reads a record's parts (models/record.py) with one MGET
    from scheduler.models.record import PART_COUNT

    READ: Any = [JOB] + [None] * (PART_COUNT - 1)
except ImportError:  # a checkout from before: one GET, the record
    READ = JOB
HEAD = b" HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: bench\r\n"
Case = tuple[str, bytes, Any]  # (name, request, what Redis replies)


def cases(key: str) -> list[Case]:
    head = HEAD + (f"Authorization: Bearer {key}\r\n".encode() if key else b"") + b"\r\n"
    return [
        ("GET /jobs/{id}", b"GET /jobs/job-7" + head, READ),
        ("poll, at capacity", b"GET /jobs?node_id=n3&status=pending" + head, [1, []]),
        ("poll, finds a job", b"GET /jobs?node_id=n3&status=pending" + head, [1, [], JOB]),
    ]


class AnsweringRedis:
    """Stands in for MuxRedis on the lane's path: each command's Reply is kept until the
    caller sets it, as the protocol's data_received would."""

    def __init__(self) -> None:
        self.sent: list[Reply] = []

    def send_packed(self, command: bytes) -> Reply:
        reply = Reply()
        self.sent.append(reply)
        return reply

    def send_now(self, *args: Any) -> Reply:
        return self.send_packed(b"")


class Transport:
    """What uvicorn's protocol uses of a transport; counts the answers."""

    def __init__(self) -> None:
        self.answers = 0
        self.last = b""

    def write(self, data: bytes) -> None:
        self.answers += 1
        self.last = data

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(name)

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def close(self) -> None: ...


def protocol_for(
    redis: AnsweringRedis, agent_networks: str, key: str
) -> tuple[LaneProtocol, Transport]:
    return serving(lane_app(redis, agent_networks, key))


def lane_app(redis: AnsweringRedis, agent_networks: str, key: str) -> Any:
    """The API's app with these settings, its store on `redis`."""
    settings = Settings.from_env(
        {},
        api_key=key,
        agent_networks=agent_networks,
        redis_prefix="cost",
        scheduler_db=os.path.join(tempfile.mkdtemp(), "scheduler.db"),
    )
    app = create_app(settings)
    app.state.settings = settings
    app.state.store = JobStore(redis, settings)  # type: ignore[arg-type]
    return app


def serving(app: Any) -> tuple[LaneProtocol, Transport]:
    """`app` behind serve's protocol, connected to a Transport."""
    config = Config(app, http=LaneProtocol, log_level="warning", access_log=False)
    config.load()
    protocol = LaneProtocol(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, transport


def run(
    protocol: LaneProtocol,
    transport: Transport,
    redis: AnsweringRedis,
    case: Any,
    n: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """µs per request of `n` requests of `case`, by `clock` (seconds)."""
    _, request, reply = case
    before = transport.answers
    started = clock()
    for _ in range(n):
        protocol.data_received(request)
        redis.sent.pop().set_result(reply)
    elapsed = clock() - started
    if transport.answers - before != n or not transport.last.startswith(b"HTTP/1.1 200 OK"):
        raise RuntimeError(f"not answered 200 each time: {transport.last[:200]!r}")
    return elapsed / n * 1e6


async def measure(args: argparse.Namespace) -> None:
    redis = AnsweringRedis()
    protocol, transport = protocol_for(redis, args.agent_networks, args.key)
    table = Table(Column("", "6.2f", "µs of the API's Python per request"), label_width=20)
    for case in cases(args.key):
        table.row(
            case[0],
            best_of(
                args.repeats, lambda case=case: run(protocol, transport, redis, case, args.requests)
            ),
        )
    protocol.connection_lost(None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=25)
    parser.add_argument("--agent-networks", default="", help="AGENT_NETWORKS (default: unset)")
    parser.add_argument("--key", default="", help="TINYAWS_API_KEY, sent (default: unset)")
    uvloop.run(measure(parser.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
