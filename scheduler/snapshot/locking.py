"""What the snapshot writer and the restore share: a blocking store for one operation and
the Redis locks that keep each of them to one process at a time."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator

from redis.exceptions import LockError, RedisError
from redis.lock import Lock

from scheduler.config import Settings
from scheduler.snapshot import db as snapshot_db
from scheduler.store.connection.blocking import sync_client
from scheduler.store.sync_store import SyncJobStore

SNAPSHOT_LOCK, RESTORE_LOCK = "sqlite-snapshot", "sqlite-restore"
# Lock lifetimes; each batch renews them, so these only bound how long a crashed holder
# blocks the others. The restore lock is also kept alive by a thread while held (`kept`), so
# its lifetime can be short: every start waits on it, and an upgrade watches the old keys
# under it for seconds between two batches.
SNAPSHOT_LOCK_SECS = 60.0
RESTORE_LOCK_SECS = 6.0
# Rows per batch, for the snapshot's reads and the restore's writes.
BATCH = 1000


@contextlib.contextmanager
def fenced_transaction(path: str, lock: Lock) -> Iterator[sqlite3.Connection]:
    """A write transaction on the snapshot file that commits only while `lock` is still held:
    a holder whose lock expired must not commit over its successor. Any error rolls it back."""
    conn = snapshot_db.open_writer(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            if not lock.owned():
                raise LockError("snapshot lock lost before commit")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()


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


@contextlib.contextmanager
def kept(lock: Lock, ttl: float) -> Iterator[None]:
    """Renew the held `lock` to `ttl` every third of it from a thread while the block runs:
    a holder killed -9 stops blocking the others within `ttl`, however long its work. A lost
    lock is not renewed again (the holder's own checks, `lock.owned()`, see it)."""
    stop = threading.Event()

    def renew() -> None:
        while not stop.wait(ttl / 3):
            try:
                lock.extend(ttl, replace_ttl=True)
            except LockError:
                return
            except RedisError:
                continue  # the holder's own next call meets the outage too

    keeper = threading.Thread(target=renew, name=f"keep {lock.name!r}", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join()
