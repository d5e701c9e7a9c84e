"""Restore (`restore_if_empty`, when serve or a worker starts): the marker key `initialised`
says the question "does Redis hold no scheduler state?" has been answered for this Redis. The
first process to find it missing takes the restore lock and decides: Redis already holds jobs
(the id counter or the jobs index exists): nothing to do; Redis is empty and the snapshot has
jobs: load them all with every index (RESTORE_JOBS, in batches), set the id counter to the
highest job number, set the marker. Everyone else waits for the marker. A restore killed
midway leaves the `restoring` flag, so whoever takes the lock next starts it again (loading a
job twice is harmless: RESTORE_JOBS replaces it). Before deciding, under the same lock, a
deployment still in the layout before the hash tag is renamed into it (store/migrate.py),
which is refused (OldLayoutAlive) while a process of the old layout runs: `serve` and
`worker` then wait for it to stop (`restore_at_process_start`).

The lock's TTL is short (locking.RESTORE_LOCK_SECS) and a thread renews it while its holder
works (locking.kept): a start killed midway blocks the next one for seconds, not the time
its whole restore or upgrade would have taken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from redis.exceptions import LockError, RedisError
from redis.lock import Lock

from scheduler.config import Settings
from scheduler.snapshot import access_keys, drains, layout, quotas, schedules
from scheduler.snapshot import db as snapshot_db
from scheduler.snapshot.locking import (
    BATCH,
    RESTORE_LOCK,
    RESTORE_LOCK_SECS,
    kept,
    named_lock,
    open_store,
    release,
)
from scheduler.store import ops
from scheduler.store.migrate import OldLayoutAlive, rename_legacy_keys
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.scripts.layout import check_count
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger("scheduler.snapshot")

WAIT_POLL_SECS = 0.1
OLD_LAYOUT_RETRY_SECS = 5.0  # a start that found the old layout alive tries again after this


class RestoreRefused(RuntimeError):
    """Redis holds jobs, yet fewer than the snapshot: it lost its data and new jobs were
    created since. Restoring would clash ids; writing snapshots would overwrite the old rows.
    An operator decides (docs/DEPLOYMENT.md, "Durability")."""


@dataclass(frozen=True, slots=True)
class RestoreReport:
    jobs: int
    highest_job_number: int
    source: str


def restore_if_empty(
    settings: Settings,
    *,
    lock_ttl: float = RESTORE_LOCK_SECS,
    now: float | None = None,
) -> bool:
    """At the start of serve and of a worker: if Redis holds no scheduler state under
    REDIS_PREFIX and SCHEDULER_DB has jobs, restore them all. Exactly one of several processes
    starting together restores; the others wait until it is done. Returns whether this call
    restored. Raises RestoreRefused (see there)."""
    with open_store(settings) as store:
        restored = settle(store, settings, lock_ttl, time.time() if now is None else now)
        upgraded = store.run(ops.upkeep.upgrade_retired())
        if upgraded:
            log.info("upgraded %d job(s) ended under a status this version retired", upgraded)
        split = store.run(ops.upkeep.split_records())
        if split:
            log.info("upgraded %d job record(s) to records in parts", split)
        indexed = store.run(ops.upkeep.index_namespaces())
        if indexed:
            log.info("upgraded %d job(s) to namespaces: each in its namespace's indexes", indexed)
        return restored


async def restore_at_start(settings: Settings) -> bool:
    """`restore_if_empty` of every shard of the deployment (Settings.for_shard), for the API,
    which serves them all: whether one was restored."""
    restored = [
        await _restore_shard_at_start(settings.for_shard(k)) for k in range(settings.shards)
    ]
    return any(restored)


async def _restore_shard_at_start(settings: Settings) -> bool:
    """`restore_if_empty` for the API's lifespan, in a thread so the event loop stays free.
    Redis being down is not fatal: the API answers 503 until it is back, and the worker's next
    snapshot settles the restore then. A refused restore is logged; the API still starts.
    An upgrade refused because a process of the old layout runs (OldLayoutAlive) is raised:
    the API does not serve beside it (`scheduler serve` waits for it before, in
    `restore_at_process_start`)."""
    try:
        return await asyncio.to_thread(restore_if_empty, settings)
    except RedisError as exc:
        log.warning("restore check skipped, Redis unavailable: %s", exc)
    except RestoreRefused as exc:
        log.error("restore refused: %s", exc)
    except OldLayoutAlive as exc:
        log.error("upgrade refused, not serving: %s", exc)
        raise
    return False


def restore_at_process_start(settings: Settings, retry_secs: float = OLD_LAYOUT_RETRY_SECS) -> bool:
    """`restore_if_empty` at the start of `scheduler serve` and `scheduler worker`, before
    they serve or work. While processes of the layout before the hash tag run, the upgrade is
    refused: this logs an ERROR naming them and tries again every `retry_secs`, until they
    are stopped (a supervisor restarting a process that exits would only retry the same way,
    with growing delays or giving up, while this goes on the moment they stop). Redis
    unavailable and a refused restore are logged, as in restore_at_start."""
    while True:
        try:
            return restore_if_empty(settings)
        except RedisError as exc:
            log.warning("restore check skipped, Redis unavailable: %s", exc)
        except RestoreRefused as exc:
            log.error("restore refused: %s", exc)
        except OldLayoutAlive as exc:
            log.error(
                "upgrade refused: processes of the version before the hash tag are running "
                "(%s). Stop every one of them (docs/UPGRADING.md); trying again in %.0f s",
                exc,
                retry_secs,
            )
            time.sleep(retry_secs)
            continue
        return False


def settle(store: SyncJobStore, settings: Settings, lock_ttl: float, now: float) -> bool:
    keys, waited = store.keys, time.monotonic()
    while True:
        if store.redis.exists(keys.initialised):
            return False
        lock = named_lock(store, RESTORE_LOCK, lock_ttl)
        if lock.acquire(blocking=False):
            try:
                with kept(lock, lock_ttl):
                    return _decide(store, settings, lock, lock_ttl, now)
            finally:
                release(lock)
        if time.monotonic() - waited > 10:
            log.info("waiting for another process to restore the snapshot")
            waited = time.monotonic()
        time.sleep(WAIT_POLL_SECS)


def _has_jobs(store: SyncJobStore) -> bool:
    return bool(store.redis.exists(store.keys.job_seq, store.keys.all_jobs))


def _decide(
    store: SyncJobStore, settings: Settings, lock: Lock, lock_ttl: float, now: float
) -> bool:
    """Under the restore lock: answer the restore question for this Redis, once."""
    keys, path = store.keys, settings.scheduler_db
    # A deployment of the layout before the hash tag has its marker under the old name.
    rename_legacy_keys(store.redis, keys, watch_secs=settings.upgrade_watch_secs, lock=lock)
    if store.redis.exists(keys.initialised):
        return False
    interrupted = store.redis.get(keys.restoring)
    if interrupted is not None:
        source = interrupted.decode() if isinstance(interrupted, bytes) else interrupted
        log.warning("restore: resuming the interrupted restore from %s", source)
    else:
        holds_jobs, highest = snapshot_db.snapshot_summary(path)
        if _has_jobs(store):
            counter = drawn_up_to(int(store.redis.get(keys.job_seq) or 0), settings)
            if highest > counter:
                raise RestoreRefused(
                    f"Redis (prefix {keys.prefix!r}) counts jobs up to job-{counter} but the "
                    f"snapshot {path} holds job-{highest}: Redis lost its data and new jobs "
                    "were created since"
                )
            store.run(snapshot_scripts.finish_restore(0, "found jobs in Redis"))
            return False
        if not holds_jobs:
            layout.restore(store, path, mark_dirty=False)
            drains.restore(store, path)
            access_keys.restore(store, path)
            quotas.restore(store, path)
            count = schedules.restore(store, path, mark_dirty=False)
            marker = f"restored {count} schedules from {path}" if count else "started empty"
            store.run(snapshot_scripts.finish_restore(0, marker))
            return False
        source = os.path.abspath(path)
        store.redis.set(keys.restoring, source)
    _load(store, source, _mark_dirty(source, path), lock, lock_ttl, now, into_empty=True)
    return True


def drawn_up_to(counter: int, settings: Settings) -> int:
    """The highest job number a shard whose id counter is `counter` has made: shard k of S
    draws counter x S + k (store/shards.py); the counter itself, unsharded."""
    return counter * settings.shards + settings.shard if counter else 0


def _mark_dirty(source: str, scheduler_db: str) -> bool:
    """Jobs restored from another file than SCHEDULER_DB must reach SCHEDULER_DB too."""
    try:
        return not os.path.samefile(source, scheduler_db)
    except OSError:
        return True


def _load(
    store: SyncJobStore,
    source: str,
    mark_dirty: bool,
    lock: Lock,
    lock_ttl: float,
    now: float,
    *,
    into_empty: bool,
) -> RestoreReport:
    """Load every row of `source` (batches of RESTORE_JOBS), then finish: counter, marker."""
    started = time.monotonic()
    count, highest, expired = 0, 0, 0
    # The layout first: an API that reads it meanwhile finds the deployment's own.
    layout.restore(store, source, mark_dirty)
    # Jobs past JOB_RETENTION_SECS stay in the file they come from and out of Redis, as the
    # sweep would prune them next. Only when that file is the snapshot: jobs from another
    # file must reach the snapshot first (mark_dirty), so they are loaded and pruned later.
    # And only into an empty Redis: a forced restore over jobs must put back every row, or
    # a newer job with the same id would stay and the next snapshot would overwrite the row.
    retention = store.settings.job_retention_secs
    expire = retention and into_empty and not mark_dirty
    expire_before = now - retention if expire else None
    # One batch goes to Redis from a thread (which mostly waits on the socket) while the next
    # is converted here: the two costs overlap instead of adding up. One batch in flight.
    with (
        contextlib.closing(snapshot_db.open_reader(source)) as conn,
        ThreadPoolExecutor(max_workers=1, thread_name_prefix="restore") as sender,
    ):
        in_flight: Future[int] | None = None
        for rows in snapshot_db.read_batches(conn, BATCH):
            jobs = _convert(rows, source, now)
            # Scores of job-N ids are N; other ids score below 1 (snapshot_db.NON_JOB_SCORE).
            highest = max([highest, *(int(job.score) for job in jobs if job.score >= 1)])
            if expire_before is not None:
                kept = [j for j in jobs if j.finished is None or j.finished >= expire_before]
                expired, jobs = expired + len(jobs) - len(kept), kept
            for piece in _pieces(jobs):
                if in_flight is not None:
                    count += in_flight.result()
                    lock.extend(lock_ttl, replace_ttl=True)
                call = snapshot_scripts.restore_jobs(piece, mark_dirty)
                in_flight = sender.submit(store.run, call)
        if in_flight is not None:
            count += in_flight.result()
    store.run(
        ops.upkeep.rebuild_waiting(now)
    )  # a waiting job's count depends on the others restored
    restored_schedules = schedules.restore(store, source, mark_dirty)
    drains.restore(store, source)
    access_keys.restore(store, source)
    quotas.restore(store, source)
    if not lock.owned():
        raise LockError("restore lock lost before the restore finished")
    marker = f"restored {count} jobs from {source}"
    if restored_schedules:
        marker += f" and {restored_schedules} schedules"
    if expired:
        marker += f" ({expired} finished before JOB_RETENTION_SECS left in the file)"
    store.run(snapshot_scripts.finish_restore(highest, marker))
    log.info("%s in %.3f s (next id job-%d)", marker, time.monotonic() - started, highest + 1)
    return RestoreReport(jobs=count, highest_job_number=highest, source=source)


# What one RESTORE_JOBS call puts back: about 5 ms of Redis (benchmarks/script_bounds.py),
# so a restore never holds Redis long, whatever the file holds (a piece has one job at least).
PIECE_JOBS, PIECE_BYTES = 250, 1 << 20


def _pieces(
    jobs: list[snapshot_scripts.RestoredJob],
) -> Iterator[list[snapshot_scripts.RestoredJob]]:
    piece: list[snapshot_scripts.RestoredJob] = []
    size = 0
    for job in jobs:
        if piece and (len(piece) == PIECE_JOBS or size + len(job.record) > PIECE_BYTES):
            yield piece
            piece, size = [], 0
        piece.append(job)
        size += len(job.record)
    if piece:
        yield piece


def _check_file_layout(source: str, settings: Settings) -> None:
    """A file holding a sharded deployment's layout is that deployment's shard 0's: refused
    into a deployment of another count (LayoutChanged) or into another shard, before anything
    is written (its jobs would be looked for on the shards their ids name)."""
    record = layout.filed(source)
    if not record:
        return
    check_count(record.get("count"), settings.shards)
    if settings.shard:
        raise RestoreRefused(
            f"{source} holds the layout of a sharded deployment: it is shard 0's file, not "
            f"shard {settings.shard}'s"
        )


def _convert(
    rows: list[tuple[Any, ...]], source: str, now: float
) -> list[snapshot_scripts.RestoredJob]:
    jobs = []
    for row in rows:
        try:
            jobs.append(snapshot_db.restored_job(row, now))
        except ValueError as exc:
            log.error("restore: skipped a row of %s: %s", source, exc)
    return jobs


def restore_from_file(
    settings: Settings,
    source: str,
    *,
    force: bool = False,
    lock_ttl: float = RESTORE_LOCK_SECS,
    now: float | None = None,
) -> RestoreReport:
    """The operator's `scheduler restore --from FILE`. Into a Redis that already holds jobs it
    refuses (RestoreRefused) unless `force`: then the file's jobs replace those with the same
    id, the others stay, and the id counter only ever rises. Jobs from a file other than
    SCHEDULER_DB are marked changed, so the next snapshot writes them there too."""
    source = os.path.abspath(source)
    snapshot_db.open_reader(source).close()  # fail early, before any lock, if it is missing
    _check_file_layout(source, settings)
    with open_store(settings) as store:
        lock = named_lock(store, RESTORE_LOCK, lock_ttl)
        lock.acquire(blocking=True)
        try:
            with kept(lock, lock_ttl):
                # Jobs left by an interrupted restore do not count: this one starts it again.
                holds_jobs = _has_jobs(store) and not store.redis.exists(store.keys.restoring)
                if holds_jobs and not force:
                    raise RestoreRefused(
                        f"Redis (prefix {store.keys.prefix!r}) already holds jobs; "
                        "use --force to load the file over them"
                    )
                if not holds_jobs:
                    store.redis.set(store.keys.restoring, source)
                mark = _mark_dirty(source, settings.scheduler_db)
                at = time.time() if now is None else now
                return _load(store, source, mark, lock, lock_ttl, at, into_empty=not holds_jobs)
        finally:
            release(lock)
