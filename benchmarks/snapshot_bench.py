"""SQLite snapshot and restore: time to snapshot 100 000 changed jobs, time to restore 1 000 000.

    .venv/bin/python -m benchmarks.snapshot_bench [--changed 100000] [--restore 1000000]

Starts its own redis-server on a free loopback port and works in a temporary directory;
touches nothing else. Prints one line per measurement:
  snapshot N changed jobs into a new file / into a file that already has them (updates)
  snapshot with nothing changed, and with 1 000 changed among everything stored (cost follows
  the changes, not the total)
  restore of the --restore jobs from a file (every index rebuilt), and Redis memory after it
  retention: pruning the restored jobs that finished a day ago (3 in 5 of them), and Redis
  memory after it
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from benchmarks import harness
from benchmarks.new_jobs import creation
from benchmarks.report import Column, Table
from benchmarks.timing import timed
from scheduler.config import Settings
from scheduler.models.job import JobCreate, new_job
from scheduler.models.wire import rfc3339
from scheduler.nodes.placement import Placement
from scheduler.snapshot import db as snapshot_db
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import jobs as job_scripts
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.scripts.jobs import create_job
from scheduler.store.scripts.snapshot import finish_restore
from scheduler.store.sync_store import SyncJobStore

NODES = [f"bench-node-{i}" for i in range(10)]
CHUNK = 1000


def create_jobs(client: redis.Redis, settings: Settings, count: int) -> None:
    """`count` jobs through the real create script (so they are in `dirty`), pipelined."""
    script = client.register_script(job_scripts.CREATE_JOB.text)
    keys = Keys(settings.redis_prefix)
    now = time.time()
    # As a starting serve or worker does: settle the restore question before any create.
    marker = finish_restore(0, "benchmark")
    client.register_script(snapshot_scripts.FINISH_RESTORE.text)(keys=[keys.root], args=marker.args)
    request = JobCreate(command="python3 -c 'print(42)'", env_vars={"GREETING": "hi", "EMPTY": ""})
    body, extra = creation(new_job(request, rfc3339(now)))
    for start in range(0, count, CHUNK):
        with client.pipeline(transaction=False) as pipe:
            for i in range(start, min(start + CHUNK, count)):
                call = create_job(body, Placement.fixed(NODES[i % len(NODES)]), now, 30, **extra)
                script(keys=[keys.root], args=call.args, client=pipe)
            pipe.execute()


TABLE = Table(Column("took", "7.2f", "s"), Column("result", "10s"), label_width=44)


def measured(label: str, run: Callable[..., Any], *args: Any) -> Any:
    """`run(*args)`'s result, its time printed."""
    result, seconds = timed(lambda: run(*args))
    TABLE.row(label, seconds, str(result))
    return result


def bench_snapshot(url: str, work: Path, changed: int) -> None:
    settings = Settings.from_env(
        {}, redis_url=url, redis_prefix="snap", scheduler_db=str(work / "snap.db")
    )
    client = redis.Redis.from_url(url)
    create_jobs(client, settings, changed)
    written = measured(f"snapshot {changed} changed jobs, new file", snapshot_once, settings)
    assert written == changed, written
    keys = Keys(settings.redis_prefix)
    for start in range(1, changed + 1, CHUNK):
        ids = [f"job-{n}" for n in range(start, min(start + CHUNK, changed + 1))]
        client.sadd(keys.dirty, *ids)
    measured(f"snapshot {changed} changed jobs, all updates", snapshot_once, settings)
    measured("snapshot with nothing changed", snapshot_once, settings)
    client.sadd(keys.dirty, *[f"job-{n}" for n in range(1, CHUNK + 1)])
    measured(f"snapshot {CHUNK} changed of {changed} stored", snapshot_once, settings)
    print(f"  file size {os.path.getsize(settings.scheduler_db) / 1e6:.1f} MB", flush=True)
    client.close()


def rows(count: int) -> Iterator[tuple[Any, ...]]:
    """Rows shaped like ours: a mix of statuses, full-precision timestamps, env vars; made
    from records as the snapshot makes them (snapshot.db.row_from_record), so that they
    follow its columns."""
    base = time.time() - 86_400
    for n in range(1, count + 1):
        status = ("done", "done", "failed", "pending", "running")[n % 5]
        record: dict[str, Any] = {
            "job_id": f"job-{n}",
            "node_id": NODES[n % len(NODES)],
            "command": f"echo {n}",
            "status": status,
            "exit_code": {"done": 0, "failed": 1}.get(status),
            "stdout": "42\n" if status == "done" else "",
            "stderr": "boom" if status == "failed" else "",
            "created_at": rfc3339(base + n * 0.01),
            "retry_count": n % 2 if status == "failed" else 0,
            "env_vars": {"GREETING": "hi"},
        }
        if status != "pending":
            record["running_at"] = rfc3339(base + n * 0.01 + 1)
        if status in ("done", "failed"):
            record["finished_at"] = rfc3339(base + n * 0.01 + 2)
        yield snapshot_db.row_from_record(json.dumps(record).encode())


def bench_restore(url: str, work: Path, count: int) -> None:
    path = work / "restore.db"
    conn = snapshot_db.open_writer(str(path))
    conn.execute("BEGIN")
    conn.executemany(snapshot_db.UPSERT, rows(count))
    conn.execute("COMMIT")
    conn.close()
    print(f"  restore file: {count} rows, {os.path.getsize(path) / 1e6:.0f} MB", flush=True)
    settings = Settings.from_env({}, redis_url=url, redis_prefix="rest", scheduler_db=str(path))
    restored = measured(f"restore {count} jobs", restore_if_empty, settings)
    assert restored is True
    client = redis.Redis.from_url(url)
    keys = Keys("rest")
    assert client.zcard(keys.all_jobs) == count
    assert client.get(keys.job_seq) == str(count).encode()
    used = int(client.info("memory")["used_memory"])
    print(f"  redis used_memory after restore: {used / 1e6:.0f} MB", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  this process' peak RSS (snapshot and restore included): {peak:.0f} MB", flush=True)
    client.close()


def bench_prune(url: str, work: Path, count: int) -> None:
    """JOB_RETENTION_SECS=3600 over the restored jobs (they are in the snapshot, not dirty)."""
    settings = Settings.from_env(
        {},
        redis_url=url,
        redis_prefix="rest",
        scheduler_db=str(work / "restore.db"),
        job_retention_secs=3600,
    )
    client = redis.Redis.from_url(url)
    finished = client.zcard(Keys("rest").finished)
    store = SyncJobStore.connect(settings)
    removed = measured(
        f"prune {finished} finished jobs of {count}",
        lambda: len(store.run(ops.upkeep.prune_finished(time.time()))),
    )
    store.close()
    assert removed == finished, (removed, finished)
    used = int(client.info("memory")["used_memory"])
    print(f"  redis used_memory after pruning: {used / 1e6:.0f} MB", flush=True)
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--changed", type=int, default=100_000)
    parser.add_argument("--restore", type=int, default=1_000_000)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="snapshot-bench-") as tmp,
        harness.redis_server() as url,
    ):
        work = Path(tmp)
        print(f"sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus", flush=True)
        bench_snapshot(url, work, args.changed)
        bench_restore(url, work, args.restore)
        bench_prune(url, work, args.restore)


if __name__ == "__main__":
    main()
