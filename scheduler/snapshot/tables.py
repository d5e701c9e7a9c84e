"""The snapshot file's optional tables, each added by a later version beside `jobs` (drains,
the shards' layout): read as text rows, none from a file older than the table."""

from __future__ import annotations

import os
import sqlite3

from redis.lock import Lock

from scheduler.snapshot.db import SnapshotFileError, open_reader
from scheduler.snapshot.locking import fenced_transaction


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
