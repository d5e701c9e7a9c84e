"""Bulk submit against single submits (issue 40): N jobs made by POST /jobs/batch (N / B
requests of B jobs, one after another on one keep-alive connection) against N POST /jobs, one
after another on one keep-alive connection, and spread over C connections at once; side by
side in one run, the subjects taking turns (A B C, B C A, ...: timing.rounds), against a real
`scheduler serve` (one process, the hot lane on: POST /jobs is served there, POST /jobs/batch
through Starlette) on a redis-server of its own. Prints each subject's jobs/s (the median of
its rounds) and the ratios of the batch to each (the median of the rounds' ratios).

The client is the suite's bare asyncio one (tests/processes.request_many): httpx would cost
more than the API per single submit on this 2-core machine, where the client, the API and
Redis share the cores.

    python -m benchmarks.batch_submit [--jobs 10000] [--batch 1000] [--connections 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable

import httpx

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


def timed(
    base: str, requests: list[HttpRequest], connections: int, made: Callable[[int, bytes], int]
) -> float:
    """Seconds to send `requests` over `connections`; SystemExit unless every job was made."""
    began = time.perf_counter()
    answers = asyncio.run(request_many([base], requests, connections))
    elapsed = time.perf_counter() - began
    count = sum(made(status, body) for status, body in answers)
    wanted = sum(
        len(json.loads(body)["jobs"]) if path.endswith("batch") else 1 for _, path, body in requests
    )
    if count != wanted:
        raise SystemExit(f"{count} jobs made of {wanted}: {answers[0]}")
    return elapsed


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
        harness.scheduler_api(
            url, PREFIX, AGENT_AUTH="open", NODE_TTL_SECS="86400", METRICS_FLUSH_SECS="3600"
        ) as api,
    ):
        register(api.url)
        bulk = [("POST", "/jobs/batch", batch_body[n]) for n in batches]
        singles = [("POST", "/jobs", job)] * args.jobs
        subjects = {
            f"batch ({len(batches)} x {args.batch}, 1 connection)": lambda: timed(
                api.url, bulk, 1, batch_made
            ),
            "POST /jobs, 1 connection": lambda: timed(api.url, singles, 1, single_made),
            f"POST /jobs, {args.connections} connections": lambda: timed(
                api.url, singles, args.connections, single_made
            ),
        }
        timed(api.url, bulk[:1], 1, batch_made)  # warm: connections, the library, caches
        timed(api.url, singles[:100], args.connections, single_made)
        took = rounds(subjects, args.rounds)
    names = list(subjects)
    print(
        f"{args.jobs} jobs a turn, {args.rounds} rounds taking turns; one `scheduler serve` "
        "process (hot lane on), its own redis-server"
    )
    for name in names:
        rates = [args.jobs / secs for secs in took[name]]
        each = ", ".join(f"{rate:.0f}" for rate in rates)
        print(f"{name:<40} {median(rates):>9.0f} jobs/s  (rounds: {each})")
    for name in names[1:]:
        # The batch's jobs/s over the other's: its time over the batch's, round by round.
        print(f"batch / {name:<32} {median_ratio(took[name], took[names[0]]):>5.1f}x")


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
