"""Writing the snapshot. Redis is the live store; the SQLite file SCHEDULER_DB is its durable
snapshot and the way back when Redis loses its data.

Snapshot (`snapshot_once`, every SNAPSHOT_INTERVAL_SECS in a worker): every job-changing
script adds the job id to the dirty set. A snapshot moves that set to an in-flight set (one
script), reads the records in batches, upserts them in one SQLite transaction, commits, and
only then removes the written ids from the in-flight set. A snapshot killed at any point leaves
its ids in flight; the next one folds them back in and writes them. Cost: the jobs changed.

The restore is in restore.py.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any

from redis.exceptions import LockError
from redis.lock import Lock

from scheduler.config import Settings
from scheduler.models.record import PART_COUNT, record
from scheduler.snapshot import access_keys, drains, layout, quotas, schedules
from scheduler.snapshot import db as snapshot_db
from scheduler.snapshot.locking import (
    BATCH,
    RESTORE_LOCK_SECS,
    SNAPSHOT_LOCK,
    SNAPSHOT_LOCK_SECS,
    fenced_transaction,
    named_lock,
    open_store,
    release,
)
from scheduler.snapshot.restore import RestoreRefused, settle
from scheduler.store.records import job_parts
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger("scheduler.snapshot")


class SnapshotBusy(RuntimeError):
    """Another process holds the snapshot lock."""


def snapshot_once(settings: Settings, *, lock_ttl: float = SNAPSHOT_LOCK_SECS) -> int:
    """The worker's periodic task: write the jobs changed since the last snapshot, and log how
    many (`scheduler snapshot` prints its own line instead: once). Returns how many were
    written (0 when another process is writing one, or when a restore was refused)."""
    started = time.monotonic()
    try:
        written = write_snapshot(settings, lock_ttl=lock_ttl)
    except SnapshotBusy:
        log.info("snapshot: another process is writing one")
        return 0
    except RestoreRefused as exc:
        log.error("snapshot: not written: %s", exc)
        return 0
    except LockError as exc:
        log.warning("snapshot: abandoned, rolled back: %s", exc)
        return 0
    if written:
        log.info("snapshot: %d jobs written in %.3f s", written, time.monotonic() - started)
    return written


def write_snapshot(
    settings: Settings,
    *,
    wait: bool = False,
    lock_ttl: float = SNAPSHOT_LOCK_SECS,
    now: float | None = None,
) -> int:
    """Write the changed schedules, drains and jobs to SCHEDULER_DB (returns the jobs written); with
    `wait`, wait for a running snapshot to end instead of raising SnapshotBusy. A Redis whose
    restore question is open (it lost its data since this process started) is settled first,
    so the snapshot never writes a fresh job-1 over the file's job-1. Raises RestoreRefused
    when that cannot be settled."""
    with open_store(settings) as store:
        if not store.redis.exists(store.keys.initialised):
            settle(store, settings, RESTORE_LOCK_SECS, time.time() if now is None else now)
        lock = named_lock(store, SNAPSHOT_LOCK, lock_ttl)
        if not lock.acquire(blocking=wait, blocking_timeout=None):
            raise SnapshotBusy()
        try:
            # Schedules first: a tick the file holds as fired has its job in the file too
            # (snapshot/schedules.py).
            schedules.write_changes(store, settings.scheduler_db, lock, lock_ttl)
            drains.write_changes(store, settings.scheduler_db, lock)
            access_keys.write_changes(store, settings.scheduler_db, lock)
            quotas.write_changes(store, settings.scheduler_db, lock)
            layout.write_changes(store, settings.scheduler_db, lock)
            return _write_changes(store, settings.scheduler_db, lock, lock_ttl)
        finally:
            release(lock)


def _write_changes(store: SyncJobStore, path: str, lock: Lock, lock_ttl: float) -> int:
    if store.run(snapshot_scripts.take_dirty()) == 0:
        return 0
    written, settled = 0, []  # rows upserted; ids that may leave the in-flight set
    with fenced_transaction(path, lock) as conn:
        for ids in _batches(store.redis.sscan_iter(store.keys.dirty_inflight, count=BATCH)):
            rows, done = _read_batch(store, ids)
            snapshot_db.upsert(conn, rows)
            written += len(rows)
            settled += done
            lock.extend(lock_ttl, replace_ttl=True)
    # Only now may the changes be forgotten: a crash before this leaves them in flight.
    _forget(store, settled)
    return written


def _batches(members: Iterable[bytes]) -> Iterator[list[str]]:
    """Distinct ids, BATCH at a time (SSCAN may return a member twice)."""
    seen: set[str] = set()
    batch: list[str] = []
    for member in members:
        job_id = member.decode()
        if job_id in seen:
            continue
        seen.add(job_id)
        batch.append(job_id)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _read_batch(store: SyncJobStore, ids: list[str]) -> tuple[list[tuple[Any, ...]], list[str]]:
    """The rows to upsert for these ids, and the ids that may leave the in-flight set once
    they are committed."""
    keys = [key for job_id in ids for key in job_parts(store.keys, job_id)]
    parts: list[Any] = store.redis.mget(keys)
    rows, settled = [], []
    for i, job_id in enumerate(ids):
        if parts[i * PART_COUNT] is None:
            settled.append(job_id)  # no longer in Redis: nothing to write
            continue
        try:
            blob = record(parts[i * PART_COUNT : (i + 1) * PART_COUNT])
            rows.append(snapshot_db.row_from_record(blob or b""))
        except (ValueError, KeyError) as exc:
            # Kept in flight (retried by every snapshot) rather than silently dropped.
            log.error("snapshot: job %s: unreadable record (%s); not written", job_id, exc)
            continue
        settled.append(job_id)
    return rows, settled


def _forget(store: SyncJobStore, ids: list[str]) -> None:
    with store.redis.pipeline(transaction=False) as pipe:
        for start in range(0, len(ids), BATCH):
            pipe.srem(store.keys.dirty_inflight, *ids[start : start + BATCH])
        pipe.execute()
