"""The periodic trigger: a thread in every worker process.

Exactly one run per period, with any number of workers: the trigger numbers periods from
Redis's clock (TIME), the same for every process wherever it runs, and enqueues the run of
period k of task t as the rq job `<tag>-<t>-<k>` with `unique=True`. rq's enqueue script saves
a job only if its id is new, so the copies from every trigger collapse to one job, and the
job's record outlives the period (result_ttl), so a late trigger cannot enqueue it again.
(`rq cron` would fire once per running instance: it has no lock between instances.)

The same thread promotes the due jobs of rq's scheduled registries (retries waiting for their
backoff) to their queues, under a short Redis lock so one process at a time does it. This is
what rq's own scheduler process (`with_scheduler=True`) does; doing it here keeps one
mechanism per worker, and a killed holder is replaced after WORKER_LOCK_SECS instead of the
61 s of rq's scheduler lock.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from dataclasses import dataclass

import redis
from redis.exceptions import LockError, RedisError
from redis.lock import Lock
from rq.scheduler import RQScheduler

from scheduler.config import Settings
from scheduler.store.keys import Keys
from workers.outage import until_redis_answers
from workers.queues import KINDS, PERIODIC, PERIODIC_FAILURE_TTL, enqueue_unique, queue

log = logging.getLogger("workers.schedule")

TICK_SECS = 0.5  # the longest the thread sleeps: how late a due retry can be promoted


@dataclass(frozen=True, slots=True)
class Periodic:
    name: str
    func: str
    interval: float
    timeout: int  # rq's time limit for one run


# Tasks of shard 0's workers alone in a sharded deployment (DEPLOYMENT.md, Shards): schedules are
# kept on shard 0, and two shards draining one SQS queue would each dedup a message on their
# own, so a message could make a job on each.
SHARD_ZERO_TASKS = frozenset({"schedules", "sqs"})


def periodic_tasks(settings: Settings) -> list[Periodic]:
    """The periodic tasks of a worker serving `settings` (a shard's, Settings.for_shard)."""
    tasks = _every_task(settings)
    if settings.shard == 0:
        return tasks
    return [task for task in tasks if task.name not in SHARD_ZERO_TASKS]


def _every_task(settings: Settings) -> list[Periodic]:
    http = math.ceil(settings.http_timeout_secs)
    tasks = [
        Periodic("sweep", "workers.tasks.sweep", settings.sweep_interval_secs, 120),
        Periodic("outbox", "workers.tasks.flush_outbox", settings.outbox_flush_secs, 120),
        Periodic("snapshot", "workers.tasks.snapshot", settings.snapshot_interval_secs, 600),
        Periodic("promote", "workers.tasks.promote", settings.promote_interval_secs, 60),
        Periodic("schedules", "workers.tasks.fire_schedules", settings.schedule_tick_secs, 60),
    ]
    if settings.sqs_url:
        # A drain stops taking messages after 30 s; the last message may then make up to
        # four bounded HTTP calls (receive, two registry reads, ack).
        drain = Periodic("sqs", "workers.tasks.ingest_sqs", settings.sqs_poll_secs, 40 + 4 * http)
        tasks.append(drain)
    return tasks


def period_of(now: float, interval: float) -> int:
    return math.floor(now / interval)


def redis_time(connection: redis.Redis) -> float:
    seconds, micros = connection.time()
    return float(seconds) + micros / 1e6


def fire(connection: redis.Redis, settings: Settings, task: Periodic, period: int) -> bool:
    """Enqueue the run of `task` for `period`; False if some process already did."""
    return enqueue_unique(
        queue(connection, settings, PERIODIC),
        task.func,
        Keys(settings.redis_prefix).rq_job_id(task.name, period),
        (period,),
        job_timeout=task.timeout,
        # The record must outlive the period so a late trigger finds it (see module doc).
        result_ttl=max(60, math.ceil(5 * task.interval)),
        failure_ttl=PERIODIC_FAILURE_TTL,
        description=f"{task.name} period {period}",
    )


class Trigger:
    """Fires the periodic tasks and promotes due retries; `tick` once, or `start` a thread."""

    def __init__(self, connection: redis.Redis, settings: Settings) -> None:
        self.connection = connection
        self.settings = settings
        self.tasks = periodic_tasks(settings)
        self.fired: dict[str, int] = {}
        # Every queue of the deployment, whichever this worker takes jobs from: the lock
        # holder is the only promoter.
        self.queue_names = [Keys(settings.redis_prefix).rq_queue(kind) for kind in KINDS]
        self.lock = Lock(
            connection,
            Keys(settings.redis_prefix).lock("promote"),
            timeout=settings.worker_lock_secs,
            thread_local=False,
        )
        self.holds_lock = False
        self.promoter = RQScheduler(self.queue_names, connection=connection)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="periodic-trigger", daemon=True)

    def tick(self, now: float) -> float:
        """One round at Redis time `now`; returns how long to sleep before the next."""
        for task in self.tasks:
            period = period_of(now, task.interval)
            if self.fired.get(task.name) != period:
                fire(self.connection, self.settings, task, period)
                self.fired[task.name] = period
        self.promote()
        next_due = min((period_of(now, t.interval) + 1) * t.interval for t in self.tasks)
        return max(0.01, min(TICK_SECS, next_due - now))

    def promote(self) -> None:
        if not self._hold_lock():
            return
        self.promoter.prepare_registries(self.queue_names)
        self.promoter.enqueue_scheduled_jobs()  # type: ignore[no-untyped-call]

    def _hold_lock(self) -> bool:
        if self.holds_lock:
            try:
                self.lock.reacquire()
                return True
            except LockError:
                log.warning("trigger: lost the promote lock; another worker took over")
                self.holds_lock = False
        self.holds_lock = bool(self.lock.acquire(blocking=False))
        return self.holds_lock

    def _loop(self) -> None:
        delay = 0.0
        while not self._stop.wait(delay):
            try:
                # Redis unavailable (down, BUSY, LOADING) is waited out as the worker's loop
                # waits it out; a stop ends the wait.
                stopped = self._stop.is_set
                delay = until_redis_answers("trigger", self._tick, stopped, self._stop.wait)
            except RedisError as exc:
                if self._stop.is_set():
                    return  # stopped while Redis was unavailable
                log.warning("trigger: redis error (%r); retrying in 1 s", exc)
                delay = 1.0
            except Exception:
                log.exception("trigger: unexpected error; retrying in 1 s")
                delay = 1.0

    def _tick(self) -> float:
        try:
            return self.tick(redis_time(self.connection))
        except RedisError:
            self.holds_lock = False  # taken afresh: it may have lapsed meanwhile
            raise

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.holds_lock:
            with contextlib.suppress(LockError, RedisError):
                self.lock.release()
            self.holds_lock = False
