"""Bulk submit against single submits (issue 40): N jobs made by POST /jobs/batch (N / B
requests of B jobs, one after another on one keep-alive connection) against N POST /jobs, one
after another on one keep-alive connection, and spread over C connections at once; side by
side in one run, the subjects taking turns (A B C, B C A, ...: timing.rounds), against a real
`scheduler serve` (one process, the hot lane on: POST /jobs is served there, POST /jobs/batch
through Starlette) on a redis-server of its own. Prints each subject's jobs/s (the median of
its rounds), the CPU the API process and Redis spent per job (read from /proc and INFO cpu:
what the machine's load moves least), and the batch's ratios to each (the median of the
rounds' ratios).

The client is the suite's bare asyncio one (tests/processes.request_many): httpx would cost
more than the API per single submit on this 2-core machine, where the client, the API and
Redis share the cores.

    python -m benchmarks.batch_submit [--jobs 10000] [--batch 1000] [--connections 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import redis

from benchmarks import harness
from benchmarks.timing import median, median_ratio, rounds
from tests.processes import HttpRequest, request_many

PREFIX = "batch-bench"
NODES = [f"bench-node-{i}" for i in range(4)]
JOB = {"command": "echo hello", "env_vars": {"STAGE": "bench"}}


def register(base: str) -> None:
    with httpx.Client(base_url=base, timeout=30.0) as http:
        for node in NODES:
            body = {"id": node, "hostname": node, "cpu_count": 64, "role": "compute"}
            if http.post("/nodes/register", json=body).status_code != 201:
                raise SystemExit(f"register {node} failed")


@dataclass(frozen=True)
class Turn:
    """One subject's turn: its wall time, and the CPU the API process and Redis spent in it."""

    secs: float
    api_cpu: float
    redis_cpu: float


def cpu_secs(pid: int) -> float:
    """A process's CPU time so far (user + system), from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def redis_cpu_secs(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def timed(
    where: tuple[harness.Served, redis.Redis],
    requests: list[HttpRequest],
    connections: int,
    made: Callable[[int, bytes], int],
) -> Turn:
    """`requests` sent over `connections`; SystemExit unless every job was made."""
    api, stats = where
    cpu, redis_cpu, began = cpu_secs(api.pid), redis_cpu_secs(stats), time.perf_counter()
    answers = asyncio.run(request_many([api.url], requests, connections))
    elapsed = time.perf_counter() - began
    turn = Turn(elapsed, cpu_secs(api.pid) - cpu, redis_cpu_secs(stats) - redis_cpu)
    count = sum(made(status, body) for status, body in answers)
    wanted = sum(
        len(json.loads(body)["jobs"]) if path.endswith("batch") else 1 for _, path, body in requests
    )
    if count != wanted:
        raise SystemExit(f"{count} jobs made of {wanted}: {answers[0]}")
    return turn


def batch_made(status: int, body: bytes) -> int:
    return sum("job_id" in entry for entry in json.loads(body)["jobs"]) if status == 200 else 0


def single_made(status: int, body: bytes) -> int:
    return int(status == 201)


def measure(args: argparse.Namespace) -> None:
    job = json.dumps(JOB).encode()
    batches = [
        len(range(i, min(i + args.batch, args.jobs))) for i in range(0, args.jobs, args.batch)
    ]
    batch_body = {n: json.dumps({"jobs": [JOB] * n}).encode() for n in set(batches)}
    with (
        harness.redis_server() as url,
        harness.connected(url) as stats,
        harness.scheduler_api(
            url, PREFIX, AGENT_AUTH="open", NODE_TTL_SECS="86400", METRICS_FLUSH_SECS="3600"
        ) as api,
    ):
        register(api.url)
        where = (api, stats)
        bulk = [("POST", "/jobs/batch", batch_body[n]) for n in batches]
        singles = [("POST", "/jobs", job)] * args.jobs
        subjects = {
            f"batch ({len(batches)} x {args.batch}, 1 connection)": lambda: timed(
                where, bulk, 1, batch_made
            ),
            "POST /jobs, 1 connection": lambda: timed(where, singles, 1, single_made),
            f"POST /jobs, {args.connections} connections": lambda: timed(
                where, singles, args.connections, single_made
            ),
        }
        timed(where, bulk[:1], 1, batch_made)  # warm: connections, the library, caches
        timed(where, singles[:100], args.connections, single_made)
        took = rounds(subjects, args.rounds)
    report(took, args)


def report(took: dict[str, list[Turn]], args: argparse.Namespace) -> None:
    names, jobs = list(took), args.jobs
    print(
        f"{jobs} jobs a turn, {args.rounds} rounds taking turns; one `scheduler serve` process "
        "(hot lane on), its own redis-server; medians of the rounds"
    )
    print(f"{'':<36} {'jobs/s':>8} {'API CPU µs/job':>15} {'Redis CPU µs/job':>17}")
    for name in names:
        turns = took[name]
        rate = median(jobs / t.secs for t in turns)
        api = median(t.api_cpu / jobs * 1e6 for t in turns)
        db = median(t.redis_cpu / jobs * 1e6 for t in turns)
        print(f"{name:<36} {rate:>8.0f} {api:>15.1f} {db:>17.1f}")
    first = took[names[0]]
    for name in names[1:]:
        # Each a median of the rounds' ratios: the other's over the batch's, round by round.
        speed = median_ratio([t.secs for t in took[name]], [t.secs for t in first])
        api = median_ratio([t.api_cpu for t in took[name]], [t.api_cpu for t in first])
        db = median_ratio([t.redis_cpu for t in took[name]], [t.redis_cpu for t in first])
        print(
            f"batch against {name}: {speed:.1f}x the jobs/s, {api:.1f}x less API CPU, "
            f"{db:.1f}x less Redis CPU"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs each subject makes a turn")
    parser.add_argument("--batch", type=int, default=1000, help="jobs per POST /jobs/batch")
    parser.add_argument("--connections", type=int, default=8, help="the concurrent singles'")
    parser.add_argument("--rounds", type=int, default=3)
    measure(parser.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
