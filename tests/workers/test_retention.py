"""Retention: done and failed jobs past JOB_RETENTION_SECS leave Redis once the snapshot holds
them (scripts/upkeep.py PRUNE_FINISHED, run by the sweep); the restore leaves them in the file."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.models.wire import rfc3339
from scheduler.snapshot.restore import restore_from_file, restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, CtxFactory, SettingsFactory, register, report, submit
from tests.snapshot_helpers import job_state, lose_redis_data, rows
from workers import tasks

RETENTION = 60


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(job_retention_secs=RETENTION, max_job_retries=0, max_jobs_per_node=10)


@pytest.fixture
def api(make_client: ClientFactory, settings: Settings) -> TestClient:
    return make_client(settings)


def finish(api: TestClient, status: str = "done") -> str:
    job_id: str = submit(api, command="echo x")["job_id"]
    assert report(api, job_id, "running").status_code == 200
    assert report(api, job_id, status, exit_code=0 if status == "done" else 1).status_code == 200
    return job_id


def mentions(state: dict[str, Any], job_id: str) -> list[str]:
    """The keys of a job_state dump that hold `job_id` (as a record or an index member)."""
    return [
        name
        for name, value in state.items()
        if name == f"job:{job_id}" or (isinstance(value, (dict, list)) and job_id in value)
    ]


def test_old_finished_jobs_leave_redis_with_every_index_and_stay_in_the_snapshot(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    register(api, "n1", "n2")
    done, failed = finish(api, "done"), finish(api, "failed")
    running = submit(api, command="sleep 1")["job_id"]
    assert report(api, running, "running").status_code == 200
    pending = submit(api, command="echo later")["job_id"]
    assert snapshot_once(store.settings) == 4

    removed = store.run(ops.upkeep.prune_finished(time.time() + RETENTION + 1))

    assert sorted(removed) == sorted([done, failed])
    state = job_state(rclient, prefix)
    assert mentions(state, done) == [] and mentions(state, failed) == []
    assert mentions(state, running) and mentions(state, pending)
    assert api.get(f"/jobs/{done}").status_code == 404
    assert [job["job_id"] for job in api.get("/jobs").json()] == [running, pending]
    for node in ("n1", "n2"):
        listed = api.get("/jobs", params={"node_id": node}).json()
        assert {job["job_id"] for job in listed} <= {running, pending}
    assert api.get("/jobs", params={"status": "done"}).json() == []
    saved = rows(db)
    assert (saved[done]["status"], saved[failed]["status"]) == ("done", "failed")


def test_jobs_finished_within_the_retention_stay(api: TestClient, store: SyncJobStore) -> None:
    register(api, "n1")
    job_id = finish(api)
    snapshot_once(store.settings)
    assert store.run(ops.upkeep.prune_finished(time.time() + RETENTION - 5)) == []
    assert api.get(f"/jobs/{job_id}").status_code == 200


def test_a_job_the_snapshot_has_not_written_stays_until_it_has(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "n1")
    job_id = finish(api)
    later = time.time() + RETENTION + 1
    assert store.run(ops.upkeep.prune_finished(later)) == []  # only in P:dirty
    keys = Keys(settings.redis_prefix)
    store.run(snapshot_scripts.take_dirty())  # a snapshot that died before its commit
    assert rclient.sismember(keys.dirty_inflight, job_id)
    assert store.run(ops.upkeep.prune_finished(later)) == []
    assert snapshot_once(settings) == 1
    assert store.run(ops.upkeep.prune_finished(later)) == [job_id]


def test_unwritten_jobs_at_the_head_do_not_hold_back_the_rest(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "n1")
    ids = [finish(api) for _ in range(5)]
    snapshot_once(settings)
    rclient.sadd(Keys(settings.redis_prefix).dirty, *ids[:3])  # changed again, not yet written
    removed = store.run(ops.upkeep.prune_finished(time.time() + RETENTION + 1, batch=2))
    assert removed == ids[3:]
    assert all(api.get(f"/jobs/{job_id}").status_code == 200 for job_id in ids[:3])


def test_a_retention_of_zero_keeps_jobs_forever(
    make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    settings = make_settings(max_job_retries=0)
    api = make_client(settings)
    register(api, "n1")
    job_id = finish(api)
    snapshot_once(settings)
    store = SyncJobStore.connect(settings)
    try:
        assert store.run(ops.upkeep.prune_finished(time.time() + 10 * 365 * 86400)) == []
    finally:
        store.close()
    assert api.get(f"/jobs/{job_id}").status_code == 200


def test_timed_out_jobs_are_pruned_like_finished_ones(
    api: TestClient, store: SyncJobStore, settings: Settings
) -> None:
    register(api, "n1")
    job_id = submit(api, command="sleep 1000")["job_id"]
    assert report(api, job_id, "running").status_code == 200
    swept_at = time.time() + settings.job_timeout_secs + 1
    assert store.run(ops.upkeep.sweep_timeouts(swept_at)) == [job_id]
    snapshot_once(settings)
    assert store.run(ops.upkeep.prune_finished(swept_at + RETENTION - 1)) == []
    assert store.run(ops.upkeep.prune_finished(swept_at + RETENTION + 1)) == [job_id]


def test_cancelled_jobs_are_pruned_like_finished_ones(
    api: TestClient, store: SyncJobStore, settings: Settings, rclient: redis.Redis, prefix: str
) -> None:
    register(api, "n1")
    job_id = submit(api, command="never")["job_id"]
    assert api.delete(f"/jobs/{job_id}").json()["failure_reason"] == "cancelled"
    snapshot_once(settings)
    now = time.time()
    assert store.run(ops.upkeep.prune_finished(now + RETENTION - 1)) == []
    assert store.run(ops.upkeep.prune_finished(now + RETENTION + 1)) == [job_id]
    assert mentions(job_state(rclient, prefix), job_id) == []


def test_the_restore_leaves_expired_jobs_in_the_file_and_keeps_the_id_counter(
    api: TestClient, make_client: ClientFactory, settings: Settings, rclient: redis.Redis, db: Path
) -> None:
    register(api, "n1")
    old, recent = finish(api), finish(api)
    pending = submit(api, command="echo waiting")["job_id"]
    snapshot_once(settings)
    with sqlite3.connect(db) as conn:  # `old` finished two retention periods ago
        stamp = rfc3339(time.time() - 2 * RETENTION)
        conn.execute("UPDATE jobs SET finished_at = ? WHERE id = ?", (stamp, old))
    lose_redis_data(rclient, settings.redis_prefix)

    assert restore_if_empty(settings) is True

    restarted = make_client(settings)
    assert restarted.get(f"/jobs/{old}").status_code == 404
    assert restarted.get(f"/jobs/{recent}").json()["status"] == "done"
    assert restarted.get(f"/jobs/{pending}").json()["status"] == "pending"
    register(restarted, "n1")  # nodes live in Redis too
    assert submit(restarted, command="echo next")["job_id"] == "job-4"  # above `old` too
    assert old in rows(db)
    marker = rclient.get(Keys(settings.redis_prefix).initialised)
    assert isinstance(marker, bytes) and b"1 finished before JOB_RETENTION_SECS" in marker


def test_a_restore_from_another_file_loads_expired_jobs_so_the_snapshot_gets_them(
    api: TestClient, make_settings: SettingsFactory, tmp_path: Path, rclient: redis.Redis
) -> None:
    register(api, "n1")
    job_id = finish(api)
    source = tmp_path / "elsewhere.db"
    elsewhere = make_settings(scheduler_db=str(source), job_retention_secs=RETENTION)
    snapshot_once(elsewhere)
    later = time.time() + RETENTION + 1
    fresh = make_settings(
        redis_prefix=f"{elsewhere.redis_prefix}-b",
        scheduler_db=str(tmp_path / "fresh.db"),
        job_retention_secs=RETENTION,
    )
    restore_from_file(fresh, str(source), now=later)
    assert rclient.exists(Keys(fresh.redis_prefix).job(job_id))
    assert snapshot_once(fresh) == 1
    assert rows(tmp_path / "fresh.db")[job_id]["status"] == "done"
    store = SyncJobStore.connect(fresh)
    try:
        assert store.run(ops.upkeep.prune_finished(later)) == [job_id]
    finally:
        store.close()


def test_the_sweep_task_prunes_and_counts(make_ctx: CtxFactory, make_client: ClientFactory) -> None:
    ctx = make_ctx(job_retention_secs=1, max_job_retries=0)
    api = make_client(ctx.settings)
    register(api, "n1")
    job_id = finish(api)
    snapshot_once(ctx.settings)
    time.sleep(1.1)
    tasks.sweep(period=1)
    assert api.get(f"/jobs/{job_id}").status_code == 404
    assert ctx.redis.hget(ctx.keys.stats, "pruned") == b"1"


def test_a_failed_job_sent_back_to_pending_is_not_finished(
    make_client: ClientFactory, make_settings: SettingsFactory
) -> None:
    settings = make_settings(job_retention_secs=RETENTION, max_job_retries=1)
    api = make_client(settings)
    register(api, "n1")
    job_id = finish(api, "failed")  # retried: pending again
    assert api.get(f"/jobs/{job_id}").json()["status"] == "pending"
    snapshot_once(settings)
    store = SyncJobStore.connect(settings)
    try:
        assert store.run(ops.upkeep.prune_finished(time.time() + 10 * RETENTION)) == []
    finally:
        store.close()


def test_stale_index_entries_are_dropped_without_counting_as_pruned(
    api: TestClient, store: SyncJobStore, rclient: redis.Redis, settings: Settings
) -> None:
    register(api, "n1")
    job_id = finish(api)
    pending = submit(api, command="echo waiting")["job_id"]
    snapshot_once(settings)
    keys = Keys(settings.redis_prefix)
    rclient.zadd(keys.finished, {"job-999": 1.0, pending: 1.0})  # no record; not final
    assert store.run(ops.upkeep.prune_finished(time.time() + RETENTION + 1)) == [job_id]
    assert rclient.zcard(keys.finished) == 0
    assert api.get(f"/jobs/{pending}").json()["status"] == "pending"
