"""Snapshot files: the original Go scheduler's, older ones missing columns, and the
operator's `scheduler snapshot` / `scheduler restore --from FILE` commands."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest
import redis

from scheduler.cli.main import main as cli_main
from scheduler.config import Settings
from scheduler.snapshot import db as snapshot_db
from scheduler.snapshot.restore import restore_if_empty
from scheduler.snapshot.writer import snapshot_once
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore
from tests.conftest import ClientFactory, SettingsFactory, register, report, submit
from tests.records import stored_job
from tests.snapshot_helpers import (
    columns,
    full_record,
    go_file,
    job_state,
    put_records,
    rows,
)


@pytest.fixture
def settings(make_settings: SettingsFactory) -> Settings:
    return make_settings(max_jobs_per_node=2)


# Files of the original Go scheduler, and older files.


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
    assert sorted(columns(path)) == sorted(snapshot_db.NAMES)
    saved = rows(path)
    assert set(saved) == {"job-99", "not-a-job", "job-100"}
    assert saved["job-99"]["created_at"] == "2026-01-01T10:00:00Z"
    # A job whose id is no job-N still lives its life (its number is its listing score).
    assert report(client, "not-a-job", "running").status_code == 200
    assert report(client, "not-a-job", "done", exit_code=0).json()["status"] == "done"


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
    restored = stored_job(rclient, Keys(prefix), "job-7")
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
    assert saved["job-8"]["port"] == full_record("job-8")["port"]


# The operator's commands.


def test_the_workers_snapshot_logs_what_it_wrote(
    settings: Settings, store: SyncJobStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The periodic snapshot has no output but its log (`scheduler snapshot` prints its own
    line, and logs none: test_cli_snapshot_and_restore)."""
    put_records(store, [full_record("job-1")])
    with caplog.at_level(logging.INFO, "scheduler.snapshot"):
        assert snapshot_once(settings) == 1
    said = [r.message for r in caplog.records if "jobs written" in r.message]
    assert len(said) == 1 and said[0].startswith("snapshot: 1 jobs written in "), said


def test_cli_snapshot_and_restore(
    settings: Settings,
    store: SyncJobStore,
    rclient: redis.Redis,
    prefix: str,
    db: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("REDIS_URL", settings.redis_url)
    monkeypatch.setenv("REDIS_PREFIX", prefix)
    monkeypatch.setenv("SCHEDULER_DB", str(db))
    put_records(store, [full_record("job-1"), full_record("job-2")])
    rclient.set(Keys(prefix).job_seq, 2)
    with caplog.at_level(logging.INFO, "scheduler.snapshot"):
        assert cli_main(["snapshot"]) == 0
    assert "2 changed jobs written" in capsys.readouterr().out
    # Said once: the worker's periodic snapshot logs it, the command prints it.
    assert [r.message for r in caplog.records if "jobs written" in r.message] == []
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
    assert rclient.exists(Keys(prefix).job("job-1"), Keys(prefix).job("job-99")) == 2
    assert rclient.get(Keys(prefix).job_seq) == b"99"
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
    assert rclient.zrange(Keys(prefix).all_jobs, 0, -1) == [b"not-a-job", b"job-99"]
    assert rclient.get(Keys(prefix).initialised) is not None
    assert not rclient.exists(Keys(prefix).restoring)
    assert rclient.smembers(Keys(prefix).dirty) == {b"job-99", b"not-a-job"}
