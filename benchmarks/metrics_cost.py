"""What the request metrics cost the hot paths: the same API with METRICS=on and METRICS=off,
side by side on one Redis, for GET /jobs/{id}, the agent's poll and submit.

    .venv/bin/python benchmarks/metrics_cost.py [--duration 5] [--rounds 5] [--connections 32]

Needs `wrk` (Debian: apt-get install wrk). Starts its own redis-server and two API processes
(one per setting) on free loopback ports. Rounds alternate the two processes so drift of a
shared machine falls on both; figures are medians. It cannot isolate the two processes from
each other's leftovers in Redis (both write to the same server, under their own prefixes), nor
wrk and Redis from the API's two cores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.processes import scheduler_env, stop, wait_http  # noqa: E402
from tests.redis_server import free_port, redis_server  # noqa: E402

OPS = {
    "get": ("/jobs/job-1", 'wrk.method = "GET"'),
    "poll": ("/jobs?node_id=node-0&status=pending", 'wrk.method = "GET"'),
    "submit": (
        "/jobs",
        'wrk.method = "POST"\nwrk.body = \'{"command":"echo hi"}\'\n'
        'wrk.headers["Content-Type"] = "application/json"',
    ),
}


def start_api(redis_url: str, metrics: str, name: str = "") -> tuple[subprocess.Popen[bytes], str]:
    # Nodes registered once must stay healthy for the whole run: no heartbeats are sent.
    env = scheduler_env(redis_url, f"metrics-{metrics}", METRICS=metrics, NODE_TTL_SECS="36000")
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "scheduler.api.app:create_app", "--factory"]
    cmd += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    wait_http(f"{url}/health")
    for i in range(4):
        httpx.post(f"{url}/nodes/register", json={"id": f"node-{i}"})
    for _ in range(100):
        httpx.post(f"{url}/jobs", json={"command": "x"})
    return proc, url


def wrk(url: str, op: str, duration: int, connections: int) -> float:
    path, lua = OPS[op]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as script:
        script.write(lua)
    try:
        out = subprocess.run(
            ["wrk", "-t2", f"-c{connections}", f"-d{duration}s", "-s", script.name, url + path],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script.name)
    match = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert match, out
    if "Non-2xx" in out:
        raise RuntimeError(f"{op}: errors\n{out}")
    return float(match.group(1))


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
    with redis_server() as redis_url:
        setting = {"on": "off" if args.same else "on", "off": "off"}
        procs = {m: start_api(redis_url, setting[m], m) for m in ("on", "off")}
        try:
            rates: dict[tuple[str, str], list[float]] = {}
            for round_ in range(args.rounds):
                # Which setting goes first alternates: neither gains from running second.
                order = ("on", "off") if round_ % 2 == 0 else ("off", "on")
                for op in OPS:
                    for metrics in order:
                        rate = wrk(procs[metrics][1], op, args.duration, args.connections)
                        rates.setdefault((op, metrics), []).append(rate)
        finally:
            for proc, _ in procs.values():
                stop(proc)
    print(f"{args.rounds} rounds x {args.duration} s, {args.connections} connections, medians")
    for op in OPS:
        on, off = (statistics.median(rates[(op, m)]) for m in ("on", "off"))
        print(f"{op:7s} metrics on {on:8.0f} req/s  off {off:8.0f} req/s  on/off {on / off:5.3f}")
    off_us = statistics.median(app_cpu_us("off") for _ in range(3))
    on_us = statistics.median(app_cpu_us("on") for _ in range(3))
    extra = on_us - off_us
    print(f"the app in-process: {off_us:.2f} -> {on_us:.2f} us of CPU a request (+{extra:.2f} us)")
    for op in OPS:
        off = statistics.median(rates[(op, "off")])
        # One API process is CPU-bound under wrk: at R req/s a request costs 1/R of a core.
        cost = 1e6 / off
        print(f"{op:7s} +{extra:.2f} us on {cost:6.1f} us a request: {extra / cost:5.1%} less")


if __name__ == "__main__":
    main()
