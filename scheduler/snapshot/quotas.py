"""The namespaces' quotas in the snapshot file (docs/GUIDE.md, Quotas): table `quotas`
(namespace as stored, "" the default's; quota: its JSON as Redis holds it), the whole hash
written in one transaction under the snapshot's lock whenever it changed, and put back by a
restore, so a Redis that lost its data does not lift every team's limits. A file from
before quotas has no table: it restores with none.

Whether it changed is a count, as for the drains (drains.py): SET_QUOTA adds one to
`Keys.quotas_changes`'s `made`, and a snapshot records the count it wrote as `written`;
equal, there is nothing to write (one HMGET, the usual case)."""

from __future__ import annotations

import logging

from redis.lock import Lock

from scheduler.snapshot.tables import replace_rows, table_rows
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger("scheduler.snapshot")

CREATE_TABLE = "CREATE TABLE IF NOT EXISTS quotas (namespace TEXT PRIMARY KEY, quota TEXT NOT NULL)"


def _count(value: bytes | str | None) -> int:
    return int(value or 0)


def write_changes(store: SyncJobStore, path: str, lock: Lock) -> int:
    """Write the quotas when they changed since the file last got them; returns how many rows
    the table now holds (0 also when nothing changed)."""
    keys = store.keys
    made, written = store.redis.hmget(keys.quotas_changes, ["made", "written"])
    if _count(made) == _count(written):
        return 0
    # Read together (MULTI): the quotas as of the count recorded below.
    with store.redis.pipeline(transaction=True) as pipe:
        pipe.hget(keys.quotas_changes, "made")
        pipe.hgetall(keys.quotas)
        made, found = pipe.execute()
    rows = sorted((namespace.decode(), quota.decode()) for namespace, quota in found.items())
    replace_rows(path, lock, CREATE_TABLE, "quotas", rows)
    store.redis.hset(keys.quotas_changes, "written", _count(made))
    log.info("snapshot: %d quota(s) written", len(rows))
    return len(rows)


def restore(store: SyncJobStore, path: str) -> int:
    """Put back the quotas of the file `path` where Redis holds none; returns how many. They
    count as a change, so the next snapshot writes the table again (the same rows, or, from
    another file, into SCHEDULER_DB)."""
    keys = store.keys
    rows = table_rows(path, "SELECT namespace, quota FROM quotas")
    if rows and not store.redis.exists(keys.quotas):
        with store.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.quotas, mapping=dict(rows))
            pipe.hincrby(keys.quotas_changes, "made", 1)
            pipe.execute()
        log.info("restore: %d quota(s) from %s", len(rows), path)
    return len(rows)
