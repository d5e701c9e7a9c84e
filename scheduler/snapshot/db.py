"""The SQLite snapshot file (SCHEDULER_DB): its `jobs` table, and the conversions between its
rows and the job records kept in Redis.

The table holds the original's columns (CONTRACT 2.11, same names and types) plus ours, so a
file the Go scheduler wrote restores here, and a file we wrote still opens in the Go scheduler
(it names its columns in every statement; a file we create orders them as Job does, not as
the Go schema, which matters only to a `SELECT *`). The columns follow from models.job.Job:
`id` (the original's name for job_id), then one per other field in Job's order, by its kind:

  str            TEXT NOT NULL DEFAULT ''
  int            INTEGER NOT NULL DEFAULT 0
  int | None     INTEGER, NULL when the job has none (0 is a real exit code)
  Timestamp      TEXT NOT NULL DEFAULT ''; `Timestamp | None`: TEXT, NULL when unset.
                 RFC 3339 in UTC. Our rows keep the record's full precision
                 (2026-01-01T10:00:00.123456Z); the original wrote seconds
                 (2026-01-01T10:00:00Z). Both are read; Go's time.Parse reads both too.
  dict[str, str] TEXT NOT NULL DEFAULT '{}', a JSON object (NULL, '' and 'null' read as
                 empty: the original's nil map for env_vars)

and last `extra`: TEXT, a JSON object of any record field this version has no column for (one
a newer version added), so it survives a snapshot and restore here.

A file missing any of these columns is migrated in place when the snapshot writer opens it
(ALTER TABLE ... ADD COLUMN, one transaction); the restore reads such a file as it is, a
missing column reading as its field's default. So a field added to Job needs no code here.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from scheduler.models.fields import JobField, Kind
from scheduler.models.job import (
    ENDINGS,
    FINAL_STATUSES,
    JOB_FIELDS,
    RETIRED_STATUSES,
    Job,
    job_number,
    record_encoder,
)
from scheduler.models.wire import parse_rfc3339, rfc3339
from scheduler.store.scripts.snapshot import RestoredJob

log = logging.getLogger("scheduler.snapshot")

# Seconds a connection waits for another writer's lock before failing.
BUSY_TIMEOUT_SECS = 30.0
# The listing score of a job whose id is not job-N (e.g. a row "not-a-job" of an old file):
# above 0, so the default listing (numbers above 0) includes it, and below job-1, so it
# sorts first and never collides with a real number.
NON_JOB_SCORE = 0.5

_any_decoder = msgspec.json.Decoder(dict[str, Any])
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    decl: str  # valid in CREATE TABLE and in ALTER TABLE ADD COLUMN
    missing: str  # SQL value read for this column from a file that lacks it


JSON_KINDS = (Kind.OBJECT, Kind.LIST, Kind.SELECTOR)  # held as JSON text in their column


def _literal(value: str | int) -> str:
    return str(value) if isinstance(value, int) else "'" + value.replace("'", "''") + "'"


def _stored(field: JobField, value: Any) -> Any:
    """A record's value as its column holds it."""
    if field.kind in JSON_KINDS:
        return _encoder.encode(value or field.empty).decode()
    return value


def _column(field: JobField) -> Column:
    sql_type = "INTEGER" if field.kind is Kind.INT else "TEXT"
    if field.nullable:
        return Column(field.name, sql_type, "NULL")
    default = _literal(_stored(field, field.empty))
    return Column(field.name, f"{sql_type} NOT NULL DEFAULT {default}", default)


# job_id is the original's `id`; the others keep their field's name.
_FIELDS = tuple(f for f in JOB_FIELDS if f.name != "job_id")
COLUMNS = (
    Column("id", "TEXT PRIMARY KEY", "NULL"),
    *(_column(field) for field in _FIELDS),
    Column("extra", "TEXT NOT NULL DEFAULT '{}'", "'{}'"),
)
NAMES = tuple(c.name for c in COLUMNS)

CREATE_TABLE = "CREATE TABLE IF NOT EXISTS jobs ({})".format(
    ", ".join(f"{c.name} {c.decl}" for c in COLUMNS)
)
UPSERT = "INSERT INTO jobs ({}) VALUES ({}) ON CONFLICT(id) DO UPDATE SET {}".format(
    ", ".join(NAMES),
    ", ".join("?" for _ in NAMES),
    ", ".join(f"{name} = excluded.{name}" for name in NAMES[1:]),
)
_KNOWN_FIELDS = frozenset(f.name for f in JOB_FIELDS)
# A JSON column (an object, a list) is read back with its field's own decoder.
_object_decoders = {
    f.name: msgspec.json.Decoder(f.annotation) for f in _FIELDS if f.kind in JSON_KINDS
}
_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z")


class SnapshotFileError(RuntimeError):
    """The file cannot be used as a snapshot (not SQLite, or a `jobs` table without `id`)."""


# Writing (the snapshot).


def open_writer(path: str) -> sqlite3.Connection:
    """Open (creating if needed) and migrate the snapshot file for writing.

    WAL, so a restore or an operator can read while a snapshot writes. synchronous=FULL: the
    snapshot commits once per interval, so the fsync costs nothing noticeable, and after the
    commit the changed-jobs set is cleared in Redis; with NORMAL an OS crash or power loss
    could drop a committed transaction whose changes Redis no longer remembers."""
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECS, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        _migrate(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {str(row[1]) for row in conn.execute("PRAGMA table_info(jobs)")}


def _migrate(conn: sqlite3.Connection) -> None:
    # One write transaction: two workers opening an old file at once cannot both add a column.
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(CREATE_TABLE)
        have = _columns(conn)
        if "id" not in have:
            raise SnapshotFileError("table jobs has no id column")
        for column in COLUMNS:
            if column.name not in have:
                log.info("snapshot file: adding column %s", column.name)
                conn.execute(f"ALTER TABLE jobs ADD COLUMN {column.name} {column.decl}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def row_from_record(blob: bytes) -> tuple[Any, ...]:
    """A job record (the wire JSON kept in Redis) as a row of `jobs`, in NAMES order.
    Raises msgspec.DecodeError for a record that is not a JSON object, KeyError without id."""
    job = _any_decoder.decode(blob)
    job_id = job.pop("job_id")
    values = [_stored(field, job.pop(field.name, field.empty)) for field in _FIELDS]
    extra = _encoder.encode(job).decode() if job else "{}"
    return (job_id, *values, extra)


def upsert(conn: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
    conn.executemany(UPSERT, rows)


# Reading (the restore).


def open_reader(path: str) -> sqlite3.Connection:
    """Open an existing snapshot file without changing it (no migration)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"snapshot file {path!r} does not exist")
    return sqlite3.connect(path, timeout=BUSY_TIMEOUT_SECS, isolation_level=None)


def _select(conn: sqlite3.Connection) -> str | None:
    """The query reading every row in NAMES order, or None if the file has no jobs table."""
    try:
        have = _columns(conn)
    except sqlite3.DatabaseError as exc:
        raise SnapshotFileError(f"not a SQLite snapshot: {exc}") from None
    if not have:
        return None
    if "id" not in have:
        raise SnapshotFileError("table jobs has no id column")
    exprs = [c.name if c.name in have else f"{c.missing} AS {c.name}" for c in COLUMNS]
    return f"SELECT {', '.join(exprs)} FROM jobs"


def read_batches(conn: sqlite3.Connection, size: int) -> Iterator[list[tuple[Any, ...]]]:
    """Every row, `size` at a time, from one read transaction (one consistent view)."""
    query = _select(conn)
    if query is None:
        return
    cursor = conn.execute(query)
    while rows := cursor.fetchmany(size):
        yield rows


def snapshot_summary(path: str) -> tuple[bool, int]:
    """(whether the file holds any job, the highest job number in it); (False, 0) when the
    file does not exist or has no jobs table."""
    if path == ":memory:" or not os.path.isfile(path):
        return False, 0
    conn = open_reader(path)
    try:
        if _select(conn) is None:
            return False, 0
        highest, any_row = 0, False
        for (job_id,) in conn.execute("SELECT id FROM jobs"):
            any_row = True
            number = job_number(str(job_id)) if job_id is not None else None
            if number is not None and number > highest:
                highest = number
        return any_row, highest
    finally:
        conn.close()


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value if isinstance(value, str) else str(value)


def _int(value: Any, job_id: str, column: str) -> int | None:
    if value is None or isinstance(value, int):
        return value
    try:
        return int(value)
    except (TypeError, ValueError):
        log.warning("restore: job %s: %s %r is not an integer; left empty", job_id, column, value)
        return None


def _timestamp(value: Any, job_id: str, column: str) -> str | None:
    """The stored timestamp as the record keeps it: UTC `Z` forms verbatim (whatever their
    precision), other offsets converted to UTC. One that does not parse is kept as written
    (with a warning) rather than dropped, and does not stop the restore (CONTRACT 8.18)."""
    if value is None or value == "":
        return None
    text = _text(value)
    if _UTC.fullmatch(text):
        return text
    try:
        return rfc3339(parse_rfc3339(text))
    except ValueError:
        log.warning("restore: job %s: %s %r is not RFC 3339; kept as is", job_id, column, text)
        return text


_LIST: type[list[Any]] = list
_DICT: type[dict[str, Any]] = dict


def _json_object(
    value: Any,
    job_id: str,
    column: str,
    decoder: msgspec.json.Decoder[Any],
    into: type[dict[str, Any]] | type[list[Any]] = dict,
) -> Any:
    """A JSON column as `into` (an object, or a list); empty when it cannot be read."""
    text = _text(value).strip()
    if text in ("", "null"):
        return into()
    try:
        return into(decoder.decode(text))
    except (msgspec.DecodeError, TypeError, ValueError) as exc:
        kind = into.__name__
        log.warning(
            "restore: job %s: %s is not a JSON %s (%s); left empty", job_id, column, kind, exc
        )
        return into()


def _read(field: JobField, value: Any, job_id: str) -> Any:
    """A column's value as the record holds it: the field's default for NULL, and for a
    value that cannot be read (logged); an unparsable timestamp is kept as written."""
    if value is None:
        return field.empty
    read: Any
    if field.kind is Kind.TEXT:
        read = _text(value)
    elif field.kind is Kind.INT:
        read = _int(value, job_id, field.name)
    elif field.kind is Kind.TIMESTAMP:
        read = _timestamp(value, job_id, field.name)
    else:
        into = _LIST if field.kind is Kind.LIST else _DICT
        read = _json_object(value, job_id, field.name, _object_decoders[field.name], into)
    return field.empty if read is None else read


def _first_readable(*stamps: str | None) -> float | None:
    """Epoch seconds of the first of `stamps` that is set and parses."""
    for stamp in stamps:
        if stamp:
            try:
                return parse_rfc3339(stamp)
            except ValueError:
                continue
    return None


def _start(job: Job, now: float) -> float:
    """When a running job started, for its deadline: running_at, else created_at, as the
    original's watcher. A job whose start cannot be read gets the restore time: a full timeout
    from now, rather than failing it at once for a stamp it did not write."""
    started = _first_readable(job.running_at, job.created_at)
    if started is None:
        log.warning("restore: job %s: no readable start time; timeout counts from now", job.job_id)
        return now
    return started


def _finish(job: Job, now: float) -> float:
    """When a done or failed job finished, for the retention: finished_at, else the restore
    time (an unreadable stamp keeps the job a full retention period, never drops it early)."""
    finished = _first_readable(job.finished_at)
    return now if finished is None else finished


def _due(job: Job, now: float) -> float:
    """When a delayed job is due: its run_at, else now (an unreadable stamp runs it)."""
    due = _first_readable(job.run_at)
    return now if due is None else due


def _upgraded(job: Job) -> Job:
    """A job an earlier version ended with a status of its own: as it ends now."""
    ending = RETIRED_STATUSES.get(job.status)
    if ending is None:
        return job
    status, reason = ENDINGS[ending]
    return msgspec.structs.replace(job, status=status, failure_reason=reason)


def restored_job(row: Sequence[Any], now: float) -> RestoredJob:
    """A row of `jobs` (NAMES order) as the record and index entries the restore writes.
    Raises ValueError for a row without id. `now` (epoch s) is the restore time."""
    values = dict(zip(NAMES, row, strict=True))
    job_id = _text(values["id"])
    if not job_id:
        raise ValueError("a row has no id")
    job = _upgraded(
        Job(job_id=job_id, **{f.name: _read(f, values[f.name], job_id) for f in _FIELDS})
    )
    record = record_encoder.encode(job)
    extra = {
        k: v
        for k, v in _json_object(values["extra"], job_id, "extra", _any_decoder).items()
        if k not in _KNOWN_FIELDS
    }
    if extra:
        record = record[:-1] + b"," + record_encoder.encode(extra)[1:]
    number = job_number(job_id)
    running_run_job = job.status == "running" and job.job_type != "service"
    return RestoredJob(
        job_id=job_id,
        score=NON_JOB_SCORE if number is None else number,
        node_id=job.node_id,
        status=job.status,
        started=_start(job, now) if running_run_job else None,
        finished=_finish(job, now) if job.status in FINAL_STATUSES else None,
        record=record,
        due=_due(job, now) if job.status == "delayed" else None,
        priority=job.priority,
        cpus=job.cpus,
        memory_mb=job.memory_mb,
        schedule=job.schedule,
        job_type=job.job_type,
        namespace=job.namespace,
        pending_reason=job.pending_reason,
    )
