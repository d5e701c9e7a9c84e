"""Redis CPU per script call (INFO commandstats), the part of a request Redis spends: create,
the poll (finding a job, then at capacity) and the transitions running, retry, running, done,
over N jobs; first, a script that only returns 1, what any script call costs.

    .venv/bin/python -m benchmarks.script_cost [--jobs 20000]

Starts its own redis-server. Calls are pipelined from one client, so the figure is Redis'
own time per call (usec_per_call), not a latency. To measure another checkout's scripts,
put it first on the path and leave the working directory off it (-P):
`PYTHONPATH=DIR:. python -P -m benchmarks.script_cost`.
"""

from __future__ import annotations

import argparse
import sys
import time

import redis

from benchmarks import harness
from benchmarks.report import Column, Table
from benchmarks.timing import calls_usec, script_usec
from scheduler.models.job import JobUpdate
from scheduler.nodes.placement import Placement
from scheduler.store.keys import Keys
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts.retry import RetryPolicy

BODY = b'{"command":"echo hello","env_vars":{"GREETING":"hi"},"status":"pending","retry_count":0,"created_at":"2026-01-01T00:00:00.000000Z"}'  # noqa: E501
STEPS = [
    JobUpdate(status="running"),
    JobUpdate(status="failed", exit_code=1, stdout="out", stderr="err"),
    JobUpdate(status="running"),
    JobUpdate(status="done", exit_code=0, stdout="hello"),
]
TABLE = Table(Column("Redis", "6.2f", "µs/call"), label_width=22)


def poll(client: redis.Redis, keys: Keys, count: int) -> float:
    """The agent's poll (MAX_JOBS_PER_NODE 1) of the 10 nodes in turn, `count` times."""
    return calls_usec(
        client,
        keys.root,
        [harness.poll_call(job_scripts, f"n{n % 10}") for n in range(count)],
    )


# What any script call costs Redis, whatever it does: the floor under every row below.
EMPTY_SCRIPT = "return 1"


def empty(client: redis.Redis, keys: Keys, count: int) -> float:
    # The poll's arguments, so that the row differs from the others by the script alone.
    args = job_scripts.POLL.call(
        node="", max_jobs=0, caller="", capacity="", named="", stealing="", builtin=""
    ).args
    return script_usec(client, keys.root, EMPTY_SCRIPT, [args] * count)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    args = parser.parse_args()
    keys = Keys("cost")
    with harness.redis_server() as url, harness.connected(url) as client:
        client.set(keys.initialised, "bench")
        now = time.time()
        placement = Placement.among([f"n{i}" for i in range(10)])
        create = [job_scripts.create_job(BODY, placement, now, 30) for _ in range(args.jobs)]
        at_capacity = 0.0
        TABLE.row("(a script: return 1)", empty(client, keys, args.jobs))
        TABLE.row("CREATE_JOB", calls_usec(client, keys.root, create))
        TABLE.row("POLL, finds a job", poll(client, keys, args.jobs))
        for step in STEPS:
            calls = [
                job_scripts.transition(
                    f"job-{n}", step, now, RetryPolicy(1, 0, 3600), "open", node_ttl=30
                )
                for n in range(1, args.jobs + 1)
            ]
            TABLE.row(f"TRANSITION -> {step.status}", calls_usec(client, keys.root, calls))
            if step.status == "running" and not at_capacity:
                at_capacity = poll(client, keys, args.jobs)
                TABLE.row("POLL, node at capacity", at_capacity)
    return 0


if __name__ == "__main__":
    sys.exit(main())
