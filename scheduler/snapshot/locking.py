"""What the snapshot writer and the restore share: a blocking store for one operation and
the Redis locks that keep each of them to one process at a time."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from redis.exceptions import LockError
from redis.lock import Lock

from scheduler.config import Settings
from scheduler.store.connection.blocking import sync_client
from scheduler.store.sync_store import SyncJobStore

SNAPSHOT_LOCK, RESTORE_LOCK = "sqlite-snapshot", "sqlite-restore"
# Lock lifetimes; each batch renews them, so these only bound how long a crashed holder
# blocks the others.
SNAPSHOT_LOCK_SECS = 60.0
RESTORE_LOCK_SECS = 30.0
# Rows per batch, for the snapshot's reads and the restore's writes.
BATCH = 1000


@contextlib.contextmanager
def open_store(settings: Settings) -> Iterator[SyncJobStore]:
    client = sync_client(settings, socket_connect_timeout=10)
    try:
        yield SyncJobStore(client, settings)
    finally:
        client.close()


def named_lock(store: SyncJobStore, name: str, ttl: float) -> Lock:
    held: Lock = store.redis.lock(store.keys.lock(name), timeout=ttl, thread_local=False)
    return held


def release(lock: Lock) -> None:
    with contextlib.suppress(LockError):
        lock.release()
