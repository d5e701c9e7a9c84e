"""The upgrade of rq's part of a deployment from the layout before the hash tag: rq ran with
its default prefix, so the work of our queues sits under rq:queue:P.<kind>, rq:job:<id>,
rq:<registry>:P.<kind>; now rq's prefix is "{P}:rq" (workers/rq_prefix.py). The scheduler's
own keys are renamed by scheduler/store/migrate.py.

At a worker's start, before it takes work: queued jobs move to the new queue, in order; the
scheduled, failed, finished, ... registries move with their scores; each job's hash (and rq
result) with them. Jobs an old worker had started (rq's wip registry, or popped into the
intermediate list) are queued again, so old workers must all be stopped first (README,
"Upgrading"; while one is registered, this refuses: OldLayoutAlive); a publish that ran
half-way is made again: at least once, as ever. Each job moves in one MULTI/EXEC, so after a
crash every job is in the old place or the new one, and the next start moves the rest. rq's
other old keys (workers, locks, executions) expire.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from redis.client import Pipeline

from scheduler.config import Settings
from scheduler.store.keys import Keys
from scheduler.store.legacy_keys import RQ_REGISTRIES, RQ_STARTED, LegacyKeys
from scheduler.store.migrate import OldLayoutAlive, is_cluster, old_processes
from workers.queues import KINDS

log = logging.getLogger("workers.upgrade")

REGISTRIES, STARTED = RQ_REGISTRIES, RQ_STARTED
LOCK = "rq-upgrade"
LOCK_SECS = 60
RENEW_EVERY = 500  # jobs between renewals of the lock

Step = Callable[[Pipeline], object]


@dataclass
class Moved:
    queued: int = 0
    requeued: int = 0
    registered: int = 0
    dropped: int = 0  # ids whose job hash had expired


def move_legacy_rq(client: redis.Redis, settings: Settings) -> Moved | None:
    """Move the old layout's rq work of this deployment under rq's new prefix; None when there
    is none (every start but the first after the upgrade: one EXISTS)."""
    keys = Keys(settings.redis_prefix)
    names = [keys.rq_queue(kind) for kind in KINDS]
    if is_cluster(client) or not _has_legacy_work(client, names):
        return None
    moved = Moved()
    lock = client.lock(keys.lock(LOCK), timeout=LOCK_SECS, blocking_timeout=2 * LOCK_SECS)
    with lock:
        if not _has_legacy_work(client, names):
            return None  # a worker starting at the same time moved it
        # An old worker still running would go on taking this work, and its started jobs
        # would be queued again here while it runs them.
        alive = old_processes(client, settings.redis_prefix)
        if alive:
            raise OldLayoutAlive(alive)
        for name in names:
            _move_queue(client, keys, name, moved, lambda: lock.extend(LOCK_SECS, True))
    log.info(
        "upgrade: moved rq's work from %s:* to %s:*: %d queued, %d started and queued again, "
        "%d in registries, %d without a job dropped",
        LegacyKeys.rq_prefix(),
        keys.rq_prefix,
        moved.queued,
        moved.requeued,
        moved.registered,
        moved.dropped,
    )
    return moved


def _has_legacy_work(client: redis.Redis, queues: list[str]) -> bool:
    return bool(client.exists(*(key for queue in queues for key in LegacyKeys.rq_work(queue))))


def _intermediate(queue_key: str) -> str:
    """rq's list of jobs popped by a worker, not yet started (rq/intermediate_queue.py)."""
    return f"{queue_key}:intermediate"


def _move_queue(
    client: redis.Redis, keys: Keys, queue: str, moved: Moved, renew: Callable[[], object]
) -> None:
    old_queue, new_queue = LegacyKeys.rq("queue", queue), keys.rq_key("queue", queue)
    old_popped, started = _intermediate(old_queue), LegacyKeys.rq(STARTED, queue)
    # (kind of move, the ids with how each leaves its old place and enters the new one)
    moves: list[tuple[str, str, Step, Step]] = []
    for job_id in _texts(client.lrange(old_queue, 0, -1)):
        moves.append(("queued", job_id, _lrem(old_queue, job_id), _rpush(new_queue, job_id)))
    for job_id in _texts(client.lrange(old_popped, 0, -1)):
        moves.append(("requeued", job_id, _lrem(old_popped, job_id), _requeue(keys, queue, job_id)))
    for member in _texts(client.zrange(started, 0, -1)):
        job_id = member.split(":", 1)[0]
        moves.append(("requeued", job_id, _zrem(started, member), _requeue(keys, queue, job_id)))
    for kind in REGISTRIES:
        old, new = LegacyKeys.rq(kind, queue), keys.rq_key(kind, queue)
        scored: Any = client.zrange(old, 0, -1, withscores=True)
        for raw, score in scored:
            job_id = _text(raw)
            moves.append(("registered", job_id, _zrem(old, job_id), _zadd(new, job_id, score)))
    for done, (kind, job_id, detach, attach) in enumerate(moves, 1):
        if _move_job(client, keys, job_id, detach, attach):
            setattr(moved, kind, getattr(moved, kind) + 1)
        else:
            moved.dropped += 1
        if done % RENEW_EVERY == 0:
            renew()
    # rq's set of queues: what rq-dashboard lists (the failed publishes among them).
    client.srem(LegacyKeys.rq_queues(), old_queue)
    if moves:
        client.sadd(keys.rq_queues, new_queue)


def _lrem(key: str, value: str) -> Step:
    return lambda pipe: pipe.lrem(key, 1, value)


def _rpush(key: str, value: str) -> Step:
    return lambda pipe: pipe.rpush(key, value)


def _zrem(key: str, member: str) -> Step:
    return lambda pipe: pipe.zrem(key, member)


def _zadd(key: str, member: str, score: float) -> Step:
    return lambda pipe: pipe.zadd(key, {member: score})


def _requeue(keys: Keys, queue: str, job_id: str) -> Step:
    """A job an old worker had taken: queued again, as rq does with an abandoned one."""

    def step(pipe: Pipeline) -> None:
        pipe.rpush(keys.rq_key("queue", queue), job_id)
        pipe.hset(keys.rq_key("job", job_id), "status", "queued")

    return step


def _move_job(client: redis.Redis, keys: Keys, job_id: str, detach: Step, attach: Step) -> bool:
    """Take `job_id` out of its old place and, with its hash renamed, into the new one, in
    one transaction; False if its hash had expired (then it is only taken out)."""
    old_job, new_job = LegacyKeys.rq("job", job_id), keys.rq_key("job", job_id)
    old_result = LegacyKeys.rq("results", job_id)
    # Read first: old workers are stopped and other starters wait for the lock, so only a
    # TTL can change these meanwhile (then its RENAME fails alone, below).
    has_job, has_result = bool(client.exists(old_job)), bool(client.exists(old_result))
    moved_already = not has_job and bool(client.exists(new_job))  # it was in two places
    with client.pipeline(transaction=True) as pipe:
        detach(pipe)
        if has_job:
            pipe.rename(old_job, new_job)
        if has_result:
            pipe.rename(old_result, keys.rq_key("results", job_id))
        if has_job or moved_already:
            attach(pipe)
        pipe.execute(raise_on_error=False)
    return has_job or moved_already


def _texts(raw: Any) -> list[str]:
    return [_text(value) for value in raw]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
