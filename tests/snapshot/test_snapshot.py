"""The SQLite snapshot and the restore from it, against the real redis-server fixture."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from starlette.testclient import TestClient

from scheduler.config import Settings
from scheduler.snapshot.restore import RestoreRefused, restore_from_file, restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store import ops
from scheduler.store.keys import Keys
from scheduler.store.scripts import snapshot as snapshot_scripts
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, report, submit
from tests.records import stored_job
from tests.snapshot_helpers import (
    full_record,
    job_state,
    lose_redis_data,
    put_records,
    rows,
    without,
)


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_jobs_per_node=2)


# Round trip.


def test_every_field_survives_snapshot_and_restore(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    records = [
        full_record("job-1"),
        full_record("job-2", status="failed", exit_code=-1, retry_count=0, job_type="service"),
        without(full_record("job-3", status="running"), "exit_code", "finished_at", "stdout"),
        without(full_record("job-4", status="pending"), "exit_code", "running_at", "finished_at"),
        full_record("job-5", future_field={"kept": [1, "two"]}),
    ]
    put_records(store, records)
    assert snapshot_once(settings) == 5
    before = job_state(rclient, prefix)

    lose_redis_data(rclient, prefix)
    assert restore_if_empty(settings) is True

    assert job_state(rclient, prefix) == before
    for record in records:
        assert stored_job(rclient, Keys(prefix), record["job_id"]) == record
    saved, full = rows(db)["job-1"], full_record("job-1")
    assert saved["exit_code"] == 0
    assert json.loads(saved["env_vars"]) == full["env_vars"]
    assert saved["created_at"] == full["created_at"]  # full precision kept
    assert saved["created_at"].endswith(".123456Z")
    assert json.loads(rows(db)["job-5"]["extra"]) == {"future_field": {"kept": [1, "two"]}}


def test_api_jobs_round_trip_with_all_indexes(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, prefix: str
) -> None:
    client = make_client(settings)
    register(client, "n1", "n2")
    created = [
        submit(client, command="true", env_vars={"EMPTY": "", "K": "v"}),
        submit(client, command="", deploy_url="http://x/app.zip", job_type="service", port=80),
        submit(client, command="sleep 1"),
        submit(client, command="exit 3"),
        submit(client, command="echo queued"),
    ]
    ids = [job["job_id"] for job in created]
    assert report(client, ids[0], "running").status_code == 200
    assert report(client, ids[0], "done", exit_code=0, stdout="ok").status_code == 200
    assert report(client, ids[1], "running").status_code == 200
    assert report(client, ids[2], "running").status_code == 200
    assert report(client, ids[3], "running").status_code == 200
    assert report(client, ids[3], "failed", exit_code=3, stderr="boom").status_code == 200
    listing = client.get("/jobs").json()
    api_before = {job_id: client.get(f"/jobs/{job_id}").json() for job_id in ids}
    assert snapshot_once(settings) == 5
    state_before = job_state(rclient, prefix)

    lose_redis_data(rclient, prefix)
    restarted = make_client(settings)  # serve restarts: the lifespan restores

    assert job_state(rclient, prefix) == state_before
    assert restarted.get("/jobs").json() == listing
    assert {job_id: restarted.get(f"/jobs/{job_id}").json() for job_id in ids} == api_before
    assert api_before[ids[0]]["exit_code"] == 0
    assert api_before[ids[0]]["env_vars"] == {"EMPTY": "", "K": "v"}


# After a restore the scheduler behaves as before.


def test_polling_timeouts_and_retries_after_restore(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, prefix: str
) -> None:
    client = make_client(settings)
    register(client, "n1")
    run_job = submit(client, command="a")["job_id"]
    service = submit(client, command="b", job_type="service", port=8080)["job_id"]
    retried, done, queued, queued2 = (submit(client, command=c)["job_id"] for c in "cdef")
    for job_id in (run_job, retried, done):
        assert report(client, job_id, "running").status_code == 200
    assert report(client, done, "done", exit_code=0).status_code == 200
    assert report(client, retried, "failed", exit_code=1, stderr="first").status_code == 200
    poll = "/jobs?node_id=n1&status=pending"
    poll_before = client.get(poll).json()
    assert snapshot_once(settings) == 6
    lose_redis_data(rclient, prefix)

    client = make_client(settings)
    register(client, "n1")  # the registry's nodes are not part of the snapshot
    # Polling: the running run-job still takes one of the two slots.
    assert client.get(poll).json() == poll_before
    assert [job["job_id"] for job in poll_before] == [service]
    # The state machine and the one retry.
    assert report(client, done, "running").status_code == 409
    assert report(client, retried, "running").status_code == 200
    after_retry = report(client, retried, "failed", exit_code=1).json()
    assert after_retry["status"] == "failed" and after_retry["retry_count"] == 1
    assert report(client, service, "running").status_code == 200
    # Timeouts: the restored running run-job is in the deadlines, by its running_at.
    store = SyncJobStore.connect(settings)
    try:
        assert (
            store.run(ops.upkeep.sweep_timeouts(time.time() - settings.job_timeout_secs - 60)) == []
        )
        assert store.run(
            ops.upkeep.sweep_timeouts(time.time() + settings.job_timeout_secs + 60)
        ) == [run_job]
    finally:
        store.close()
    timed_out = client.get(f"/jobs/{run_job}").json()
    assert (timed_out["status"], timed_out["exit_code"]) == ("failed", -1)
    assert [job["job_id"] for job in client.get(poll).json()] == [queued, queued2]
    # And the id counter continues.
    assert submit(client, command="next")["job_id"] == "job-7"


# Only changed jobs, crash-safe bookkeeping.


def test_snapshot_writes_only_the_jobs_changed_since_the_last(
    make_client: ClientFactory, settings: Settings, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    client = make_client(settings)
    register(client, "n1")
    for _ in range(3):
        submit(client, command="x")
    assert snapshot_once(settings) == 3
    assert snapshot_once(settings) == 0
    assert report(client, "job-2", "running").status_code == 200
    assert snapshot_once(settings) == 1
    saved = rows(db)
    assert saved["job-2"]["status"] == "running"
    assert saved["job-2"]["running_at"] == client.get("/jobs/job-2").json()["running_at"]
    assert {saved[j]["status"] for j in ("job-1", "job-3")} == {"pending"}
    assert not rclient.exists(Keys(prefix).dirty, Keys(prefix).dirty_inflight)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_leftover_in_flight_set_is_written_by_the_next_snapshot(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    put_records(store, [full_record("job-1"), full_record("job-2")])
    # A snapshot that died after taking the changes: they sit in the in-flight set.
    assert store.run(snapshot_scripts.take_dirty()) == 2
    put_records(store, [full_record("job-3")])
    assert snapshot_once(settings) == 3
    assert set(rows(db)) == {"job-1", "job-2", "job-3"}
    assert not rclient.exists(Keys(prefix).dirty, Keys(prefix).dirty_inflight)


def test_an_unreadable_record_stays_in_flight_and_a_vanished_one_is_dropped(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    put_records(store, [full_record("job-1")])
    rclient.set(Keys(prefix).job("job-2"), b"{not json")
    rclient.sadd(Keys(prefix).dirty, "job-2", "job-3")  # job-3 has no record at all
    assert snapshot_once(settings) == 1
    assert set(rows(db)) == {"job-1"}
    assert rclient.smembers(Keys(prefix).dirty_inflight) == {b"job-2"}
    # Once readable again it is written, and the set empties.
    put_records(store, [full_record("job-2")])
    assert snapshot_once(settings) == 1
    assert set(rows(db)) == {"job-1", "job-2"}
    assert not rclient.exists(Keys(prefix).dirty, Keys(prefix).dirty_inflight)


def test_two_snapshots_at_once_one_skips(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    put_records(store, [full_record("job-1")])
    rclient.set(Keys(prefix).lock("sqlite-snapshot"), "someone else", px=60_000)
    assert snapshot_once(settings) == 0
    assert rclient.scard(Keys(prefix).dirty) == 1  # nothing taken, nothing lost
    rclient.delete(Keys(prefix).lock("sqlite-snapshot"))
    assert snapshot_once(settings) == 1


# Deciding whether to restore.


def test_jobs_in_redis_are_kept_and_the_snapshot_not_loaded(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    put_records(store, [full_record("job-1"), full_record("job-2")])
    assert snapshot_once(settings) == 2
    rclient.delete(Keys(prefix).initialised)  # e.g. a deployment that predates the marker
    rclient.delete(Keys(prefix).job("job-2"))
    rclient.set(Keys(prefix).job_seq, 2)
    assert restore_if_empty(settings) is False
    assert not rclient.exists(Keys(prefix).job("job-2"))
    assert rclient.get(Keys(prefix).initialised) == b"found jobs in Redis"


def test_no_snapshot_file_means_nothing_to_restore(
    settings: Settings, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    assert restore_if_empty(settings) is False
    assert rclient.get(Keys(prefix).initialised) == b"started empty"
    assert not db.exists()


@pytest.fixture(params=[0, 3600], ids=["keep-forever", "retention"])
def retained_store(
    make_settings: SettingsFactory, request: pytest.FixtureRequest
) -> Iterator[SyncJobStore]:
    # The records finished in January 2026: long past an hour's retention.
    store = SyncJobStore.connect(make_settings(job_retention_secs=request.param))
    yield store
    store.close()


def test_new_jobs_after_a_data_loss_do_not_overwrite_the_snapshot(
    retained_store: SyncJobStore, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    store, settings = retained_store, retained_store.settings
    put_records(store, [full_record("job-1"), full_record("job-2")])
    rclient.set(Keys(prefix).job_seq, 2)
    assert snapshot_once(settings) == 2
    lose_redis_data(rclient, prefix)
    # An API process that kept running creates job-1 again before anything restored.
    put_records(store, [full_record("job-1", command="new")])
    rclient.set(Keys(prefix).job_seq, 1)

    with pytest.raises(RestoreRefused, match="lost its data"):
        restore_if_empty(settings)
    assert snapshot_once(settings) == 0
    assert rows(db)["job-1"]["command"] == full_record("job-1")["command"]
    # The operator's way out: load the snapshot over it.
    restore_from_file(settings, str(db), force=True)
    assert stored_job(rclient, Keys(prefix), "job-1")["command"] == full_record("job-1")["command"]
    assert rclient.get(Keys(prefix).job_seq) == b"2"
    assert snapshot_once(settings) == 1  # settled: snapshots run again
    assert rows(db)["job-1"]["command"] == full_record("job-1")["command"]


def test_redis_down_at_start_does_not_stop_the_api(
    make_settings: SettingsFactory, db: Path
) -> None:
    from tests.redis_server import free_port

    settings = make_settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", scheduler_db=str(db))
    from scheduler.api.app import create_app

    with TestClient(create_app(settings)) as client:
        assert client.get("/health").status_code == 200


def test_redis_emptied_under_a_running_api_gets_the_snapshot_back_before_new_ids(
    make_settings: SettingsFactory, make_client: ClientFactory, rclient: redis.Redis
) -> None:
    settings = make_settings()
    api = make_client(settings)
    register(api, "n1")
    first = [api.post("/jobs", json={"command": f"echo {i}"}).json() for i in range(3)]
    assert snapshot_once(settings) == 3
    # Redis loses everything (a restart without AOF) while the API keeps running.
    rclient.delete(*rclient.keys(Keys(settings.redis_prefix).pattern()))
    register(api, "n1")

    response = api.post("/jobs", json={"command": "echo after"})

    assert response.status_code == 201, response.text
    assert response.json()["job_id"] == "job-4"
    assert [api.get(f"/jobs/{job['job_id']}").json() for job in first] == first
