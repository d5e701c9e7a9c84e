"""Workers ride out a Redis outage (issue #11, item 1): Redis is SIGKILLed while a worker is
in the middle of a job, and comes back from its append-only file a few seconds later. No
worker exits, the job's result is recorded once (its event reaches SNS once), and the periodic
tasks run again soon after Redis returns."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis

from scheduler.config import Settings
from tests.conftest import ClientFactory, assert_json, register, report
from tests.fakes import FakeSNS, eventually
from tests.processes import scheduler_env
from tests.redis_server import RestartableRedis
from tests.workers.test_processes import BASE_ENV, Workers, drained, run_periods
from workers.outage import until_redis_answers


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
