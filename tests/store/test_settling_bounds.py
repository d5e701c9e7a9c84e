"""The work an ending's settling counts (store/scripts/endings.py) against what it really
costs Redis: a job's record is read, decoded, encoded and written again, in proportion to
its size, and the API takes records far larger than a small one (a node_selector of 16 keys
of 16 values of 255 characters is ~66 KB in the record itself). Against a real Redis; the
units each call reports are the scripts' own count (no clock): benchmarks/script_bounds.py
has the times."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.nodes.placement import Placement
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts.endings import SETTLE_UNITS
from scheduler.store.scripts.retry import retry_jobs
from scheduler.store.scripts.settling import settle_endings
from scheduler.store.scripts.snapshot import rebuild_waiting
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, assert_json, register, submit
from tests.store.test_dependencies import job

# The largest node_selector the API takes (models/labels.py): every byte of it in the record.
LARGE_SELECTOR = {
    f"k{k:02d}": [f"{k:02d}{v:02d}" + "v" * 251 for v in range(16)] for k in range(16)
}


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_jobs_per_node=10, max_job_retries=0)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    client = make_client(settings)
    register(client, "a")
    return client


def large_waiter(api: TestClient, *deps: str) -> str:
    body: dict[str, Any] = {"command": "w", "after": list(deps), "node_selector": LARGE_SELECTOR}
    return str(assert_json(api.post("/jobs", json=body), 201)["job_id"])


def test_waiters_with_large_records_are_fewer_to_a_call(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    """A call ends ~120 small waiters within its units; a waiter of ~66 KB costs Redis some
    30 times a small one's, so a call ends that many times fewer (each call still within its
    units, every waiter ended once)."""
    root = submit(api, command="root")["job_id"]
    waiters = [large_waiter(api, root) for _ in range(30)]
    assert len(rclient.get(Keys(settings.redis_prefix).job(waiters[0])) or b"") > 60_000
    assert_json(api.delete(f"/jobs/{root}"))
    ended = sum(job(api, w)["status"] == "failed" for w in waiters)
    assert 1 <= ended <= 6
    calls = 0
    while True:
        settled = store.run(settle_endings(time.time()))
        assert 0 < settled.units <= SETTLE_UNITS
        calls += 1
        if not settled.left:
            break
    assert calls >= 4
    assert {job(api, w)["failure_reason"] for w in waiters} == {"dependency_failed"}


def test_a_bulk_retry_of_large_records_takes_fewer_a_call(
    api: TestClient, store: SyncJobStore
) -> None:
    root = submit(api, command="root")["job_id"]
    waiters = [large_waiter(api, root) for _ in range(30)]
    for waiter in waiters:
        assert_json(api.delete(f"/jobs/{waiter}"))
    first = store.run(retry_jobs(waiters, Placement("live"), time.time(), 3600))
    assert 1 <= len(first) <= 6
    answer = assert_json(api.post("/jobs/retry", json={"job_ids": waiters}))
    assert answer["retried"] == waiters[len(first) :]
    assert {job(api, w)["status"] for w in waiters} == {"waiting"}


def test_a_restores_rebuild_of_large_records_takes_fewer_a_call(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    root = submit(api, command="root")["job_id"]
    waiters = [large_waiter(api, root) for _ in range(30)]
    keys = Keys(settings.redis_prefix)
    rclient.delete(keys.waiting, keys.dependents(root))  # as a restore leaves them
    more, last = store.run(rebuild_waiting(0, 500, time.time()))
    assert more and last < int(waiters[6].removeprefix("job-"))
    store.run(ops.upkeep.rebuild_waiting(time.time()))
    assert rclient.hlen(keys.waiting) == len(waiters)
    assert rclient.scard(keys.dependents(root)) == len(waiters)


def test_a_restore_drops_the_endings_left_without_freeing_their_sets_in_the_script(
    store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    """CLEAR_ENDINGS drops up to a batch of endings, each with up to MAX_WAITERS waiters: a
    DEL freed 500 sets of 1000 in the script (~100 ms); their memory goes in the background
    (UNLINK), the call's own work is one command an ending."""
    keys = Keys(settings.redis_prefix)
    for n in range(1, 4):
        rclient.zadd(keys.endings, {f"job-{n} {n} failed cancelled": 0})
        rclient.sadd(keys.ending_waiters(str(n)), *(f"job-{1000 * n + i}" for i in range(1000)))
    before = lazily_freed(rclient)
    store.run(ops.upkeep.rebuild_waiting(time.time()))
    assert not list(rclient.scan_iter(keys.endings + "*"))
    deadline = time.monotonic() + 30
    while lazily_freed(rclient) - before < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert lazily_freed(rclient) - before == 3


def lazily_freed(rclient: redis.Redis) -> int:
    """The objects Redis freed in its background thread, or is about to (INFO memory)."""
    memory = rclient.info("memory")
    return int(memory["lazyfreed_objects"]) + int(memory["lazyfree_pending_objects"])
