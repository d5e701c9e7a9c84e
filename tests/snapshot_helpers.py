"""Helpers of the snapshot tests (tests/snapshot/): Redis state dumps, snapshot
rows, job records with every field, and a file as the Go scheduler writes it."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path
from typing import Any, cast

import redis

from scheduler.models.fields import JobField, Kind
from scheduler.models.job import JOB_FIELDS, job_number
from scheduler.snapshot import db as snapshot_db
from scheduler.store.keys import Keys
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.sync_store import SyncJobStore
from tests.records import stored_job

# Keys that are not job state (or are snapshot bookkeeping), left out of state comparisons.
_NOT_JOB_STATE = {
    "initialised",
    "dirty",
    "dirty:inflight",
    "restoring",
    "seq:rr",
    "seq:event",
    "tokens",
    "unplaced:retry",  # placement's flag: whether a pass is due, not a job's state
    "records:split",  # the upgrade to records in parts is done: bookkeeping
    "namespaces:indexed",  # the upgrade to namespaces is done: bookkeeping
    "libraries",  # the function libraries in use (ops.upkeep.retire_libraries): bookkeeping
}
# rq: the workers' queues; runs, stats: their bookkeeping.
# attempts, live output (log:) and events: Redis-only, by design (a restore brings jobs
# back without them).
_NOT_JOB_PREFIXES = (
    "lock:", "nodes", "outbox", "rq:", "runs:", "stats", "attempts:", "series", "ui:", "authfail:",
    "label:", "log:", "events",
)  # fmt: skip


def job_state(r: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every job record and index under `prefix`, decoded for comparison."""
    state: dict[str, Any] = {}
    for raw in r.scan_iter(Keys(prefix).pattern(), count=1000):
        name = raw.decode().removeprefix(Keys(prefix).root)
        if name in _NOT_JOB_STATE or name.startswith(_NOT_JOB_PREFIXES):
            continue
        if name.startswith("node:") and name.endswith(":room"):
            continue  # a node's offer (its registration's) and what it holds, a sum
        kind = r.type(raw)
        if name.startswith("job:") and name.count(":") == 2:
            continue  # a part of a job's record (models/record.py), read with its head
        if name.startswith("job:"):
            state[name] = stored_job(r, Keys(prefix), name.removeprefix("job:"))
        elif kind == b"string":
            state[name] = r.get(raw)
        elif kind == b"zset":
            members = cast(list[tuple[bytes, float]], r.zrange(raw, 0, -1, withscores=True))
            # Deadlines and finish times come back from the microsecond stamps of the record.
            digits = 3 if name in ("deadlines", "finished") else 9
            state[name] = {m.decode(): round(s, digits) for m, s in members}
        elif kind == b"set":
            state[name] = sorted(m.decode() for m in cast(set[bytes], r.smembers(raw)))
        elif kind == b"hash" and name.startswith("ns:") and name.endswith(":held"):
            # a namespace's running sums (quota.lua), which the restore makes again
            state[name] = cast(dict[bytes, bytes], r.hgetall(raw))
        else:
            raise AssertionError(f"unexpected key type {kind!r} for {name}")
    return state


def lose_redis_data(r: redis.Redis, prefix: str) -> None:
    """What a Redis restart without persistence does to this deployment."""
    keys = list(r.scan_iter(Keys(prefix).pattern(), count=1000))
    if keys:
        r.delete(*keys)


def rows(path: Path) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        return {row["id"]: dict(row) for row in conn.execute("SELECT * FROM jobs")}


def columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]


# Values the scheduler reads (indexes, deadlines, retention) must be real ones; every other
# field gets an awkward value of its kind, its own (a column swapped for another shows), so a
# field added to models.job.Job is covered too.
_MEANINGFUL = {"node_id": "n1", "status": "done", "job_type": "run"}
_STAMPS = [f.name for f in JOB_FIELDS if f.kind is Kind.TIMESTAMP]
_FRACTIONS = (".123456", ".5", "")  # the precisions a timestamp comes in


def _awkward(field: JobField, position: int) -> Any:
    if field.kind is Kind.TIMESTAMP:  # later fields later: created, running, finished
        fraction = _FRACTIONS[_STAMPS.index(field.name) % len(_FRACTIONS)]
        return f"2026-01-01T10:00:{position:02d}{fraction}Z"
    if field.kind is Kind.INT:
        return 0 if field.nullable else 8000 + position  # exit code 0 is set, not "none"
    if field.kind is Kind.OBJECT:
        return {"PATH_LIKE": "/usr/bin:/bin", "EMPTY": "", "UNI": "\u2603", "FIELD": field.name}
    if field.kind is Kind.LIST:
        return ["job-1", "a/b \u2603", field.name]
    if field.kind is Kind.SELECTOR:
        return {"zone/x": ["a/b", "\u2603", field.name], "EMPTY": "", "one": "a/b"}
    return f"{field.name}: 'a/b' \u00e9 \"q\" \\ \u2603\n\ttab"


def full_record(job_id: str, **fields: Any) -> dict[str, Any]:
    """A record with every field of models.job.Job set, with awkward values: "/", quotes,
    non-ASCII, control characters, exit code 0, env vars with an empty value."""
    record = {f.name: _MEANINGFUL.get(f.name) or _awkward(f, i) for i, f in enumerate(JOB_FIELDS)}
    record["job_id"] = job_id
    record.update(fields)
    return record


def without(record: dict[str, Any], *names: str) -> dict[str, Any]:
    """The record with these fields unset (as the API omits them)."""
    return {k: v for k, v in record.items() if k not in names}


def put_records(store: SyncJobStore, records: list[dict[str, Any]], now: float = 0.0) -> None:
    """Jobs into Redis as a snapshot row would put them back, marked changed."""
    jobs = []
    for record in records:
        blob = json.dumps(record).encode()
        job = snapshot_db.restored_job(snapshot_db.row_from_record(blob), now)
        jobs.append(dataclasses.replace(job, record=blob))
    store.run(snapshot_scripts.restore_jobs(jobs, mark_dirty=True))
    # As if created: the id counter covers them.
    highest = max(job_number(r["job_id"]) or 0 for r in records)
    if highest > int(store.redis.get(store.keys.job_seq) or 0):
        store.redis.set(store.keys.job_seq, highest)


GO_SCHEMA = """CREATE TABLE jobs (
    id TEXT PRIMARY KEY, node_id TEXT NOT NULL, instance_id TEXT NOT NULL DEFAULT '',
    command TEXT NOT NULL, deploy_url TEXT NOT NULL DEFAULT '', status TEXT NOT NULL,
    exit_code INTEGER, stdout TEXT NOT NULL DEFAULT '', stderr TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL, running_at TEXT, finished_at TEXT,
    retry_count INTEGER NOT NULL DEFAULT 0, env_vars TEXT,
    job_type TEXT NOT NULL DEFAULT 'run', port INTEGER NOT NULL DEFAULT 0)"""


def go_file(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(GO_SCHEMA)
        conn.execute(
            "INSERT INTO jobs VALUES ('job-99', 'n1', '', 'echo hi', '', 'done', 0, 'hi\n', '',"
            " '2026-01-01T10:00:00Z', '2026-01-01T10:00:03Z', '2026-01-01T10:00:04Z', 1,"
            " '{\"A\":\"\"}', 'run', 0)"
        )
        conn.execute(
            "INSERT INTO jobs VALUES ('not-a-job', 'n1', '', 'echo old', '', 'pending', NULL,"
            " '', '', '2026-01-01T09:00:00Z', NULL, NULL, 0, NULL, 'run', 0)"
        )
    conn.close()
