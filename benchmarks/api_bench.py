"""API throughput and latency (GET /jobs/{id}, submit, poll, poll with every node at
capacity, update) with 1 000, 100 000 and 1 000 000 jobs stored, against the ceiling of the
stack (the same server and HTTP protocol answering constant JSON through Starlette), and the
end-to-end dispatch latency (submit -> running -> done through the reference agent), and
what 1 000 idle long-polling agents cost the API (GET /jobs/{id} throughput without and with).

    .venv/bin/python -m benchmarks.api_bench [--duration 5] [--connections 32] [--rounds 3]
        [--stored 1000 100000 1000000] [--ops get submit poll poll-full update]
        [--http lane|one-write|httptools|h11] [--dispatch 20] [--idle 1000]

Needs `wrk` (Debian: apt-get install wrk). Starts its own redis-server, one API process per
stored size, the bare app, (for dispatch) one more API and a reference agent, and (for
--idle) one more API and a process of N idle long-polling agents (idle.py), all on free
loopback ports; touches nothing else. `--http` is `scheduler serve --http` (default lane, what
serve runs): the hot lane answers get, poll, submit and update without Starlette, so they
can pass the ceiling, which is Starlette's.

Every run starts from exactly the stored count it reports, all jobs pending
(bench_state.check): a submit run's jobs are removed after it, and an update run's jobs are
put back to pending. Get, submit and the polls run for --duration. `poll` finds work (each
answer carries one pending job); `poll-full` first makes one job per node running, so every
node is at capacity (checked) and each answer is `[]`, then puts them back. Update runs in
bursts of exactly 4 x W requests over jobs 1..W (W = min(stored, --update-window)): each job
goes running, failed (the one retry of MAX_JOB_RETRIES=1, back to pending), running, done, so
every cycle reaches done; bursts repeat, with a reset between them, until --update-requests
were sent.

What it cannot isolate: wrk, Redis and the API share the machine's cores (and, on a shared
VM, other tenants' load), so figures drift between minutes; every round runs the ceiling and
every size back to back, and figures are medians over the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import sys
from collections.abc import Iterator

import httpx
import redis

from benchmarks import harness
from benchmarks.bench_state import NODES, check, preload, reset_window, truncate
from benchmarks.dispatch import measure_dispatch
from benchmarks.idle import STORED as IDLE_STORED
from benchmarks.idle import measure_idle, raise_file_limit
from benchmarks.load import GET_LUA, Result, run_burst, run_wrk
from benchmarks.report import Column, Table
from benchmarks.timing import median as median_of
from scheduler.cli.main import HTTP_PROTOCOLS

SUBMIT_LUA = """
wrk.method = "POST"
wrk.body = '{"command":"echo hello","env_vars":{"GREETING":"hi"}}'
wrk.headers["Content-Type"] = "application/json"
"""
# The 10 nodes' polls in turn, formatted once (wrk.format per request was ~1.5 µs of wrk's
# ~14 µs per request, on the cores the API shares), in init: wrk sets the Host header only
# then, and a request formatted before it has none (h11 answers that 400).
POLL_LUA = """
local polls = {}
init = function(args)
  for n = 0, 9 do
    polls[n] = wrk.format("GET", "/jobs?node_id=bench-node-" .. n .. "&status=pending")
  end
end
local i = 0
request = function()
  i = i + 1
  return polls[i % 10]
end
"""
# next_request(n) for a burst of 4 x window requests: job (n mod window) + 1, its phase n div
# window; window is far wider than the requests in flight, so each report is a valid step.
UPDATE_LUA = """
local window = %(window)d
local bodies = {
  '{"status":"running","exit_code":null,"stdout":"","stderr":""}',
  '{"status":"failed","exit_code":1,"stdout":"out","stderr":"err"}',
  '{"status":"running","exit_code":null,"stdout":"","stderr":""}',
  '{"status":"done","exit_code":0,"stdout":"hello","stderr":""}',
}
local headers = {["Content-Type"] = "application/json"}
function next_request(n)
  local body = bodies[math.floor(n / window) + 1]
  return wrk.format("PATCH", "/jobs/job-" .. ((n %% window) + 1), headers, body)
end
"""


# The API's settings in every run: nodes live without heartbeats, one retry (update's cycle
# fails once), a node at capacity with one running job (poll-full).
API_SETTINGS = {"NODE_TTL_SECS": "86400", "MAX_JOB_RETRIES": "1", "MAX_JOBS_PER_NODE": "1"}


def server_args(workers: int, http: str) -> list[str]:
    """uvicorn's options as `scheduler serve --http <http>` runs it (default lane, serve's
    default). The ceiling (bare_app) runs under the same protocol: with no lane there, it is
    one-write's."""
    return ["--workers", str(workers), "--http", HTTP_PROTOCOLS[http]]


@contextlib.contextmanager
def api(redis_url: str, prefix: str, workers: int, http: str = "lane") -> Iterator[str]:
    """The API under uvicorn with API_SETTINGS, NODES registered; its URL."""
    with harness.uvicorn_api(
        redis_url, prefix, *server_args(workers, http), **API_SETTINGS
    ) as served:
        for node in NODES:
            httpx.post(f"{served.url}/nodes/register", json={"id": node}).raise_for_status()
        yield served.url


@contextlib.contextmanager
def ceiling(workers: int, http: str) -> Iterator[str]:
    """The bare app (bare_app.py) under the same server; its URL."""
    port = harness.free_port()
    cmd = harness.uvicorn_cmd("benchmarks.bare_app:app", port, *server_args(workers, http))
    with harness.served(cmd, port) as served:
        yield served.url


def measure(
    client: redis.Redis | None,
    url: str,
    op: str,
    stored: int,
    args: argparse.Namespace,
    prefix: str = "",
) -> Result:
    """One run of `op`, from exactly `stored` pending jobs under `prefix` (default
    bench<stored>; ceiling: client None)."""
    prefix = prefix or f"bench{stored}"
    if client is not None:
        check(client, prefix, stored)
    if op == "submit":
        result = run_wrk(f"{url}/jobs", SUBMIT_LUA, args.duration, args.connections)
        if client is not None:
            truncate(client, prefix, stored)
        return result
    if op == "poll":
        return run_wrk(url, POLL_LUA, args.duration, args.connections)
    if op == "get":
        return run_wrk(url, GET_LUA % {"stored": stored}, args.duration, args.connections)
    if op == "poll-full":
        # Every node at capacity (MAX_JOBS_PER_NODE=1 running job each): the state of the Go
        # original's poll figure in the issue. Jobs 1..10 are one per node (preload places
        # them round robin); they go back to pending after the run.
        if client is not None:
            claim_one_per_node(url)
        result = run_wrk(url, POLL_LUA, args.duration, args.connections)
        if client is not None:
            reset_window(client, prefix, len(NODES))
        return result
    window = min(stored, args.update_window)
    bursts: list[Result] = []
    while sum(b.requests for b in bursts) < args.update_requests:
        lua = UPDATE_LUA % {"window": window}
        bursts.append(run_burst(url, lua, 4 * window, args.connections))
        if client is not None:
            reset_window(client, prefix, window)
    return Result(
        requests=sum(b.requests for b in bursts),
        seconds=sum(b.seconds for b in bursts),
        p50_ms=statistics.median(b.p50_ms for b in bursts),
        p99_ms=statistics.median(b.p99_ms for b in bursts),
        errors=sum(b.errors for b in bursts),
    )


def claim_one_per_node(url: str) -> None:
    """Jobs 1..len(NODES) running, so every node is at capacity; checked by a poll each."""
    with httpx.Client(base_url=url) as http:
        for n in range(1, len(NODES) + 1):
            http.patch(f"/jobs/job-{n}", json={"status": "running"}).raise_for_status()
        for node in NODES:
            polled = http.get("/jobs", params={"node_id": node, "status": "pending"}).json()
            if polled:
                raise RuntimeError(f"{node} is not at capacity: its poll gave {len(polled)} jobs")


def median(results: list[Result]) -> Result:
    return Result(
        requests=round(median_of(r.rps for r in results)),
        seconds=1.0,
        p50_ms=median_of(r.p50_ms for r in results),
        p99_ms=median_of(r.p99_ms for r in results),
        errors=sum(r.errors for r in results),
    )


TABLE = Table(
    Column("throughput", "9.0f", "req/s"),
    Column("p50", "7.2f", "ms"),
    Column("p99", "7.2f", "ms"),
    Column("of ceiling", "10.2f"),
    Column("non-2xx", "7d"),
    label_width=26,
)


def row(name: str, r: Result, ceiling: Result | None = None) -> None:
    of_ceiling = r.rps / ceiling.rps if ceiling else None
    TABLE.row(name, r.rps, r.p50_ms, r.p99_ms, of_ceiling, *([r.errors] if r.errors else []))


OPS = ("get", "submit", "poll", "poll-full", "update")


def run_rounds(args: argparse.Namespace, redis_url: str) -> dict[tuple[str, str], list[Result]]:
    runs: dict[tuple[str, str], list[Result]] = {}
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(harness.connected(redis_url))
        ceiling_url = stack.enter_context(ceiling(args.workers, args.http))
        targets: list[tuple[str, str, int]] = []
        for stored in args.stored:
            url = stack.enter_context(api(redis_url, f"bench{stored}", args.workers, args.http))
            preload(client, f"bench{stored}", stored)
            targets.append((str(stored), url, stored))
        top = ("ceiling", ceiling_url, min(args.stored))
        for _ in range(args.rounds):
            for op in args.ops:
                for name, url, stored in [top, *targets]:
                    db = None if name == "ceiling" else client
                    runs.setdefault((op, name), []).append(measure(db, url, op, stored, args))
    return runs


def report(args: argparse.Namespace, runs: dict[tuple[str, str], list[Result]]) -> None:
    TABLE.header()
    for op in args.ops:
        top = median(runs[(op, "ceiling")])
        row(f"{op} ceiling", top)
        for stored in args.stored:
            row(f"{op} @ {stored} stored", median(runs[(op, str(stored))]), top)
    low, *rest = args.stored
    for op in [op for op in ("poll", "update") if op in args.ops]:
        base = median(runs[(op, str(low))]).p50_ms
        for stored in rest:
            ratio = median(runs[(op, str(stored))]).p50_ms / base
            print(f"{op} p50 latency at {stored} / at {low} stored: {ratio:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument(
        "--http", choices=sorted(HTTP_PROTOCOLS), default="lane", help="as scheduler serve --http"
    )
    parser.add_argument("--rounds", type=int, default=3, help="medians over this many rounds")
    parser.add_argument("--stored", type=int, nargs="+", default=[1000, 100_000, 1_000_000])
    parser.add_argument("--ops", nargs="*", choices=OPS, default=list(OPS))
    parser.add_argument("--update-window", type=int, default=10_000)
    parser.add_argument("--update-requests", type=int, default=40_000)
    parser.add_argument("--dispatch", type=int, default=20, help="jobs timed end to end (0: none)")
    parser.add_argument("--idle", type=int, default=1000, help="idle long-polling agents (0: none)")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        print("wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    print(
        f"# {args.connections} connections, {args.duration:g} s per submit/poll run, update in "
        f"bursts of 4 x min(stored, {args.update_window}) requests up to "
        f"{args.update_requests}, median of {args.rounds} interleaved rounds, "
        f"{args.workers} uvicorn worker(s), --http {args.http}, {os.cpu_count()} cores"
    )
    raise_file_limit()
    with harness.redis_server() as redis_url:
        if args.ops:
            report(args, run_rounds(args, redis_url))
        if args.idle:
            with (
                harness.connected(redis_url) as client,
                api(redis_url, "idle", args.workers) as url,
            ):
                preload(client, "idle", IDLE_STORED)
                measure_idle(url, args)
        if args.dispatch:
            measure_dispatch(redis_url, args.dispatch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
