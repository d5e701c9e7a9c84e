"""What the Python client (scheduler.client) costs per call against raw httpx (issue 42): the
same calls made by `Client` (its plan, retry policy and typed answer) and by a hand-written
httpx equivalent (one `httpx.Client` request, `response.json()`), side by side in one run,
the two taking turns (A B, B A, ...: timing.rounds), against a real `scheduler serve` on a
redis-server of its own. Prints each call's wall time and this process's CPU per call (what
the client itself spends: the API and Redis cost the same for both), medians of the rounds,
and the client's ratio to raw httpx (the median of the rounds' ratios).

    python -m benchmarks.client_overhead [--calls 2000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from benchmarks import harness
from benchmarks.timing import median, median_ratio, rounds
from scheduler.client import Client

PREFIX = "client-bench"
NODE = {"id": "bench-node", "hostname": "bench-node", "cpu_count": 64, "role": "compute"}
JOB = {"command": "echo hello", "env_vars": {"STAGE": "bench"}}


@dataclass(frozen=True)
class Turn:
    wall: float  # seconds
    cpu: float  # this process's CPU seconds


def timed(calls: int, call: Callable[[], object]) -> Turn:
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        call()
    return Turn(time.perf_counter() - wall, time.process_time() - cpu)


def raw_submit(http: httpx.Client) -> object:
    response = http.post("/jobs", json=JOB, headers={"Idempotency-Key": str(time.time_ns())})
    response.raise_for_status()
    return response.json()


def raw_read(http: httpx.Client, job_id: str) -> object:
    response = http.get(f"/jobs/{job_id}")
    response.raise_for_status()
    return response.json()


def subjects(client: Client, http: httpx.Client, job_id: str) -> dict[str, Callable[[], object]]:
    """Each call, by the client and by raw httpx: the same request, the same answer read."""
    return {
        "GET /jobs/{id}, client.job": lambda: client.job(job_id),
        "GET /jobs/{id}, raw httpx": lambda: raw_read(http, job_id),
        "POST /jobs, client.submit": lambda: client.submit(**JOB),
        "POST /jobs, raw httpx": lambda: raw_submit(http),
    }


def measure(args: argparse.Namespace) -> dict[str, list[Turn]]:
    with (
        harness.redis_server() as url,
        harness.scheduler_api(
            url, PREFIX, AGENT_AUTH="open", NODE_TTL_SECS="86400", METRICS_FLUSH_SECS="3600"
        ) as api,
        Client(api.url) as client,
        httpx.Client(base_url=api.url, timeout=5.0) as http,
    ):
        http.post("/nodes/register", json=NODE).raise_for_status()
        job_id = client.submit("echo first").job_id
        calls = subjects(client, http, job_id)
        for call in calls.values():  # warm: connections, imports, caches
            timed(50, call)
        return rounds(
            {name: lambda c=call: timed(args.calls, c) for name, call in calls.items()}, args.rounds
        )


def report(took: dict[str, list[Turn]], args: argparse.Namespace) -> None:
    print(
        f"{args.calls} calls a turn, {args.rounds} rounds taking turns, one connection each; "
        "one `scheduler serve` process, its own redis-server; medians of the rounds"
    )
    print(f"{'':<30} {'µs/call':>9} {'client CPU µs/call':>19}")
    for name, turns in took.items():
        wall = median(t.wall for t in turns) / args.calls * 1e6
        cpu = median(t.cpu for t in turns) / args.calls * 1e6
        print(f"{name:<30} {wall:>9.0f} {cpu:>19.0f}")
    for call in ("GET /jobs/{id}", "POST /jobs"):
        ours, raw = took[f"{call}, {_ours(call)}"], took[f"{call}, raw httpx"]
        wall = median_ratio([t.wall for t in ours], [t.wall for t in raw])
        cpu = median_ratio([t.cpu for t in ours], [t.cpu for t in raw])
        print(f"{call}: the client / raw httpx = {wall:.2f} wall, {cpu:.2f} client CPU")


def _ours(call: str) -> str:
    return "client.job" if call.startswith("GET") else "client.submit"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls of each subject a turn")
    parser.add_argument("--rounds", type=int, default=5, help="turns of each subject")
    args = parser.parse_args()
    report(measure(args), args)


if __name__ == "__main__":
    main()
