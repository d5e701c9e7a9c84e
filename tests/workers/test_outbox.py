"""The outbox, SNS publishing on rq with retries, the periodic trigger and the snapshot task,
in-process against the real redis-server, a real HTTP fake of SNS and rq's own worker code
(our SimpleWorker subclass in burst mode)."""

from __future__ import annotations

import itertools
import logging
import signal
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from rq import Queue, Retry
from rq.job import Job as RqJob
from rq.registry import FailedJobRegistry, ScheduledJobRegistry
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store import ops
from scheduler.store.keys import Keys
from tests.conftest import (
    ClientFactory,
    CtxFactory,
    SettingsFactory,
    assert_json,
    register,
    report,
    submit,
)
from tests.fakes import FakeSNS, eventually
from workers import queues, tasks
from workers.context import Context
from workers.schedule import Trigger, fire, periodic_tasks, redis_time
from workers.worker import build_worker, run


@pytest.fixture
def ctx_overrides() -> dict[str, Any]:
    return {"sns_retry_base_secs": 1, "sns_retry_cap_secs": 1}


def finish(api: TestClient, status: str = "done", **fields: Any) -> str:
    job_id: str = submit(api, command="work", **fields)["job_id"]
    assert_json(report(api, job_id, "running"))
    assert_json(report(api, job_id, status, exit_code=0 if status == "done" else 3))
    return job_id


def api_for(make_client: ClientFactory, ctx: Context) -> TestClient:
    api = make_client(ctx.settings)
    register(api, "n1")
    return api


def outbox_numbers(ctx: Context) -> list[int]:
    """The event numbers of the outbox's entries (each ending's job event's: GET /events)."""
    return [int(entry.split(b" ", 1)[0]) for entry in ctx.redis.lrange(ctx.keys.outbox, 0, -1)]


def events_queue(ctx: Context) -> Queue:
    return queues.queue(ctx.redis, ctx.settings, queues.EVENTS)


def work_burst(settings: Settings, exception_handlers: list[Any] | None = None) -> None:
    """Run our rq worker until its queues are empty, in this process."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        worker = build_worker(settings)
        for handler in exception_handlers or []:
            worker.push_exc_handler(handler)
        worker.work(burst=True, with_scheduler=False, logging_level="WARNING")
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_final_transitions_are_published_with_the_exact_body(
    make_ctx: CtxFactory, make_client: ClientFactory, sns: FakeSNS
) -> None:
    ctx = make_ctx(sns_url=sns.url, max_job_retries=1)
    api = api_for(make_client, ctx)
    done = finish(api, "done")
    retried = submit(api, command="retried")["job_id"]
    assert_json(report(api, retried, "running"))
    assert_json(report(api, retried, "failed", exit_code=1))  # retry branch: no event
    assert_json(report(api, retried, "running"))
    assert_json(report(api, retried, "failed", exit_code=1))  # final: event

    numbers = outbox_numbers(ctx)
    assert tasks.flush_outbox(period=1) == 2
    assert ctx.redis.llen(ctx.keys.outbox) == 0
    assert events_queue(ctx).job_ids == [ctx.keys.rq_job_id("event", n) for n in numbers]
    work_burst(ctx.settings)

    assert [p.body for p in sns.published] == [
        b'{"message":"{\\"job_id\\":\\"' + done.encode() + b'\\",\\"status\\":\\"done\\"}"}',
        b'{"message":"{\\"job_id\\":\\"' + retried.encode() + b'\\",\\"status\\":\\"failed\\"}"}',
    ]
    assert {p.topic for p in sns.published} == {"job-status"}


def test_a_flush_repeated_after_a_crash_enqueues_no_event_twice(
    make_ctx: CtxFactory, make_client: ClientFactory, sns: FakeSNS
) -> None:
    ctx = make_ctx(sns_url=sns.url)
    api = api_for(make_client, ctx)
    finish(api)
    # A flush that enqueued the event and died before trimming the outbox:
    entry = ctx.store.run(ops.upkeep.outbox_head(10))[0]
    number, _, message = entry.decode().partition(" ")
    assert queues.enqueue_publish(ctx.redis, ctx.settings, int(number), message)

    assert tasks.flush_outbox(period=1) == 1  # the entry goes, without a second job
    assert len(events_queue(ctx)) == 1
    work_burst(ctx.settings)
    assert len(sns.published) == 1


def test_trim_removes_only_what_was_handed_over(make_ctx: CtxFactory) -> None:
    ctx = make_ctx()
    for n in (1, 2, 3):
        ctx.redis.rpush(ctx.keys.outbox, f"{n} m{n}")
    head = ctx.store.run(ops.upkeep.outbox_head(2))
    ctx.redis.rpush(ctx.keys.outbox, "4 m4")  # appended while a flush works

    assert ctx.store.run(ops.upkeep.trim_outbox(head)) == 2
    assert (
        ctx.store.run(ops.upkeep.trim_outbox(head)) == 0
    )  # a concurrent flush of the same head: no-op
    assert ctx.store.run(ops.upkeep.outbox_head(10)) == [b"3 m3", b"4 m4"]


def test_without_sns_url_events_are_discarded_not_accumulated(
    make_ctx: CtxFactory, make_client: ClientFactory
) -> None:
    ctx = make_ctx(sns_url="")
    finish(api_for(make_client, ctx))
    assert tasks.flush_outbox(period=1) == 1
    assert ctx.redis.llen(ctx.keys.outbox) == 0
    assert len(events_queue(ctx)) == 0
    assert ctx.redis.hget(ctx.keys.stats, "events_discarded") == b"1"


def test_malformed_outbox_entries_are_dropped_with_an_error(
    make_ctx: CtxFactory, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = make_ctx(sns_url="http://127.0.0.1:9")
    ctx.redis.rpush(ctx.keys.outbox, "garbage", '7 {"job_id":"job-7","status":"done"}')
    assert tasks.flush_outbox(period=1) == 2
    assert events_queue(ctx).job_ids == [ctx.keys.rq_job_id("event", 7)]
    assert any("malformed entry" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("outage", ["500", "down"])
def test_publish_raises_while_sns_fails_so_rq_retries(
    make_ctx: CtxFactory, sns: FakeSNS, outage: str
) -> None:
    make_ctx(sns_url=sns.url)
    if outage == "500":
        sns.failing = 500
    else:
        sns.stop()
    with pytest.raises(tasks.PublishFailed, match="event 3"):
        tasks.publish_event(3, '{"job_id":"job-3","status":"done"}')
    assert sns.published == []


def test_default_backoff_is_exponential_and_covers_well_over_a_minute() -> None:
    intervals = queues.retry_intervals(Settings.from_env({}))
    assert intervals[:5] == [1, 2, 4, 8, 16]
    assert all(b >= a for a, b in itertools.pairwise(intervals))
    assert sum(intervals) > 10 * 60


def test_a_failing_publish_is_retried_with_backoff_then_delivered(
    make_ctx: CtxFactory, make_client: ClientFactory, sns: FakeSNS
) -> None:
    ctx = make_ctx(sns_url=sns.url)
    job_id = finish(api_for(make_client, ctx))
    sns.failing = 500
    [number] = outbox_numbers(ctx)
    tasks.flush_outbox(period=1)
    work_burst(ctx.settings)
    scheduled = ScheduledJobRegistry(queue=events_queue(ctx))  # type: ignore[no-untyped-call]
    assert scheduled.get_job_ids() == [ctx.keys.rq_job_id("event", number)]  # its backoff
    assert sns.refused == 1

    sns.failing = None
    trigger = Trigger(ctx.redis, ctx.settings)

    def promoted_and_worked() -> bool:
        trigger.promote()
        work_burst(ctx.settings)
        return bool(sns.published)

    eventually(promoted_and_worked)
    trigger.stop()
    assert sns.events() == [{"job_id": job_id, "status": "done"}]


def test_a_publish_out_of_retries_stays_in_the_failed_registry(
    make_ctx: CtxFactory, make_client: ClientFactory, sns: FakeSNS
) -> None:
    ctx = make_ctx(sns_url=sns.url, sns_retry_max=1)
    finish(api_for(make_client, ctx))
    sns.failing = 503
    [number] = outbox_numbers(ctx)
    tasks.flush_outbox(period=1)
    trigger = Trigger(ctx.redis, ctx.settings)
    failed = FailedJobRegistry(queue=events_queue(ctx))

    def exhausted() -> list[str]:
        trigger.promote()
        work_burst(ctx.settings)
        return failed.get_job_ids()

    job_ids = eventually(exhausted)
    trigger.stop()
    assert job_ids == [ctx.keys.rq_job_id("event", number)]
    result = RqJob.fetch(job_ids[0], connection=ctx.redis).latest_result()
    assert result is not None
    assert "SNS answered 503" in (result.exc_string or "")
    assert sns.refused == 2  # the first try and its one retry


def noted(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """The messages of the records of exactly `level`."""
    return [r.getMessage() for r in caplog.records if r.levelno == level]


@pytest.mark.parametrize("outage", ["500", "down"])
def test_a_retried_publish_logs_one_warning_per_attempt_and_no_traceback(
    make_ctx: CtxFactory,
    make_client: ClientFactory,
    sns: FakeSNS,
    outage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ctx = make_ctx(sns_url=sns.url, sns_retry_max=2)
    finish(api_for(make_client, ctx))
    if outage == "500":
        sns.failing = 500
    else:
        sns.stop()
    [number] = outbox_numbers(ctx)
    tasks.flush_outbox(period=1)
    trigger = Trigger(ctx.redis, ctx.settings)
    failed = FailedJobRegistry(queue=events_queue(ctx))
    handled: list[type[BaseException]] = []
    caplog.set_level(logging.WARNING)

    def exhausted() -> list[str]:
        trigger.promote()
        work_burst(ctx.settings, exception_handlers=[lambda job, kind, *_: handled.append(kind)])
        return failed.get_job_ids()

    eventually(exhausted)
    trigger.stop()
    job_id = ctx.keys.rq_job_id("event", number)
    error = "SNS answered 500: sns is failing" if outage == "500" else "SNS unreachable: "
    assert not [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    warnings = noted(caplog, logging.WARNING)
    assert len(warnings) == 2, warnings  # the first attempt and the first retry
    for line, remaining in zip(warnings, [1, 0], strict=True):
        assert line.startswith(f"job {job_id}: event {number}: {error}"), line
        assert line.endswith(f"; retrying in 1 s, {remaining} retries remaining"), line
    [given_up] = noted(caplog, logging.ERROR)  # the second retry, the last
    assert given_up.startswith(f"job {job_id}: event {number}: {error}"), given_up
    assert given_up.endswith("; out of retries, given up"), given_up
    assert noted(caplog, logging.CRITICAL) == []
    assert "\n" not in given_up + "".join(warnings)
    # rq's exception handlers still see every failure; the failure keeps its traceback in
    # rq's result, for rq-dashboard.
    assert handled == [tasks.PublishFailed] * 3
    result = RqJob.fetch(job_id, connection=ctx.redis).latest_result()
    assert result is not None and "Traceback" in (result.exc_string or "")


def test_an_unexpected_exception_in_a_task_is_logged_with_its_traceback(
    make_ctx: CtxFactory, caplog: pytest.LogCaptureFixture
) -> None:
    ctx = make_ctx()
    caplog.set_level(logging.WARNING)
    retried = Retry(max=1, interval=0)  # retried or not, a bug shows its traceback each time
    events_queue(ctx).enqueue("json.loads", args=("not json",), job_id="bug", retry=retried)
    work_burst(ctx.settings)
    errors = noted(caplog, logging.ERROR)
    assert len(errors) == 2, errors
    for line in errors:
        assert "job bug: exception raised while executing (json.loads)" in line
        assert "Traceback (most recent call last)" in line
        assert "json.decoder.JSONDecodeError: Expecting value" in line
    assert noted(caplog, logging.WARNING) == []


def test_triggers_in_many_processes_fire_each_period_once(make_ctx: CtxFactory) -> None:
    ctx = make_ctx(sqs_url="http://127.0.0.1:9")
    triggers = [Trigger(ctx.redis, ctx.settings) for _ in range(3)]
    now = redis_time(ctx.redis)
    for trigger in triggers:
        trigger.tick(now)
    periodic = queues.queue(ctx.redis, ctx.settings, queues.PERIODIC)
    names = sorted(job_id.split("-")[1] for job_id in periodic.job_ids)
    assert names == ["outbox", "promote", "schedules", "snapshot", "sqs", "sweep"]

    # A trigger that comes late, after the run finished, still finds the run's record.
    sweep = next(t for t in periodic_tasks(ctx.settings) if t.name == "sweep")
    period = int(next(j for j in periodic.job_ids if "-sweep-" in j).rsplit("-", 1)[1])
    work_burst(ctx.settings)
    assert not fire(ctx.redis, ctx.settings, sweep, period)
    assert len(periodic) == 0
    for trigger in triggers:
        trigger.stop()


def test_one_trigger_at_a_time_promotes(make_ctx: CtxFactory) -> None:
    ctx = make_ctx(worker_lock_secs=1)
    first, second = Trigger(ctx.redis, ctx.settings), Trigger(ctx.redis, ctx.settings)
    assert first._hold_lock()
    assert not second._hold_lock()
    assert first._hold_lock()  # refreshed by its holder
    first.holds_lock = False  # as a holder that died: its lock expires...
    assert eventually(second._hold_lock, timeout=5)  # ...and another takes over
    second.stop()
    assert first._hold_lock()  # released on stop


def test_snapshot_task_calls_snapshot_once(
    make_ctx: CtxFactory, make_client: ClientFactory, tmp_path: Path
) -> None:
    ctx = make_ctx()
    finish(api_for(make_client, ctx))
    assert tasks.snapshot(period=4) == 1
    assert Path(ctx.settings.scheduler_db).exists()
    runs = cast(list[bytes], ctx.redis.lrange(ctx.keys.runs("snapshot"), 0, -1))
    assert runs[0].startswith(b"4 ")


def test_a_burst_worker_restores_the_snapshot_then_does_one_round(
    make_ctx: CtxFactory,
    make_client: ClientFactory,
    make_settings: SettingsFactory,
    sns: FakeSNS,
    rclient: redis.Redis,
) -> None:
    """`scheduler worker --burst` on a Redis that lost its data: the jobs come back from the
    snapshot first (as at serve's start), then each periodic task runs once."""
    ctx = make_ctx()
    job_id = finish(api_for(make_client, ctx))
    assert tasks.snapshot(period=1) == 1
    lost = make_settings(
        redis_prefix=f"{ctx.settings.redis_prefix}lost",  # an empty Redis, the same file
        scheduler_db=ctx.settings.scheduler_db,
        sns_url=sns.url,
    )
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        assert run(lost, burst=True) == 0
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    restored = rclient.get(Keys(lost.redis_prefix).job(job_id))
    assert restored is not None and b'"status":"done"' in restored
    for task in ("sweep", "outbox", "snapshot"):
        assert rclient.llen(Keys(lost.redis_prefix).runs(task)) == 1
