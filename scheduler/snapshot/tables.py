"""The snapshot file's optional tables, each added by a later version beside `jobs` (drains,
the shards' layout): read as text rows, none from a file older than the table."""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass

from redis.lock import Lock

from scheduler.snapshot.db import SnapshotFileError, open_reader
from scheduler.snapshot.locking import fenced_transaction
from scheduler.store.keys import Keys
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger("scheduler.snapshot")


def table_rows(path: str, query: str) -> list[tuple[str, str]]:
    """The rows `query` reads from the snapshot file `path`, as text; none when there is no
    file, or it lacks the table (a file from before that table was added). Raises
    SnapshotFileError for a file that is not SQLite."""
    if path == ":memory:" or not os.path.isfile(path):
        return []
    conn = open_reader(path)
    try:
        rows = conn.execute(query).fetchall()
    except sqlite3.OperationalError:
        return []
    except sqlite3.DatabaseError as exc:
        raise SnapshotFileError(f"{path}: not a SQLite snapshot: {exc}") from None
    finally:
        conn.close()
    return [(str(a), str(b)) for a, b in rows]


def replace_rows(
    path: str, lock: Lock, create: str, table: str, rows: list[tuple[str, str]]
) -> None:
    """The whole of an optional two-column table (`create` makes it) replaced by `rows`, in
    one transaction under the snapshot's `lock`: the drains, the named keys."""
    with fenced_transaction(path, lock) as conn:
        conn.execute(create)
        conn.execute(f"DELETE FROM {table}")
        conn.executemany(f"INSERT INTO {table} VALUES (?, ?)", rows)


def _count(value: bytes | str | None) -> int:
    return int(value or 0)


@dataclass(frozen=True, slots=True)
class CountedHash:
    """A Redis hash the snapshot file keeps as a two-column table (the drains, the quotas),
    the whole of it written in one transaction under the snapshot's lock whenever it changed.

    Whether it changed is a count, not a read of the file: the scripts that change the hash
    add one to its changes hash's `made`, and a snapshot records the count it wrote as
    `written`; equal, there is nothing to write (one HMGET, the usual case). A change while a
    snapshot writes raises `made` past what it records, so the next one writes again. A
    restore puts the rows back and counts a change, so the next snapshot writes the table
    again (the same rows, or, from another file, into SCHEDULER_DB)."""

    table: str
    create: str
    select: str  # the rows, (key, value), as the restore reads them
    what: str  # the rows' name in the log: "drained node(s)"
    hash_of: Callable[[Keys], str]
    changes_of: Callable[[Keys], str]
    into_empty_only: bool = False  # restored only where Redis holds none of the hash

    def write_changes(self, store: SyncJobStore, path: str, lock: Lock) -> int:
        """Write the table when the hash changed since the file last got it; returns how many
        rows the table now holds (0 also when nothing changed)."""
        changes = self.changes_of(store.keys)
        made, written = store.redis.hmget(changes, ["made", "written"])
        if _count(made) == _count(written):
            return 0
        with store.redis.pipeline(transaction=True) as pipe:  # the hash as of the count read
            pipe.hget(changes, "made")
            pipe.hgetall(self.hash_of(store.keys))
            made, found = pipe.execute()
        rows = sorted((key.decode(), value.decode()) for key, value in found.items())
        replace_rows(path, lock, self.create, self.table, rows)
        store.redis.hset(changes, "written", _count(made))
        log.info("snapshot: %d %s written", len(rows), self.what)
        return len(rows)

    def restore(self, store: SyncJobStore, path: str) -> int:
        """Put back the rows of the file `path` (beside what Redis holds, or only into a
        Redis holding none: `into_empty_only`); returns how many the file has."""
        rows = table_rows(path, self.select)
        hash_key = self.hash_of(store.keys)
        if rows and not (self.into_empty_only and store.redis.exists(hash_key)):
            with store.redis.pipeline(transaction=True) as pipe:
                pipe.hset(hash_key, mapping=dict(rows))
                pipe.hincrby(self.changes_of(store.keys), "made", 1)
                pipe.execute()
            log.info("restore: %d %s from %s", len(rows), self.what, path)
        return len(rows)
