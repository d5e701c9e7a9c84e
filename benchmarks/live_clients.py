"""The clients benchmarks/live_logs.py drives the API with: a bare keep-alive HTTP connection
(httpx's own CPU would crowd the 2 cores at 1,000 requests a second, as tests/processes.py
request_many says), the calls that make a job run without an agent (a node registered, a job
submitted to it and claimed, its output POSTed as an agent sends it), and followers of a
job's output (GET /jobs/{id}/logs?follow=1): one that reads every event, one that never
reads (a slow client), and idle connections that only hold their stream or long-poll."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import httpx

from benchmarks import harness
from scheduler.api.follow import KEEPALIVE, START

KiB, MiB = 1024, 1024 * 1024
DEADLINE_SECS = 120.0  # a wait's bound: only a failure reaches it
SLOW_RCVBUF = 4096  # a slow follower's receive buffer: it holds little of what it is owed


def dumps(value: object) -> bytes:
    return json.dumps(value).encode()


class Conn:
    """One keep-alive HTTP/1.1 connection, a request at a time; opened again when the server
    closed it while it was idle (uvicorn's keep-alive timeout, 5 s)."""

    def __init__(self, url: str) -> None:
        self.host, self.port = address(url)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    @classmethod
    async def open(cls, url: str) -> Conn:
        conn = cls(url)
        await conn._connect()
        return conn

    async def _connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.reader is None or self.writer is None or self.reader.at_eof():
            self.close()
            await self._connect()
        assert self.reader is not None and self.writer is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        async with asyncio.timeout(DEADLINE_SECS):
            status_line = await self.reader.readline()
            length = 0
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            return int(status_line.split()[1]), await self.reader.readexactly(length)

    async def expect(self, method: str, path: str, body: bytes = b"", status: int = 200) -> bytes:
        got, reply = await self.request(method, path, body)
        if got != status:
            raise RuntimeError(f"{method} {path}: {got} {reply[:300]!r}")
        return reply

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def address(url: str) -> tuple[str, int]:
    parsed = urlparse(url)
    return parsed.hostname or harness.LOOPBACK, parsed.port or 80


@dataclass
class Job:
    """A running job on `node` and the offset of its stdout's next chunk."""

    id: str
    node: str
    offset: int = 0

    @property
    def output(self) -> str:
        return f"/jobs/{self.id}/output"

    def chunk(self, data: str) -> bytes:
        """The body of its next chunk (the offset moves on: each is sent once, in order)."""
        body = {"node_id": self.node, "stream": "stdout", "offset": self.offset, "data": data}
        self.offset += len(data.encode())
        return dumps(body)


async def register(conn: Conn, node: str) -> None:
    body = {"id": node, "hostname": node, "cpu_count": 2, "role": "compute"}
    await conn.expect("POST", "/nodes/register", dumps(body), 201)


async def submit(conn: Conn, node: str, command: str = "true") -> str:
    body = {"command": command, "node_selector": {"node.id": node}}
    job = json.loads(await conn.expect("POST", "/jobs", dumps(body), 201))
    if job["node_id"] != node:
        raise RuntimeError(f"{job['job_id']} was placed on {job['node_id']!r}, not {node}")
    return str(job["job_id"])


async def claimed(conn: Conn, node: str) -> Job:
    """A job submitted to `node` and claimed there (running), as an agent claims it."""
    job_id = await submit(conn, node)
    await conn.expect("PATCH", f"/jobs/{job_id}", dumps({"status": "running", "node_id": node}))
    return Job(job_id, node)


async def finish(conn: Conn, job: Job) -> None:
    body = {"status": "done", "exit_code": 0, "node_id": job.node}
    await conn.expect("PATCH", f"/jobs/{job.id}", dumps(body))


async def many_claimed(url: str, nodes: Sequence[str], count: int) -> list[Job]:
    """`count` running jobs, spread over `nodes` in turn (16 connections)."""
    conns = [await Conn.open(url) for _ in range(16)]
    jobs: list[Job | None] = [None] * count
    todo = iter(range(count))

    async def claim(conn: Conn) -> None:
        for i in todo:
            jobs[i] = await claimed(conn, nodes[i % len(nodes)])

    await asyncio.gather(*(claim(conn) for conn in conns))
    for conn in conns:
        conn.close()
    return [job for job in jobs if job is not None]


async def until(done: Callable[[], bool], what: str, secs: float = DEADLINE_SECS) -> None:
    """Until `done()`; the deadline only bounds a failure."""
    deadline = time.monotonic() + secs
    while not done():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {secs:.0f} s for {what}")
        await asyncio.sleep(0.005)


class Follower:
    """Everything a follower of a job's output (GET /jobs/{id}/logs?follow=1) is sent, read as
    it comes: the output events, the bytes of their text, those dropped, how the job ended;
    `timed`: each whole line that is a time (the printer's), shown minus printed."""

    def __init__(self, timed: bool = False) -> None:
        self.timed = timed
        self.started = asyncio.Event()
        self.outputs = 0
        self.text_bytes = 0
        self.dropped = 0
        self.end: dict[str, Any] | None = None
        self.latencies: list[float] = []
        self._partial = ""
        self.task: asyncio.Task[None] | None = None  # its reading (followed)

    async def run(self, http: httpx.AsyncClient, job_id: str) -> None:
        async with http.stream("GET", f"/jobs/{job_id}/logs", params={"follow": "1"}) as answer:
            if answer.status_code != 200:
                raise RuntimeError(f"follow {job_id}: {answer.status_code}")
            pending = b""
            async for data in answer.aiter_bytes():
                shown = time.time()
                self.started.set()  # the first bytes are the stream's start (`retry:`)
                *events, pending = (pending + data).split(b"\n\n")
                for event in events:
                    self._event(event, shown)
                if self.end is not None:
                    return

    def _event(self, raw: bytes, shown: float) -> None:
        kind, data = "", b""
        for line in raw.split(b"\n"):
            if line.startswith(b"event: "):
                kind = line[7:].decode()
            elif line.startswith(b"data: "):
                data = line[6:]
        if kind == "output":
            text = json.loads(data)["text"]
            self.outputs += 1
            self.text_bytes += len(text.encode())
            if self.timed:
                self._lines(text, shown)
        elif kind == "dropped":
            self.dropped += int(json.loads(data)["bytes"])
        elif kind == "end":
            self.end = json.loads(data)

    def _lines(self, text: str, shown: float) -> None:
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            with contextlib.suppress(ValueError):
                self.latencies.append(shown - float(line))


def sent_all(readers: Sequence[Follower], wanted: Sequence[int]) -> Callable[[], bool]:
    """Whether each follower has had its count of output events."""
    return lambda: all(r.outputs >= n for r, n in zip(readers, wanted, strict=True))


def read_to(readers: Sequence[Follower], offset: int) -> Callable[[], bool]:
    """Whether each follower has had the output up to `offset`, read or dropped."""
    return lambda: all(r.text_bytes + r.dropped >= offset for r in readers)


def follower_client(url: str) -> httpx.AsyncClient:
    timeout = httpx.Timeout(30.0, read=None)
    return httpx.AsyncClient(base_url=url, timeout=timeout, limits=httpx.Limits())


async def followed(http: httpx.AsyncClient, job_id: str, timed: bool = False) -> Follower:
    """A follower of the job, reading in a task of its own, once its stream has started."""
    follower = Follower(timed)
    task = follower.task = asyncio.create_task(follower.run(http, job_id))
    task.add_done_callback(lambda done: done.cancelled() or done.exception())
    await until(lambda: follower.started.is_set() or task.done(), f"the follower of {job_id}")
    if task.done():
        task.result()  # its error
    return follower


async def ended(follower: Follower, secs: float = DEADLINE_SECS) -> dict[str, Any]:
    if follower.task is not None:
        await asyncio.wait_for(follower.task, secs)
    if follower.end is None:
        raise RuntimeError("a follower's stream ended without an `end` event")
    return follower.end


def slow_follower(url: str, job_id: str) -> socket.socket:
    """A follower that sends its request and never reads (a small receive buffer)."""
    host, port = address(url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SLOW_RCVBUF)
    sock.connect((host, port))
    sock.sendall(f"GET /jobs/{job_id}/logs?follow=1 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    return sock


class RawStream:
    """A follower's stream read from its socket (a slow follower reading again), event by
    event as `find` asks; what came after an event found is kept for the next `find`."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.read = 0  # bytes taken from the socket
        self.window = b""  # the last of them, not yet searched past

    def find(self, marker: bytes, limit: int) -> tuple[int, bytes | None]:
        """The bytes of the stream before the event `marker` starts, once it is whole, and
        the event; None: `limit` more bytes, the stream's end or a minute of silence first."""
        self.sock.settimeout(60)
        stop = self.read + limit
        while True:
            at = self.window.find(marker)
            end = self.window.find(b"\n\n", at) if at >= 0 else -1
            if end >= 0:
                event, self.window = self.window[at:end], self.window[end + 2 :]
                return self.read - len(event) - 2 - len(self.window), event
            if at < 0:
                self.window = self.window[-len(marker) :]
            if self.read >= stop:
                return self.read, None
            try:
                data = self.sock.recv(256 * KiB)
            except TimeoutError:
                return self.read, None
            if not data:
                return self.read, None
            self.read += len(data)
            self.window += data


def event_data(event: bytes) -> dict[str, Any]:
    data = event.split(b"data: ", 1)[1]
    return dict(json.loads(data))


class Idle:
    """An idle connection: a follower of a job that prints nothing (once its stream started)
    or a long-poll of a job that does not change. What the server sends it later is only
    counted: a keepalive every 15 s for a follower; for a long-poll, nothing before its wait
    ends (anything is an early answer)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.later = 0  # bytes sent after the start
        self.keepalives = 0
        self.closed = False
        self.task = asyncio.create_task(self._count())

    @classmethod
    async def follower(cls, url: str, job_id: str) -> Idle:
        host, port = address(url)
        reader, writer = await asyncio.open_connection(host, port)
        path = f"/jobs/{job_id}/logs?follow=1"
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        async with asyncio.timeout(DEADLINE_SECS):
            await reader.readuntil(START)  # the stream's start
        return cls(reader, writer)

    @classmethod
    async def long_poll(cls, url: str, job_id: str) -> Idle:
        host, port = address(url)
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"GET /jobs/{job_id}?wait=60 HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        return cls(reader, writer)

    async def _count(self) -> None:
        with contextlib.suppress(OSError):
            while data := await self.reader.read(4096):
                self.later += len(data)
                self.keepalives += data.count(KEEPALIVE)
        self.closed = True

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


async def connect(
    opener: Callable[[str, str], Awaitable[Idle]], url: str, job_id: str, count: int
) -> list[Idle]:
    """`count` idle connections, 100 at a time."""
    held: list[Idle] = []
    for start in range(0, count, 100):
        batch = range(start, min(count, start + 100))
        held += await asyncio.gather(*(opener(url, job_id) for _ in batch))
    return held
