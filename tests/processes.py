"""Run scheduler processes (API replicas) as real subprocesses for multi-process tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping

import httpx

from tests.redis_server import free_port

# Starlette's TestClient sends `Host: testserver`, the raw requests of the server tests
# `Host: t`: the tests' settings allow them, the product does not (api/boundary.py).
TEST_HOSTS = "testserver,t"


def unique_prefix(name: str) -> str:
    """`name` made this deployment's own: a module fixture's API may be made twice on the same
    Redis in one run (pytest-xdist's worksteal runs a module's tests apart), and the second
    must not find the first's nodes and jobs."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def scheduler_env(redis_url: str, prefix: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REDIS_", "REGISTRY_"))}
    env.update({"REDIS_URL": redis_url, "REDIS_PREFIX": prefix, "PYTHONUNBUFFERED": "1"})
    env["UPGRADE_WATCH_SECS"] = "0.2"  # an upgrade's watch of the old keys (store/migrate.py)
    # Never the working directory's scheduler.db (see conftest.make_settings).
    env["SCHEDULER_DB"] = os.path.join(tempfile.mkdtemp(prefix="sched-test-"), "scheduler.db")
    env.pop("TINYAWS_API_KEY", None)
    env.pop("RQ_KEY_PREFIX", None)  # each scheduler process derives its own from REDIS_PREFIX
    # Settings built from this environment serve in-process apps too (TEST_HOSTS).
    env["ALLOWED_HOSTS"] = TEST_HOSTS
    env.update(extra)
    return env


def worker_burst(env: Mapping[str, str]) -> subprocess.CompletedProcess[str]:
    """`scheduler worker --burst`: one round of every periodic task and the queued work, then
    exit; fails the test unless it exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "worker", "--burst"],
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def wait_http(url: str, timeout: float = 60.0, proc: subprocess.Popen[bytes] | None = None) -> None:
    """Until `url` answers (a server's start on a loaded 2-core machine took over 20 s: the
    deadline only bounds a failure). With `proc`: until `proc` (or a child of it) is the one
    listening on the URL's port. A free port is only free when drawn: another test's server
    may take it first, answer here, and `proc` fail to bind (PortTaken, for the caller to
    start again)."""
    deadline = time.monotonic() + timeout
    port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise PortTaken(f"the server for {url} exited ({proc.returncode})")
        try:
            answered = httpx.get(url, timeout=1.0).status_code < 500
            if answered and (proc is None or listens(proc.pid, port)):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not answer within {timeout} s")


class PortTaken(RuntimeError):
    """A server's port was taken by another process between drawing and binding it."""


def listens(pid: int, port: int) -> bool:
    """Whether process `pid` or a child of it listens on loopback TCP `port` (/proc)."""
    inodes = set()
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.split(":")[1], 16) == port:
                inodes.add(f"socket:[{inode}]")
    for member in (pid, *_children(pid)):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{member}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{member}/fd/{fd}") in inodes:
                        return True
    return False


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as children:
                for child in children.read().split():
                    found += [int(child), *_children(int(child))]
    return found


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def api_replicas(count: int, env: Mapping[str, str], workers: int = 1) -> Iterator[list[str]]:
    """`count` API replicas on free loopback ports, each `scheduler serve --workers
    workers`; yields their base URLs."""
    procs: list[subprocess.Popen[bytes]] = []
    urls: list[str] = []
    try:
        for _ in range(count):
            port = free_port()
            cmd = [sys.executable, "-m", "scheduler", "serve", "--host", "127.0.0.1"]
            cmd += ["--workers", str(workers)]
            procs.append(
                subprocess.Popen(
                    [*cmd, "--port", str(port), "--log-level", "warning"],
                    env=dict(env),
                    stdout=subprocess.DEVNULL,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            wait_http(f"{url}/health")
        yield urls
    finally:
        for proc in procs:
            stop(proc)


HttpRequest = tuple[str, str, bytes]  # method, path, body


async def post_json_many(
    base_urls: list[str], path: str, bodies: list[bytes], connections: int
) -> list[tuple[int, bytes]]:
    """POST each body as JSON (request_many)."""
    return await request_many(base_urls, [("POST", path, body) for body in bodies], connections)


async def request_many(
    base_urls: list[str], requests: list[HttpRequest], connections: int
) -> list[tuple[int, bytes]]:
    """Send each request once, with a JSON content type, over `connections` keep-alive
    HTTP/1.1 connections spread over `base_urls`; returns (status, body) in input order. A
    bare asyncio client: httpx's async client is the bottleneck at thousands of requests per
    second."""
    results: list[tuple[int, bytes]] = [(0, b"")] * len(requests)
    next_index = iter(range(len(requests)))

    async def worker(base_url: str) -> None:
        host, port = base_url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for i in next_index:
                method, path, body = requests[i]
                head = (
                    f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"
                    f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                )
                writer.write(head.encode() + body)
                results[i] = await _read_response(reader)
        finally:
            writer.close()

    await asyncio.gather(*(worker(base_urls[c % len(base_urls)]) for c in range(connections)))
    return results


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    status_line = await reader.readline()
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return int(status_line.split()[1]), await reader.readexactly(length)
