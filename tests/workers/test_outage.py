"""Workers ride out a Redis outage (issue #11, item 1): Redis is SIGKILLed while a worker is
in the middle of a job, and comes back from its append-only file a few seconds later. No
worker exits, the job's result is recorded once (its event reaches SNS once), and the periodic
tasks run again soon after Redis returns."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scheduler.config import Settings
from tests.conftest import ClientFactory, SettingsFactory, assert_json, register, report
from tests.fakes import FakeSNS, eventually
from tests.processes import scheduler_env
from tests.redis_server import RestartableRedis
from tests.workers.test_processes import BASE_ENV, Workers, drained, run_periods
from workers import worker as worker_module
from workers.outage import Availability, redis_unavailable, until_redis_answers
from workers.worker import SchedulerWorker


@pytest.fixture
def env(
    restartable_redis: RestartableRedis, prefix: str, tmp_path: Path, sns: FakeSNS
) -> dict[str, str]:
    return scheduler_env(
        restartable_redis.url,
        prefix,
        **{**BASE_ENV, "HTTP_TIMEOUT_SECS": "10"},  # the held publish must not time out
        SNS_URL=sns.url,
        SCHEDULER_DB=str(tmp_path / "snapshot.db"),
        REGISTRY_URL="",
    )


def test_workers_survive_a_redis_restart_mid_job(
    restartable_redis: RestartableRedis,
    env: dict[str, str],
    workers: Workers,
    sns: FakeSNS,
    make_client: ClientFactory,
    prefix: str,
) -> None:
    settings = Settings.from_env(env)
    api = make_client(settings)
    register(api, "n1")
    procs = [workers.start() for _ in range(2)]
    sns.delay_secs = 2.0  # the publish is in flight while Redis dies
    job_id = api.post("/jobs", json={"command": "echo outage"}).json()["job_id"]
    assert_json(report(api, job_id, "running"))
    assert_json(report(api, job_id, "done", exit_code=0))
    eventually(lambda: sns.in_flight == 1, timeout=20)

    restartable_redis.kill()
    time.sleep(2.5)
    assert all(proc.poll() is None for proc in procs), "a worker exited while Redis was down"
    restartable_redis.start()
    back = time.time()

    client = redis.Redis.from_url(restartable_redis.url)
    eventually(lambda: len(sns.published) >= 1, timeout=20)
    eventually(lambda: drained(client, settings), timeout=30)

    def swept_since_restart() -> bool:
        return any(
            p * settings.sweep_interval_secs >= back for p in run_periods(client, prefix, "sweep")
        )

    eventually(swept_since_restart, timeout=10)
    time.sleep(1.0)  # a late duplicate publish would land here
    assert [e["job_id"] for e in sns.events()] == [job_id]
    assert all(proc.poll() is None for proc in procs), "a worker exited after Redis returned"
    assert "unhandled exception" not in workers.logs()


def test_until_redis_answers_backs_off_to_its_cap_and_can_give_up() -> None:
    waits: list[float] = []
    failures = iter(range(7))

    def flaky() -> str:
        if next(failures, None) is not None:
            raise redis.ConnectionError("down")
        return "back"

    assert until_redis_answers("test", flaky, sleep=waits.append) == "back"
    assert waits == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0, 2.0]

    def down() -> None:
        raise redis.TimeoutError("still down")

    with pytest.raises(redis.TimeoutError):
        until_redis_answers("test", down, give_up=lambda: True, sleep=waits.append)

    def broken() -> None:
        raise redis.ResponseError("a bug, not an outage")

    with pytest.raises(redis.ResponseError):
        until_redis_answers("test", broken, sleep=waits.append)


BUSY_REPLY = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or ..."
IN_PIPELINE = "of pipeline caused error:"


@pytest.mark.parametrize(
    ("error", "unavailable"),
    [
        (redis.ConnectionError("Connection refused"), True),
        (redis.TimeoutError("Timeout reading from socket"), True),
        (redis.BusyLoadingError("Redis is loading the dataset in memory"), True),
        (redis.ResponseError(BUSY_REPLY), True),
        # From a pipeline: redis-py puts the command in front; the reply is what follows.
        (
            redis.ResponseError(f"Command # 1 (SREM k v) {IN_PIPELINE} {BUSY_REPLY}"),
            True,
        ),
        (
            redis.ResponseError(f"Command # 2 (SET BUSY x) {IN_PIPELINE} ERR syntax"),
            False,
        ),
        (redis.ResponseError("BUSYKEY Target key name already exists."), False),
        (redis.ResponseError("BUSYGROUP Consumer Group name already exists"), False),
        (
            redis.ResponseError("user_script:1: attempt to call a nil value"),
            False,
        ),
        (redis.ResponseError("ERR Error running script: BUSY inside the message"), False),
    ],
)
def test_busy_and_loading_are_waited_out_and_a_script_error_is_not(
    error: redis.RedisError, unavailable: bool
) -> None:
    assert redis_unavailable(error) is unavailable
    calls = iter([error])

    def call() -> str:
        failure = next(calls, None)
        if failure is not None:
            raise failure
        return "answered"

    if unavailable:
        assert until_redis_answers("test", call, sleep=lambda secs: None) == "answered"
    else:
        with pytest.raises(type(error)):
            until_redis_answers("test", call, sleep=lambda secs: None)


def test_an_outage_is_said_once_then_every_30_s_then_its_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """However many calls and threads meet it: not a line per retried call."""
    now = [0.0]
    said = Availability(clock=lambda: now[0])
    busy = redis.ResponseError(BUSY_REPLY)
    caplog.set_level("INFO", logger="workers.outage")
    for _ in range(4):  # at 0, 12, 24 and 36 s
        said.failed("dequeue", busy)
        said.failed("trigger", busy)
        now[0] += 12.0
    said.answered("trigger")
    said.answered("dequeue")  # the same end, met again
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["WARNING", "WARNING", "INFO"]
    assert "BUSY" in lines[0][1] and "after 36 s" in lines[1][1]
    assert "after 48.0 s" in lines[2][1]


def test_rq_quitting_on_an_unexpected_error_is_not_the_end_of_the_worker(
    make_settings: SettingsFactory,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """rq's loop quits on any error it does not expect (it logs it and tears the worker
    down); the process starts a new rq worker instead of ending, and only a stop ends it."""
    seen: list[str] = []

    def dequeue(self: SchedulerWorker, *args: Any, **kwargs: Any) -> None:
        seen.append(self.name)
        if len(seen) == 1:
            raise RuntimeError("planted: an error rq does not expect")
        self.request_stop(signal.SIGTERM, None)  # idle: rq raises StopRequested

    monkeypatch.setattr(SchedulerWorker, "dequeue_job_and_maintain_ttl", dequeue)
    monkeypatch.setattr(worker_module, "RESTART_PAUSE_SECS", 0.0)
    with restored_signals():
        assert worker_module.run(make_settings()) == 0
    assert len(seen) == 2 and seen[0] != seen[1]  # a new rq worker, then the stop ended it
    assert "rq's loop quit on an unexpected error" in caplog.text


def test_a_stop_while_idle_ends_the_worker(
    make_settings: SettingsFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    def dequeue(self: SchedulerWorker, *args: Any, **kwargs: Any) -> None:
        seen.append(self.name)
        self.request_stop(signal.SIGTERM, None)

    monkeypatch.setattr(SchedulerWorker, "dequeue_job_and_maintain_ttl", dequeue)
    with restored_signals():
        assert worker_module.run(make_settings()) == 0
    assert len(seen) == 1


@contextlib.contextmanager
def restored_signals() -> Iterator[None]:
    """rq installs its handlers of SIGINT and SIGTERM in the test process: put pytest's back."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
