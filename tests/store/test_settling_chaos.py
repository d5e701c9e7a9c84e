"""Settling in pieces under what a deployment meets (issue 36, finding 5 review): Redis
killed mid-settle and started again from its append-only file, and two settling loops at
once (two workers' promote runs overlapping). Each script call is atomic, so each waiter
ends once, with one event, whatever happens between two calls."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts.settling import settle_endings
from scheduler.store.shards import Layout
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, assert_json, register, submit
from tests.redis_server import RestartableRedis

LAYOUT = Layout(3)  # a deployment sharded from its first start

WIDE = 300  # more than a request's piece and a settle call's


def graph(api: TestClient) -> tuple[str, list[str]]:
    """A root, WIDE jobs after it, and as many again after 20 of those each."""
    root = submit(api, command="root")["job_id"]
    first = [assert_json(api.post("/jobs", json={"command": "w", "after": [root]}), 201)["job_id"]
             for _ in range(WIDE)]  # fmt: skip
    second = [
        assert_json(api.post("/jobs", json={"command": "w", "after": first[i : i + 20]}), 201)[
            "job_id"
        ]
        for i in range(0, WIDE - 20, 3)
    ]
    return root, first + second


def events(rclient: redis.Redis, settings: Settings) -> Counter[str]:
    entries = rclient.lrange(Keys(settings.redis_prefix).outbox, 0, -1)
    return Counter(json.loads(entry.split(b" ", 1)[1])["job_id"] for entry in entries)


def ended_once(api: TestClient, rclient: redis.Redis, settings: Settings, ids: list[str]) -> None:
    for job_id in ids:
        job = assert_json(api.get(f"/jobs/{job_id}"))
        assert (job["status"], job["failure_reason"]) == ("failed", "dependency_failed")
    counted = events(rclient, settings)
    assert all(counted[job_id] == 1 for job_id in ids)
    assert rclient.zcard(Keys(settings.redis_prefix).endings) == 0


def test_redis_killed_mid_settle_goes_on_from_its_append_only_file(
    make_settings: SettingsFactory, make_client: ClientFactory, restartable_redis: RestartableRedis
) -> None:
    settings = make_settings(redis_url=restartable_redis.url, max_job_retries=0)
    api = make_client(settings)
    register(api, "a")
    root, waiters = graph(api)
    assert_json(api.delete(f"/jobs/{root}"))
    store = SyncJobStore.connect(settings)
    assert store.run(settle_endings(time.time())).left > 0
    restartable_redis.kill()
    restartable_redis.start()
    rclient = redis.Redis.from_url(restartable_redis.url)
    assert rclient.zcard(Keys(settings.redis_prefix).endings) > 0
    store.close()
    store = SyncJobStore.connect(settings)
    assert store.run(ops.upkeep.settle_endings()).left == 0
    ended_once(api, rclient, settings, waiters)
    store.close()
    rclient.close()


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_job_retries=0)


def test_two_settling_loops_at_once_end_each_waiter_once(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis
) -> None:
    api = make_client(settings)
    register(api, "a")
    root, waiters = graph(api)
    assert_json(api.delete(f"/jobs/{root}"))
    stores = [SyncJobStore.connect(settings) for _ in range(2)]
    loops = [
        threading.Thread(target=lambda s=store: s.run(ops.upkeep.settle_endings()))
        for store in stores
    ]
    for loop in loops:
        loop.start()
    for loop in loops:
        loop.join(timeout=60)
    assert not any(loop.is_alive() for loop in loops)
    ended_once(api, rclient, settings, waiters)
    for store in stores:
        store.close()


def test_each_shards_workers_settle_that_shards_endings(
    make_client: ClientFactory, make_settings: SettingsFactory, rclient: redis.Redis
) -> None:
    """SCHEDULER_SHARDS=3: a job's dependencies are on its own shard, so the endings its
    cancel leaves are that shard's; its workers' settling ends every waiter, the others'
    find nothing."""
    settings = make_settings(shards=3, max_job_retries=0, max_jobs_per_node=10)
    api = make_client(settings)
    register(api, *(f"n{i}" for i in range(9)))
    root, waiters = graph(api)
    home = LAYOUT.job_shard(root)
    assert {LAYOUT.job_shard(w) for w in waiters} == {home}
    assert_json(api.delete(f"/jobs/{root}"))
    stores = [SyncJobStore.connect(settings.for_shard(k)) for k in range(3)]
    for k, store in enumerate(stores):
        if k != home:
            assert store.run(ops.upkeep.settle_endings()).calls == 0
    assert stores[home].run(ops.upkeep.settle_endings()).calls > 0
    for job_id in waiters:
        job = assert_json(api.get(f"/jobs/{job_id}"))
        assert (job["status"], job["failure_reason"]) == ("failed", "dependency_failed")
    for store in stores:
        store.close()
