"""A sharded deployment's layout in shard 0's snapshot file (store/scripts/layout.py Recorded):
table `shards` (field, value), the record `{P}:shards` as Redis holds it, written by a
snapshot once it is not the one the file holds and put back by a restore before the jobs.
Without it a shard 0 that lost its data would lose what only the record knew: the shard count
(a start with another one would restore the shards' files into its own shards and record
its count), and the nodes kept on shard 0 (they would move to the shard their id ranks first,
away from their queues).

The record never changes once made: whether the file holds it is its `since` against the
record's `filed` field (the `since` a snapshot wrote, or a restore from SCHEDULER_DB found),
one HMGET a snapshot."""

from __future__ import annotations

import logging

from redis.exceptions import RedisError
from redis.lock import Lock

from scheduler.config import Settings
from scheduler.snapshot.locking import fenced_transaction, open_store
from scheduler.snapshot.tables import table_rows
from scheduler.store.scripts.layout import FILED, check_count
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger("scheduler.snapshot")

CREATE_TABLE = "CREATE TABLE IF NOT EXISTS shards (field TEXT PRIMARY KEY, value TEXT NOT NULL)"


def write_changes(store: SyncJobStore, path: str, lock: Lock) -> int:
    """Write the layout's record when the file does not hold it yet; returns how many fields
    it wrote (0: none to write, or not sharded)."""
    keys = store.keys
    since, filed = store.redis.hmget(keys.shards, ["since", FILED])
    if since is None or since == filed:
        return 0
    stored: dict[bytes, bytes] = store.redis.hgetall(keys.shards)  # type: ignore[assignment]
    record = {name.decode(): value.decode() for name, value in stored.items()}
    record.pop(FILED, None)
    with fenced_transaction(path, lock) as conn:
        conn.execute(CREATE_TABLE)
        conn.execute("DELETE FROM shards")
        conn.executemany("INSERT INTO shards (field, value) VALUES (?, ?)", record.items())
    store.redis.hset(keys.shards, FILED, record["since"])
    log.info("snapshot: the layout of %s shards written", record.get("count"))
    return len(record)


def filed(path: str) -> dict[str, str]:
    """The record the file `path` holds (none: not shard 0's file of a sharded deployment)."""
    return dict(table_rows(path, "SELECT field, value FROM shards"))


def restore(store: SyncJobStore, path: str, mark_dirty: bool) -> bool:
    """Put the file's record back into a Redis that has none (a record there is the
    deployment's own: never replaced); returns whether it did. With `mark_dirty` (a file
    other than SCHEDULER_DB, as the jobs restored with it) it is not marked as filed, so the
    next snapshot writes it to SCHEDULER_DB too."""
    record, keys = filed(path), store.keys
    # Nothing else writes it meanwhile: RECORD_SHARDS waits for the restore's marker.
    if not record or store.redis.exists(keys.shards):
        return False
    if not mark_dirty:
        record[FILED] = record.get("since", "")
    store.redis.hset(keys.shards, mapping=dict(record.items()))
    log.info("restore: the layout of %s shards from %s", record.get("count"), path)
    return True


def check_layout(settings: Settings) -> None:
    """The deployment's shard count checked against the one recorded at its first sharded
    start (check_count), before a process restores or works: shard 0's record, in Redis or,
    when that Redis lost its data, in shard 0's snapshot file. `settings` are the
    deployment's (shard 0's prefix and file). Raises SnapshotFileError when that file is
    not SQLite (as the restore that follows would)."""
    with open_store(settings) as store:
        recorded, lost = _recorded_count(store)
    in_file = recorded is None and lost
    check_count(filed(settings.scheduler_db).get("count") if in_file else recorded, settings.shards)


def check_layout_if_reachable(settings: Settings, log: logging.Logger) -> None:
    """check_layout, save that a Redis not answering is told to `log` rather than raised: the
    caller's own start meets that Redis next, and reports or waits for it."""
    try:
        check_layout(settings)
    except (RedisError, OSError) as exc:
        log.warning("the shard count not checked, Redis unavailable: %s", exc)


def _recorded_count(store: SyncJobStore) -> tuple[bytes | None, bool]:
    """Shard 0's recorded count, and whether that Redis lost its data (no `initialised`
    marker: its restore question is open, restore.py). Read together (MULTI): a restore puts
    the record back before it sets the marker, so a marker seen means the record is too."""
    keys = store.keys
    with store.redis.pipeline(transaction=True) as pipe:
        pipe.hget(keys.shards, "count")
        pipe.exists(keys.initialised)
        recorded, initialised = pipe.execute()
    return recorded, not initialised
