"""The named keys and the audit stream in the snapshot file (docs/SECURITY.md, Named keys), so
a Redis that lost its data does not lock every team out or forget who did what.

- Table `api_keys` (name, record: the key's record as Redis holds it, the key's hash and
  never the key): all of them written in one transaction whenever they changed. Whether
  they changed is the keys' version (`Keys.api_keys_version`, moved by every change) against
  the one the file last got (`Keys.api_keys_written`): equal, nothing to write (one MGET).
- Table `audit` (ms, seq: the entry's stream id; entry: its fields as JSON): the entries
  newer than the last one written, the newest AUDIT_MAX kept.

A restore puts both back when Redis holds none (a file from before them has no tables: none)
and moves the version, so every API reads the keys again and the next snapshot writes them.
"""

from __future__ import annotations

import logging
import time

import msgspec
from redis.lock import Lock

from scheduler.snapshot.locking import fenced_transaction
from scheduler.snapshot.tables import replace_rows, table_rows
from scheduler.store.scripts.access import AUDIT_MAX
from scheduler.store.sync_store import SyncJobStore

log = logging.getLogger("scheduler.snapshot")

CREATE_KEYS = "CREATE TABLE IF NOT EXISTS api_keys (name TEXT PRIMARY KEY, record TEXT NOT NULL)"
CREATE_AUDIT = (
    "CREATE TABLE IF NOT EXISTS audit "
    "(ms INTEGER NOT NULL, seq INTEGER NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (ms, seq))"
)
# The newest AUDIT_MAX entries stay; the rest go, as the stream trims them.
TRIM_AUDIT = (
    "DELETE FROM audit WHERE (ms, seq) NOT IN "
    "(SELECT ms, seq FROM audit ORDER BY ms DESC, seq DESC LIMIT ?)"
)
_entry = msgspec.json.Decoder(dict[str, str])


def write_changes(store: SyncJobStore, path: str, lock: Lock) -> int:
    """Write the named keys when they changed since the file last got them, and the audit
    entries it lacks; returns how many rows were written."""
    return _write_keys(store, path, lock) + _write_audit(store, path, lock)


def _write_keys(store: SyncJobStore, path: str, lock: Lock) -> int:
    keys = store.keys
    made, written = store.redis.mget([keys.api_keys_version, keys.api_keys_written])
    if int(made or 0) == int(written or 0):
        return 0
    with store.redis.pipeline(transaction=True) as pipe:  # the keys as of the version read
        pipe.get(keys.api_keys_version)
        pipe.hgetall(keys.api_keys)
        made, found = pipe.execute()
    rows = sorted((name.decode(), record.decode()) for name, record in found.items())
    replace_rows(path, lock, CREATE_KEYS, "api_keys", rows)
    store.redis.set(keys.api_keys_written, int(made or 0))
    log.info("snapshot: %d named key(s) written", len(rows))
    return len(rows)


def _write_audit(store: SyncJobStore, path: str, lock: Lock) -> int:
    keys = store.keys
    after: bytes | None = store.redis.get(keys.audit_written)  # type: ignore[assignment]
    start = f"({after.decode()}" if after else "-"
    entries: list[tuple[bytes, dict[bytes, bytes]]] = store.redis.xrange(  # type: ignore[assignment]
        keys.audit, min=start, count=AUDIT_MAX
    )
    if not entries:
        return 0
    rows = [(*_id_parts(entry_id), _fields_json(fields)) for entry_id, fields in entries]
    with fenced_transaction(path, lock) as conn:
        conn.execute(CREATE_AUDIT)
        conn.executemany("INSERT OR REPLACE INTO audit (ms, seq, entry) VALUES (?, ?, ?)", rows)
        conn.execute(TRIM_AUDIT, (AUDIT_MAX,))
    store.redis.set(keys.audit_written, entries[-1][0])
    return len(rows)


def _id_parts(entry_id: bytes) -> tuple[int, int]:
    ms, seq = entry_id.decode().split("-")
    return int(ms), int(seq)


def _fields_json(fields: dict[bytes, bytes]) -> str:
    return msgspec.json.encode({k.decode(): v.decode() for k, v in fields.items()}).decode()


def restore(store: SyncJobStore, path: str) -> int:
    """Put back the named keys and the audit entries of the file `path` where Redis holds
    none; returns how many keys."""
    keys = store.keys
    found = table_rows(path, "SELECT name, record FROM api_keys")
    if found and not store.redis.exists(keys.api_keys):
        with store.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.api_keys, mapping=dict(found))
            # As the scripts move it (access.lua next_keys_version): never a version a
            # process may hold from before the loss.
            pipe.set(keys.api_keys_version, max(int(time.time() * 1000), 1))
            pipe.execute()
        log.info("restore: %d named key(s) from %s", len(found), path)
    entries = table_rows(path, "SELECT ms || '-' || seq, entry FROM audit ORDER BY ms, seq")
    if entries and not store.redis.exists(keys.audit):
        with store.redis.pipeline(transaction=False) as pipe:
            for entry_id, entry in entries:
                pipe.xadd(keys.audit, _entry.decode(entry), id=entry_id)  # type: ignore[arg-type]
            pipe.execute()
    return len(found)
