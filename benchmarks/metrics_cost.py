"""What the request metrics cost the hot paths: the same API with METRICS=on and METRICS=off,
side by side on one Redis, for GET /jobs/{id}, the agent's poll and submit.

    .venv/bin/python -m benchmarks.metrics_cost [--duration 5] [--rounds 5] [--connections 32]

Needs `wrk` (Debian: apt-get install wrk). Starts its own redis-server and two API processes
(one per setting) on free loopback ports. Rounds alternate the two processes so drift of a
shared machine falls on both; figures are medians. It cannot isolate the two processes from
each other's leftovers in Redis (both write to the same server, under their own prefixes), nor
wrk and Redis from the API's two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx

from benchmarks import harness
from benchmarks.load import run_wrk
from benchmarks.report import Column, Table
from benchmarks.timing import in_turn, median, ratio

OPS = {
    "get": ("/jobs/job-1", 'wrk.method = "GET"'),
    "poll": ("/jobs?node_id=node-0&status=pending", 'wrk.method = "GET"'),
    "submit": (
        "/jobs",
        'wrk.method = "POST"\nwrk.body = \'{"command":"echo hi"}\'\n'
        'wrk.headers["Content-Type"] = "application/json"',
    ),
}


@contextlib.contextmanager
def api(redis_url: str, metrics: str, prefix: str) -> Iterator[str]:
    """An API process with METRICS=`metrics`, 4 nodes and 100 jobs; its URL."""
    # Nodes registered once must stay healthy for the whole run: no heartbeats are sent.
    with harness.uvicorn_api(
        redis_url, f"metrics-{prefix}", METRICS=metrics, NODE_TTL_SECS="36000"
    ) as served:
        for i in range(4):
            httpx.post(f"{served.url}/nodes/register", json={"id": f"node-{i}"})
        for _ in range(100):
            httpx.post(f"{served.url}/jobs", json={"command": "x"})
        yield served.url


def wrk(url: str, op: str, duration: int, connections: int) -> float:
    path, lua = OPS[op]
    result = run_wrk(url + path, lua, duration, connections, threads=2)
    if result.errors:
        raise RuntimeError(f"{op}: {result.errors} answers not 2xx")
    return result.rps


def app_cpu_us(metrics: str, requests: int = 100_000) -> float:
    """CPU time (process time: other processes on the machine do not count) per request of
    the real app, called in-process as the server would, for GET /health (no Redis): the
    app's own cost, which the setting changes, free of the network, Redis and wrk."""
    from scheduler.api.app import create_app
    from scheduler.config import Settings

    app = create_app(Settings.from_env({}, metrics=metrics))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/health",
        "raw_path": b"/health",
        "query_string": b"",
        "root_path": "",
        "headers": [],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }

    async def receive() -> Any:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        return None

    async def run() -> float:
        for _ in range(2000):  # warm up
            await app(dict(scope), receive, send)
        started = time.process_time()
        for _ in range(requests):
            await app(dict(scope), receive, send)
        return (time.process_time() - started) / requests * 1e6

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--same",
        action="store_true",
        help="both processes with metrics off: how far two processes of the same code differ",
    )
    args = parser.parse_args()
    rates: dict[tuple[str, str], list[float]] = {}
    with harness.redis_server() as redis_url, contextlib.ExitStack() as stack:
        setting = {"on": "off" if args.same else "on", "off": "off"}
        urls = {m: stack.enter_context(api(redis_url, setting[m], m)) for m in ("on", "off")}
        for round_ in range(args.rounds):
            # Which setting goes first alternates: neither gains from running second.
            order = in_turn(["on", "off"], round_)
            for op in OPS:
                for metrics in order:
                    rate = wrk(urls[metrics], op, args.duration, args.connections)
                    rates.setdefault((op, metrics), []).append(rate)
    print(f"{args.rounds} rounds x {args.duration} s, {args.connections} connections, medians")
    table = Table(
        Column("metrics on", "8.0f", "req/s"),
        Column("off", "8.0f", "req/s"),
        Column("on/off", "6.3f"),
        label_width=7,
    )
    table.header()
    for op in OPS:
        on, off = (median(rates[(op, m)]) for m in ("on", "off"))
        table.row(op, on, off, ratio(on, off))
    off_us = median(app_cpu_us("off") for _ in range(3))
    on_us = median(app_cpu_us("on") for _ in range(3))
    extra = on_us - off_us
    print(f"the app in-process: {off_us:.2f} -> {on_us:.2f} us of CPU a request (+{extra:.2f} us)")
    for op in OPS:
        off = median(rates[(op, "off")])
        # One API process is CPU-bound under wrk: at R req/s a request costs 1/R of a core.
        cost = 1e6 / off
        print(f"{op:7s} +{extra:.2f} us on {cost:6.1f} us a request: {extra / cost:5.1%} less")


if __name__ == "__main__":
    main()
