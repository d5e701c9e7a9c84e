"""The upgrade from the layout before the hash tag: keys were "P:..." (P = REDIS_PREFIX), now
"{P}:..." (store/keys.py says why).

`rename_legacy_keys` runs at the start of serve and of a worker, under the restore lock and
before the restore decision: that decision reads the `initialised` marker, and a deployment
whose state still sits under the old names would look empty and get the older SQLite snapshot
restored over it. Each key is RENAMEd (atomic, keeps its TTL); the old marker is renamed last,
so while it exists the upgrade is unfinished, and the next start after a crash resumes it.
rq's part (its queues and jobs under "rq:") is workers/rq_migrate.py's.

Only a standalone Redis is upgraded: the old layout could never run on a cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from redis.cluster import RedisCluster

from scheduler.store.connection.blocking import LocatedPool
from scheduler.store.keys import Keys, LegacyKeys

log = logging.getLogger("scheduler.store.migrate")

RENEW_EVERY = 1000  # renamed keys between calls of keep_alive (the caller's lock)


def rename_legacy_keys(
    client: redis.Redis,
    keys: Keys,
    keep_alive: Callable[[], object] = lambda: None,
) -> int:
    """Rename this deployment's old-layout keys into the new layout, if there are any and
    the new layout is not initialised yet. Returns how many keys were renamed."""
    if is_cluster(client):
        return 0
    old = LegacyKeys(keys.prefix)
    if client.exists(keys.initialised):
        return 0
    if not client.exists(old.initialised):
        if not client.exists(old.of(keys.job_seq, keys), old.of(keys.all_jobs, keys)):
            return 0
        # A deployment older than the marker: the marker first, so a crash midway still
        # leaves an old marker that says "unfinished". It holds jobs: settled, as _decide
        # (snapshot/restore.py) would say.
        client.set(old.initialised, "found jobs in Redis", nx=True)
    # An old lock belongs to a process that is gone (its TTL ends it); renamed, it would
    # replace the restore lock this upgrade runs under.
    old_locks = old.of(keys.lock(""), keys)
    renamed = 0
    for raw in client.scan_iter(match=old.pattern(), count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        if key == old.initialised or not old.owns(key) or key.startswith(old_locks):
            continue
        if _rename(client, key, old.renamed(key, keys)):
            renamed += 1
            if renamed % RENEW_EVERY == 0:
                keep_alive()
    _rename(client, old.initialised, keys.initialised)
    log.info(
        "upgrade: renamed %d keys from %s* to %s* (Redis Cluster hash tag)",
        renamed + 1,
        old.root,
        keys.root,
    )
    return renamed + 1


def is_cluster(client: object) -> bool:
    """Whether `client` speaks to a Redis Cluster (nothing of the old layout can be there)."""
    pool = getattr(client, "connection_pool", None)
    return isinstance(client, RedisCluster) or isinstance(pool, LocatedPool)


def _rename(client: redis.Redis, source: str, target: str) -> bool:
    """RENAME, False when the source is gone (SCAN may return a key twice, a TTL may end)."""
    try:
        client.rename(source, target)
    except redis.ResponseError as exc:
        if "no such key" not in str(exc).lower():
            raise
        return False
    return True
