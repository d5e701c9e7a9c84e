"""The workers' rq queues, and how work is put on them.

Two queues per deployment, named from REDIS_PREFIX (keys.rq_queue) so several deployments or
test runs can share one Redis: `periodic` (sweep, SQS, outbox, snapshot) and `events` (one
publish job per SNS event). A worker listens to `periodic` first, so a backlog of publishes
while SNS is down never delays a timeout sweep.

Every job is enqueued with an explicit id and rq's `unique=True`: rq's own Lua script saves
the job only if no job with that id exists, so the same period or the same event enqueued
by several processes, or again after a crash, is one rq job.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from rq import Queue, Retry
from rq.exceptions import DequeueTimeout, DuplicateJobError
from rq.job import Job
from rq.utils import as_text

from scheduler.config import Settings
from scheduler.store.connection.blocking import sync_client
from scheduler.store.keys import Keys

PERIODIC = "periodic"
EVENTS = "events"
KINDS = (PERIODIC, EVENTS)

PUBLISH_RESULT_TTL = 3600  # outlives any re-flush of the same outbox entry by far
PUBLISH_FAILURE_TTL = 7 * 86400  # a publish that exhausted its retries stays visible a week
PERIODIC_FAILURE_TTL = 86400
DEQUEUE_POLL_SECS = 0.1  # how often an idle worker looks at its queues


class ClaimingQueue(Queue):
    """A queue class whose dequeue never loses a job.

    rq takes a job with BLPOP when a worker listens on several queues (ours always does). A job
    popped for a worker that was killed at that moment, or whose answer Redis lost as it died,
    is in no list any more and stays `queued` for ever: its event is never published. rq keeps
    such a job safe only with one queue, by moving it (BLMOVE) into the queue's intermediate
    list, where its maintenance finds it after a minute and fails it (a publish is retried).
    BLMOVE takes one source, so this moves with LMOVE from each queue in order, and polls."""

    @classmethod
    def dequeue_any(
        cls,
        queues: Iterable[Queue],
        timeout: int | None,
        connection: redis.Redis,
        job_class: type[Job] | None = None,
        serializer: Any = None,
        death_penalty_class: Any = None,
    ) -> tuple[Job, Queue] | None:
        ordered = list(queues)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for queue in ordered:
                moved = cls.lmove(connection, queue.key, None)
                if moved is None:
                    continue
                queue_key, job_id = map(as_text, moved)
                found = cls._fetch_dequeued_job(
                    connection, queue_key, job_id, job_class, serializer, death_penalty_class
                )
                if found is not None:
                    return found
            if deadline is None:
                return None
            if time.monotonic() >= deadline:
                raise DequeueTimeout(timeout, [queue.key for queue in ordered])
            time.sleep(DEQUEUE_POLL_SECS)


def connect(settings: Settings) -> redis.Redis:
    return sync_client(settings)


def queue(connection: redis.Redis, settings: Settings, kind: str) -> Queue:
    return ClaimingQueue(Keys(settings.redis_prefix).rq_queue(kind), connection=connection)


def queues(
    connection: redis.Redis, settings: Settings, kinds: Sequence[str] = KINDS
) -> list[Queue]:
    return [queue(connection, settings, kind) for kind in kinds]


def retry_intervals(settings: Settings) -> list[int]:
    """Exponential backoff: base, 2 base, 4 base, ... capped, one interval per retry."""
    base, cap = settings.sns_retry_base_secs, settings.sns_retry_cap_secs
    return [min(cap, base * 2**attempt) for attempt in range(settings.sns_retry_max)]


def enqueue_unique(q: Queue, func: str, job_id: str, args: tuple[Any, ...], **options: Any) -> bool:
    """Enqueue `func(*args)` as job `job_id` unless that job already exists; True if enqueued."""
    try:
        q.enqueue(func, args=args, job_id=job_id, unique=True, **options)
    except DuplicateJobError:
        return False
    return True


def publish_timeout(settings: Settings) -> int:
    """rq's time limit for one publish attempt: the HTTP call's own bounds, plus slack."""
    return math.ceil(2 * settings.http_timeout_secs) + 2


def enqueue_publish(connection: redis.Redis, settings: Settings, number: int, message: str) -> bool:
    """One rq job per outbox event; its id is the event number, so it is enqueued once."""
    return enqueue_unique(
        queue(connection, settings, EVENTS),
        "workers.tasks.publish_event",
        Keys(settings.redis_prefix).rq_job_id("event", number),
        (number, message),
        job_timeout=publish_timeout(settings),
        retry=Retry(max=settings.sns_retry_max, interval=retry_intervals(settings)),
        result_ttl=PUBLISH_RESULT_TTL,
        failure_ttl=PUBLISH_FAILURE_TTL,
        description=f"publish event {number}: {message}",
    )
