"""The stored state a benchmark run starts from: exactly N pending jobs under one prefix.

`preload` stores them once through the real create script; `truncate` and `reset_window` put
the prefix back to that state after a run changed it (submit added jobs, update moved jobs
through running, retry and done), so every run starts from the count it reports. The resets
cost the jobs a run touched, never the N stored ones. Benchmark-only plain commands: nothing
else writes to these prefixes while they run.
"""

from __future__ import annotations

import json
import time

import redis

from benchmarks.new_jobs import creation
from benchmarks.timing import evalsha_many
from scheduler.models.job import STATUSES, Job, JobCreate, new_job, record_encoder
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import Placement
from scheduler.store.keys import Keys
from scheduler.store.scripts import jobs as job_scripts

NODES = [f"bench-node-{i}" for i in range(10)]
_CHUNK = 2000


def preload(client: redis.Redis, prefix: str, count: int) -> None:
    """Store `count` pending jobs through the real create script, pipelined."""
    keys = Keys(prefix)
    created_at = rfc3339(time.time())
    body, extra = creation(new_job(JobCreate(command="echo preloaded"), created_at))
    placement = Placement.among(NODES)
    for start in range(0, count, _CHUNK):
        calls = [
            job_scripts.create_job(body, placement, time.time(), 30, **extra).args
            for _ in range(min(_CHUNK, count - start))
        ]
        evalsha_many(client, keys.root, job_scripts.CREATE_JOB.text, calls)


def truncate(client: redis.Redis, prefix: str, count: int) -> None:
    """Forget every job numbered above `count` (a submit run's), with its index entries."""
    keys = Keys(prefix)
    last = int(client.get(keys.job_seq) or 0)
    for start in range(count + 1, last + 1, _CHUNK):
        ids = [keys.job(f"job-{n}") for n in range(start, min(start + _CHUNK, last + 1))]
        client.delete(*ids)
    pipe = client.pipeline(transaction=False)
    for index in _indexes(keys):
        pipe.zremrangebyscore(index, f"({count}", "+inf")
    pipe.delete(keys.dirty)
    pipe.set(keys.job_seq, count)
    pipe.execute()


def reset_window(client: redis.Redis, prefix: str, window: int) -> None:
    """Put jobs 1..`window` (an update run's) back to pending, as `preload` left them, and
    drop what their transitions added (running/finished indexes, outbox events)."""
    keys = Keys(prefix)
    pipe = client.pipeline(transaction=False)
    for start in range(1, window + 1, _CHUNK):
        numbers = range(start, min(start + _CHUNK, window + 1))
        raws = client.mget([keys.job(f"job-{n}") for n in numbers])
        for n, raw in zip(numbers, raws, strict=True):
            old = json.loads(raw)  # type: ignore[arg-type]
            job = Job(
                job_id=old["job_id"],
                node_id=old["node_id"],
                command=old["command"],
                status="pending",
                retry_count=0,
                created_at=old["created_at"],
            )
            pipe.set(keys.job(job.job_id), record_encoder.encode(job))
            pipe.zadd(keys.status("pending"), {job.job_id: n})
            pipe.zadd(keys.node_status(job.node_id, "pending"), {job.job_id: n})
        pipe.execute()
    for status in STATUSES[1:]:
        pipe.delete(keys.status(status), *(keys.node_status(node, status) for node in NODES))
    pipe.delete(keys.deadlines, keys.finished, keys.outbox, keys.dirty)
    pipe.delete(*(keys.node_busy(node) for node in NODES))
    pipe.execute()


def check(client: redis.Redis, prefix: str, count: int) -> None:
    """Raise unless the prefix holds exactly `count` jobs, all pending, none running."""
    keys = Keys(prefix)
    pipe = client.pipeline(transaction=False)
    pipe.zcard(keys.all_jobs)
    pipe.zcard(keys.status("pending"))
    stored, pending = pipe.execute()
    if (stored, pending) != (count, count):
        raise RuntimeError(f"{prefix}: {stored} stored, {pending} pending, expected {count}")


def _indexes(keys: Keys) -> list[str]:
    per_node = [keys.node_jobs(n) for n in NODES] + [
        keys.node_status(n, s) for n in NODES for s in STATUSES
    ]
    return [keys.all_jobs, *(keys.status(s) for s in STATUSES), *per_node]
