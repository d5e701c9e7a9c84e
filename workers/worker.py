"""The worker process: an rq worker on the deployment's queues, plus the periodic trigger.

rq's SimpleWorker runs each job in the worker process itself. Our jobs are short, bounded by
HTTP timeouts, and run every second or so; forking a work horse for each (rq's default
Worker) would cost more than the job, and would fork a process that runs the trigger thread.
A SIGKILLed worker then takes its current job with it, and rq's maintenance in another worker
finds it abandoned once its execution lease expires (its timeout plus
WORKER_ABANDON_GRACE_SECS): a publish is retried, a periodic run is failed (the next period
re-does its work, as every task reads its state from Redis).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis.exceptions import RedisError
from rq.defaults import DEFAULT_WORKER_TTL
from rq.job import Job
from rq.worker import SimpleWorker

from scheduler.config import Settings
from workers import context
from workers.queues import KINDS, connect, queues
from workers.schedule import Trigger, redis_time

log = logging.getLogger("workers.worker")


class SchedulerWorker(SimpleWorker):
    """A SimpleWorker whose execution lease after a job's timeout is configurable (rq's is a
    fixed 60 s): that grace is how long a killed worker's job waits before recovery."""

    abandon_grace_secs = 60

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        if job.timeout == -1:
            return DEFAULT_WORKER_TTL
        return int(job.timeout or DEFAULT_WORKER_TTL) + self.abandon_grace_secs


def build_worker(settings: Settings, kinds: Sequence[str] = KINDS) -> SchedulerWorker:
    connection = connect(settings)
    worker = SchedulerWorker(
        queues(connection, settings, kinds),
        connection=connection,
        maintenance_interval=settings.worker_maintenance_secs,
    )
    worker.abandon_grace_secs = settings.worker_abandon_grace_secs
    return worker


def restore_snapshot(settings: Settings) -> None:
    """Before working: a Redis that lost its data gets the SQLite snapshot back (as serve does
    at start; scheduler.snapshot.writer decides, and only one starting process restores)."""
    from scheduler.snapshot.restore import RestoreRefused, restore_if_empty

    try:
        if restore_if_empty(settings):
            log.info("restored the jobs of %s", settings.scheduler_db)
    except RedisError as exc:
        log.warning("restore check skipped, Redis unavailable: %s", exc)
    except RestoreRefused as exc:
        log.error("restore refused: %s", exc)


def run(
    settings: Settings,
    kinds: Sequence[str] = KINDS,
    burst: bool = False,
    rq_log_level: str = "WARNING",
) -> int:
    """Work until stopped (SIGTERM/SIGINT: rq finishes the current job first); with `burst`,
    fire the current periods once, work until the queues are empty, and return."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per SQS poll
    restore_snapshot(settings)
    context.configure(settings)
    worker = build_worker(settings, kinds)
    trigger = Trigger(worker.connection, settings)
    log.info("worker %s: queues %s", worker.name, ", ".join(worker.queue_names()))
    try:
        if burst:
            trigger.tick(redis_time(worker.connection))
        else:
            trigger.start()
        worker.work(burst=burst, with_scheduler=False, logging_level=rq_log_level)
    finally:
        trigger.stop()
        context.close()
    return 0
