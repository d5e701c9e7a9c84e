"""The worker process: an rq worker on the deployment's queues, plus the periodic trigger.

rq's SimpleWorker runs each job in the worker process itself. Our jobs are short, bounded by
HTTP timeouts, and run every second or so; forking a work horse for each (rq's default
Worker) would cost more than the job, and would fork a process that runs the trigger thread.
A SIGKILLed worker then takes its current job with it, and rq's maintenance in another worker
finds it abandoned once its execution lease expires (its timeout plus
WORKER_ABANDON_GRACE_SECS): a publish is retried, a periodic run is failed (the next period
re-does its work, as every task reads its state from Redis).

A Redis outage does not end the process (rq's loop quits on any error outside its dequeue),
nor does a Redis that answers BUSY (a long script) or LOADING (a restart reading its data) for
minutes: every Redis step of rq's loop, its dequeue and a job's bookkeeping is retried with
capped backoff until Redis answers (workers.outage). A job that finished while Redis was away
has its result recorded once Redis returns, so it is neither lost nor run again.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, TypeVar

from redis.client import Pipeline
from redis.exceptions import LockError, RedisError
from rq import worker_registration
from rq.defaults import DEFAULT_WORKER_TTL
from rq.exceptions import StopRequested
from rq.executions import Execution
from rq.job import Job
from rq.job_lifecycle import call_exception_handlers
from rq.queue import Queue
from rq.registry import clean_registries
from rq.utils import now as rq_now
from rq.worker import SimpleWorker

from scheduler.config import Settings
from scheduler.snapshot.layout import check_layout
from scheduler.snapshot.restore import OLD_LAYOUT_RETRY_SECS, restore_at_process_start
from scheduler.store.keys import Keys
from scheduler.store.migrate import OldLayoutAlive
from workers import context
from workers.outage import (
    AVAILABILITY,
    BACKOFF_CAP_SECS,
    RoutineFailure,
    redis_unavailable,
    until_redis_answers,
)
from workers.queues import KINDS, ClaimingQueue, connect
from workers.rq_migrate import move_legacy_rq
from workers.schedule import Trigger, redis_time

log = logging.getLogger("workers.worker")

T = TypeVar("T")

MAINTENANCE_LOCK_SECS = 30  # cleaning takes well under a second
RESTART_PAUSE_SECS = 1.0  # before a new rq worker, after rq's loop quit on an error


class RidingQueue(ClaimingQueue):
    """A ClaimingQueue whose dequeue waits out Redis unavailable (workers.outage): rq's own
    wait around it logs an ERROR on each try, and BUSY, which it does not expect, quits its
    loop. A stop (SIGTERM) while idle is raised by rq's signal handler, in the wait."""

    @classmethod
    def dequeue_any(cls, *args: Any, **kwargs: Any) -> tuple[Job, Queue] | None:
        dequeue = super().dequeue_any
        return until_redis_answers("dequeue", functools.partial(dequeue, *args, **kwargs))


class SchedulerWorker(SimpleWorker):
    """A SimpleWorker whose execution lease after a job's timeout is configurable (rq's is a
    fixed 60 s): that grace is how long a killed worker's job waits before recovery. It rides
    out Redis outages instead of quitting (module doc)."""

    abandon_grace_secs = 60
    queue_class = RidingQueue
    # rq waits out a lost Redis around its dequeue too (what RidingQueue leaves it), up to 60 s.
    max_connection_wait_time = BACKOFF_CAP_SECS

    stop_signalled = False

    @property
    def stop_requested(self) -> bool:
        """A stop was asked for (SIGTERM, SIGINT, rq's shutdown command): rq's loop ending is
        then the end. rq's own flag is set only when the stop comes during a job."""
        return self.stop_signalled or bool(self._stop_requested)

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signalled = True
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        if job.timeout == -1:
            return DEFAULT_WORKER_TTL
        return int(job.timeout or DEFAULT_WORKER_TTL) + self.abandon_grace_secs

    def _ride(self, what: str, call: Callable[[], T]) -> T:
        """`call()` retried while Redis is unavailable; a stop requested meanwhile (SIGTERM)
        ends the wait as a stop, which rq's loop handles quietly."""
        try:
            return until_redis_answers(what, call, give_up=lambda: self.stop_requested)
        except RedisError as exc:
            if not redis_unavailable(exc):
                raise  # a bug: rq's loop logs it, and run() starts a new worker
            raise StopRequested() from exc

    # rq's start and loop, outside its dequeue: each of these talks to Redis.

    def register_birth(self) -> None:
        self._ride("start", super().register_birth)

    def subscribe(self) -> None:
        self._ride("subscribe", super().subscribe)

    def set_state(self, state: str, pipeline: Pipeline | None = None) -> None:
        if pipeline is not None:  # only queued: whoever executes the pipeline retries
            super().set_state(state, pipeline)
            return
        self._ride("state", functools.partial(super().set_state, state))

    def check_for_suspension(self, burst: bool) -> None:
        self._ride("suspension check", functools.partial(super().check_for_suspension, burst))

    def _pubsub_exception_handler(self, exc: Exception, *thread: Any) -> None:
        """rq's, for the thread that takes rq's commands (shutdown, kill a job): it logs an
        ERROR every 2 s of an outage, and ends the thread on BUSY. This waits either out as
        the loop does, said as the outage is said (workers.outage)."""
        if not redis_unavailable(exc):
            super()._pubsub_exception_handler(exc, *thread)
            return
        AVAILABILITY.failed("rq's command channel", exc)
        time.sleep(BACKOFF_CAP_SECS)

    def run_maintenance_tasks(self) -> None:
        self._ride("maintenance", super().run_maintenance_tasks)

    def clean_registries(self) -> None:
        """rq's, with a short lock: rq's queue maintenance lock lives 899 s, so a worker
        killed (or cut off by a Redis outage) while cleaning stopped the recovery of
        abandoned and stuck jobs for 15 minutes."""
        for queue in self.queues:
            lock = queue.registry_cleaning_key
            if queue.connection.set(lock, 1, nx=True, ex=MAINTENANCE_LOCK_SECS):
                clean_registries(queue, self._exc_handlers)
                worker_registration.clean_worker_registry(queue)
                queue.intermediate_queue.cleanup(self, queue)
                queue.connection.delete(lock)
        self.last_cleaned_at = rq_now()  # type: ignore[assignment]

    def heartbeat(self, timeout: int | None = None, pipeline: Pipeline | None = None) -> None:
        if pipeline is not None:  # only queued: whoever executes the pipeline retries
            super().heartbeat(timeout, pipeline)
            return
        self._ride("heartbeat", functools.partial(super().heartbeat, timeout))

    # A job's bookkeeping before it runs: retried, or a job dequeued just before the outage
    # would wait in rq's intermediate queue for its one-minute cleanup.

    def prepare_execution(self, job: Job) -> Execution:
        return self._ride(f"job {job.id} start", functools.partial(super().prepare_execution, job))

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False) -> None:
        # Every job came through its queue's intermediate list (ClaimingQueue), whatever the
        # number of queues: it leaves it once started (rq does so only with one queue).
        prepare = functools.partial(super().prepare_job_execution, job, True)
        self._ride(f"job {job.id} start", prepare)

    # A job's bookkeeping once it ran: retried, so its result is recorded exactly once.

    def handle_execution_ended(self, job: Job, queue: Queue, heartbeat_ttl: int) -> None:
        ended = functools.partial(super().handle_execution_ended, job, queue, heartbeat_ttl)
        self._ride(f"job {job.id} end", ended)

    def handle_job_success(self, *args: Any, **kwargs: Any) -> None:
        self._ride("job success", functools.partial(super().handle_job_success, *args, **kwargs))

    def handle_job_failure(self, *args: Any, **kwargs: Any) -> None:
        self._ride("job failure", functools.partial(super().handle_job_failure, *args, **kwargs))

    def handle_job_retry(self, *args: Any, **kwargs: Any) -> None:
        self._ride("job retry", functools.partial(super().handle_job_retry, *args, **kwargs))

    def handle_exception(self, job: Job, *exc_info: Any) -> None:
        """A job raised. rq logs an ERROR with the traceback, then runs the exception handlers;
        for a RoutineFailure (SNS down: retried, expected) that is one line instead, a WARNING
        while retries are left (rq retries it after this, in handle_job_failure), an ERROR
        once out of them. A task that met Redis unavailable (down, BUSY, LOADING) is said as
        the outage the worker rides out is, one line now and then (workers.outage): rq's
        retry, or the next period's run, does its work. Anything else (a bug) keeps rq's
        ERROR and traceback."""
        failure = exc_info[1]
        if redis_unavailable(failure):
            AVAILABILITY.failed(f"job {job.id}", failure)
            call_exception_handlers(self._exc_handlers, job, *exc_info)
            return
        if not isinstance(failure, RoutineFailure):
            super().handle_exception(job, *exc_info)
            return
        if job.should_retry:
            delay = job.get_retry_interval()
            remaining = (job.retries_left or 1) - 1  # after this one, as rq counts them
            log.warning(
                "job %s: %s; retrying in %d s, %d retries remaining",
                *(job.id, failure, delay, remaining),
            )
        else:
            log.error("job %s: %s; out of retries, given up", job.id, failure)
        call_exception_handlers(self._exc_handlers, job, *exc_info)

    def execute_job(self, job: Job, queue: Queue) -> None:
        try:
            super().execute_job(job, queue)
        except RedisError as exc:
            if not redis_unavailable(exc):
                raise
            # Redis went away before the job started (its execution record) or after its
            # bookkeeping (the idle state). A job left in the started registry is recovered
            # by rq's maintenance as abandoned, as after a killed worker.
            log.warning("worker %s: Redis went away around job %s: %s", self.name, job.id, exc)
            self._ride("reconnect", self.connection.ping)

    def teardown(self) -> None:
        try:
            super().teardown()  # type: ignore[no-untyped-call]
        except RedisError as exc:
            if not redis_unavailable(exc):
                raise
            # Stopping while Redis is away: the worker's record expires on its own TTL.
            log.warning("worker %s: stop not recorded, Redis unavailable: %s", self.name, exc)


def build_worker(settings: Settings, kinds: Sequence[str] = KINDS) -> SchedulerWorker:
    connection = connect(settings)
    worker = SchedulerWorker(
        # Named: rq makes each a SchedulerWorker.queue_class on this connection.
        [Keys(settings.redis_prefix).rq_queue(kind) for kind in kinds],
        connection=connection,
        maintenance_interval=settings.worker_maintenance_secs,
    )
    worker.abandon_grace_secs = settings.worker_abandon_grace_secs
    return worker


def restore_snapshot(settings: Settings) -> None:
    """Before working: a Redis that lost its data gets the SQLite snapshot back (as serve does
    at start; scheduler.snapshot.writer decides, and only one starting process restores). An
    upgrade from the layout before the hash tag waits until its old processes are stopped."""
    if restore_at_process_start(settings):
        log.info("restored the jobs of %s", settings.scheduler_db)


def move_legacy_work(settings: Settings, retry_secs: float = OLD_LAYOUT_RETRY_SECS) -> None:
    """Before working: rq's work left by the layout before the hash tag (rq_migrate.py), not
    while an old rq worker may still be running some of it (then this waits, as the restore)."""
    connection = connect(settings)
    try:
        while True:
            try:
                move_legacy_rq(connection, settings)
                return
            except OldLayoutAlive as exc:
                log.error(
                    "rq upgrade refused: processes of the version before the hash tag are "
                    "running (%s). Stop every one of them (docs/UPGRADING.md); trying again "
                    "in %.0f s",
                    exc,
                    retry_secs,
                )
                time.sleep(retry_secs)
    except RedisError as exc:
        log.warning("rq upgrade check skipped, Redis unavailable: %s", exc)
    except LockError:
        log.warning("rq upgrade: another worker still moves rq's old work; the next start goes on")
    finally:
        connection.close()


def run(
    settings: Settings,
    kinds: Sequence[str] = KINDS,
    burst: bool = False,
    rq_log_level: str = "WARNING",
) -> int:
    """Work until stopped (SIGTERM/SIGINT: rq finishes the current job first); with `burst`,
    fire the current periods once, work until the queues are empty, and return. `settings`
    are the deployment's: the worker serves shard `settings.shard` (Settings.served)."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per SQS poll
    until_redis_answers("layout", functools.partial(check_layout, settings))
    # Its rq queues, periodic tasks, snapshot file, restore and outbox are that shard's.
    settings = settings.served()
    restore_snapshot(settings)
    move_legacy_work(settings)
    context.configure(settings)
    # rq's Worker talks to Redis as it is built: a worker started while Redis is away waits.
    worker = until_redis_answers("start", functools.partial(build_worker, settings, kinds))
    trigger = Trigger(worker.connection, settings)
    log.info(
        "worker %s: shard %d of %d, queues %s",
        *(worker.name, settings.shard, settings.shards, ", ".join(worker.queue_names())),
    )
    try:
        if burst:
            trigger.tick(redis_time(worker.connection))
        else:
            trigger.start()
        worker.work(burst=burst, with_scheduler=False, logging_level=rq_log_level)
        while not burst and not worker.stop_requested:
            worker = _start_again(worker, settings, kinds)
            worker.work(with_scheduler=False, logging_level=rq_log_level)
    except StopRequested:  # a SIGTERM between two runs of rq's loop
        pass
    finally:
        trigger.stop()
        context.close()
    return 0


def _start_again(old: SchedulerWorker, settings: Settings, kinds: Sequence[str]) -> SchedulerWorker:
    """A new rq worker after rq's loop quit with no stop requested: that is an error rq did
    not expect (it logged it, with its traceback, and tore the worker down). A worker process
    that ends on one leaves its deployment without periodic tasks until someone restarts it.
    rq's signal handlers stay installed until the new worker's: a SIGTERM in the pause
    raises StopRequested (rq's)."""
    log.error("worker %s: rq's loop quit on an unexpected error; starting a new worker", old.name)
    time.sleep(RESTART_PAUSE_SECS)
    if old.stop_requested:
        raise StopRequested()
    return until_redis_answers("start", functools.partial(build_worker, settings, kinds))
