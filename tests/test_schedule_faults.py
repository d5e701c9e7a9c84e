"""Schedules under kill -9 (issue 23, item 6): two `scheduler worker` processes fire 100
schedules ticking every second while each worker is SIGKILLed and started again, over and
over. Then every tick from each schedule's first to its last settled one has exactly one
job, found under the tick's idempotency key, and Redis holds no other job: no tick fired twice,
none lost."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import cast

import pytest
import redis

from scheduler.config import Settings
from scheduler.models.schedule import Schedule, schedule_decoder, tick_key
from scheduler.store.keys import Keys
from tests.conftest import ClientFactory, last_heard
from tests.fakes import eventually
from tests.processes import scheduler_env
from tests.workers.test_processes import Workers
from workers.schedule import redis_time

pytestmark = pytest.mark.faults

SCHEDULES = 100
KILLS = 12
ENV = {
    "SCHEDULE_TICK_SECS": "0.5",
    "SNAPSHOT_INTERVAL_SECS": "1",
    "OUTBOX_FLUSH_SECS": "0.5",
    "NODE_TTL_SECS": "600",
    "MAX_JOBS_PER_NODE": "100000",
    "WORKER_ABANDON_GRACE_SECS": "1",
    "WORKER_MAINTENANCE_SECS": "1",
    "WORKER_LOCK_SECS": "1",
    # Every tick must fire, however long the killed workers take to come back on a loaded
    # machine: past the grace (60 s by default) a late tick is skipped by design
    # (test_schedule_ticks.py), which this test would count as lost.
    "SCHEDULE_GRACE_SECS": "3600",
}


def stored(r: redis.Redis, keys: Keys, name: str) -> Schedule:
    return schedule_decoder.decode(cast(bytes, r.hget(keys.schedules, name)))


def test_kill_9_of_workers_while_ticks_are_due_fires_each_tick_once(
    redis_url: str, prefix: str, tmp_path: Path, make_client: ClientFactory
) -> None:
    env = scheduler_env(redis_url, prefix, **ENV, SCHEDULER_DB=str(tmp_path / "snap.db"))
    settings = Settings.from_env(env)
    keys = Keys(prefix)
    r = redis.Redis.from_url(redis_url)
    api = make_client(settings)
    last_heard(r, settings, "n1", time.time())  # live for NODE_TTL_SECS
    names = [f"every-second-{i}" for i in range(SCHEDULES)]
    first: dict[str, int] = {}
    for name in names:
        body = {"name": name, "every_secs": 1, "job": {"command": f"echo {name}"}}
        assert api.post("/schedules", json=body).status_code == 201
        first[name] = stored(r, keys, name).next_tick

    workers = Workers(env, tmp_path)
    try:
        procs = [workers.start(), workers.start()]
        turn = 0
        for turn in range(KILLS):
            # Half the kills land while a tick's jobs are being made (the job count moves):
            # both workers go, whichever was firing; the others at a random point.
            if turn % 2 == 0:
                made = r.zcard(keys.all_jobs)
                moved = lambda made=made: r.zcard(keys.all_jobs) > made  # noqa: E731
                eventually(moved, timeout=30, interval=0.002)
                time.sleep(random.uniform(0, 0.02))
                victims = [0, 1]
            else:
                time.sleep(random.uniform(0.3, 1.2))
                victims = [turn % 4 // 2]
            for i in victims:
                Workers.kill(procs[i])
            for i in victims:
                procs[i] = workers.start()
        end = redis_time(r)

        eventually(lambda: all(stored(r, keys, n).next_tick > end for n in names), timeout=60)
        workers.stop_all()  # no more firing while the jobs are counted
        logs = workers.logs(0)
    finally:
        workers.stop_all()

    tick_jobs: dict[tuple[str, int], str] = {}
    missing = []
    for name in names:
        schedule = stored(r, keys, name)
        # Every tick from the first to the last settled one (the one before the next).
        ticks = range(first[name], schedule.next_tick)
        assert len(ticks) >= 5, (name, ticks)
        for tick in ticks:
            made = cast(bytes | None, r.get(keys.submission(tick_key(schedule, tick))))
            if made is None:
                missing.append((name, tick))
            else:
                tick_jobs[(name, tick)] = made.decode()
    assert missing == [], f"ticks without a job: {missing[:10]}\n{logs[-3000:]}"
    jobs = {raw.decode() for raw in r.zrange(keys.all_jobs, 0, -1)}
    # One job per tick, and none besides: no tick fired twice.
    assert len(set(tick_jobs.values())) == len(tick_jobs)
    assert jobs == set(tick_jobs.values())
    stats = {k.decode(): int(v) for k, v in r.hgetall(keys.stats).items() if b"schedule" in k}
    print(
        f"MEASURED schedule faults: kill rounds={turn + 1} ticks={len(tick_jobs)} "
        f"jobs={len(jobs)} {stats}"
    )
