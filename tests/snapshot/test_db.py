"""Pure conversions between snapshot rows and job records (no Redis)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from scheduler.models.job import job_number
from scheduler.models.wire import parse_rfc3339
from scheduler.snapshot import db as snapshot_db
from scheduler.snapshot.db import NAMES, NON_JOB_SCORE, restored_job, row_from_record
from tests.snapshot_helpers import GO_SCHEMA, full_record

NOW = 1_800_000_000.0


def row(**values: Any) -> tuple[Any, ...]:
    """A row as the restore reads it: as the Go scheduler wrote it (env_vars NULL, job_type
    'run'), each column it did not have at its default, then `values`."""
    record = {
        "job_id": "job-1",
        "node_id": "n1",
        "command": "true",
        "status": "pending",
        "created_at": "2026-01-01T10:00:00Z",
    }
    base = dict(zip(NAMES, row_from_record(json.dumps(record).encode()), strict=True))
    base.update({"env_vars": None, "job_type": "run", **values})
    return tuple(base[name] for name in NAMES)


@pytest.mark.parametrize(
    ("job_id", "number"),
    [
        ("job-1", 1),
        ("job-99", 99),
        ("job-007", 7),
        ("not-a-job", None),
        ("job-", None),
        ("job-+5", None),
        ("job--5", None),
        ("job-5a", None),
        ("job-1 ", None),
        ("JOB-5", None),
        ("job-\u0663", None),  # a non-ASCII digit
        (f"job-{2**53}", 2**53),
        (f"job-{2**53 + 1}", None),  # not exact as a Redis score
    ],
)
def test_job_number_follows_the_original_parse_rule(job_id: str, number: int | None) -> None:
    assert job_number(job_id) == number


def test_a_go_row_becomes_the_record_the_api_serves() -> None:
    job = restored_job(
        row(status="done", exit_code=0, stdout="hi\n", finished_at="2026-01-01T10:00:04Z"), NOW
    )
    assert json.loads(job.record) == {
        "job_id": "job-1",
        "node_id": "n1",
        "command": "true",
        "status": "done",
        "retry_count": 0,
        "created_at": "2026-01-01T10:00:00Z",
        "job_type": "run",
        "exit_code": 0,
        "stdout": "hi\n",
        "finished_at": "2026-01-01T10:00:04Z",
    }
    assert (job.score, job.node_id, job.status, job.started) == (1, "n1", "done", None)


@pytest.mark.parametrize("env", [None, "", "null", "{}"])
def test_an_empty_env_vars_column_means_no_env_vars(env: str | None) -> None:
    assert "env_vars" not in json.loads(restored_job(row(env_vars=env), NOW).record)


def test_env_vars_with_an_empty_value_are_kept() -> None:
    record = json.loads(restored_job(row(env_vars='{"A":"","B":"x"}'), NOW).record)
    assert record["env_vars"] == {"A": "", "B": "x"}


def test_timestamps_utc_kept_verbatim_offsets_converted_garbage_kept() -> None:
    record = json.loads(
        restored_job(
            row(
                created_at="2026-01-01T10:00:00.123456789Z",
                running_at="2026-01-01T12:00:01+02:00",
                finished_at="yesterday",
            ),
            NOW,
        ).record
    )
    assert record["created_at"] == "2026-01-01T10:00:00.123456789Z"
    assert record["running_at"] == "2026-01-01T10:00:01.000000Z"
    assert record["finished_at"] == "yesterday"  # kept rather than lost; logged


def test_a_running_run_job_gets_its_deadline_start() -> None:
    running = restored_job(row(status="running", running_at="2026-01-01T10:00:05Z"), NOW)
    assert running.started == parse_rfc3339("2026-01-01T10:00:05Z")
    no_running_at = restored_job(row(status="running"), NOW)
    assert no_running_at.started == parse_rfc3339("2026-01-01T10:00:00Z")  # created_at
    unreadable = restored_job(row(status="running", created_at="?"), NOW)
    assert unreadable.started == NOW
    service = restored_job(row(status="running", job_type="service"), NOW)
    assert service.started is None


def test_an_id_that_is_not_job_n_is_listed_before_job_1() -> None:
    job = restored_job(row(id="not-a-job"), NOW)
    assert 0 < job.score == NON_JOB_SCORE < 1


def test_a_row_without_id_is_rejected() -> None:
    with pytest.raises(ValueError, match="no id"):
        restored_job(row(id=None), NOW)


def test_odd_column_types_are_coerced_not_fatal() -> None:
    record = json.loads(
        restored_job(row(exit_code="3", retry_count=None, port="x", stdout=None), NOW).record
    )
    assert record["exit_code"] == 3 and record["retry_count"] == 0
    assert "port" not in record and "stdout" not in record


def test_record_to_row_and_back_is_exact() -> None:
    record = full_record("job-12", new_field=[1, {"x": None}])
    stored = row_from_record(json.dumps(record).encode())
    assert dict(zip(NAMES, stored, strict=True))["extra"] == '{"new_field":[1,{"x":null}]}'
    assert json.loads(restored_job(stored, NOW).record) == record


def test_the_writer_creates_and_migrates_the_table(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, node_id TEXT NOT NULL)")
        conn.execute("INSERT INTO jobs VALUES ('job-1', 'n1')")
    conn.close()
    writer = snapshot_db.open_writer(str(path))
    try:
        assert writer.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        have = [r[1] for r in writer.execute("PRAGMA table_info(jobs)")]
        assert sorted(have) == sorted(NAMES)
    finally:
        writer.close()
    reader = snapshot_db.open_reader(str(path))
    try:
        (only,) = [r for batch in snapshot_db.read_batches(reader, 10) for r in batch]
    finally:
        reader.close()
    assert json.loads(restored_job(only, NOW).record)["node_id"] == "n1"
    assert snapshot_db.snapshot_summary(str(path)) == (True, 1)


def test_a_file_that_is_not_a_snapshot_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(snapshot_db.SnapshotFileError):
        snapshot_db.snapshot_summary(str(path))
    with sqlite3.connect(tmp_path / "other.db") as conn:
        conn.execute("CREATE TABLE jobs (name TEXT)")
    conn.close()
    with pytest.raises(snapshot_db.SnapshotFileError, match="no id column"):
        snapshot_db.open_writer(str(tmp_path / "other.db"))
    assert snapshot_db.snapshot_summary(str(tmp_path / "missing.db")) == (False, 0)


# The columns the Go scheduler's statements name (its store.go: Save and LoadAll).
GO_STATEMENT_COLUMNS = (
    "id",
    "node_id",
    "instance_id",
    "command",
    "deploy_url",
    "status",
    "retry_count",
    "exit_code",
    "stdout",
    "stderr",
    "created_at",
    "finished_at",
)


def _types(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        found = {str(r[1]): str(r[2]) for r in conn.execute("PRAGMA table_info(jobs)")}
    conn.close()
    return found


def test_the_originals_columns_keep_their_names_and_types(tmp_path: Path) -> None:
    """The columns derive from models.job.Job; the original's keep their names and types, so a
    Go file restores here and ours opens in the Go scheduler."""
    go, ours = tmp_path / "go.db", tmp_path / "ours.db"
    with sqlite3.connect(go) as conn:
        conn.execute(GO_SCHEMA)
    conn.close()
    snapshot_db.open_writer(str(ours)).close()
    go_types, our_types = _types(go), _types(ours)
    assert {name: our_types.get(name) for name in go_types} == go_types

    # The Go scheduler's own statements, on our file.
    names = ", ".join(GO_STATEMENT_COLUMNS)
    marks = ", ".join("?" for _ in GO_STATEMENT_COLUMNS)
    values = ("job-1", "n1", "", "echo", "", "done", 0, 0, "", "", "2026-01-01T10:00:00Z", None)
    with sqlite3.connect(ours) as conn:
        conn.execute(f"INSERT INTO jobs ({names}) VALUES ({marks})", values)
        assert conn.execute(f"SELECT {names} FROM jobs").fetchall() == [values]
    conn.close()
    reader = snapshot_db.open_reader(str(ours))
    try:
        (only,) = [r for batch in snapshot_db.read_batches(reader, 10) for r in batch]
    finally:
        reader.close()
    assert json.loads(restored_job(only, NOW).record)["exit_code"] == 0
