"""The schedules in the snapshot file: table `schedules` (name, record: the schedule's JSON as
Redis holds it, state included), written from the changed set as jobs are, and restored with
the jobs into a Redis that lost its data.

Written before the jobs in each snapshot (writer.py): a tick whose advance the file holds had
its job created earlier, so that job is in the file too; a restore never loses a tick the file
says was fired. The other way round, a tick fired while a snapshot runs (between the
schedules' turn and the jobs') can have its job in the file and its advance not: after a
restore it fires again. A restored schedule's ticks since the snapshot are late, so its
catch-up policy decides them as after any outage.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
from collections.abc import Iterator

import msgspec
from redis.lock import Lock

from scheduler.models.schedule import schedule_decoder
from scheduler.snapshot import db as snapshot_db
from scheduler.snapshot.locking import BATCH, fenced_transaction
from scheduler.store.scripts import schedules as schedule_scripts
from scheduler.store.scripts.schedules import RestoredSchedule
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger("scheduler.snapshot")

CREATE_TABLE = "CREATE TABLE IF NOT EXISTS schedules (name TEXT PRIMARY KEY, record TEXT NOT NULL)"
UPSERT = (
    "INSERT INTO schedules (name, record) VALUES (?, ?) "
    "ON CONFLICT(name) DO UPDATE SET record = excluded.record"
)


def write_changes(store: SyncJobStore, path: str, lock: Lock, lock_ttl: float) -> int:
    """Write the schedules changed since the last snapshot (a deleted one: its row goes), in
    one transaction, then forget them in Redis. Returns how many rows changed."""
    if store.run(schedule_scripts.take_dirty_schedules()) == 0:
        return 0
    keys = store.keys
    names = sorted({n.decode() for n in store.redis.sscan_iter(keys.schedules_dirty_inflight)})
    with fenced_transaction(path, lock) as conn:
        conn.execute(CREATE_TABLE)
        for start in range(0, len(names), BATCH):
            batch = names[start : start + BATCH]
            records: list[bytes | None] = store.redis.hmget(keys.schedules, batch)  # type: ignore[assignment]
            upserts = [(n, r.decode()) for n, r in zip(batch, records, strict=True) if r]
            gone = [(n,) for n, r in zip(batch, records, strict=True) if r is None]
            conn.executemany(UPSERT, upserts)
            conn.executemany("DELETE FROM schedules WHERE name = ?", gone)
            lock.extend(lock_ttl, replace_ttl=True)
    with store.redis.pipeline(transaction=False) as pipe:
        for start in range(0, len(names), BATCH):
            pipe.srem(keys.schedules_dirty_inflight, *names[start : start + BATCH])
        pipe.execute()
    log.info("snapshot: %d schedule(s) written", len(names))
    return len(names)


def _rows(path: str) -> Iterator[list[tuple[str, str]]]:
    """Every row of `schedules`, BATCH at a time; none for a file without the table."""
    if path == ":memory:" or not os.path.isfile(path):
        return
    with contextlib.closing(snapshot_db.open_reader(path)) as conn:
        try:
            cursor = conn.execute("SELECT name, record FROM schedules")
        except sqlite3.OperationalError:
            return  # a file from before schedules
        while rows := cursor.fetchmany(BATCH):
            yield rows


def restored(name: str, record: str | bytes) -> RestoredSchedule:
    """A row as what RESTORE_SCHEDULES puts back; ValueError for a record that is not one."""
    raw = record.encode() if isinstance(record, str) else record
    try:
        schedule = schedule_decoder.decode(raw)
    except msgspec.DecodeError as exc:
        raise ValueError(f"schedule {name!r}: unreadable record ({exc})") from None
    if schedule.name != name:
        raise ValueError(f"schedule {name!r}: the record is named {schedule.name!r}")
    return RestoredSchedule(name, raw, 0 if schedule.paused else schedule.next_tick)


def restore(store: SyncJobStore, path: str, mark_dirty: bool) -> int:
    """Put back every schedule of the file `path` (replacing those of the same name); returns
    how many. A row that cannot be read is logged and skipped."""
    count = 0
    for rows in _rows(path):
        batch = []
        for name, record in rows:
            try:
                batch.append(restored(str(name), record))
            except ValueError as exc:
                log.error("restore: skipped a schedule of %s: %s", path, exc)
        if batch:
            count += store.run(schedule_scripts.restore_schedules(batch, mark_dirty))
    return count
