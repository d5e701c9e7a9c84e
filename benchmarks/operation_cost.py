"""What running a store operation through its declaration costs the API's Python (issue 37):
`await store.run(ops.jobs.get(id))` (an `Op` built, its route resolved, its program stepped
by the executor) against the same MGET sent and read directly, as `JobStore.get` did before
operations were declared. Both on one process's connection to a redis-server of its own,
taking turns (A B, B A, ...); each figure the median of the rounds, in µs per call.

    .venv/bin/python -m benchmarks.operation_cost [--calls 2000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from benchmarks import harness
from benchmarks.report import Column, Table, ratio_column
from benchmarks.timing import in_turn, median
from scheduler.config import Settings
from scheduler.models.record import record
from scheduler.store import ops, records
from scheduler.store.jobs import JobStore


async def _measure(url: str, calls: int, rounds: int) -> dict[str, list[float]]:
    settings = Settings(redis_url=url, redis_prefix=f"bench-{uuid.uuid4().hex[:6]}")
    store = JobStore.connect(settings)
    shard = store.shards[0]
    head = (
        b'{"job_id":"job-1","node_id":"n1","command":"echo hi","status":"pending",'
        b'"retry_count":0,"created_at":"2026-01-01T00:00:00.000000Z"}'
    )
    await store.redis.execute("SET", shard.keys.job("job-1"), head)

    async def declared() -> None:
        await store.run(ops.jobs.get("job-1"))

    async def direct() -> None:
        record(await store.redis.execute("MGET", *records.job_parts(shard.keys, "job-1")))

    subjects = {"operation": declared, "direct MGET": direct}
    took: dict[str, list[float]] = {name: [] for name in subjects}
    try:
        for turn in range(rounds):
            for name in in_turn(list(subjects), turn):
                start = time.perf_counter()
                for _ in range(calls):
                    await subjects[name]()
                took[name].append((time.perf_counter() - start) / calls * 1e6)
    finally:
        await store.aclose()
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with harness.redis_server() as url:
        took = asyncio.run(_measure(url, args.calls, args.rounds))
    table = Table(Column("µs/call", "8.1f"), ratio_column("/ direct"))
    table.header("a job read, one call at a time (round trip included)")
    base = median(took["direct MGET"])
    for name, figures in took.items():
        table.row(name, median(figures), median(figures) / base)


if __name__ == "__main__":
    main()
