"""The drains in the snapshot file (docs/GUIDE.md, Drain): table `drains` (node, drained_by), the
whole drained hash written in one transaction under the snapshot's lock whenever it changed,
and put back by a restore, so a Redis that lost its data does not forget a node an operator
drained for maintenance. A file from before drains has no table: it restores with none.

Whether it changed is a count, not a read of the file: the drain scripts add one to
`Keys.drained_changes`'s `made` with every change (drains.lua `set_drain`, `lift_drain`), and
a snapshot records the count it wrote as `written`; equal, there is nothing to write (one
HMGET, the usual case). A drain while a snapshot writes raises `made` past what it records,
so the next one writes again."""

from __future__ import annotations

import logging

from redis.lock import Lock

from scheduler.snapshot.tables import replace_rows, table_rows
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger("scheduler.snapshot")

CREATE_TABLE = "CREATE TABLE IF NOT EXISTS drains (node TEXT PRIMARY KEY, drained_by TEXT NOT NULL)"


def _count(value: bytes | str | None) -> int:
    return int(value or 0)


def write_changes(store: SyncJobStore, path: str, lock: Lock) -> int:
    """Write the drained nodes when they changed since the file last got them; returns how
    many rows the table now holds (0 also when nothing changed)."""
    keys = store.keys
    made, written = store.redis.hmget(keys.drained_changes, ["made", "written"])
    if _count(made) == _count(written):
        return 0
    # Read together (MULTI): the drains as of the count recorded below.
    with store.redis.pipeline(transaction=True) as pipe:
        pipe.hget(keys.drained_changes, "made")
        pipe.hgetall(keys.drained_nodes)
        made, drained = pipe.execute()
    rows = sorted((node.decode(), by.decode()) for node, by in drained.items())
    replace_rows(path, lock, CREATE_TABLE, "drains", rows)
    store.redis.hset(keys.drained_changes, "written", _count(made))
    log.info("snapshot: %d drained node(s) written", len(rows))
    return len(rows)


def restore(store: SyncJobStore, path: str) -> int:
    """Put back the drains of the file `path` (beside any Redis holds); returns how many.
    They count as a change, so the next snapshot writes the table again: the same rows, or,
    from another file, into SCHEDULER_DB."""
    rows = table_rows(path, "SELECT node, drained_by FROM drains")
    if rows:
        keys = store.keys
        with store.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.drained_nodes, mapping=dict(rows))
            pipe.hincrby(keys.drained_changes, "made", 1)
            pipe.execute()
        log.info("restore: %d drained node(s) from %s", len(rows), path)
    return len(rows)
