"""The SQLite snapshot and the restore from it, against the real redis-server fixture."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from starlette.testclient import TestClient

from scheduler import commands, snapshot_db
from scheduler.cli import main as cli_main
from scheduler.config import Settings
from scheduler.snapshot import (
    RestoreRefused,
    restore_from_file,
    restore_if_empty,
    snapshot_once,
)
from scheduler.store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, report, submit

# Keys that are not job state (or are snapshot bookkeeping), left out of state comparisons.
_NOT_JOB_STATE = {"initialised", "dirty", "dirty:inflight", "restoring", "seq:rr", "seq:event"}
_NOT_JOB_PREFIXES = ("lock:", "nodes", "outbox")


def job_state(r: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every job record and index under `prefix`, decoded for comparison."""
    state: dict[str, Any] = {}
    for raw in r.scan_iter(f"{prefix}:*", count=1000):
        name = raw.decode()[len(prefix) + 1 :]
        if name in _NOT_JOB_STATE or name.startswith(_NOT_JOB_PREFIXES):
            continue
        kind = r.type(raw)
        if kind == b"string":
            value = r.get(raw)
            state[name] = json.loads(value) if name.startswith("job:") else value
        elif kind == b"zset":
            members = r.zrange(raw, 0, -1, withscores=True)
            # Deadlines come back from the microsecond timestamp of the record.
            digits = 3 if name == "deadlines" else 9
            state[name] = {m.decode(): round(s, digits) for m, s in members}
        elif kind == b"set":
            state[name] = sorted(m.decode() for m in r.smembers(raw))
        else:
            raise AssertionError(f"unexpected key type {kind!r} for {name}")
    return state


def lose_redis_data(r: redis.Redis, prefix: str) -> None:
    """What a Redis restart without persistence does to this deployment."""
    keys = list(r.scan_iter(f"{prefix}:*", count=1000))
    if keys:
        r.delete(*keys)


def rows(path: Path) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(path) as conn:
        conn.row_factory = sqlite3.Row
        return {row["id"]: dict(row) for row in conn.execute("SELECT * FROM jobs")}


def columns(path: Path) -> list[str]:
    with sqlite3.connect(path) as conn:
        return [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "scheduler.db"


@pytest.fixture
def settings(make_settings: SettingsFactory, db: Path) -> Settings:
    return make_settings(scheduler_db=str(db), max_jobs_per_node=2)


@pytest.fixture
def store(settings: Settings) -> Any:
    s = SyncJobStore.connect(settings)
    yield s
    s.close()


def full_record(job_id: str, **fields: Any) -> dict[str, Any]:
    """A record with every field the wire has set, including the awkward values."""
    record = {
        "job_id": job_id,
        "node_id": "n1",
        "instance_id": "i-7",
        "command": "echo 'a/b' \u00e9",
        "deploy_url": "http://store:7001/buckets/deployments/objects/app.zip",
        "env_vars": {"EMPTY": "", "PATH_LIKE": "/usr/bin:/bin", "UNI": "\u2603"},
        "job_type": "run",
        "port": 8080,
        "status": "done",
        "retry_count": 1,
        "exit_code": 0,
        "stdout": "line 1\nline 2\n",
        "stderr": "warn\ttab",
        "created_at": "2026-01-01T10:00:00.123456Z",
        "running_at": "2026-01-01T10:00:01.5Z",
        "finished_at": "2026-01-01T10:00:02Z",
    }
    record.update(fields)
    return record


def without(record: dict[str, Any], *names: str) -> dict[str, Any]:
    """The record with these fields unset (as the API omits them)."""
    return {k: v for k, v in record.items() if k not in names}


def put_records(store: SyncJobStore, records: list[dict[str, Any]], now: float = 0.0) -> None:
    """Jobs into Redis as a snapshot row would put them back, marked changed."""
    jobs = []
    for record in records:
        blob = json.dumps(record).encode()
        job = snapshot_db.restored_job(snapshot_db.row_from_record(blob), now)
        jobs.append(dataclasses.replace(job, record=blob))
    store.run(commands.restore_jobs(store.keys, jobs, mark_dirty=True))
    # As if created: the id counter covers them.
    highest = max(snapshot_db.job_number(r["job_id"]) or 0 for r in records)
    if highest > int(store.redis.get(store.keys.job_seq) or 0):
        store.redis.set(store.keys.job_seq, highest)


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
        assert json.loads(rclient.get(f"{prefix}:job:{record['job_id']}")) == record
    saved = rows(db)["job-1"]
    assert saved["exit_code"] == 0
    assert json.loads(saved["env_vars"]) == {
        "EMPTY": "",
        "PATH_LIKE": "/usr/bin:/bin",
        "UNI": "\u2603",
    }
    assert saved["created_at"] == "2026-01-01T10:00:00.123456Z"  # full precision kept
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
        assert store.sweep_timeouts(time.time() - settings.job_timeout_secs - 60) == []
        assert store.sweep_timeouts(time.time() + settings.job_timeout_secs + 60) == [run_job]
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
    assert not rclient.exists(f"{prefix}:dirty", f"{prefix}:dirty:inflight")
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_leftover_in_flight_set_is_written_by_the_next_snapshot(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    put_records(store, [full_record("job-1"), full_record("job-2")])
    # A snapshot that died after taking the changes: they sit in the in-flight set.
    assert store.run(commands.take_dirty(store.keys)) == 2
    put_records(store, [full_record("job-3")])
    assert snapshot_once(settings) == 3
    assert set(rows(db)) == {"job-1", "job-2", "job-3"}
    assert not rclient.exists(f"{prefix}:dirty", f"{prefix}:dirty:inflight")


def test_an_unreadable_record_stays_in_flight_and_a_vanished_one_is_dropped(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    put_records(store, [full_record("job-1")])
    rclient.set(f"{prefix}:job:job-2", b"{not json")
    rclient.sadd(f"{prefix}:dirty", "job-2", "job-3")  # job-3 has no record at all
    assert snapshot_once(settings) == 1
    assert set(rows(db)) == {"job-1"}
    assert rclient.smembers(f"{prefix}:dirty:inflight") == {b"job-2"}
    # Once readable again it is written, and the set empties.
    put_records(store, [full_record("job-2")])
    assert snapshot_once(settings) == 1
    assert set(rows(db)) == {"job-1", "job-2"}
    assert not rclient.exists(f"{prefix}:dirty", f"{prefix}:dirty:inflight")


def test_two_snapshots_at_once_one_skips(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    put_records(store, [full_record("job-1")])
    rclient.set(f"{prefix}:lock:sqlite-snapshot", "someone else", px=60_000)
    assert snapshot_once(settings) == 0
    assert rclient.scard(f"{prefix}:dirty") == 1  # nothing taken, nothing lost
    rclient.delete(f"{prefix}:lock:sqlite-snapshot")
    assert snapshot_once(settings) == 1


# Files of the original Go scheduler, and older files.

GO_SCHEMA = """CREATE TABLE jobs (
    id TEXT PRIMARY KEY, node_id TEXT NOT NULL, instance_id TEXT NOT NULL DEFAULT '',
    command TEXT NOT NULL, deploy_url TEXT NOT NULL DEFAULT '', status TEXT NOT NULL,
    exit_code INTEGER, stdout TEXT NOT NULL DEFAULT '', stderr TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL, running_at TEXT, finished_at TEXT,
    retry_count INTEGER NOT NULL DEFAULT 0, env_vars TEXT,
    job_type TEXT NOT NULL DEFAULT 'run', port INTEGER NOT NULL DEFAULT 0)"""


def go_file(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(GO_SCHEMA)
        conn.execute(
            "INSERT INTO jobs VALUES ('job-99', 'n1', '', 'echo hi', '', 'done', 0, 'hi\n', '',"
            " '2026-01-01T10:00:00Z', '2026-01-01T10:00:03Z', '2026-01-01T10:00:04Z', 1,"
            " '{\"A\":\"\"}', 'run', 0)"
        )
        conn.execute(
            "INSERT INTO jobs VALUES ('not-a-job', 'n1', '', 'echo old', '', 'pending', NULL,"
            " '', '', '2026-01-01T09:00:00Z', NULL, NULL, 0, NULL, 'run', 0)"
        )
    conn.close()


def test_a_file_of_the_go_scheduler_restores(
    make_client: ClientFactory, make_settings: SettingsFactory, tmp_path: Path
) -> None:
    path = tmp_path / "go.db"
    go_file(path)
    settings = make_settings(scheduler_db=str(path))
    client = make_client(settings)
    register(client, "n1")

    job = client.get("/jobs/job-99").json()
    assert job == {
        "job_id": "job-99",
        "node_id": "n1",
        "command": "echo hi",
        "status": "done",
        "retry_count": 1,
        "exit_code": 0,
        "stdout": "hi\n",
        "env_vars": {"A": ""},
        "job_type": "run",
        "created_at": "2026-01-01T10:00:00Z",
        "running_at": "2026-01-01T10:00:03Z",
        "finished_at": "2026-01-01T10:00:04Z",
    }
    assert client.get("/jobs/not-a-job").json()["status"] == "pending"
    assert [j["job_id"] for j in client.get("/jobs").json()] == ["not-a-job", "job-99"]
    assert [j["job_id"] for j in client.get("/jobs?node_id=n1&status=pending").json()] == [
        "not-a-job"
    ]
    assert submit(client, command="new")["job_id"] == "job-100"

    # The worker's snapshot then migrates the file in place and adds the new job.
    assert snapshot_once(settings) == 1
    assert columns(path) == list(snapshot_db.NAMES)
    saved = rows(path)
    assert set(saved) == {"job-99", "not-a-job", "job-100"}
    assert saved["job-99"]["created_at"] == "2026-01-01T10:00:00Z"


OLDEST_SCHEMA = """CREATE TABLE jobs (
    id TEXT PRIMARY KEY, node_id TEXT NOT NULL, command TEXT NOT NULL, status TEXT NOT NULL,
    exit_code INTEGER, stdout TEXT NOT NULL DEFAULT '', stderr TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL, finished_at TEXT)"""


def test_an_older_file_missing_columns_is_migrated_in_place(
    make_settings: SettingsFactory, rclient: redis.Redis, prefix: str, tmp_path: Path
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute(OLDEST_SCHEMA)
        conn.execute(
            "INSERT INTO jobs VALUES ('job-7', 'n1', 'make', 'failed', 2, '', 'err',"
            " '2025-06-01T08:00:00+02:00', '2025-06-01T08:00:09+02:00')"
        )
    conn.close()
    settings = make_settings(scheduler_db=str(path))

    assert restore_if_empty(settings) is True  # read as it is, not modified by the restore
    assert "port" not in columns(path)
    restored = json.loads(rclient.get(f"{prefix}:job:job-7"))
    assert restored["created_at"] == "2025-06-01T06:00:00.000000Z"  # offsets become UTC
    assert (restored["exit_code"], restored["retry_count"], restored["stderr"]) == (2, 0, "err")

    store = SyncJobStore.connect(settings)
    try:
        put_records(store, [full_record("job-8")])
    finally:
        store.close()
    assert snapshot_once(settings) == 1
    assert sorted(columns(path)) == sorted(snapshot_db.NAMES)
    saved = rows(path)
    assert saved["job-7"]["command"] == "make" and saved["job-7"]["retry_count"] == 0
    assert saved["job-7"]["env_vars"] == "{}" and saved["job-7"]["port"] == 0
    assert saved["job-8"]["port"] == 8080


# Deciding whether to restore.


def test_jobs_in_redis_are_kept_and_the_snapshot_not_loaded(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str
) -> None:
    put_records(store, [full_record("job-1"), full_record("job-2")])
    assert snapshot_once(settings) == 2
    rclient.delete(f"{prefix}:initialised")  # e.g. a deployment that predates the marker
    rclient.delete(f"{prefix}:job:job-2")
    rclient.set(f"{prefix}:seq:job", 2)
    assert restore_if_empty(settings) is False
    assert not rclient.exists(f"{prefix}:job:job-2")
    assert rclient.get(f"{prefix}:initialised") == b"found jobs in Redis"


def test_no_snapshot_file_means_nothing_to_restore(
    settings: Settings, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    assert restore_if_empty(settings) is False
    assert rclient.get(f"{prefix}:initialised") == b"started empty"
    assert not db.exists()


def test_new_jobs_after_a_data_loss_do_not_overwrite_the_snapshot(
    settings: Settings, store: SyncJobStore, rclient: redis.Redis, prefix: str, db: Path
) -> None:
    put_records(store, [full_record("job-1"), full_record("job-2")])
    rclient.set(f"{prefix}:seq:job", 2)
    assert snapshot_once(settings) == 2
    lose_redis_data(rclient, prefix)
    # An API process that kept running creates job-1 again before anything restored.
    put_records(store, [full_record("job-1", command="new")])
    rclient.set(f"{prefix}:seq:job", 1)

    with pytest.raises(RestoreRefused, match="lost its data"):
        restore_if_empty(settings)
    assert snapshot_once(settings) == 0
    assert rows(db)["job-1"]["command"] == full_record("job-1")["command"]
    # The operator's way out: load the snapshot over it.
    restore_from_file(settings, str(db), force=True)
    assert (
        json.loads(rclient.get(f"{prefix}:job:job-1"))["command"] == full_record("job-1")["command"]
    )
    assert rclient.get(f"{prefix}:seq:job") == b"2"
    assert snapshot_once(settings) == 1  # settled: snapshots run again
    assert rows(db)["job-1"]["command"] == full_record("job-1")["command"]


def test_redis_down_at_start_does_not_stop_the_api(
    make_settings: SettingsFactory, db: Path
) -> None:
    from tests.redis_server import free_port

    settings = make_settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", scheduler_db=str(db))
    from scheduler.app import create_app

    with TestClient(create_app(settings)) as client:
        assert client.get("/health").status_code == 200


# The operator's commands.


def test_cli_snapshot_and_restore(
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
    prefix: str,
    db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("REDIS_PREFIX", prefix)
    monkeypatch.setenv("SCHEDULER_DB", str(db))
    put_records(store, [full_record("job-1"), full_record("job-2")])
    rclient.set(f"{prefix}:seq:job", 2)
    assert cli_main(["snapshot"]) == 0
    assert "2 changed jobs written" in capsys.readouterr().out
    assert set(rows(db)) == {"job-1", "job-2"}

    other = tmp_path / "other.db"
    go_file(other)
    # Into a Redis that holds jobs: refused, nothing changes.
    before = job_state(rclient, prefix)
    assert cli_main(["restore", "--from", str(other)]) == 1
    assert "--force" in capsys.readouterr().err
    assert job_state(rclient, prefix) == before
    assert cli_main(["restore", "--from", str(tmp_path / "missing.db")]) == 1
    assert "does not exist" in capsys.readouterr().err

    assert cli_main(["restore", "--from", str(other), "--force"]) == 0
    assert "restored 2 jobs" in capsys.readouterr().out
    assert rclient.exists(f"{prefix}:job:job-1", f"{prefix}:job:job-99") == 2
    assert rclient.get(f"{prefix}:seq:job") == b"99"
    # Jobs from another file reach SCHEDULER_DB with the next snapshot.
    assert cli_main(["snapshot"]) == 0
    assert set(rows(db)) == {"job-1", "job-2", "job-99", "not-a-job"}


def test_cli_restore_into_an_empty_redis(
    settings: Settings,
    rclient: redis.Redis,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = tmp_path / "go.db"
    go_file(source)
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("REDIS_PREFIX", prefix)
    monkeypatch.setenv("SCHEDULER_DB", settings.scheduler_db)
    assert cli_main(["restore", "--from", str(source)]) == 0
    assert rclient.zrange(f"{prefix}:jobs", 0, -1) == [b"not-a-job", b"job-99"]
    assert rclient.get(f"{prefix}:initialised") is not None
    assert not rclient.exists(f"{prefix}:restoring")
    assert rclient.smembers(f"{prefix}:dirty") == {b"job-99", b"not-a-job"}
