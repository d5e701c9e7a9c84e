"""How far one Redis carries the scheduler: Redis CPU per request of every hot route, the
ceiling of one Redis core in requests (and job lifecycles) per second, and how many API
processes it takes to reach it.

    .venv/bin/python -m benchmarks.redis_ceiling [--stored 10000] [--requests 20000]
        [--connections 32] [--http one-write|httptools|h11]

Starts its own redis-server and one `scheduler serve` process on free loopback ports, stores
--stored pending jobs (the real create script), then sends exactly --requests requests of
each operation over --connections keep-alive connections, from this process:

  submit   POST /jobs
  poll     GET /jobs?node_id=X&status=pending (the original agent's poll, no wait) of a
           registered node with nothing pending: the common poll (an agent polls every 3 s)
  get      GET /jobs/{id}
  running  PATCH /jobs/{id} pending -> running (jobs 1..N, each once)
  done     PATCH /jobs/{id} running -> done (the same jobs; outbox event, finished index)
  beat     POST /nodes/heartbeat

Every figure is a CPU time per request, not a rate: the Redis process' CPU (INFO cpu, all its
threads) and the API process' CPU (/proc/PID/stat), each divided by the requests of that
operation alone, plus Redis' own time inside the command (INFO commandstats, reset before
each operation). Rates on this 2-core machine are set by whichever of the load generator, the
API and Redis gets the cores; CPU per request is not, so the ceiling of one Redis core is
1 / (Redis CPU per request), and the API processes one Redis core feeds is (API CPU per
request) / (Redis CPU per request).

What it cannot isolate: Redis' CPU includes its event loop's share of reading and writing
the sockets, which depends on how many commands arrive per read (here up to FLUSH_COST's
worth per write from the API, as in production); the load generator shares the cores, so
cache effects of contention land in both CPU figures; the stored count changes during
submit (it grows by --requests) and the `running`/`done` runs need --stored >= --requests
(checked).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis

from benchmarks import harness
from benchmarks.bench_state import NODES, check, preload
from benchmarks.report import Column, Table
from tests.processes import HttpRequest, request_many

PREFIX = "ceiling"
IDLE_NODES = [f"idle-node-{i}" for i in range(10)]


@dataclass
class Figures:
    op: str
    requests: int
    seconds: float
    redis_cpu_us: float  # Redis process CPU per request
    redis_command_us: float  # time inside the commands (commandstats) per request
    api_cpu_us: float  # API process CPU per request

    def row(self) -> None:
        ceiling = 1e6 / self.redis_cpu_us
        feeds = self.api_cpu_us / self.redis_cpu_us
        rps = self.requests / self.seconds
        values = (self.requests, rps, self.redis_cpu_us, self.redis_command_us, self.api_cpu_us)
        TABLE.row(self.op, *values, ceiling, feeds)


TABLE = Table(
    Column("requests", "7d"),
    Column("req/s*", "9.0f"),
    Column("redis µs", "9.1f"),
    Column("in-cmd µs", "9.1f"),
    Column("api µs", "9.1f"),
    Column("ceiling/s", "10.0f"),
    Column("APIs/core", "7.1f"),
    label_width=8,
)


def requests_of(op: str, count: int) -> list[HttpRequest]:
    json_patch = {
        "running": b'{"status":"running"}',
        "done": b'{"status":"done","exit_code":0,"stdout":"hello","stderr":""}',
    }
    if op == "submit":
        return [("POST", "/jobs", b'{"command":"echo hello"}')] * count
    if op == "poll":
        nodes = IDLE_NODES
        paths = [f"/jobs?node_id={nodes[i % len(nodes)]}&status=pending" for i in range(count)]
        return [("GET", path, b"") for path in paths]
    if op == "get":
        return [("GET", f"/jobs/job-{i % 1000 + 1}", b"") for i in range(count)]
    if op in json_patch:
        return [("PATCH", f"/jobs/job-{i + 1}", json_patch[op]) for i in range(count)]
    beats = [f'{{"id":"{NODES[i % len(NODES)]}"}}'.encode() for i in range(count)]
    return [("POST", "/nodes/heartbeat", body) for body in beats]


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def command_usec(client: redis.Redis, op: str) -> float:
    """Time inside the request's own command: commandstats also counts each command a script
    calls, inside the script's own time, so only the top-level command is summed."""
    stats = client.info("commandstats")
    # GET /jobs/{id} is one GET, or one MGET of a record's parts (since issue 26); a script
    # is an EVALSHA, or an FCALL of the function library (since issue 26).
    reads = ["cmdstat_get", "cmdstat_mget"]
    names = reads if op == "get" else ["cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall"]
    return sum(float(stats[name]["usec"]) for name in names if name in stats)


def measure(op: str, args: argparse.Namespace, client: redis.Redis, api: harness.Served) -> Figures:
    reqs = requests_of(op, args.requests)
    client.config_resetstat()
    redis_before, api_before = redis_cpu(client), process_cpu(api.pid)
    started = time.monotonic()
    answers = asyncio.run(request_many([api.url], reqs, args.connections))
    statuses = [status for status, _ in answers]
    seconds = time.monotonic() - started
    # INFO itself costs Redis a little CPU: a few µs against seconds.
    redis_used, api_used = redis_cpu(client) - redis_before, process_cpu(api.pid) - api_before
    in_commands = command_usec(client, op)
    wanted = {"submit": 201}.get(op, 200)
    wrong = [s for s in statuses if s != wanted]
    if wrong:
        raise SystemExit(f"{op}: {len(wrong)} answers were not {wanted}: {sorted(set(wrong))}")
    n = len(reqs)
    return Figures(op, n, seconds, redis_used / n * 1e6, in_commands / n, api_used / n * 1e6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stored", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--http", default="one-write", help="scheduler serve --http")
    args = parser.parse_args()
    if args.stored < args.requests:
        parser.error("--stored must be at least --requests (each PATCH run moves distinct jobs)")
    with (
        harness.redis_server() as url,
        harness.connected(url) as client,
        harness.scheduler_api(
            url,
            PREFIX,
            "--http",
            args.http,
            NODE_TTL_SECS="3600",
            MAX_JOBS_PER_NODE="1000000",
            SWEEP_INTERVAL_SECS="3600",
        ) as api,
    ):
        for node in NODES + IDLE_NODES:
            body = {"id": node, "hostname": node, "cpu_count": 1, "role": "compute"}
            httpx.post(f"{api.url}/nodes/register", json=body)
        preload(client, PREFIX, args.stored)
        check(client, PREFIX, args.stored)
        print(f"{args.stored} jobs stored, {args.connections} connections, one API process")
        TABLE.header("op")
        print("         (* this machine, load generator included: not a ceiling)")
        figures = {}
        for op in ("get", "poll", "running", "done", "beat", "submit"):
            figures[op] = measure(op, args, client, api)
            figures[op].row()
        lifecycle(figures)
    return 0


def lifecycle(figures: dict[str, Figures]) -> None:
    """A job's life as the Rust agent lives it: submit, one poll that finds it, running, done."""
    steps = ("submit", "poll", "running", "done")
    redis_us = sum(figures[op].redis_cpu_us for op in steps)
    api_us = sum(figures[op].api_cpu_us for op in steps)
    print(
        f"job lifecycle ({' + '.join(steps)}): Redis {redis_us:.0f} µs, API {api_us:.0f} µs: "
        f"one Redis core carries {1e6 / redis_us:.0f} jobs/s, fed by {api_us / redis_us:.1f} "
        "API processes"
    )


if __name__ == "__main__":
    sys.exit(main())
