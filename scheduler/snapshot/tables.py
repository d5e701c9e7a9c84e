"""The snapshot file's optional tables, each added by a later version beside `jobs` (drains,
the shards' layout): read as text rows, none from a file older than the table."""

from __future__ import annotations

import os
import sqlite3

from scheduler.snapshot.db import SnapshotFileError, open_reader


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
