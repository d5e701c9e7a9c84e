"""A job an earlier version ended `cancelled` (a final status of its own then) ends failed with
failure_reason cancelled now, whether it sits in Redis at the upgrade (every start changes what
it finds) or comes back from an older snapshot file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import redis

from scheduler.models.job import STATUSES, job_number
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, submit
from tests.snapshot_helpers import lose_redis_data, rows

FINISHED = "2026-01-02T03:04:05Z"


def old_cancelled(store: SyncJobStore, job_id: str, node: str) -> None:
    """`job_id`, as the earlier version left a cancelled job: its status, and its indexes."""
    record = json.dumps(
        {
            "job_id": job_id,
            "node_id": node,
            "command": "x",
            "status": "cancelled",
            "retry_count": 0,
            "created_at": FINISHED,
            "finished_at": FINISHED,
        }
    ).encode()
    number = job_number(job_id) or 0
    restored = snapshot_scripts.RestoredJob(
        job_id=job_id,
        score=number,
        node_id=node,
        status="cancelled",
        started=None,
        finished=1.0,
        record=record,
    )
    store.run(snapshot_scripts.restore_jobs([restored], mark_dirty=False))


def indexed_under(r: redis.Redis, keys: Keys, job_id: str, node: str) -> list[str]:
    statuses = [*STATUSES, "cancelled"]
    return [s for s in statuses if r.zscore(keys.status(s), job_id) is not None] + [
        f"{node}:{s}" for s in statuses if r.zscore(keys.node_status(node, s), job_id) is not None
    ]


def test_a_start_upgrades_the_cancelled_jobs_it_finds_in_redis(
    make_settings: SettingsFactory, make_client: ClientFactory, rclient: redis.Redis
) -> None:
    settings = make_settings()
    api = make_client(settings)
    register(api, "n1")
    live = submit(api, command="stays pending")
    store = SyncJobStore(rclient, settings)
    keys = store.keys
    old_cancelled(store, "job-7", "n1")
    old_cancelled(store, "job-8", "n1")
    rclient.delete(keys.dirty)

    restore_if_empty(settings)  # what serve and a worker run at start

    for job_id in ("job-7", "job-8"):
        job: dict[str, Any] = api.get(f"/jobs/{job_id}").json()
        assert (job["status"], job["failure_reason"]) == ("failed", "cancelled")
        assert job["finished_at"] == FINISHED  # it keeps its end, and had its event then
        assert indexed_under(rclient, keys, job_id, "n1") == ["failed", "n1:failed"]
        assert rclient.zscore(keys.finished, job_id) == 1.0
    assert rclient.smembers(keys.dirty) == {b"job-7", b"job-8"}  # the snapshot follows
    assert rclient.llen(keys.outbox) == 0  # no second event
    assert api.get(f"/jobs/{live['job_id']}").json()["status"] == "pending"
    assert store.run(ops.upkeep.upgrade_retired()) == 0  # done once


def test_an_older_snapshot_row_restores_as_it_ends_now(
    make_settings: SettingsFactory, make_client: ClientFactory, rclient: redis.Redis
) -> None:
    settings = make_settings()
    store = SyncJobStore(rclient, settings)
    old_cancelled(store, "job-3", "n1")
    rclient.sadd(store.keys.dirty, "job-3")
    assert snapshot_once(settings) == 1
    assert rows(Path(settings.scheduler_db))["job-3"]["status"] == "cancelled"  # as the old wrote
    lose_redis_data(rclient, settings.redis_prefix)

    assert restore_if_empty(settings)

    job = make_client(settings).get("/jobs/job-3").json()
    assert (job["status"], job["failure_reason"]) == ("failed", "cancelled")
    keys = store.keys
    assert indexed_under(rclient, keys, "job-3", "n1") == ["failed", "n1:failed"]
    assert rclient.zscore(keys.finished, "job-3") is not None  # retention still finds it
